"""Importers on the real third-party traces in ../shared/data (sources in its README): facts read from the
files independently (csv, gzip, json, tarfile), compared with what the bundle holds; inspect, replay and
replay-comms on imported bundles; malformed inputs."""

from __future__ import annotations

import csv
import gzip
import io
import json
import tarfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest
from helpers import require_shared, run_cli

import rltrace
from rltrace.analysis.diagnose import diagnose

PROFILES = "profiler_traces"


def _import(kind: str, files: list[Path], out: Path, *extra: str) -> rltrace.Bundle:
    done = run_cli("import", kind, *map(str, files), "-o", str(out), *extra)
    assert done.returncode == 0, done.stderr
    bundle = rltrace.open(out)
    assert bundle.manifest.source == f"import:{kind}"  # as docs/format.md documents the field
    return bundle


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


# Ranks 0 and 1 of HTA's 128-rank job, every NCCL kernel (all named ncclKernel_SendRecv_*, without collective args)
# as the ops around its cudaLaunchKernel describe it (c10d::* cpu op, nccl:* user_annotation): kernel ts and dur (us),
# op, dtype, count and bytes_in (the input: nccl:* Input Dims, or the c10d op's input argument), bytes_out (the
# c10d op's output argument where it has one: alltoall_base_ and _allgather_base_ take (output, input, ...)).
HTA_128 = {
    0: [(1682725898094377, 30669, "all_to_all", "long", 384, 3072, 3072),
        (1682725898125052, 62783, "all_to_all", "unsigned char", 419430400, 419430400, 382132224),
        (1682725898295662, 11727, "all_reduce", "float", 19618307, 78473228, 78473228),
        (1682725898348496, 47652, "all_reduce", "float", 26955536, 107822144, 107822144),
        (1682725898585321, 42496, "all_gather", "signed char", 16777216, 16777216, 1073741824),
        (1682725898741096, 67827, "all_to_all", "unsigned char", 419430400, 419430400, 382132224),
        (1682725898854684, 21124, "all_to_all", "int", 2846720, 11386880, 10485760),
        (1682725899131066, 12119, "all_reduce", "float", 26258430, 105033720, 105033720),
        (1682725899146327, 36158, "all_reduce", "float", 5716654, 22866616, 22866616),
        (1682725899185890, 63644, "all_gather", "signed char", 16777216, 16777216, 1073741824)],
    1: [(1682725898129911, 57924, "all_to_all", "unsigned char", 339738624, 339738624, 382132224),
        (1682725898234342, 41375, "all_to_all", "int", 2846720, 11386880, 10485760),
        (1682725898298964, 8370, "all_reduce", "float", 19618307, 78473228, 78473228),
        (1682725898512687, 17614, "all_reduce", "float", 26258430, 105033720, 105033720),
        (1682725898585405, 42744, "all_gather", "signed char", 16777216, 16777216, 1073741824),
        (1682725898701451, 39630, "all_to_all", "long", 384, 3072, 3072),
        (1682725898899992, 4624, "all_reduce", "float", 19618307, 78473228, 78473228),
        (1682725899038545, 90771, "all_to_all", "unsigned char", 394073856, 394073856, 350355456),
        (1682725899168655, 13838, "all_reduce", "float", 5716654, 22866616, 22866616),
        (1682725899187182, 62163, "all_gather", "signed char", 16777216, 16777216, 1073741824)],
}
HTA_128_COLUMNS = ("ts_us", "dur_us", "op", "dtype", "count", "bytes_in", "bytes_out")


@pytest.fixture(scope="module")
def hta_128(tmp_path_factory: pytest.TempPathFactory) -> rltrace.Bundle:
    files = [require_shared(f"{PROFILES}/hta_sampled_128rank_rank{r}.json.gz") for r in (0, 1)]
    return _import("kineto", files, tmp_path_factory.mktemp("hta128") / "b")


def _hta_128_rows(bundle: rltrace.Bundle, rank: int) -> pl.DataFrame:
    return bundle.collectives.collect().filter(pl.col("rank") == rank).sort("start_ns")


@pytest.mark.parametrize("rank", [0, 1])
def test_kineto_sendrecv_kernels_take_their_collective_from_the_ops_around_their_launch(hta_128, rank: int):
    c = _hta_128_rows(hta_128, rank)
    assert c["op"].to_list() == [row[2] for row in HTA_128[rank]]
    assert dict(c.group_by("op").len().iter_rows()) == {"all_reduce": 4, "all_gather": 2, "all_to_all": 4}
    # Kineto's integer microseconds, exactly (no float rounding of 1.68e15 us)
    assert c["start_ns"].to_list() == [row[0] * 1000 for row in HTA_128[rank]]
    assert (c["end_ns"] - c["start_ns"]).to_list() == [row[1] * 1000 for row in HTA_128[rank]]
    assert all(len(r) == 128 for r in c["pg_ranks"].to_list())
    assert hta_128.manifest.cluster["trainer"].count == 2


@pytest.mark.parametrize("rank", [0, 1])
def test_kineto_nccl_annotations_give_the_all_reduce_sizes(hta_128, rank: int):
    c = _hta_128_rows(hta_128, rank).filter(pl.col("op") == "all_reduce")
    expected = [row for row in HTA_128[rank] if row[2] == "all_reduce"]
    assert c.select("dtype", "count", "bytes_in", "bytes_out").rows() == [row[3:] for row in expected]
    assert not any("without a message size" in n for n in hta_128.manifest.notes)
    # the nccl:* annotations describe collectives; they are not counted as CPU work
    with gzip.open(require_shared(f"{PROFILES}/hta_sampled_128rank_rank{rank}.json.gz")) as f:
        events = json.load(f)["traceEvents"]
    cpu_ops = sum(1 for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op")
    spans = hta_128.spans.collect().filter((pl.col("actor") == f"trainer/rank{rank}") & (pl.col("phase") == "cpu"))
    assert sum(int(name.split()[0]) for name in spans["name"]) == cpu_ops


@pytest.mark.parametrize("rank", [0, 1])
def test_kineto_output_first_c10d_ops_give_input_and_output_sizes(hta_128, rank: int):
    c = _hta_128_rows(hta_128, rank).filter(pl.col("op").is_in(["all_gather", "all_to_all"]))
    expected = [row for row in HTA_128[rank] if row[2] in ("all_gather", "all_to_all")]
    assert c.select("op", "dtype", "count", "bytes_in", "bytes_out").rows() == [row[2:] for row in expected]


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


def _et_documents() -> dict[int, dict]:
    """The DLRM execution traces by rank (the last number in each file name)."""
    path = require_shared(f"{PROFILES}/param_dlrm_host_et_8rank.tar.gz")
    with tarfile.open(path) as tar:
        return {int(m.name.rsplit("_", 1)[1].split(".")[0]): json.load(io.BytesIO(tar.extractfile(m).read()))
                for m in tar.getmembers() if m.name.endswith(".json")}


# seq 3 of every rank: c10d::alltoall_base_(Tensor output, Tensor input, ...), the input 3,392 floats on each rank,
# the output as the rank's split sizes make it
ET_SEQ3_BYTES_OUT = {0: 3072, 1: 7168, 2: 9216, 3: 53248, 4: 18944, 5: 3072, 6: 6144, 7: 7680}


def test_execution_trace_alltoall_reads_input_and_output_by_op_schema(tmp_path: Path):
    c = _import("et", [require_shared(f"{PROFILES}/param_dlrm_host_et_8rank.tar.gz")], tmp_path / "b").collectives
    c = c.collect()
    seq3 = c.filter(pl.col("seq") == 3).sort("rank")
    assert seq3.select("rank", "op", "count", "bytes_in", "bytes_out").rows() == [
        (rank, "all_to_all", 3392, 3392 * 4, out) for rank, out in ET_SEQ3_BYTES_OUT.items()]
    # every row, from the nodes: the argument the op_schema names input (output) holds [id, storage, offset, numel,
    # element bytes, device]
    for rank, trace in _et_documents().items():
        nodes = [n for n in trace["nodes"] if n["name"].startswith("c10d::")]
        mine = c.filter(pl.col("rank") == rank).sort("seq")
        for node, (count, b_in, b_out) in zip(nodes, mine.select("count", "bytes_in", "bytes_out").rows()):
            if node["name"] == "c10d::alltoall_base_":
                assert "(Tensor output, Tensor input," in node["op_schema"]
                out, given = node["inputs"][0], node["inputs"][1]
            else:  # allreduce_(Tensor[] tensors, ...): one tensor, in place
                out = given = node["inputs"][0][0]
            assert (count, b_in, b_out) == (given[3], given[3] * given[4], out[3] * out[4]), (rank, node["id"])


def test_execution_trace_start_ts_is_milliseconds(tmp_path: Path):
    docs = _et_documents()
    # a 2 s run: finish_ts - start_ts is about 2,040 in every file, so the unit is ms
    assert all(2000 < d["finish_ts"] - d["start_ts"] < 2100 for d in docs.values())
    c = _import("et", [require_shared(f"{PROFILES}/param_dlrm_host_et_8rank.tar.gz")], tmp_path / "b").collectives
    c = c.collect().sort("rank", "seq")
    assert c.filter(pl.col("rank") == 0)["start_ns"].to_list() == [6_672_645_000_000 + i * 1000 for i in range(8)]
    for rank, doc in docs.items():
        starts = c.filter(pl.col("rank") == rank)["start_ns"].to_list()
        assert starts == [doc["start_ts"] * 1_000_000 + seq * 1000 for seq in range(len(starts))]


TORCH_SCHEMAS = {  # torch/csrc/distributed/c10d/Ops.cpp
    "allgather_": "Tensor[][] output_tensors, Tensor[] input_tensors",
    "_allgather_base_": "Tensor output_tensor, Tensor input_tensor",
    "allgather_coalesced_": "Tensor[][] output_lists, Tensor[] input_list",
    "allgather_into_tensor_coalesced_": "Tensor[] outputs, Tensor[] inputs",
    "reduce_scatter_": "Tensor[] output_tensors, Tensor[][] input_tensors",
    "_reduce_scatter_base_": "Tensor output_tensor, Tensor input_tensor",
    "reduce_scatter_tensor_coalesced_": "Tensor[] outputs, Tensor[] inputs",
    "gather_": "Tensor[][] output_tensors, Tensor[] input_tensors",
    "scatter_": "Tensor[] output_tensors, Tensor[][] input_tensors",
    "alltoall_": "Tensor[] output_tensors, Tensor[] input_tensors",
    "alltoall_base_": "Tensor output, Tensor input",
    "allreduce_": "Tensor[] tensors",
    "broadcast_": "Tensor[] tensors",
    "reduce_": "Tensor[] tensors",
}


@pytest.mark.parametrize("op", sorted(TORCH_SCHEMAS))
def test_input_and_output_positions_of_c10d_ops(op: str):
    from rltrace.collectors.importers.comms import io_positions

    expected = (0, 0) if TORCH_SCHEMAS[op] == "Tensor[] tensors" else (1, 0)
    schema = f"c10d::{op}({TORCH_SCHEMAS[op]}, __torch__.torch.classes.c10d.ProcessGroup process_group, int timeout)"
    assert io_positions(f"c10d::{op}") == expected  # by name (Kineto)
    assert io_positions(f"c10d::{op}", schema + " -> __torch__.torch.classes.c10d.Work") == expected  # by schema (ET)
    assert io_positions(f"nccl:{op.strip('_')}") == (0, None)  # annotations record the input only
    # the node's own schema wins over the name
    assert io_positions(f"c10d::{op}", "c10d::x(Tensor input, int[] s, *, Tensor output=None) -> ()") == (0, 2)


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
    # a request log holds arrivals, not a measured step: diagnose says so rather than judge a trainer it lacks
    with pytest.raises(rltrace.ConfigError, match="nothing to diagnose: no request finished"):
        diagnose(tmp_path / "req", replicates=0)
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
    ("et", lambda p: (p / "e.json").write_text('{"nodes": 3}') and p / "e.json", "/e.json: not an execution trace"),
    ("mooncake", lambda p: (p / "e.jsonl").write_bytes(b"") or p / "e.jsonl",  # polars' "Cannot infer NDJSON types"
     "not a Mooncake trace (JSON lines) (it holds no JSON lines)"),
    ("azure-llm", lambda p: (p / "nan.csv").write_text(  # "conversion from `f64` to `i64` failed in column ..."
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,5,10\n2023-11-16 18:15:47.68,6,NaN\n")
     and p / "nan.csv", "output token counts must be numbers: data row 2 has nan (1 of 2 rows)"),
    ("azure-llm", lambda p: (p / "a.csv").write_text("a,b\n1,2\n") and p / "a.csv",
     "not an Azure LLM trace (CSV): no column 'TIMESTAMP'"),
    ("csv", lambda p: (p / "c.csv").write_text("a,b\n1,2\n") and p / "c.csv", "needs --map"),
    ("nosuch", lambda p: p / "z.csv", "unknown import kind 'nosuch'"),
    ("azure-llm", lambda p: (p / "f.csv").write_text(  # imported as 5 prompt tokens without a word
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,5.5,10\n2023-11-16 18:15:47.68,6,11\n")
     and p / "f.csv", "prompt token counts must be whole numbers: data row 1 has 5.5 (1 of 2 rows are fractional)"),
    ("azure-llm", lambda p: (p / "far.csv").write_text(  # its nanoseconds wrapped: "arrival_ns=-48...7 is below 0"
        "TIMESTAMP,ContextTokens,GeneratedTokens\n9999-12-31 23:59:59,5,10\n") and p / "far.csv",
     "TIMESTAMP 9999-12-31 23:59:59 is past 2262-04-11 23:47:16, the last time nanoseconds since 1970 hold"),
    ("azure-llm", lambda p: (p / "big.csv").write_text(  # refused naming requests.parquet, a file the user never saw
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,5,3000000000\n") and p / "big.csv",
     "output token counts must be at most 2,147,483,647: data row 1 has 3,000,000,000 (1 of 1 rows)"),
    ("mooncake", lambda p: (p / "m.jsonl").write_text(  # a traceback from polars' explode
        '{"timestamp": 1, "input_length": 5, "output_length": 3, "hash_ids": "zz"}\n') and p / "m.jsonl",
     "hash_ids must be lists of block hashes, got String values"),
    # refused naming requests.parquet's arrival_ns, or a cast of 1e26 (the trace's ms as ns) that failed
    ("mooncake", lambda p: (p / "n.jsonl").write_text(
        '{"timestamp": 3, "input_length": 5, "output_length": 3}\n{"timestamp": -5, "input_length": 5, '
        '"output_length": 3}\n') and p / "n.jsonl",
     "arrival times must be from 0 to 9.22e+09 s: data row 2 arrives at -0.005 s (1 of 2 rows)"),
    ("mooncake", lambda p: (p / "f.jsonl").write_text(
        '{"timestamp": 1e20, "input_length": 5, "output_length": 3}\n') and p / "f.jsonl",
     "arrival times must be from 0 to 9.22e+09 s: data row 1 arrives at 1e+17 s (1 of 1 rows)"),
])
def test_malformed_inputs_are_one_line_and_exit_2(kind, make, message, tmp_path: Path):
    done = run_cli("import", kind, str(make(tmp_path)), "-o", str(tmp_path / "out"))
    assert done.returncode == 2, done.stdout
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("window, message", [
    ("1e-6", "--window-s 1e-06 cuts 3,436 s of arrivals into 3,435,948,057 steps, more than the 2,147,483,648"),
    ("1e300", "--window-s must be a number of seconds from 1e-09 (1 ns) to 9.22e+09, got 1e+300"),
    ("1e-12", "--window-s must be a number of seconds from 1e-09 (1 ns) to 9.22e+09, got 1e-12"),
    ("nan", "--window-s must be a number of seconds from 1e-09 (1 ns)"),
])
def test_a_window_that_gives_no_steps_is_one_line_and_exit_2(window: str, message: str, tmp_path: Path):
    azure = require_shared("requests/azure_llm_2023_code.csv")
    done = run_cli("import", "azure-llm", str(azure), "-o", str(tmp_path / "b"), "--window-s", window)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "b").exists()


def test_engines_above_the_manifest_limit_are_refused_at_import(tmp_path: Path):
    from rltrace.manifest import MAX_GPUS

    azure = require_shared("requests/azure_llm_2023_code.csv")
    done = run_cli("import", "azure-llm", str(azure), "-o", str(tmp_path / "b"), "--engines", str(MAX_GPUS + 1))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"--engines={MAX_GPUS + 1:,} is above the limit of {MAX_GPUS:,}" in done.stderr
    assert not (tmp_path / "b").exists()
    _import("azure-llm", [azure], tmp_path / "most", "--engines", str(MAX_GPUS))  # the limit itself is a bundle
    assert run_cli("inspect", str(tmp_path / "most")).returncode == 0


def _zoned_azure(tmp_path: Path, last: str | None = None) -> tuple[Path, list[dict]]:
    """The Azure code trace's first 4 requests, their TIMESTAMPs written as the same instants: as they are (no
    zone), in UTC with "Z", at +01:00 and at -05:00 (and a last row ``last``)."""
    rows = list(csv.DictReader(require_shared("requests/azure_llm_2023_code.csv").open()))[:4]
    out = []
    for row, (hours, zone) in zip(rows, [(0, ""), (0, "Z"), (1, "+01:00"), (-5, "-05:00")]):
        whole, fraction = row["TIMESTAMP"].split(".")
        local = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S") + timedelta(hours=hours)
        stamp = row["TIMESTAMP"] if not zone else f"{local:%Y-%m-%dT%H:%M:%S}.{fraction}{zone}"
        out.append({**row, "TIMESTAMP": stamp})
    if last is not None:
        out.append({**rows[0], "TIMESTAMP": last})
    path = tmp_path / "zoned.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(out[0]))
        writer.writeheader()
        writer.writerows(out)
    return path, rows


def test_csv_datetimes_with_a_zone_are_read_as_utc(tmp_path: Path):
    path, rows = _zoned_azure(tmp_path)
    mapping = ("--map", "arrival=TIMESTAMP,prompt=ContextTokens,output=GeneratedTokens", "--time-unit", "datetime")
    r = _import("csv", [path], tmp_path / "b", *mapping).requests.collect()
    azure = _import("azure-llm", [require_shared("requests/azure_llm_2023_code.csv")], tmp_path / "a").requests
    assert r.height == 4 and r["prompt_tokens"].to_list() == [int(x["ContextTokens"]) for x in rows]
    assert r["arrival_ns"].to_list() == azure.collect()["arrival_ns"].to_list()[:4]


def test_an_azure_time_early_in_2262_still_fits_nanoseconds(tmp_path: Path):
    path = tmp_path / "late.csv"  # int64 nanoseconds end on 2262-04-11; January was refused as "past 2262"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2262-01-01 00:00:00,5,10\n")
    r = _import("azure-llm", [path], tmp_path / "b").requests.collect()
    assert r["arrival_ns"].to_list() == [int(datetime(2262, 1, 1, tzinfo=timezone.utc).timestamp()) * 10**9]


def test_a_csv_datetime_that_is_not_a_timestamp_says_so(tmp_path: Path):
    path, _ = _zoned_azure(tmp_path, last="yesterday")
    done = run_cli("import", "csv", str(path), "-o", str(tmp_path / "b"), "--map",
                   "arrival=TIMESTAMP,prompt=ContextTokens,output=GeneratedTokens", "--time-unit", "datetime")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "column 'TIMESTAMP', data row 5: 'yesterday' is not a timestamp" in done.stderr
    assert "negative token count" not in done.stderr + done.stdout


def test_an_azure_timestamp_is_read_or_refused_never_dropped(tmp_path: Path):
    # "notadate" was dropped as a "negative token count or missing arrival", and so was a zoned time
    head = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,5\n"
    (tmp_path / "bad.csv").write_text(head + "notadate,10,5\n")
    done = run_cli("import", "azure-llm", str(tmp_path / "bad.csv"), "-o", str(tmp_path / "b"))
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "rltrace: error: column 'TIMESTAMP', data row 2: 'notadate' is not a timestamp"], done.stderr
    (tmp_path / "zoned.csv").write_text(head + "2023-11-16T18:17:05+01:00,10,5\n")
    arrival = _import("azure-llm", [tmp_path / "zoned.csv"], tmp_path / "z").requests.collect()["arrival_ns"]
    assert arrival.len() == 2 and arrival[0] - arrival[1] == 3_598_979_960_000  # 17:17:05 UTC, before 18:17:03.98


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


def test_a_profile_of_one_gpu_without_collectives_imports_its_spans(tmp_path: Path):
    # a trace with no communication failed on its empty collectives table: "column 'step': missing required column"
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 20},
              {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "ts": 15, "dur": 30, "args": {"correlation": 1}}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": events}))
    bundle = _import("kineto", [path], tmp_path / "b")
    assert bundle.collectives.collect().height == 0 and bundle.spans.collect().height > 0


@pytest.mark.parametrize(("kind", "trace"), [("kineto", "profiler_traces/hta_nccl_2rank_rank0.json.gz"),
                                              ("et", "profiler_traces/param_dlrm_host_et_8rank.tar.gz")])
def test_a_rank_given_twice_is_refused(tmp_path: Path, kind: str, trace: str):
    # a glob that named one trace twice doubled its collectives (42 where the file holds 21), unsaid
    path = require_shared(trace)
    done = run_cli("import", kind, str(path), str(path), "-o", str(tmp_path / "b"))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "rank 0 again" in done.stderr and "give each rank's trace once" in done.stderr


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


def test_an_sglang_time_past_what_nanoseconds_hold_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "far.log"  # a traceback from the cast to int64 nanoseconds
    path.write_text("".join(json.dumps({**row, "request_received_ts": 1e30}) + "\n" for row in _sglang_rows()))
    done = run_cli("import", "sglang", str(path), "-o", str(tmp_path / "b"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "request_received_ts: 1e+30 s is not a usable time" in done.stderr


def test_an_sglang_export_without_request_times_names_the_flag(tmp_path: Path):
    rows = _sglang_rows()
    bare = tmp_path / "bare.log"  # a server without --enable-metrics writes no request_received_ts
    bare.write_text("".join(json.dumps({k: v for k, v in row.items() if k != "request_received_ts"}) + "\n"
                            for row in rows))
    done = run_cli("import", "sglang", str(bare), "-o", str(tmp_path / "b"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "no field 'request_received_ts'" in done.stderr and "--enable-metrics" in done.stderr
