"""Collective names and rank lists shared by the Kineto and execution-trace importers (element sizes:
:mod:`rltrace.units`)."""

from __future__ import annotations

import json
import re

# Collective names as PyTorch writes them (record_param_comms "Collective name", c10d ops, nccl:/gloo:
# annotations, NCCL kernel names) -> the bundle's op vocabulary (rltrace/schema.py).
OPS = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "allreduce_sparse": "all_reduce", "reduce": "reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "_all_gather_base": "all_gather", "allgather_into_tensor_coalesced": "all_gather",
    "all_gather_into_tensor": "all_gather", "allgather_coalesced": "all_gather", "gather": "gather",
    "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "reducescatter": "reduce_scatter", "scatter": "scatter", "broadcast": "broadcast",
    "alltoall": "all_to_all", "all_to_all": "all_to_all", "alltoall_base": "all_to_all",
    "all_to_allv": "all_to_all", "all_to_all_single": "all_to_all", "sendrecv": "all_to_all",
    "send": "send", "recv": "recv", "recvanysource": "recv", "barrier": "barrier",
}

_KERNEL = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")


def op_of(name: str) -> str | None:
    """The bundle op for a collective name, an annotation ("nccl:all_reduce", "gloo:all_reduce",
    "c10d::allreduce_") or an NCCL kernel name; None when it is not a known collective."""
    base = name
    m = _KERNEL.match(name)
    if m:
        base = m.group(1)
    else:
        for prefix in ("nccl:", "gloo:", "c10d::"):
            if name.startswith(prefix):
                base = name[len(prefix):]
    return OPS.get(base.strip("_").lower()) or OPS.get(base.lower().rstrip("_"))


def parse_ranks(text: object) -> list[int] | None:
    """"[0, 1]" (as Kineto writes Process Group Ranks) or a list -> list of ints."""
    if isinstance(text, list):
        return [int(r) for r in text]
    if isinstance(text, str) and text.startswith("["):
        try:
            return [int(r) for r in json.loads(text)]
        except (ValueError, TypeError):
            return None
    return None
