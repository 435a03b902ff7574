"""Collective names, which argument of a communication op is its input and which its output, and rank lists, shared by
the Kineto and execution-trace importers (element sizes: :mod:`rltrace.units`)."""

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


# c10d ops whose schema is (output, input, ...) (torch/csrc/distributed/c10d/Ops.cpp); every other c10d op takes one
# tensor (list) it reads and writes in place (allreduce_, broadcast_, reduce_, send, recv_, barrier)
OUTPUT_FIRST = frozenset({
    "_allgather_base", "alltoall_base", "_reduce_scatter_base", "allgather", "alltoall", "reduce_scatter", "gather",
    "scatter", "allgather_coalesced", "allgather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced",
})


def io_positions(name: str, schema: str | None = None) -> tuple[int, int | None]:
    """(input, output) argument positions of a communication op, as its recorded inputs (Kineto's ``Input Dims``, an
    execution trace's ``inputs``) list them; output None when the op records no output (an ``nccl:``/``gloo:``
    annotation or ``record_param_comms`` lists the input only).

    ``schema`` (an execution trace's ``op_schema``, "c10d::alltoall_base_(Tensor output, Tensor input, ...) -> ...")
    decides by its argument names when it names them; else the op's name: c10d's output-first ops
    (:data:`OUTPUT_FIRST`) are (1, 0), its other ops (0, 0)."""
    if schema:
        found = _schema_positions(schema)
        if found is not None:
            return found
    if not name.startswith("c10d::"):
        return 0, None
    return (1, 0) if name.removeprefix("c10d::").rstrip("_") in OUTPUT_FIRST else (0, 0)


def _schema_positions(schema: str) -> tuple[int, int | None] | None:
    """(input, output) positions from a schema's argument names (input*, output*; or one ``tensor``/``tensors``
    read and written in place); None when it names neither."""
    names = [_arg_name(arg) for arg in _schema_args(schema) if arg.strip() != "*"]
    given = next((i for i, n in enumerate(names) if n.startswith("input")), None)
    taken = next((i for i, n in enumerate(names) if n.startswith("output")), None)
    if given is not None:
        return given, taken
    both = next((i for i, n in enumerate(names) if n in ("tensor", "tensors")), None)
    return (both, both) if both is not None else None


def _schema_args(schema: str) -> list[str]:
    """The top-level arguments of "name(arg, arg, ...) -> ret" (commas inside brackets do not split)."""
    start = schema.find("(")
    if start < 0:
        return []
    args, depth, current = [], 0, ""
    for ch in schema[start + 1:]:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            args.append(current)
            current = ""
        else:
            current += ch
    return [*args, current] if current.strip() else args


def _arg_name(arg: str) -> str:
    """"Tensor[] output_tensors" -> "output_tensors"; "int timeout=-1" -> "timeout"; "*" -> ""."""
    words = arg.split("=", 1)[0].split()
    return words[-1] if len(words) >= 2 else ""
