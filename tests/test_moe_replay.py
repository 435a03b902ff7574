"""An MoE in a replay (issue 28's item 6): H20 generation plus H800 training, the trainer expert-parallel, and the
bytes its steps move, in metrics.json and in the report."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from helpers import run_cli
from rltrace.replay.costmodels.training import TrainingCost

from rltrace.catalog import get_gpu, get_model

MOE = "Qwen3-30B-A3B"


def test_a_trainers_expert_all_to_all_volume_is_dispatch_and_combine_per_moe_layer_and_pass() -> None:
    """Per training rank and step: its share of the tokens, each sent to top-k experts as BF16 hidden states,
    (ep - 1) / ep of them leaving the rank; a dispatch and a combine per MoE layer, forward and backward for the
    trained tokens, forward only for each of the forward-only passes (reference and old log-probabilities)."""
    spec, tokens, gpus = get_model(MOE), 1_000_000.0, 16
    for ep, passes in ((8, 2), (4, 0), (1, 2)):
        cost = TrainingCost(model=spec, gpu=get_gpu("H800"), gpus=gpus, recorded_gpus=gpus, recorded_gpu=None,
                            ep=ep, forward_passes=passes)
        per_message = tokens / gpus * spec.experts_per_token * spec.hidden * 2 * (ep - 1) / ep
        expected = (2 * 2 + 2 * passes) * spec.moe_layers * per_message
        assert cost.alltoall_bytes(tokens) == pytest.approx(expected, rel=1e-12)


def test_an_moe_replay_on_h20_and_h800_reports_weight_sync_and_expert_all_to_all_volume(tmp_path: Path) -> None:
    """The default sample (a Qwen2.5-7B recording) replayed as Qwen3-30B-A3B: each sync delivers a copy of the
    replayed model (61 GB), not the recorded 7B's 15 GB; the H800 trainers, expert-parallel over 8 GPUs, send the
    closed form above; the report's per-run table shows both."""
    out = tmp_path / "runs"
    done = run_cli("replay", "--model", MOE, "--gpu", "H20,H800", "--set", "cost.train_ep=8", "--steps", "1",
                   "-s", "disagg-sync", "--replicates", "0", "-o", str(out))
    assert done.returncode == 0, done.stderr
    folder = out / "disagg-sync"
    volume = json.loads((folder / "metrics.json").read_text())["volume_bytes_per_step"]
    spec = get_model(MOE)
    assert volume["weight_sync"] == spec.weight_bytes
    cluster = json.loads((folder / "config.json").read_text())["cluster"]
    assert (cluster["gen_gpu"], cluster["train_gpu"]) == ("H20", "H800")
    requests = pl.read_parquet(folder / "requests.parquet").filter(pl.col("step") == 0)
    tokens = float((requests["prompt_tokens"] + requests["output_tokens"]).sum())
    cost = TrainingCost(model=spec, gpu=get_gpu("H800"), gpus=cluster["train_gpus"],
                        recorded_gpus=cluster["train_gpus"], recorded_gpu=None, ep=8)
    assert volume["expert_alltoall_per_train_rank"] == pytest.approx(cost.alltoall_bytes(tokens), rel=1e-9)
    assert volume["expert_alltoall_per_train_rank"] > 10 * volume["weight_sync"]  # MoE training's larger volume

    plain = run_cli("replay", "--model", MOE, "--gpu", "H20,H800", "--steps", "1", "-s", "disagg-sync",
                    "--replicates", "0", "--json")
    assert plain.returncode == 0, plain.stderr
    figures = json.loads(plain.stdout)
    figures = figures.get("disagg-sync", figures)
    assert figures["volume_bytes_per_step"]["expert_alltoall_per_train_rank"] == 0.0  # ep 1: no all-to-all
    assert figures["step_time_s"]["mean"] < json.loads((folder / "metrics.json").read_text())["step_time_s"]["mean"]

    report = tmp_path / "report.html"
    drawn = run_cli("dashboard", str(out), "-o", str(report))
    assert drawn.returncode == 0, drawn.stderr
    html = report.read_text()
    assert "weight sync per step (GB)" in html and "expert all-to-all per step, per training GPU (GB)" in html
    assert f"{spec.weight_bytes / 1e9:.3g}" in html and f"{volume['expert_alltoall_per_train_rank'] / 1e9:.3g}" in html


@pytest.mark.parametrize(("model", "ep", "message"), [
    (None, 8, "cost.train_ep 8: expert parallelism needs an MoE; the replayed model (Qwen2.5-7B) has no experts"),
    (MOE, 5, "cost.train_ep 5 must divide Qwen3-30B-A3B's 128 experts and be at most the"),
    (MOE, 0, "cost.train_ep must be >= 1, got 0"),
])
def test_an_impossible_trainer_expert_parallelism_is_one_line_and_exit_2(model: str | None, ep: int,
                                                                         message: str) -> None:
    args = ["replay", "--steps", "1", "--set", f"cost.train_ep={ep}", *(["--model", model] if model else [])]
    done = run_cli(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
