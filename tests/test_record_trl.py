"""Recording the loops people run rather than ones we wrote: a real, unmodified TRL GRPO run (Hugging Face
generation, two ranks over Gloo via ``accelerate launch``), and plain ``model.generate`` research loops.

Ground truth is the job's own account: TRL hands its reward function its completion token ids (already cut
after the first EOS, as TRL trains on them), and examples/hf_generate counts each returned sequence's tokens
itself. TRL and accelerate come from the test extras (pyproject.toml), installed by `make test`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl
import pytest
from helpers import REPO, run_cli, tiny_model
from rltrace.replay.schedulers.base import SCHEDULERS

import rltrace

pytest.importorskip("trl", reason="TRL is installed by `make test` (pyproject.toml test extras)")

pytestmark = pytest.mark.live  # a real job, engine or install: not in `make test-fast`

STEPS, PROMPTS, GENERATIONS, MAX_TOKENS = 3, 4, 4, 32
ENV = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model(tmp_path_factory.mktemp("tiny_llama") / "model")


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> tuple[Path, list[dict]]:
    """One recorded TRL GRPO run for the module, and TRL's completion lengths per (step, rank)."""
    tmp = tmp_path_factory.mktemp("trl")
    accelerate = str(Path(sys.executable).parent / "accelerate")
    result = run_cli(
        "record", "-o", str(tmp / "run"), "--model", str(model_dir / "config.json"), "--",
        accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no",
        str(REPO / "examples" / "trl_grpo" / "train.py"), "--model-dir", str(model_dir), "--out", str(tmp / "out"),
        "--lengths", str(tmp / "lengths.jsonl"), "--steps", str(STEPS), "--prompts", str(PROMPTS),
        "--generations", str(GENERATIONS), "--max-tokens", str(MAX_TOKENS),
        cwd=tmp, env=ENV, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "collector error" not in result.stderr
    lengths = [json.loads(line) for line in (tmp / "lengths.jsonl").read_text().splitlines()]
    return tmp / "run", lengths


def _rank_of_requests(bundle: rltrace.Bundle) -> pl.DataFrame:
    """Requests with the trainer rank that generated them: a request arrives when its generate span starts."""
    gen = bundle.spans.collect().filter(pl.col("phase") == "generate").select(
        pl.col("actor").str.extract(r"trainer/rank(\d+)").cast(pl.Int64).alias("rank"), "start_ns")
    return bundle.requests.collect().join(gen, left_on="arrival_ns", right_on="start_ns", how="left")


def test_trl_requests_are_prompts_times_generations_with_trls_own_lengths(trl_run: tuple[Path, list[dict]]) -> None:
    out, trl = trl_run
    bundle = rltrace.open(out)
    req = _rank_of_requests(bundle)
    assert req["rank"].null_count() == 0
    per_step = req.group_by("step").len().sort("step")
    assert per_step["step"].to_list() == list(range(STEPS))
    assert per_step["len"].to_list() == [PROMPTS * GENERATIONS] * STEPS
    ours = req.group_by("step", "rank").agg(pl.col("output_tokens").sort()).sort("step", "rank")
    theirs = sorted((t["step"], t["rank"], sorted(t["lengths"])) for t in trl)
    assert [(r["step"], r["rank"], r["output_tokens"]) for r in ours.iter_rows(named=True)] == theirs
    # a completion shorter than the cap ended in EOS; one without EOS ran to the cap
    assert (req.filter(pl.col("output_tokens") < MAX_TOKENS)["finish_reason"] == "stop").all()
    assert (req.filter(pl.col("finish_reason") == "length")["output_tokens"] == MAX_TOKENS).all()
    groups = req.group_by("step", "group_id").len()
    assert groups.height == STEPS * PROMPTS and (groups["len"] == GENERATIONS).all()
    # forward-timed: every row has a first token, and one iterations row per generated position and call
    assert req["first_token_ns"].null_count() == 0
    assert (req["first_token_ns"] <= req["finish_ns"]).all()
    iterations = bundle.iterations.collect()
    assert iterations.height == STEPS * 2 * MAX_TOKENS
    assert (iterations["requests"] == PROMPTS * GENERATIONS // 2).all()


def test_trl_actors_and_phases_follow_what_the_job_did(trl_run: tuple[Path, list[dict]]) -> None:
    out, _ = trl_run
    bundle = rltrace.open(out)
    spans = bundle.spans.collect()
    assert sorted(spans["actor"].unique()) == ["trainer/rank0", "trainer/rank1"]
    assert sorted(bundle.requests.collect()["engine"].unique()) == ["rollout/engine0", "rollout/engine1"]
    counts = spans.group_by("actor", "step", "phase").len()
    assert (counts["len"] == 1).all()
    assert counts.height == 2 * STEPS * 3  # generate, train, optimizer per rank and step
    wide = spans.pivot(on="phase", index=["actor", "step"], values=["start_ns", "end_ns"])
    # generation is never inside a train span: each step's train span starts after its generation ended
    assert (wide["end_ns_generate"] <= wide["start_ns_train"]).all()
    assert (wide["end_ns_train"] <= wide["start_ns_optimizer"]).all()
    assert "weight_sync" not in set(spans["phase"])  # HF generation in the trainer: nothing to sync


def test_trl_collectives_are_exact(trl_run: tuple[Path, list[dict]], model_dir: Path) -> None:
    from safetensors import safe_open

    out, _ = trl_run
    coll = rltrace.open(out).collectives.collect()
    assert coll["pg"].unique().to_list() == ["world"]
    # every operation once per rank, the same kind and size on both
    ops = coll.group_by("seq").agg(pl.len(), pl.col("rank").sort(), pl.col("op").n_unique(),
                                   pl.col("bytes_in").n_unique())
    assert (ops["len"] == 2).all() and (ops["op"] == 1).all() and (ops["bytes_in"] == 1).all()
    assert ops["rank"].to_list() == [[0, 1]] * ops.height
    assert sorted(ops["seq"]) == list(range(ops.height))
    # DDP's gradient all-reduce moves exactly the model's parameters once per step on each rank
    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        param_bytes = sum(f.get_tensor(k).nbytes for k in f.keys())  # noqa: SIM118 - a safe_open handle
    grads = coll.filter((pl.col("op") == "all_reduce") & (pl.col("count") > 2)).group_by("step", "rank").agg(
        pl.col("bytes_in").sum()).sort("step", "rank")
    assert grads["step"].to_list() == [s for s in range(STEPS) for _ in range(2)]
    assert (grads["bytes_in"] == param_bytes).all()


def test_trl_bundle_replays_under_every_scheduler(trl_run: tuple[Path, list[dict]], tmp_path: Path) -> None:
    out, _ = trl_run
    result = run_cli("replay", str(out), "-s", "all", "--json", "-o", str(tmp_path / "runs"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    metrics = json.loads(result.stdout)
    # the shipped schedulers: other test modules register their own (test-peek, ...) in this process only
    assert sorted(metrics) == SCHEDULERS.shipped()
    recorded = rltrace.open(out).requests.collect()
    assert metrics["as-recorded"]["samples"] == recorded.height
    assert metrics["as-recorded"]["output_tokens"] == recorded["output_tokens"].sum()
    for name, m in metrics.items():
        assert m["samples"] > 0 and m["throughput_samples_per_s"] > 0, name


@pytest.mark.parametrize("train", [False, True], ids=["generate-only", "one-process-trainer"])
def test_hf_generate_one_row_per_returned_sequence(train: bool, model_dir: Path, tmp_path: Path) -> None:
    """Left-padded prompts of different lengths, three samples each, EOS and pad distinct: every returned
    sequence is a row with the job's own prompt and output lengths; a process without torch.distributed is
    ``rollout/engine0`` when it only generates and ``trainer/rank0`` when it also trains."""
    result = run_cli(
        "record", "-o", str(tmp_path / "run"), "--", sys.executable,
        str(REPO / "examples" / "hf_generate" / "generate.py"), "--model-dir", str(model_dir),
        "--calls", "2", "--samples", "3", "--max-tokens", "40", *(["--train"] if train else []),
        cwd=tmp_path, env=ENV, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "collector error" not in result.stderr
    job = next(json.loads(line) for line in result.stdout.splitlines() if line.startswith("{"))
    bundle = rltrace.open(tmp_path / "run")
    req = bundle.requests.collect().with_columns(
        pl.col("request_id").str.extract(r"gen(\d+):(\d+)$", 1).cast(pl.Int64).alias("call"),
        pl.col("request_id").str.extract(r":(\d+)$", 1).cast(pl.Int64).alias("row"),
    ).sort("call", "row")
    assert req.height == sum(len(c) for c in job["calls"])
    assert req.select("prompt_tokens", "output_tokens").rows() == [
        (r["prompt"], r["output"]) for c in job["calls"] for r in c]
    assert req["step"].to_list() == [c for c, rows in enumerate(job["calls"]) for _ in rows]
    groups = req.group_by("call", "group_id").len()
    assert groups.height == len(job["calls"]) * job["prompts"] and (groups["len"] == job["samples"]).all()
    spans = bundle.spans.collect()
    actor = "trainer/rank0" if train else "rollout/engine0"
    assert set(spans["actor"]) == {actor}
    if train:
        wide = spans.pivot(on="phase", index="step", values=["start_ns", "end_ns"]).sort("step")
        assert wide.height == len(job["calls"])
        assert (wide["end_ns_generate"] <= wide["start_ns_train"]).all()
        assert bundle.manifest.cluster["trainer"].count == 1


def test_output_lengths_and_prompt_digests_on_edge_cases() -> None:
    """The collector's batch rules on hand-made batches: EOS inside, no EOS, pad sampled mid-sequence, pad equal
    to EOS, a row another stopping criterion ended; the digest ignores where the padding is."""
    import torch
    from rltrace.collectors.hf_generate import output_lengths, prompt_digests

    new = torch.tensor([[5, 1, 2, 2], [5, 6, 7, 8], [2, 5, 2, 9], [1, 2, 2, 2]])
    lengths, stopped = output_lengths(new, [1], 2, early_stop=False)
    assert lengths.tolist() == [2, 4, 4, 1] and stopped.tolist() == [True, False, False, True]
    # stop strings can end a row without EOS: the pads the loop appended after it are not output
    lengths, stopped = output_lengths(torch.tensor([[5, 6, 2, 2], [5, 6, 7, 8]]), [1], 2, early_stop=True)
    assert lengths.tolist() == [2, 4] and stopped.tolist() == [True, False]
    lengths, _ = output_lengths(torch.tensor([[5, 1, 1, 1]]), [1], 1, early_stop=True)  # pad is EOS
    assert lengths.tolist() == [2]
    assert output_lengths(torch.zeros((3, 0), dtype=torch.int64), [1], 2, False)[0].tolist() == [0, 0, 0]
    ids = torch.tensor([[2, 2, 7, 8, 9], [2, 7, 8, 9, 4], [7, 8, 9, 4, 5], [2, 2, 8, 7, 9]])
    mask = (torch.arange(5) >= torch.tensor([[2], [1], [0], [2]])).int()
    shifted = torch.tensor([[7, 8, 9, 2, 2]])  # the same prompt, right-padded
    digests = prompt_digests(ids, mask).tolist() + prompt_digests(shifted, (shifted != 2).int()).tolist()
    assert digests[0] == digests[4]  # left or right padding: one prompt
    assert len({digests[0], digests[1], digests[2], digests[3]}) == 4  # longer prompts and reordered tokens differ
