"""The torch.distributed collector on a real GPU: NCCL collectives and DDP recorded with CUDA-event durations.

Needs a CUDA device (skipped without one, so CI, which has none, skips it; it was run on an H100, see
docs/recording.md). NCCL takes one GPU per rank, so the job is one rank recording its one-rank groups.
"""

from __future__ import annotations

import json
import sys

import polars as pl
import pytest
from helpers import REPO, run_cli

import rltrace

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (NCCL)")

MB = 1 << 20
BIG = 128 * MB  # the job's bf16 tensor
DDP_PARAMS = 4096 * 4096 + 4096  # its Linear(4096, 4096)
SLACK_NS = 50_000  # host clock reads around the op against CUDA events inside it


def test_nccl_collectives_and_ddp_are_recorded_with_their_gpu_durations(tmp_path) -> None:
    out = tmp_path / "run"
    done = run_cli("record", "-o", str(out), "--", sys.executable, str(REPO / "tests" / "jobs" / "nccl_job.py"),
                   timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "collector error" not in done.stderr, done.stderr
    walls = json.loads(next(line for line in done.stdout.splitlines() if line.startswith('{"wall_s"')))["wall_s"]
    rows = rltrace.open(out).collectives.collect().sort("seq").with_columns(
        (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))
    explicit = rows.head(6)
    assert explicit["op"].to_list() == ["all_reduce", "all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                        "all_reduce"]
    assert explicit["async_op"].to_list() == [False] * 5 + [True]
    assert explicit["dtype"].to_list() == ["bfloat16"] * 6
    assert explicit["bytes_in"].to_list() == [BIG] * 6
    assert explicit["bytes_out"].to_list() == [BIG] * 6  # one rank: a gather or scatter moves the same bytes
    # Each duration comes from the Work's CUDA events: resolved, positive, and inside the host's issue-to-sync time.
    for name, dur in zip(["warmup", "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_reduce_async"],
                         explicit["dur_ns"].to_list()):
        assert 0 < dur <= walls[name] * 1e9 + SLACK_NS, (name, dur, walls[name])
    # A copy of 128 MB cannot beat the H100's HBM (3.35 TB/s, read and write): the all_gather ran on the GPU.
    assert explicit["dur_ns"][2] >= 2 * BIG / 3.35e12 * 1e9
    # DDP: its start-up broadcast of the parameters and the gradient bucket's all_reduce, float32.
    ddp = rows.slice(6)
    grads = ddp.filter(pl.col("op") == "all_reduce")
    assert grads["bytes_in"].to_list() == [DDP_PARAMS * 4]
    broadcasts = ddp.filter(pl.col("op") == "broadcast", pl.col("dtype") == "float32")
    assert broadcasts["bytes_in"].to_list() == [DDP_PARAMS * 4]
    assert (ddp["dur_ns"] > 0).all()
