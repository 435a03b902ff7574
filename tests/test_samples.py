"""The shipped sample traces: shapes as documented, and exactly what their presets regenerate."""

from __future__ import annotations

import json

import polars as pl
import pytest
from helpers import run_cli
from polars.testing import assert_frame_equal
from rltrace.sample_traces import DEFAULT_SAMPLE, list_samples, sample_path

import rltrace
from rltrace.synth import load_config, synthesize

PRESET_OF = {"rollpacker_qwen7b": "rollpacker", "streamrl_qwen32b": "streamrl", "rollart_qwen3_8b": "rollart"}


def test_samples_are_shipped_and_small() -> None:
    assert list_samples() == sorted([*PRESET_OF, "tiny_rl_cpu", "tiny_rl_faults"])
    assert DEFAULT_SAMPLE == "rollpacker_qwen7b"
    for name in list_samples():
        size = sum(f.stat().st_size for f in sample_path(name).iterdir())
        assert size <= 5 * 1024 * 1024, (name, size)


def test_rollpacker_like_sample_has_the_published_shape() -> None:
    result = run_cli("inspect", "--json", str(sample_path("rollpacker_qwen7b")))
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    out = info["requests"]["output_tokens"]
    assert 25 <= out["max_over_median"] <= 32
    assert 600 <= out["p50"] <= 1100
    assert out["max"] == 16384
    assert info["requests"]["steps"] >= 10
    assert {s["requests"] for s in info["requests"]["per_step"]} == {128 * 8}
    manifest = rltrace.open(sample_path("rollpacker_qwen7b")).manifest
    assert manifest.model is not None and manifest.model.name == "Qwen2.5-7B"
    assert manifest.rl is not None and (manifest.rl.algorithm, manifest.rl.samples_per_prompt) == ("grpo", 8)


def test_streamrl_like_sample_has_the_published_shape() -> None:
    bundle = rltrace.open(sample_path("streamrl_qwen32b"))
    req = bundle.requests.collect()
    per_step = req.group_by("step").len()
    assert per_step.height >= 10 and set(per_step["len"]) == {1024}
    assert req["output_tokens"].max() <= 20480
    assert req["output_tokens"].max() > 16384
    assert bundle.manifest.rl is not None and bundle.manifest.rl.algorithm == "ppo"


@pytest.mark.parametrize("name", sorted(PRESET_OF))
def test_samples_are_what_their_documented_command_regenerates(name: str) -> None:
    shipped = rltrace.open(sample_path(name))
    fresh = synthesize(load_config(preset=PRESET_OF[name]))
    assert fresh.manifest.run_id == shipped.manifest.run_id
    for table, frame in fresh.tables.items():
        assert_frame_equal(shipped.table(table).collect().select(frame.columns), frame, check_dtypes=False)


@pytest.mark.parametrize("name", ["tiny_rl_cpu", "tiny_rl_faults"])
def test_the_recorded_tiny_rl_sample(name: str) -> None:
    """Recorded from examples/tiny_rl by `make tiny-rl-sample` (and, with its faults, `make tiny-rl-faults-sample`):
    real vLLM, DDP on Gloo, weight sync per step."""
    bundle = rltrace.open(sample_path(name))
    assert bundle.manifest.source == "record" and bundle.manifest.run_id == name
    for table in ("requests", "collectives", "weight_syncs", "spans"):
        assert bundle.table(table).collect().height > 0, table
    model = bundle.manifest.model
    assert model is not None
    flows = bundle.weight_syncs.collect().filter(pl.col("src") == "trainer/rank0")
    assert set(flows["bytes"]) == {model.params * model.dtype_bytes}
