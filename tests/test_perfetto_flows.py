"""Perfetto export: flow events (weight syncs, a request's attempts across instances) and slice args, from
the real CLI, checked against the trace-event rules (tests/trace_event_rules.py)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest
from helpers import REPO, run_cli
from rltrace.sample_traces import sample_path
from trace_event_rules import violations

import rltrace


def _flows(events: list[dict]) -> dict[int, list[dict]]:
    flows: dict[int, list[dict]] = defaultdict(list)
    for e in events:
        if e["ph"] in ("s", "t", "f"):
            flows[e["id"]].append(e)
    return flows


def _slice_at(events: list[dict], flow_event: dict) -> dict:
    """The complete event a flow event binds to: the one enclosing it on its thread."""
    (hit,) = [e for e in events if e["ph"] == "X" and e["pid"] == flow_event["pid"] and e["tid"] == flow_event["tid"]
              and e["ts"] < flow_event["ts"] < e["ts"] + e["dur"]]
    return hit


@pytest.fixture(scope="module")
def rollmux_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], Path, dict[int, str]]:
    """The shipped RollMux job list replayed, then exported, both by the CLI."""
    root = tmp_path_factory.mktemp("flows")
    done = run_cli("replay", "--jobs", str(REPO / "examples" / "rollmux" / "jobs.toml"), "-s", "rollmux",
                   "--replicates", "0", "-o", str(root / "runs"), cwd=root)
    assert done.returncode == 0, done.stderr
    out = root / "trace.json"
    done = run_cli("export", "perfetto", str(root / "runs" / "rollmux"), "-o", str(out), cwd=root)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert violations(text) == []
    trace = json.loads(text)
    pids = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    return trace["traceEvents"], root / "runs" / "rollmux", pids


def test_weight_syncs_flow_from_the_trainer_through_the_sync_to_every_instance(rollmux_trace) -> None:
    events, _run, pids = rollmux_trace
    syncs = [f for f in _flows(events).values() if f[0]["name"].startswith("weight sync")]
    sources = [_slice_at(events, f[0]) for f in syncs]
    targets = [_slice_at(events, f[-1]) for f in syncs]
    # trainer -> sync: from a training slice into the sync of the same job and step
    into_sync = [(s, t) for s, t in zip(sources, targets) if s["name"].startswith("train")]
    assert into_sync and all(t["name"].startswith("weight_sync") and t["args"]["step"] == s["args"]["step"]
                             and t["args"]["job"] == s["args"]["job"] for s, t in into_sync)
    # sync -> generator: into the first request of that job on an instance after the sync ended
    out_of_sync = [(s, t) for s, t in zip(sources, targets) if s["name"].startswith("weight_sync")]
    assert len(out_of_sync) >= len(into_sync)
    for s, t in out_of_sync:
        assert pids[t["pid"]].startswith("generation"), pids[t["pid"]]
        assert "request" in t["args"] and t["args"]["job"] == s["args"]["job"]
        assert t["ts"] >= s["ts"] + s["dur"] - 1e-3
    instances = {t["pid"] for _, t in out_of_sync}
    assert len(instances) > 1  # one flow per instance


def test_a_migrated_requests_attempts_are_one_flow_across_instances(rollmux_trace) -> None:
    events, run, _pids = rollmux_trace
    timeline = pl.read_parquet(run / "timeline.parquet")
    moved = timeline.filter(pl.col("kind") == "migrated")["id"].unique().to_list()
    assert moved, "the shipped job list should make RollMux migrate its long tails"
    attempts = {f[0]["name"]: f for f in _flows(events).values() if f[0]["name"].endswith("attempts")}
    assert {f"request {r} attempts" for r in moved} <= set(attempts)
    crossed = 0
    for name, flow in attempts.items():
        slices = [_slice_at(events, e) for e in flow]
        rid = name.split()[1]
        assert all(s["args"]["request"] == rid for s in slices)
        assert [e["ph"] for e in flow] == ["s", *["t"] * (len(flow) - 2), "f"]
        assert slices[-1]["name"].startswith("request")  # the attempt that finished ends the flow
        crossed += len({s["pid"] for s in slices}) > 1
    assert crossed  # at least one request moved to another instance


def test_request_slices_carry_request_job_step_and_tokens(rollmux_trace) -> None:
    events, run, _ = rollmux_trace
    requests = pl.read_parquet(run / "requests.parquet")
    by_id = {r["request"]: r for r in requests.iter_rows(named=True)}
    slices = [e for e in events if e["ph"] == "X" and "request" in e["args"]]
    assert len(slices) >= requests["finished"].sum()
    for e in slices[:: max(len(slices) // 500, 1)]:
        row = by_id[int(e["args"]["request"])]
        assert (e["args"]["job"], e["args"]["step"]) == (row["job"], row["step"])
        assert (e["args"]["prompt_tokens"], e["args"]["output_tokens"]) == (row["prompt_tokens"], row["output_tokens"])
    train = [e for e in events if e["ph"] == "X" and e["name"].startswith("train")]
    assert train and all(set(e["args"]) == {"step", "job"} for e in train)


def test_a_recorded_bundles_weight_syncs_flow_from_sender_to_receiver(tmp_path: Path) -> None:
    out = tmp_path / "tiny.json"
    done = run_cli("export", "perfetto", "tiny_rl_cpu", "-o", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert violations(text) == []
    events = json.loads(text)["traceEvents"]
    pids = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    recorded = rltrace.open(sample_path("tiny_rl_cpu")).weight_syncs.collect()
    flows = list(_flows(events).values())
    assert len(flows) == recorded.height
    pairs = sorted((pids[f[0]["pid"]], pids[f[-1]["pid"]]) for f in flows)
    assert pairs == sorted(zip(recorded["src"].to_list(), recorded["dst"].to_list()))
    requests = [e for e in events if e["ph"] == "X" and "request" in e["args"]]
    assert len(requests) == rltrace.open(sample_path("tiny_rl_cpu")).requests.select(pl.len()).collect().item()
    assert all(e["args"]["output_tokens"] > 0 and "step" in e["args"] for e in requests)


X = {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 10}
NAMES = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "p"}},
         {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "t"}}]


@pytest.mark.parametrize("flow, rule", [
    ([{"ph": "s", "cat": "c", "id": 1, "ts": 5}], "one 's' first and one 'f' last"),
    ([{"ph": "s", "cat": "c", "id": 1, "ts": 5}, {"ph": "f", "cat": "c", "id": 1, "ts": 20, "bp": "e"}],
     "inside no slice"),
    ([{"ph": "s", "cat": "c", "id": 1, "ts": 8}, {"ph": "f", "cat": "c", "id": 1, "ts": 2, "bp": "e"}], "back in time"),
    ([{"ph": "s", "id": 1, "ts": 5}, {"ph": "f", "cat": "c", "id": 1, "ts": 6}], "needs a string cat"),
])
def test_the_rules_catch_broken_flows(flow: list[dict], rule: str) -> None:
    events = NAMES + [X] + [{"name": "w", "pid": 1, "tid": 1, **e} for e in flow]
    assert any(rule in v for v in violations(json.dumps({"traceEvents": events})))
    good = NAMES + [X] + [{"name": "w", "pid": 1, "tid": 1, "cat": "c", "id": 1, **e}
                          for e in ({"ph": "s", "ts": 2}, {"ph": "f", "ts": 8, "bp": "e"})]
    assert violations(json.dumps({"traceEvents": good})) == []


ATTEMPTS = ("request", "preempted", "aborted", "migrated")


def test_a_requests_attempts_follow_one_another_on_the_instance_that_ran_each(rollmux_trace) -> None:
    """Every attempt was drawn from the request's first admission: a migrated request appeared on its new instance
    30 s before it arrived there, and one request of fully-async filled five batch slots at once."""
    _events, run, _pids = rollmux_trace
    attempts = pl.read_parquet(run / "timeline.parquet").filter(pl.col("kind").is_in(ATTEMPTS)).sort("id", "end_s")
    moved = attempts.filter(pl.len().over("id") >= 2)
    assert moved.height
    gaps = moved.with_columns(pl.col("end_s").shift(1).over("id").alias("before")).drop_nulls("before")
    # (a migration leaves its source at that instance's next iteration boundary, which can lie a part of one decode
    # iteration, a few ms, past the moment the destination admits the request)
    overlap = gaps["before"] - gaps["start_s"]
    assert overlap.max() < 0.01, gaps.filter(overlap >= 0.01)


def test_busy_rows_are_the_union_of_each_instances_attempts(rollmux_trace) -> None:
    """An instance wrote a busy row only when its batch emptied, from after its first prefill: one that never
    emptied had none (fully-async: 1 row for 16 instances), and the others began late."""
    _events, run, _pids = rollmux_trace
    timeline = pl.read_parquet(run / "timeline.parquet")
    busy = timeline.filter(pl.col("kind") == "busy")
    work = timeline.filter(pl.col("kind").is_in(ATTEMPTS))
    assert set(busy["resource"]) == set(work["resource"])
    for (resource,), mine in work.group_by("resource"):
        rows = busy.filter(pl.col("resource") == resource).sort("start_s")
        assert rows["start_s"][0] == mine["start_s"].min() and rows["end_s"][-1] == mine["end_s"].max()
        assert (rows["start_s"][1:] > rows["end_s"][:-1]).all()  # disjoint
        covered = sum(e - s for s, e in zip(rows["start_s"], rows["end_s"]))
        assert covered <= (mine["end_s"] - mine["start_s"]).sum() + 1e-9


def test_the_running_requests_counter_is_the_batch(rollmux_trace) -> None:
    """The counter counted finished attempts only: a batch of 32 read 12 while 20 attempts that were aborted or
    migrated later still ran."""
    events, run, pids = rollmux_trace
    attempts = pl.read_parquet(run / "timeline.parquet").filter(pl.col("kind").is_in(ATTEMPTS))
    counter = [e for e in events if e["ph"] == "C" and e["name"] == "running requests"]
    for resource in attempts.filter(pl.col("kind") != "request")["resource"].unique().to_list()[:3]:
        mine = attempts.filter(pl.col("resource") == resource)
        samples = sorted((e["ts"], e["args"]["value"]) for e in counter if pids[e["pid"]] == resource)
        for ts, value in samples[:: max(len(samples) // 50, 1)]:
            t = ts / 1e6
            running = mine.filter(pl.col("start_s") <= t + 1e-9, pl.col("end_s") > t + 1e-9).height
            assert value == running, (resource, t)
