"""`rltrace record` on a real 2-rank Gloo job: every c10d API is captured with the right facts."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import polars as pl
import pytest
from helpers import REPO, require, run_cli

import rltrace

require("torch", "the torch extra is installed by `make test`")

pytestmark = pytest.mark.live  # a real job, engine or install: not in `make test-fast`

JOB = REPO / "tests" / "jobs" / "collectives_job.py"
F32, I64 = 4, 8


def expected(rank: int) -> list[tuple]:
    """(op, dtype, count, bytes_in, bytes_out, peer, async_op) in issue order, as collectives_job.py issues them."""
    peer = 1 - rank
    first_p2p = (
        ("send", "float32", 16, 16 * F32, 0, peer, False) if rank == 0
        else ("recv", "float32", 16, 0, 16 * F32, peer, False)
    )
    return [
        ("all_reduce", "float32", 1024, 1024 * F32, 1024 * F32, None, False),
        ("all_gather", "float32", 256, 256 * F32, 512 * F32, None, False),
        ("all_gather", "float32", 512, 512 * F32, 1024 * F32, None, False),  # all_gather_into_tensor
        ("reduce_scatter", "float32", 256, 256 * F32, 128 * F32, None, False),
        ("broadcast", "int64", 64, 64 * I64, 64 * I64, 0, False),
        ("all_to_all", "float32", 64, 64 * F32, 64 * F32, None, False),
        first_p2p,
        ("send", "float32", 8, 8 * F32, 0, peer, True),  # batch_isend_irecv
        ("recv", "float32", 8, 0, 8 * F32, peer, True),
        ("all_reduce", "float32", 2048, 2048 * F32, 2048 * F32, None, True),  # async_op=True + wait
        ("all_reduce", "float32", 512, 512 * F32, 512 * F32, None, True),  # the same, async_op by position
        ("all_reduce", "float32", 100, 100 * F32, 100 * F32, None, True),  # functional collective
        ("all_gather", "float32", 32, 32 * F32, 64 * F32, None, True),  # DTensor redistribute
    ]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rec") / "run"
    result = run_cli(
        "record", "-o", str(out), "--keep-shards", "--",
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29631", str(JOB),
    )
    assert result.returncode == 0, result.stderr
    assert "collector error" not in result.stderr, result.stderr
    return out


def test_every_operation_is_recorded_with_its_facts(recorded: Path) -> None:
    coll = rltrace.open(recorded).collectives.collect().sort("rank", "start_ns")  # each rank's issue order
    for rank in (0, 1):
        rows = coll.filter(pl.col("rank") == rank)
        got = list(rows.select("op", "dtype", "count", "bytes_in", "bytes_out", "peer", "async_op").iter_rows())
        assert got == expected(rank), rank
        assert set(rows["pg"]) == {"world"}
        assert all(r == [0, 1] for r in rows["pg_ranks"].to_list())
        assert sorted(rows["seq"]) == list(range(len(got)))
    # one seq names one operation on both ranks: a collective on each, or a send with its receive. The two
    # ranks' batch_isend_irecv cross (each sends, then receives), so no numbering keeps both issue orders:
    # the operation issued first anywhere is numbered first.
    ops = coll.group_by("seq").agg(pl.col("op").sort().str.join(","), pl.col("count").n_unique(), pl.len())
    assert (ops["len"] == 2).all() and (ops["count"] == 1).all()
    assert sorted(ops.filter(pl.col("op").str.contains("send"))["op"]) == ["recv,send"] * 3


def test_end_times_are_real_completions(recorded: Path) -> None:
    coll = rltrace.open(recorded).collectives.collect()
    assert (coll["end_ns"] >= coll["start_ns"]).all()
    first = coll.filter((pl.col("rank") == 0) & (pl.col("seq") == 0)).row(0, named=True)
    # rank 1 sleeps 0.3 s before joining the first all_reduce: rank 0's op ends only once it has
    assert first["end_ns"] - first["start_ns"] >= 0.25e9
    other = coll.filter((pl.col("rank") == 1) & (pl.col("seq") == 0)).row(0, named=True)
    assert other["end_ns"] - other["start_ns"] < 0.2e9


def test_a_declared_sync_group_turns_its_sends_into_flows(recorded: Path) -> None:
    """No trainer/generator roles in this job: declaring the group is what makes its transfers weight syncs."""
    assert rltrace.open(recorded).weight_syncs.collect().height == 0
    out = recorded.with_name("declared")
    result = run_cli("record", "--merge", str(recorded.with_name("run.shards")), "-o", str(out),
                     "--sync-group", "world")
    assert result.returncode == 0, result.stderr
    flows = rltrace.open(out).weight_syncs.collect().sort("src", "start_ns")
    # rank 0: the int64 broadcast (512 B) and the two sends (64 B, then 32 B in the batch) in step 0, one flow
    from_rank0 = flows.filter(pl.col("src") == "rank0")
    assert from_rank0.select("dst", "bytes", "tensors", "method").rows() == [("rank1", 512 + 64 + 32, 3, "gloo")]
    assert flows.filter(pl.col("src") == "rank1").select("dst", "bytes", "tensors").rows() == [("rank0", 32, 1)]


def test_ranks_follow_a_world_that_is_destroyed_and_formed_again(tmp_path: Path) -> None:
    """Each process read its rank once, so after destroy_process_group and a new world with the ranks swapped
    every row kept the old rank: the new rank 0's send was recorded as rank 1 sending to itself."""
    ports = _free_ports(2)
    result = run_cli("record", "-o", str(tmp_path / "run"), "--",
                     sys.executable, str(REPO / "tests" / "jobs" / "reinit_job.py"), *ports, timeout=180)
    assert result.returncode == 0, result.stderr
    coll = rltrace.open(tmp_path / "run").collectives.collect()
    p2p = coll.filter(pl.col("op").is_in(["send", "recv"])).sort("op")
    assert p2p.select("op", "rank", "peer").rows() == [("recv", 1, 0), ("send", 0, 1)]
    reduced = coll.filter(pl.col("op") == "all_reduce").group_by("count").agg(pl.col("rank").sort()).sort("count")
    assert reduced.rows() == [(10, [0, 1]), (1000, [0, 1])]  # each world's all-reduce, once per rank


def test_operations_never_waited_on_are_counted_not_lost(tmp_path: Path) -> None:
    """A Gloo isend whose Work the job never waits on has no completion time: its row was silently missing (and
    the Work, held by the recorder, kept its tensor alive). Each is counted in the manifest's left_out."""
    [port] = _free_ports(1)
    result = run_cli("record", "-o", str(tmp_path / "run"), "--",
                     sys.executable, str(REPO / "tests" / "jobs" / "unwaited_job.py"), port, timeout=180)
    assert result.returncode == 0, result.stderr
    bundle = rltrace.open(tmp_path / "run")
    ops = bundle.collectives.collect().group_by("op", "rank").len().sort("op", "rank").rows()
    assert ops == [("all_reduce", 0, 1), ("all_reduce", 1, 1), ("barrier", 0, 1), ("barrier", 1, 1), ("recv", 1, 3),
                   ("send", 0, 1)]
    assert bundle.manifest.extra["left_out"]["asynchronous operations never waited on (completion unknown)"] == 2


def _free_ports(n: int) -> list[str]:
    """``n`` distinct ports free now (each socket held until all are read, so none is handed out twice)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [str(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()
