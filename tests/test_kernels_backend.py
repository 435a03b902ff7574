"""The measured-kernel generation backend (aiconfigurator-core): its closed forms against its own queries, what it
covers, and how a replay and `estimate validate` name it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import polars as pl
import pytest
from helpers import run_cli
from rltrace.replay.costmodels.aiconfigurator import KernelDatabase, KernelGeneration, coverage
from rltrace.replay.costmodels.generation import backend_name, catalog_generation
from rltrace.replay.costmodels.validation import GENERATION_CSV

from rltrace.calibration import CALIBRATION
from rltrace.catalog import get_gpu, get_model
from rltrace.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "described" / "qwen3_30b_a3b_colocated.toml"


@pytest.fixture(scope="module")
def qwen3_8b() -> KernelDatabase:
    return KernelDatabase(model=get_model("Qwen3-8B"), gpu=get_gpu("H100"), tp=1)


@pytest.mark.parametrize("batch", [1, 8, 64, 200])
@pytest.mark.parametrize("context", [512, 2048, 8192])
def test_the_replay_closed_form_follows_the_databases_decode(qwen3_8b: KernelDatabase, batch: int,
                                                             context: int) -> None:
    closed = qwen3_8b.iteration_model(256).iteration(batch, batch * context)
    queried = qwen3_8b.decode_seconds(batch, context)
    assert queried > 0 and abs(closed - queried) / queried < 0.06, (closed, queried)


@pytest.mark.parametrize(("tokens", "prompts"), [(512, 1), (2048, 1), (8192, 4), (16384, 8), (4096, 16)])
def test_the_prefill_closed_form_follows_the_databases_prefill(qwen3_8b: KernelDatabase, tokens: int,
                                                               prompts: int) -> None:
    closed = qwen3_8b.prefill_model().seconds(tokens, prompts)
    queried = qwen3_8b.prefill_seconds(tokens, prompts)
    assert abs(closed - queried) / queried < 0.2, (closed, queried)


def test_decode_grows_with_batch_and_context(qwen3_8b: KernelDatabase) -> None:
    by_batch = [qwen3_8b.decode_seconds(b, 2048) for b in (1, 16, 128)]
    by_context = [qwen3_8b.decode_seconds(64, c) for c in (512, 4096, 16384)]
    assert by_batch == sorted(by_batch) and by_context == sorted(by_context)
    # a chunk riding beside decodes adds less than it costs alone (the decodes' weight reads are shared)
    assert 0 < qwen3_8b.mixed_prefill(2048, 64) < qwen3_8b.prefill_seconds(2048) + qwen3_8b.decode_seconds(64, 2048)


@pytest.mark.parametrize(("model", "gpu", "why"), [
    ("Qwen3-8B", "H800", "the database has no H800"),
    ("Qwen3-8B", "H20", "the database has no H20"),
    ("GLM-4.5-Air", "H100", "no config the database defines"),
])
def test_what_the_database_lacks_is_refused_with_the_reason(model: str, gpu: str, why: str) -> None:
    assert why in coverage(get_model(model), get_gpu(gpu))
    with pytest.raises(ConfigError, match=why):
        KernelDatabase(model=get_model(model), gpu=get_gpu(gpu))
    with pytest.raises(ConfigError, match=f"cost.generation=kernels: .*{why}"):
        catalog_generation("kernels", model=get_model(model), gpu=get_gpu(gpu))


def test_catalog_models_without_a_cached_config_get_one_written() -> None:
    # Llama-3-8B's config is not among the package's; the catalog's figures are written as a Llama config
    db = KernelDatabase(model=get_model("Llama-3-8B"), gpu=get_gpu("H100"))
    ref = KernelDatabase(model=get_model("Llama-3.1-8B"), gpu=get_gpu("H100"))  # the package's own config
    assert abs(db.decode_seconds(32, 2048) - ref.decode_seconds(32, 2048)) / ref.decode_seconds(32, 2048) < 0.02


def test_fp8_experts_are_priced_as_the_block_fp8_the_database_measured() -> None:
    model = dataclasses.replace(get_model("Qwen3-235B-A22B"), dtype_bytes=1)
    db = KernelDatabase(model=model, gpu=get_gpu("H200"), tp=4, engine="sglang")
    assert "fp8_block" in db.layout and db.decode_seconds(32, 2048) > 0
    bf16 = KernelDatabase(model=get_model("Qwen3-235B-A22B"), gpu=get_gpu("H200"), tp=8)
    assert "bfloat16" in bf16.layout


def test_generation_cost_per_tp_and_its_name() -> None:
    cost = KernelGeneration(model=get_model("Qwen3-32B"), gpu=get_gpu("H100"), max_num_seqs=128)
    one, two = cost.iteration_model(2).iteration(64, 64 * 2048), cost.iteration_model(4).iteration(64, 64 * 2048)
    assert 0 < two < one  # more ranks, a shorter iteration
    assert cost.kv_capacity_tokens(2) > 0 and cost.prefill_seconds(4096, 2, 2) > 0
    assert backend_name(cost) == "aiconfigurator-core 0.12.0 (h100_sxm, vllm)"


def test_a_replay_priced_by_kernels_says_so_in_its_config(tmp_path: Path) -> None:
    done = run_cli("replay", str(EXAMPLE), "-s", "colocated-sync", "--set", "cost.generation=kernels",
                   "-o", str(tmp_path / "k"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    config = json.loads((tmp_path / "k" / "colocated-sync" / "config.json").read_text())
    assert config["generation_backend"] == "aiconfigurator-core 0.12.0 (h100_sxm, vllm)"
    assert config["replay"]["cost"]["generation"] == "kernels"
    assert config["calibration"] == CALIBRATION.describe()  # the constants' files, with versions and digests
    assert set(config["calibration"]) == {"serving.toml", "training.toml"}
    assert any("aiconfigurator-core 0.12.0 kernels of Qwen3-30B-A3B on H100" in n for n in config["notes"])
    default = run_cli("replay", str(EXAMPLE), "-s", "colocated-sync", "-o", str(tmp_path / "r"), cwd=tmp_path)
    assert default.returncode == 0, default.stderr
    assert json.loads((tmp_path / "r" / "colocated-sync" / "config.json").read_text())["generation_backend"] == (
        "roofline")
    # a GPU kind the database lacks is one line and exit 2
    refused = run_cli("replay", str(EXAMPLE), "-s", "colocated-sync", "--set", "cost.generation=kernels",
                      "--gpu", "H800", "-o", str(tmp_path / "h800"), cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "the database has no H800" in refused.stderr


def test_validate_prints_each_backend_apart(tmp_path: Path) -> None:
    points = pl.read_csv(GENERATION_CSV, infer_schema_length=None).filter(
        pl.col("gpu") == "H100", pl.col("model") == "Qwen3-32B").head(6)
    mine = tmp_path / "mine.csv"
    points.write_csv(mine)
    done = run_cli("estimate", "validate", "--data", str(mine), "--json", "--points", str(tmp_path / "p.csv"),
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    overall = {(r["set"], r["backend"]): r for r in json.loads(done.stdout)["overall"]}
    assert set(overall) == {(s, b) for s in ("generation TPOT", "generation TTFT") for b in ("roofline", "kernels")}
    assert all(r["points"] == 6 for r in overall.values())
    priced = pl.read_csv(tmp_path / "p.csv")
    kernels = priced.filter(pl.col("backend") == "kernels")
    assert kernels.height == 12 and kernels["priced_by"].str.starts_with("aiconfigurator-core 0.12.0 (h100_sxm").all()
    # the two backends price the same points differently, each from its own model
    roof = priced.filter(pl.col("backend") == "roofline")["predicted"].to_list()
    assert roof != kernels["predicted"].to_list() and all(v > 0 for v in roof + kernels["predicted"].to_list())
