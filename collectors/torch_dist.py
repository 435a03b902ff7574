"""torch.distributed collector: every c10d operation, whichever API issued it.

A TorchDispatchMode sees the c10d dispatcher ops behind every API on every backend: eager
``torch.distributed.*`` calls, batched p2p, DDP's reducer, functional collectives (DTensor, FSDP2). Per op
it records op, dtype, element count, bytes in/out, process group (name and global ranks), root/peer,
a per-group sequence number, issue time and completion time:

- ops returning a Work: completion is the Work future's callback, which Gloo fires when the op is done;
  for CUDA tensors (NCCL) the future completes at enqueue, so completion is the issue time plus the
  Work's CUDA-event duration (``TORCH_NCCL_ENABLE_TIMING=1``, set by ``rltrace record``), read once the
  Work reports completion;
- functional collectives expose no Work: completion is when the job first waits on or consumes the output.

It also hooks torch.optim's global step hooks: each optimizer step ends a ``train`` span (from the first
module forward after the previous step) and is itself an ``optimizer`` span; the optimizer step count is
the trainer's step.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode

from rltrace.collectors import recorder
from rltrace.collectors.api import SELF, steps

_COMM_NAMESPACES = ("c10d", "_c10d_functional")
# c10d / functional op name -> rltrace op
_OPS = {
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce", "all_reduce": "all_reduce",
    "all_reduce_": "all_reduce", "all_reduce_coalesced": "all_reduce", "all_reduce_coalesced_": "all_reduce",
    "allgather_": "all_gather", "_allgather_base_": "all_gather", "allgather_coalesced_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather", "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_out": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
    "reduce_scatter_": "reduce_scatter", "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter", "reduce_scatter_tensor_out": "reduce_scatter",
    "broadcast_": "broadcast", "broadcast": "broadcast",
    "reduce_": "reduce", "gather_": "gather", "scatter_": "scatter",
    "alltoall_": "all_to_all", "alltoall_base_": "all_to_all", "all_to_all_single": "all_to_all",
    "send": "send", "recv_": "recv", "recv_any_source_": "recv", "barrier": "barrier",
}
_INPUT_ARGS = ("tensors", "input_tensors", "input_tensor", "input", "inputs", "self")
_OUTPUT_ARGS = ("output_tensors", "output_tensor", "output", "out", "outputs")
_PEER_ARGS = ("root_rank", "dst_rank", "src_rank", "dst", "src")
_tls = threading.local()


@dataclass(frozen=True, slots=True)
class _Spec:
    op: str
    functional: bool
    inputs: int | None
    outputs: int | None
    group: int | None
    group_name: int | None
    peer: int | None


@functools.cache
def _spec(func: Any) -> _Spec | None:
    """How to read one op's arguments, from its schema's argument names (computed once per op)."""
    if func.namespace not in _COMM_NAMESPACES:
        return None
    op = _OPS.get(func._opname)
    if op is None:
        return None
    names = [a.name for a in func._schema.arguments]

    def find(candidates: tuple[str, ...]) -> int | None:
        return next((names.index(c) for c in candidates if c in names), None)

    return _Spec(
        op=op,
        functional=func.namespace == "_c10d_functional",
        inputs=find(_INPUT_ARGS),
        outputs=find(_OUTPUT_ARGS),
        group=find(("process_group",)),
        group_name=find(("group_name", "tag")),
        peer=find(_PEER_ARGS),
    )


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _nbytes(ts: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


class _Groups:
    """Process-group name and global ranks, cached per group."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[str, list[int], str]] = {}

    def lookup(self, pg: Any) -> tuple[str, list[int], str]:
        key = pg.group_name
        hit = self._cache.get(key)
        if hit is None:
            world = dist.group.WORLD
            name = "world" if world is not None and pg.group_name == world.group_name else f"pg{pg.group_name}"
            try:
                ranks = list(dist.get_process_group_ranks(pg))
            except Exception:  # noqa: BLE001 - a group outside the default world: its own ranks
                ranks = list(range(pg.size()))
            try:
                backend = str(dist.get_backend(pg))
            except Exception:  # noqa: BLE001
                backend = "other"
            hit = self._cache[key] = (name, ranks, backend)
        return hit


class CommMode(TorchDispatchMode):
    """Records every c10d op that passes through the dispatcher on this thread (and its autograd threads)."""

    def __init__(self) -> None:
        super().__init__()
        self.groups = _Groups()
        self.seq: dict[str, int] = {}
        self.pending: dict[int, list] = {}  # id(output tensor) -> row of a functional op awaiting completion
        self.cuda_pending: list[tuple[list, Any]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        spec = _spec(func)
        if spec is None:
            out = func(*args, **(kwargs or {}))
            if self.pending:
                self._consumed(args)
            return out
        start = time.time_ns()
        out = func(*args, **(kwargs or {}))
        rec = recorder.current()
        if rec is not None:
            with rec.guard("torch.distributed collector"):
                self._record(rec, spec, args, out, start)
        return out

    def _record(self, rec: recorder.Recorder, spec: _Spec, args: tuple, out: Any, start: int) -> None:
        pg = None
        if spec.group is not None:
            pg = dist.ProcessGroup.unbox(args[spec.group])
        elif spec.group_name is not None:
            pg = torch._C._distributed_c10d._resolve_process_group(args[spec.group_name])
        if pg is None:
            return
        name, ranks, backend = self.groups.lookup(pg)
        ins = _tensors(args[spec.inputs]) if spec.inputs is not None else []
        outs = _tensors(args[spec.outputs]) if spec.outputs is not None else []
        if spec.functional:
            outs = _tensors(out)
        if spec.op == "barrier":
            ins, outs = [], []
        first = (ins or outs or [None])[0]
        dtype = str(first.dtype).removeprefix("torch.") if first is not None else "none"
        peer = None
        if spec.peer is not None and isinstance(args[spec.peer], int) and spec.op != "barrier":
            group_rank = args[spec.peer]
            peer = ranks[group_rank] if 0 <= group_rank < len(ranks) else group_rank
        bytes_in = _nbytes(ins)
        bytes_out = _nbytes(outs) if outs else bytes_in
        if spec.op in ("recv",):
            bytes_in, bytes_out = 0, _nbytes(ins)
        elif spec.op == "send":
            bytes_out = 0
        seq = self.seq.get(name, 0)
        self.seq[name] = seq + 1
        rank = dist.get_rank() if dist.is_initialized() else 0
        if rec.meta.get("rank") is None and dist.is_initialized():
            rec.meta["rank"] = rank
            rec.meta["world"] = f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}/{dist.get_world_size()}"
        rec.meta["backends"][name] = backend
        async_op = bool(getattr(_tls, "async_op", False)) or spec.functional
        count = sum(t.numel() for t in ins) if ins else sum(t.numel() for t in outs)
        row = [steps.current(), rank, name, ranks, spec.op, dtype, count, bytes_in, bytes_out, peer, seq, start, None, async_op]
        work = out[-1] if isinstance(out, tuple) else out
        if spec.functional:
            for t in outs:
                self.pending[id(t)] = row
            return
        if isinstance(work, torch.ScriptObject):
            work = dist.Work.unbox(work)
        if not isinstance(work, dist.Work):
            row[12] = time.time_ns()
            rec.add("collectives", tuple(row))
            return
        if first is not None and first.is_cuda:
            self.cuda_pending.append((row, work))
            return
        try:
            work.get_future().then(functools.partial(_completed, row))
        except RuntimeError:  # Gloo send/recv and reduce_scatter Works have no future: completion is their wait
            _awaiting[id(work)] = (row, work)

    def _consumed(self, args: tuple) -> None:
        """Stamp completion of functional collectives whose output this op consumed (or waited on)."""
        now = time.time_ns()
        for t in _tensors(list(args)):
            row = self.pending.pop(id(getattr(t, "elem", t)), None)
            if row is not None and row[12] is None:
                row[12] = now
                recorder.record("collectives", tuple(row))

    def resolve_cuda(self) -> None:
        """Finish NCCL rows whose Work completed: end = issue + CUDA-event duration (called by the flush)."""
        still = []
        for row, work in self.cuda_pending:
            if work.is_completed():
                row[12] = row[11] + int(work._get_duration() * 1e6)
                recorder.record("collectives", tuple(row))
            else:
                still.append((row, work))
        self.cuda_pending = still


def _completed(row: list, _future: Any) -> None:
    row[12] = time.time_ns()
    recorder.record("collectives", tuple(row))


# Works without a future, by id: pybind11 hands the job the same Python Work object the mode unboxed, so
# the wrapped Work.wait below finds the row when the job waits (the moment the op is known complete).
_awaiting: dict[int, tuple[list, Any]] = {}
MAX_AWAITING = 100_000


def _wrap_wait(wait: Any) -> Any:
    @functools.wraps(wait)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = wait(self, *args, **kwargs)
        if _awaiting:
            entry = _awaiting.pop(id(self), None)
            if entry is not None:
                entry[0][12] = time.time_ns()
                recorder.record("collectives", tuple(entry[0]))
        return result

    wrapper.__rltrace_wrapped__ = True  # type: ignore[attr-defined]
    return wrapper


def _prune_awaiting() -> None:
    """Forget Works the job never waited on, beyond a bound (their completion time is unknown)."""
    if len(_awaiting) > MAX_AWAITING:
        for key in list(_awaiting)[: len(_awaiting) - MAX_AWAITING]:
            _awaiting.pop(key, None)


# ---------------------------------------------------------------------- async flag of the eager API
_ASYNC_APIS = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "broadcast",
    "all_to_all", "all_to_all_single", "reduce", "gather", "scatter", "barrier", "send", "recv",
)
_ALWAYS_ASYNC = ("isend", "irecv", "batch_isend_irecv")


def _flag_async(fn: Any, always: bool) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if getattr(_tls, "depth", 0):  # an API implemented by another (send -> isend): the outer call decides
            return fn(*args, **kwargs)
        _tls.async_op = always or bool(kwargs.get("async_op", False))
        _tls.depth = 1
        try:
            return fn(*args, **kwargs)
        finally:
            _tls.async_op = False
            _tls.depth = 0

    wrapper.__rltrace_wrapped__ = True  # type: ignore[attr-defined]
    return wrapper


def _patch_async_flags() -> None:
    for names, always in ((_ASYNC_APIS, False), (_ALWAYS_ASYNC, True)):
        for name in names:
            fn = getattr(c10d, name, None)
            if fn is None or getattr(fn, "__rltrace_wrapped__", False):
                continue
            wrapped = _flag_async(fn, always)
            setattr(c10d, name, wrapped)
            if getattr(dist, name, None) is fn:
                setattr(dist, name, wrapped)


# ---------------------------------------------------------------------- optimizer steps and train spans
class _TrainSpans:
    def __init__(self) -> None:
        self.forward_start: int | None = None
        self.opt_start = 0
        self.handle: Any = None
        self.stepped = False  # an optimizer step happened since the last forward: the next forward is a new step

    def arm(self) -> None:
        self.handle = torch.nn.modules.module.register_module_forward_pre_hook(self.first_forward)

    def first_forward(self, module: Any, args: Any) -> None:
        if self.stepped:
            steps.optimizer += 1
            self.stepped = False
        if self.forward_start is None:
            self.forward_start = time.time_ns()
        if self.handle is not None:
            self.handle.remove()  # one call per step, not one per submodule
            self.handle = None

    @recorder.guarded("optimizer hooks")
    def pre_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.opt_start = time.time_ns()
        rec = recorder.current()
        if rec is None:
            return
        rec.note_role("trainer")
        if self.forward_start is not None:
            rec.add("spans", (steps.train(), SELF, "train", "forward+backward", self.forward_start, self.opt_start))
        self.forward_start = None

    @recorder.guarded("optimizer hooks")
    def post_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        end = time.time_ns()
        recorder.record("spans", (steps.train(), SELF, "optimizer", type(optimizer).__name__ + ".step", self.opt_start, end))
        self.stepped = True
        if self.handle is None:
            self.arm()


_mode: CommMode | None = None
_train: _TrainSpans | None = None


def enter_mode() -> None:
    """Start capturing c10d ops on this thread, once a process group of several ranks exists.

    Single-rank worlds (vLLM's CPU worker creates one) have nothing to record, and skipping them keeps the
    dispatch mode, which sees every op, off their hot path.
    """
    global _mode
    rec = recorder.current()
    if _mode is not None or rec is None or not dist.is_initialized() or dist.get_world_size() < 2:
        return
    _mode = CommMode()
    _mode.__enter__()
    rec.flush_hooks.append(_mode.resolve_cuda)
    rec.flush_hooks.append(_prune_awaiting)


def _after_init(init: Any) -> Any:
    @functools.wraps(init)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = init(*args, **kwargs)
        rec = recorder.current()
        if rec is not None:
            with rec.guard("torch collector install"):
                enter_mode()
        return result

    wrapper.__rltrace_wrapped__ = True  # type: ignore[attr-defined]
    return wrapper


def install(_module: Any = None) -> None:
    """Attach to torch in this process (idempotent): async flags, optimizer hooks, and the dispatch mode
    now if a multi-rank process group exists, else right after ``init_process_group`` creates one."""
    global _train
    rec = recorder.current()
    if rec is None or _train is not None:
        return
    with rec.guard("torch collector install"):
        _patch_async_flags()
        if not getattr(dist.Work.wait, "__rltrace_wrapped__", False):
            dist.Work.wait = _wrap_wait(dist.Work.wait)
        if not getattr(c10d.init_process_group, "__rltrace_wrapped__", False):
            wrapped = _after_init(c10d.init_process_group)
            c10d.init_process_group = wrapped
            dist.init_process_group = wrapped
        _train = _TrainSpans()
        _train.arm()
        register_optimizer_step_pre_hook(_train.pre_step)
        register_optimizer_step_post_hook(_train.post_step)
        enter_mode()


def uninstall() -> None:
    """Leave the dispatch mode (for start()/stop() within one process)."""
    global _mode
    if _mode is not None:
        _mode.__exit__(None, None, None)
        _mode = None
