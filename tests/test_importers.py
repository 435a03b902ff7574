"""Importers on the real third-party traces in ../shared/data (sources in its README): facts read from the
files independently (csv, gzip, json, tarfile), compared with what the bundle holds; inspect, replay and
replay-comms on imported bundles; malformed inputs."""

from __future__ import annotations

import csv
import gzip
import io
import json
import tarfile
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest
from helpers import require_shared, run_cli

import rltrace

PROFILES = "profiler_traces"


def _import(kind: str, files: list[Path], out: Path, *extra: str) -> rltrace.Bundle:
    done = run_cli("import", kind, *map(str, files), "-o", str(out), *extra)
    assert done.returncode == 0, done.stderr
    return rltrace.open(out)


def test_azure_code_trace(tmp_path: Path):
    path = require_shared("requests/azure_llm_2023_code.csv")
    rows = list(csv.DictReader(path.open()))
    bundle = _import("azure-llm", [path], tmp_path / "b", "--model", "Llama-2-7B", "--gpu", "H100")
    r = bundle.requests.collect()
    assert r.height == len(rows) == 8819
    assert r["output_tokens"].sum() == sum(int(x["GeneratedTokens"]) for x in rows)
    assert r["prompt_tokens"].sum() == sum(int(x["ContextTokens"]) for x in rows)
    first = datetime.strptime(rows[0]["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc)
    assert abs(r["arrival_ns"][0] - int(first.timestamp() * 1e9)) < 1_000  # 7 digits vs datetime's 6
    assert set(r["step"].to_list()) == {0}
    notes = " ".join(bundle.manifest.notes)
    assert "inferred" in notes and "Llama-2-7B given on the command line" in notes


def test_azure_conv_trace_in_time_windows(tmp_path: Path):
    path = require_shared("requests/azure_llm_2023_conv.csv")
    bundle = _import("azure-llm", [path], tmp_path / "b", "--window-s", "300", "--engines", "4")
    r = bundle.requests.collect()
    assert r.height == 19366
    span_s = (r["arrival_ns"].max() - r["arrival_ns"].min()) / 1e9
    assert r["step"].max() == int(span_s // 300)
    assert r["engine"].n_unique() == 4


def test_mooncake_trace_with_prefix_cache(tmp_path: Path):
    path = require_shared("requests/mooncake_conversation_trace.jsonl")
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    bundle = _import("mooncake", [path], tmp_path / "b")
    r = bundle.requests.collect()
    assert r.height == len(lines) == 12031
    assert r["output_tokens"].sum() == sum(x["output_length"] for x in lines)
    # cached prefix by hand for the first 200 requests: leading blocks some earlier request had
    seen: set[int] = set()
    for i, x in enumerate(lines[:200]):
        lead = 0
        for h in x["hash_ids"]:
            if h not in seen:
                break
            lead += 1
        assert r["cached_tokens"][i] == min(lead * 512, x["input_length"]), i
        seen.update(x["hash_ids"])
    assert r["cached_tokens"][0] == 0 and r["cached_tokens"][1] == 512  # request 1 shares block 0


def test_generic_csv_matches_the_azure_importer(tmp_path: Path):
    path = require_shared("requests/azure_llm_2023_code.csv")
    a = _import("azure-llm", [path], tmp_path / "a").requests.collect()
    b = _import("csv", [path], tmp_path / "b", "--map", "arrival=TIMESTAMP,prompt=ContextTokens,output=GeneratedTokens",
                "--time-unit", "datetime").requests.collect()
    assert a.select("prompt_tokens", "output_tokens").equals(b.select("prompt_tokens", "output_tokens"))
    assert (a["arrival_ns"] - b["arrival_ns"]).abs().max() < 1_000


def _hta_kernels(path: Path) -> list[dict]:
    with gzip.open(path) as f:
        trace = json.load(f)
    return [e for e in trace["traceEvents"] if e.get("cat") == "kernel" and "Collective name" in e.get("args", {})]


def test_kineto_hta_nccl_2rank_counts_and_sizes(tmp_path: Path):
    path = require_shared(f"{PROFILES}/hta_nccl_2rank_rank0.json.gz")
    kernels = _hta_kernels(path)
    bundle = _import("kineto", [path], tmp_path / "b")
    c = bundle.collectives.collect()
    for name, op in (("allreduce", "all_reduce"), ("broadcast", "broadcast")):
        mine = [k for k in kernels if k["args"]["Collective name"] == name]
        rows = c.filter(pl.col("op") == op)
        assert rows.height == len(mine) > 0
        assert sorted(rows["count"].to_list()) == sorted(k["args"]["In msg nelems"] for k in mine)
        assert sorted(rows["end_ns"] - rows["start_ns"]) == sorted(round(k["dur"] * 1e3) for k in mine)
    assert c.filter(pl.col("op") == "all_reduce").height == 15 and c.filter(pl.col("op") == "broadcast").height == 6
    allreduce = c.filter(pl.col("op") == "all_reduce")
    assert (allreduce["bytes_in"] == allreduce["count"] * 4).all()  # dtype Float
    assert c["pg_ranks"].to_list()[0] == [0, 1] and set(c["rank"]) == {0}
    steps = bundle.spans.collect().filter(pl.col("phase") == "train")
    assert steps["name"].to_list() == ["ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"]
    assert set(c["step"]) <= {4, 5, 6}


def test_kineto_two_ranks_of_a_128_rank_job(tmp_path: Path):
    files = [require_shared(f"{PROFILES}/hta_sampled_128rank_rank{r}.json.gz") for r in (0, 1)]
    bundle = _import("kineto", files, tmp_path / "b")
    c = bundle.collectives.collect()
    assert set(c["rank"]) == {0, 1} and set(c["op"]) == {"all_to_all"}
    sized = c.filter(pl.col("bytes_in") > 0)
    assert sized.height >= 10  # sizes from the c10d op around each kernel's launch
    assert all(len(r) == 128 for r in c["pg_ranks"].to_list())
    assert bundle.manifest.cluster["trainer"].count == 2


def test_kineto_gloo_cpu_only_rank(tmp_path: Path):
    path = require_shared(f"{PROFILES}/hta_gloo_cpu_only_rank34.json.gz")
    bundle = _import("kineto", [path], tmp_path / "b")
    c = bundle.collectives.collect()
    assert c.height == 10 and set(c["op"]) == {"all_reduce"} and set(c["rank"]) == {34}
    assert sorted(set(c["count"])) == [321271, 2082411]
    assert (c["bytes_in"] == c["count"] * 4).all()
    assert len(c["pg_ranks"][0]) == 300


def test_execution_traces_of_8_ranks(tmp_path: Path):
    path = require_shared(f"{PROFILES}/param_dlrm_host_et_8rank.tar.gz")
    expected = {}
    with tarfile.open(path) as tar:
        for m in tar.getmembers():
            if m.name.endswith(".json"):
                nodes = json.load(io.BytesIO(tar.extractfile(m).read()))["nodes"]
                expected[m.name] = [n for n in nodes if n["name"].startswith("c10d::")]
    bundle = _import("et", [path], tmp_path / "b")
    c = bundle.collectives.collect()
    assert c.height == sum(len(v) for v in expected.values()) == 64
    assert set(c["rank"]) == set(range(8))
    per_rank = c.group_by("rank", "op").len().sort("rank", "op")
    assert set(per_rank.filter(pl.col("op") == "all_to_all")["len"]) == {5}
    assert set(per_rank.filter(pl.col("op") == "all_reduce")["len"]) == {3}
    assert 394241 * 4 in c.filter(pl.col("op") == "all_reduce")["bytes_in"].to_list()
    assert any("no durations" in n for n in bundle.manifest.notes)


@pytest.mark.live  # replay-comms runs the collectives on Gloo processes
def test_inspect_replay_and_replay_comms_on_imported_bundles(tmp_path: Path):
    azure = require_shared("requests/azure_llm_2023_code.csv")
    _import("azure-llm", [azure], tmp_path / "req", "--model", "Llama-2-7B", "--gpu", "H100", "--window-s", "1800")
    shown = run_cli("inspect", str(tmp_path / "req"))
    assert shown.returncode == 0 and "8,819" in shown.stdout
    replayed = run_cli("replay", str(tmp_path / "req"), "-s", "disagg-sync", "--json")
    assert replayed.returncode == 0, replayed.stderr
    metrics = json.loads(replayed.stdout)["disagg-sync"]
    assert metrics["samples"] == 8819 and metrics["throughput_tokens_per_s"] > 0
    hta = require_shared(f"{PROFILES}/hta_nccl_2rank_rank0.json.gz")
    _import("kineto", [hta], tmp_path / "nccl")
    assert run_cli("inspect", str(tmp_path / "nccl")).returncode == 0
    refused = run_cli("replay", str(tmp_path / "nccl"), "--gpu", "A100")
    assert refused.returncode == 2 and "no requests, so no RL step to replay" in refused.stderr
    assert "replay-comms" in refused.stderr
    comms = run_cli("replay-comms", str(tmp_path / "nccl"), "--ranks", "2", timeout=600)
    assert comms.returncode == 0, comms.stderr
    assert "all_reduce" in comms.stdout


def _truncated(tmp_path: Path) -> Path:
    data = require_shared(f"{PROFILES}/hta_nccl_2rank_rank0.json.gz").read_bytes()
    out = tmp_path / "cut.json.gz"
    out.write_bytes(data[: len(data) // 2])
    return out


@pytest.mark.parametrize("kind, make, message", [
    ("kineto", _truncated, "truncated or corrupt gzip"),
    ("kineto", lambda p: (p / "x.json").write_text('{"foo": 1}') and p / "x.json", "not a Kineto trace"),
    ("kineto", lambda p: (p / "y.json").write_text("not json") and p / "y.json", "not a Kineto trace"),
    ("kineto", lambda p: p / "missing.json", "no such file"),
    ("et", lambda p: (p / "e.json").write_text('{"nodes": 3}') and p / "e.json", "not an execution trace"),
    ("azure-llm", lambda p: (p / "a.csv").write_text("a,b\n1,2\n") and p / "a.csv", "no column 'TIMESTAMP'"),
    ("csv", lambda p: (p / "c.csv").write_text("a,b\n1,2\n") and p / "c.csv", "needs --map"),
    ("nosuch", lambda p: p / "z.csv", "unknown import kind 'nosuch'"),
])
def test_malformed_inputs_are_one_line_and_exit_2(kind, make, message, tmp_path: Path):
    done = run_cli("import", kind, str(make(tmp_path)), "-o", str(tmp_path / "out"))
    assert done.returncode == 2, done.stdout
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_bad_events_inside_a_good_file_are_counted_and_skipped(tmp_path: Path):
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100},
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "ts": 10, "dur": 5,
         "args": {"Input Dims": [[8]], "Input type": ["float"]}},
        {"ph": "X", "cat": "user_annotation", "name": "gloo:frobnicate", "ts": 20, "dur": 5, "args": {}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 30},  # no dur
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": events}))
    done = run_cli("import", "kineto", str(path), "-o", str(tmp_path / "b"))
    assert done.returncode == 0, done.stderr
    assert "skipped 1 event(s): unknown collective 'gloo:frobnicate'" in done.stdout
    assert "skipped 1 event(s): complete event without a valid ts or dur" in done.stdout
    c = rltrace.open(tmp_path / "b").collectives.collect()
    assert c.height == 1 and c["bytes_in"][0] == 32 and c["step"][0] == 1
    assert any("skipped 1" in n for n in rltrace.open(tmp_path / "b").manifest.notes)


SGLANG = Path(__file__).parent / "data" / "sglang" / "sglang-request-metrics-20261129_06.log"
"""SGLang's per-request metrics export, in the fields sglang 0.5.23's FileRequestMetricsExporter writes: two
weight versions of two prompts x two samples on two data-parallel ranks"""


def test_sglang_request_metrics_export(tmp_path: Path):
    rows = _sglang_rows()
    r = _import("sglang", [SGLANG], tmp_path / "b").requests.collect()
    assert r["request_id"].to_list() == [row["id"] for row in rows]
    assert r["output_tokens"].to_list() == [row["completion_tokens"] for row in rows]
    assert r["prompt_tokens"].to_list() == [row["prompt_tokens"] for row in rows]
    assert r["cached_tokens"].to_list() == [row["cached_tokens"] for row in rows]
    ns = [round(row["request_received_ts"] * 1e9) for row in rows]
    assert r["arrival_ns"].to_list() == ns
    assert r["scheduled_ns"].to_list() == [round(row["forward_entry_time"] * 1e9) for row in rows]
    assert r["first_token_ns"].to_list() == [a + round(row["first_token_latency"] * 1e9) for a, row in zip(ns, rows)]
    assert r["finish_ns"].to_list() == [round(row["request_finished_ts"] * 1e9) for row in rows]
    assert r["finish_reason"].to_list() == [row["finish_reason"]["type"] for row in rows]
    assert r["policy_version"].to_list() == [int(row["weight_version"]) for row in rows]
    assert r["step"].to_list() == [int(row["weight_version"]) - 3 for row in rows]  # a step per weight version
    assert r["engine"].to_list() == [f"rollout/engine{row['dp_rank']}" for row in rows]
    assert r["num_preemptions"].to_list() == [row["num_retractions"] for row in rows]
    # a prompt's samples share a group; the two prompts do not
    prompts = [json.loads(row["request_parameters"])["text"] for row in rows]
    groups = dict(zip(r["group_id"].to_list(), prompts))
    assert len(groups) == 2 and all(groups[g] == p for g, p in zip(r["group_id"].to_list(), prompts))


def _sglang_rows() -> list[dict]:
    return [json.loads(line) for line in SGLANG.read_text().splitlines()]


def _unscheduled(row: dict) -> dict:
    # a request aborted in the queue: no forward batch, and SGLang's queue_time is then 0 minus its queue entry
    return {**{k: v for k, v in row.items() if k not in ("forward_entry_time", "first_token_latency")},
            "queue_time": -1795499990.0, "finish_reason": {"type": "abort", "message": "client disconnected"}}


@pytest.mark.parametrize(("change", "column", "expected"), [
    (_unscheduled, "scheduled_ns", None),
    (_unscheduled, "first_token_ns", None),
    (_unscheduled, "finish_reason", "abort"),
    # no forward_entry_time, a valid queue_time: arrival + queue_time
    (lambda row: {k: v for k, v in row.items() if k != "forward_entry_time"}, "scheduled_ns",
     round(_sglang_rows()[0]["request_received_ts"] * 1e9) + round(_sglang_rows()[0]["queue_time"] * 1e9)),
    # no request_finished_ts: arrival + e2e_latency
    (lambda row: {k: v for k, v in row.items() if k != "request_finished_ts"}, "finish_ns",
     round(_sglang_rows()[0]["request_received_ts"] * 1e9) + round(_sglang_rows()[0]["e2e_latency"] * 1e9)),
    # a finish reason given as a plain string, and none at all
    (lambda row: {**row, "finish_reason": "length"}, "finish_reason", "length"),
    (lambda row: {**row, "finish_reason": None}, "finish_reason", "abort"),
])
def test_sglang_fields_that_are_missing_or_odd(tmp_path: Path, change, column: str, expected) -> None:
    rows = _sglang_rows()
    path = tmp_path / "one.log"
    path.write_text("".join(json.dumps(change(row) if i == 0 else row) + "\n" for i, row in enumerate(rows)))
    r = _import("sglang", [path], tmp_path / "b").requests.collect()
    assert r[column][0] == expected
    assert (r["arrival_ns"] <= r["scheduled_ns"].fill_null(r["arrival_ns"])).all()


def test_sglang_steps_follow_weight_versions_without_gaps(tmp_path: Path) -> None:
    path = tmp_path / "gap.log"
    path.write_text("".join(json.dumps({**row, "weight_version": "10" if row["weight_version"] == "4" else "3"}) + "\n"
                            for row in _sglang_rows()))
    r = _import("sglang", [path], tmp_path / "b").requests.collect()
    assert sorted(set(r["step"])) == [0, 1] and sorted(set(r["policy_version"])) == [3, 10]


def test_an_sglang_export_with_text_for_a_number_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "text.log"
    path.write_text("".join(json.dumps({**row, "prompt_tokens": "many"}) + "\n" for row in _sglang_rows()))
    done = run_cli("import", "sglang", str(path), "-o", str(tmp_path / "b"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "wrong type" in done.stderr


def test_an_sglang_export_without_request_times_names_the_flag(tmp_path: Path):
    rows = _sglang_rows()
    bare = tmp_path / "bare.log"  # a server without --enable-metrics writes no request_received_ts
    bare.write_text("".join(json.dumps({k: v for k, v in row.items() if k != "request_received_ts"}) + "\n"
                            for row in rows))
    done = run_cli("import", "sglang", str(bare), "-o", str(tmp_path / "b"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "no field 'request_received_ts'" in done.stderr and "--enable-metrics" in done.stderr
