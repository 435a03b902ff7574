"""What replay-comms and --execute issue, without running it: the tensor each imported operation is issued as,
operations whose ranks disagree, and which recorded step's collectives a replayed step re-issues."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import torch
from helpers import require_shared, run_cli
from rltrace.replay.execute.comms import Op
from rltrace.replay.execute.replay_comms import DISAGREE, logical_ops
from rltrace.replay.execute.run import recorded_steps
from rltrace.sample_traces import sample_path

import rltrace

PROFILES = "profiler_traces"


@pytest.mark.parametrize(("dtype", "width", "expected"), [
    ("float32", 0, torch.float32), ("bfloat16", 0, torch.bfloat16),
    ("Float", 0, torch.float32), ("long int", 0, torch.float64), ("c10::BFloat16", 0, torch.float16),
    ("4-byte", 4, torch.float32), ("unknown", 2, torch.float16), ("unknown", 0, torch.uint8),
])
def test_a_dtype_torch_does_not_name_is_issued_at_its_width(dtype: str, width: int, expected: torch.dtype) -> None:
    """A Kineto "Float" or an ET "4-byte" was issued as uint8: a quarter of the recorded bytes."""
    assert Op("all_reduce", 8, dtype, (0, 1), width=width).tensor_dtype == expected
    odd = Op("all_reduce", 8, "16-byte", (0, 1), width=16)  # no dtype of that width here: its bytes as uint8
    assert (odd.tensor_dtype, odd.elements) == (torch.uint8, 128)


def _imported(tmp_path: Path, *names: str) -> rltrace.Bundle:
    files = [str(require_shared(f"{PROFILES}/{n}")) for n in names]
    done = run_cli("import", "kineto", *files, "-o", str(tmp_path / "b"))
    assert done.returncode == 0, done.stderr
    return rltrace.open(tmp_path / "b")


def test_imported_operations_issue_their_recorded_bytes(tmp_path: Path) -> None:
    ops = logical_ops(_imported(tmp_path, "hta_nccl_2rank_rank0.json.gz"), 2)
    issued = [o.count * torch.empty(0, dtype=o.tensor_dtype).element_size() for o in ops["op_spec"].to_list()]
    assert issued == ops["bytes"].to_list() and set(ops["dtype"]) - {"float32", "bfloat16"}


def test_an_operation_whose_ranks_disagree_is_skipped_not_merged(tmp_path: Path) -> None:
    """Two sampled ranks of HTA's 128-rank trace put an all_to_all and an all_reduce under one sequence number:
    they were issued as one operation neither rank recorded."""
    ops = logical_ops(_imported(tmp_path, "hta_sampled_128rank_rank0.json.gz",
                                "hta_sampled_128rank_rank1.json.gz"), 2)
    assert (ops["skip"] == DISAGREE).sum() > 0
    assert ops.filter(pl.col("skip").is_null()).height > 0  # those that agree still run


def test_each_replayed_step_reissues_its_own_recorded_steps_collectives() -> None:
    """--execute re-issued every recorded step's collectives whatever steps the replay took."""
    bundle = rltrace.open(sample_path("tiny_rl_cpu"))
    steps = bundle.requests.collect()["step"].unique().sort().to_list()
    assert recorded_steps(bundle, len(steps)) == steps
    assert recorded_steps(bundle, 1, [1]) == [1]
    assert recorded_steps(bundle, 5, [2, 3]) == [2, 3, 2, 3, 2]  # a resampled replay: cyclically
