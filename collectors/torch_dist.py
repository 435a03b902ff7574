"""torch.distributed collector: every c10d operation, whichever API issued it.

Every API ends in a c10d dispatcher op: eager ``torch.distributed.*`` calls, batched p2p, DDP's C++ reducer,
functional collectives (DTensor, FSDP2). The collector registers a Python kernel for exactly those ops at the
dispatcher's ``BackendSelect`` key, which every call passes through (inference-mode tensors too), records the
op and redispatches to the real backend kernel. Other ops never reach Python, so they cost nothing extra.
Per op: op, dtype, element count, bytes in/out, process group (name and global ranks), root/peer, a per-group
sequence number, issue time and completion time:

- ops returning a Work with a future (Gloo collectives): completion is the future's callback;
- Gloo Works without a future (send/recv, reduce_scatter): completion is the job's ``wait()`` on it;
- CUDA tensors (NCCL): the future completes at enqueue, so completion is the issue time plus the Work's
  CUDA-event duration (``TORCH_NCCL_ENABLE_TIMING=1``, set by ``rltrace record``), read once it completed;
- functional collectives expose no Work: completion is their ``wait_tensor``, which runs before any use.

It also hooks torch.optim's global step hooks: each optimizer step ends a ``train`` span (from the first
module forward after the previous step, or after the step's last generation or engine start-up, whose forward
passes are not training) and is itself an ``optimizer`` span.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from rltrace.collectors import recorder
from rltrace.collectors.api import SELF, steps
from torch.distributed import distributed_c10d as c10d
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

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


@dataclass(frozen=True, slots=True)
class _Group:
    name: str
    ranks: list[int]
    backend: str


class _Groups:
    """Process-group facts, cached by the group object's identity (pybind11 returns the same Python object
    for the same C++ group, and the cache keeps it alive, so identities are never reused)."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[Any, _Group]] = {}

    def lookup(self, pg: Any) -> _Group:
        hit = self._cache.get(id(pg))
        if hit is not None:
            return hit[1]
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
        group = _Group(name, ranks, backend)
        self._cache[id(pg)] = (pg, group)
        rec = recorder.current()
        if rec is not None:
            rec.meta["backends"][name] = backend
            if rec.meta.get("rank") is None and dist.is_initialized():
                rec.meta["rank"] = dist.get_rank()
                addr = f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}"
                rec.meta["world"] = f"{addr}/{dist.get_world_size()}"
        return group


_DTYPES: dict[Any, str] = {}


def _dtype_name(t: torch.Tensor) -> str:
    name = _DTYPES.get(t.dtype)
    if name is None:
        name = _DTYPES[t.dtype] = str(t.dtype).removeprefix("torch.")
    return name


_AFTER_BACKEND_SELECT = torch._C.DispatchKeySet(torch._C.DispatchKey.BackendSelect)


class Interceptor:
    """Records the c10d ops that pass through the Python kernels registered by :func:`install`.

    ``min_ranks``: groups with fewer ranks are not recorded (a one-rank group moves nothing).
    """

    def __init__(self, min_ranks: int = 2) -> None:
        self.min_ranks = min_ranks
        self.groups = _Groups()
        self.seq: dict[str, int] = {}
        # id(output tensor) -> (weak reference, row) of a functional op awaiting its wait_tensor; the reference
        # tells a reused id from the tensor itself, without keeping the tensor alive
        self.pending: dict[int, tuple[weakref.ref[Any], list[Any]]] = {}
        self.cuda_pending: list[tuple[list[Any], Any]] = []
        self.rank: int | None = None
        self.rank_world: Any = None  # the default group self.rank was read in: a re-initialised world reads again

    def kernel(self, op: Any, spec: _Spec | None) -> Any:
        """The Python kernel for one op overload."""

        def run(keyset: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(_tls, "inside", False):  # an op issued by another c10d op (functional -> c10d): once only
                return op.redispatch(keyset - _AFTER_BACKEND_SELECT, *args, **kwargs)
            _tls.inside = True
            start = time.time_ns()
            try:
                out = op.redispatch(keyset - _AFTER_BACKEND_SELECT, *args, **kwargs)
            finally:
                _tls.inside = False
            rec = recorder.current()
            if rec is not None:
                try:  # inline rather than rec.guard(): this runs once per collective
                    if spec is None:
                        self._waited(args)
                    else:
                        self._record(rec, spec, args, out, start)
                except Exception as e:  # noqa: BLE001 - recording must never break the job
                    rec.error("torch.distributed collector", e)
            return out

        return run

    def _waited(self, args: tuple[Any, ...]) -> None:
        entry = self.pending.pop(id(args[0]), None) if args else None
        if entry is not None and entry[0]() is args[0]:
            entry[1][12] = time.time_ns()
            recorder.record("collectives", tuple(entry[1]))

    def _record(self, rec: recorder.Recorder, spec: _Spec, args: tuple[Any, ...], out: Any, start: int) -> None:
        if spec.group is not None:
            pg = dist.ProcessGroup.unbox(args[spec.group])
        elif spec.group_name is not None:
            pg = torch._C._distributed_c10d._resolve_process_group(args[spec.group_name])
        else:
            return
        group = self.groups.lookup(pg)
        ranks = group.ranks
        if len(ranks) < self.min_ranks:
            rec.skip("collectives of one-rank process groups")  # nothing moves (vLLM's CPU worker makes one): counted
            return
        op = spec.op
        if op == "barrier":
            ins: list[torch.Tensor] = []
            outs: list[torch.Tensor] = []
        else:
            ins = _tensors(args[spec.inputs]) if spec.inputs is not None else []
            if spec.functional:
                outs = _tensors(out)
            else:
                outs = _tensors(args[spec.outputs]) if spec.outputs is not None else []
        first = ins[0] if ins else outs[0] if outs else None
        bytes_in = ins[0].nbytes if len(ins) == 1 else sum(t.nbytes for t in ins)
        bytes_out = (outs[0].nbytes if len(outs) == 1 else sum(t.nbytes for t in outs)) if outs else bytes_in
        if op == "recv":
            bytes_in, bytes_out = 0, bytes_in
        elif op == "send":
            bytes_out = 0
        peer = None
        if spec.peer is not None and op != "barrier":
            group_rank = args[spec.peer]
            if isinstance(group_rank, int):
                peer = ranks[group_rank] if 0 <= group_rank < len(ranks) else group_rank
        seq = self.seq.get(group.name, 0)
        self.seq[group.name] = seq + 1
        world = dist.group.WORLD
        if self.rank is None or world is not self.rank_world:  # destroy_process_group, then a new rank
            self.rank = dist.get_rank() if dist.is_initialized() else 0
            self.rank_world = world
        counted = ins or outs
        count = counted[0].numel() if len(counted) == 1 else sum(t.numel() for t in counted)
        row = [
            steps.current(), self.rank, group.name, ranks, op, _dtype_name(first) if first is not None else "none",
            count, bytes_in, bytes_out, peer, seq, start, None, spec.functional or getattr(_tls, "async_op", False),
        ]
        if spec.functional:
            if len(self.pending) > MAX_AWAITING:  # never-waited outputs: their completion time is unknown
                rec.skip(UNWAITED, len({id(row) for _, row in self.pending.values()}))  # operations, not outputs
                self.pending.clear()
            for t in outs:
                self.pending[id(t)] = (weakref.ref(t), row)
            return
        sync_rows = getattr(_tls, "sync_rows", None)
        if sync_rows is not None and not (first is not None and first.is_cuda):
            sync_rows.append(row)  # completed when the synchronous API call returns
            return
        work = out[-1] if isinstance(out, tuple) else out
        if isinstance(work, torch.ScriptObject):
            work = dist.Work.unbox(work)
        if not isinstance(work, dist.Work):
            row[12] = time.time_ns()
            rec.add("collectives", tuple(row))
        elif first is not None and first.is_cuda:
            self.cuda_pending.append((row, work))
        else:
            try:
                future = work.get_future()
            except RuntimeError:  # Gloo send/recv and reduce_scatter Works have no future: completion is their wait
                _awaiting[id(work)] = (row, work, _generation)
                return
            future.add_done_callback(functools.partial(_completed, row))

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


def _completed(row: list[Any], _future: Any) -> None:
    row[12] = time.time_ns()
    recorder.record("collectives", tuple(row))


# Works without a future, by id: pybind11 hands the job the same Python Work object the mode unboxed, so
# the wrapped Work.wait below finds the row when the job waits (the moment the op is known complete). Held
# strongly through one whole flush interval (the job has its Work by then: a flush can run while the op's binding
# has released the GIL, before the job holds it), weakly after: a Work the job drops unwaited dies one to two flush
# intervals later than unrecorded, and its row is counted as left out, not kept.
_awaiting: dict[int, tuple[list[Any], Any, int]] = {}  # id(Work) -> (row, Work or weak reference, generation)
_awaiting_lock = threading.RLock()  # a Work dropped under it runs _unwaited in this thread
_generation = 0  # flushes so far: an entry is weakened at the first flush of a later generation than its own
MAX_AWAITING = 100_000
UNWAITED = "asynchronous operations never waited on (completion unknown)"


def _wrap_wait(wait: Any) -> Any:
    @functools.wraps(wait)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = wait(self, *args, **kwargs)
        if _awaiting:
            with _awaiting_lock:
                entry = _awaiting.pop(id(self), None)
            if entry is not None:
                entry[0][12] = time.time_ns()
                recorder.record("collectives", tuple(entry[0]))
        return result

    wrapper.__rltrace_wrapped__ = True  # type: ignore[attr-defined]  # a marker on the wrapper function
    return wrapper


def _unwaited(key: int, ref: Any) -> None:
    """A Work the job dropped without waiting on it: count its row as left out."""
    with _awaiting_lock:
        entry = _awaiting.get(key)
        if entry is None or entry[1] is not ref:
            return
        del _awaiting[key]
    rec = recorder.current()
    if rec is not None:
        rec.skip(UNWAITED)


def _prune_awaiting() -> None:
    """At each flush: hold weakly the Works issued before the previous flush (they lived through a whole interval);
    beyond a bound, and at the final flush, count those the job never waited on (their completion time is unknown)
    and forget them."""
    global _generation
    rec = recorder.current()
    with _awaiting_lock:
        for key, (row, held, born) in list(_awaiting.items()):
            if born < _generation and not isinstance(held, weakref.ref):
                _awaiting[key] = (row, weakref.ref(held, functools.partial(_unwaited, key)), born)
        _generation += 1
        over = len(_awaiting) - (0 if rec is None or rec.stopping else MAX_AWAITING)
        forgotten = list(_awaiting)[:max(over, 0)]
        for key in forgotten:
            del _awaiting[key]
    if rec is not None and forgotten:
        rec.skip(UNWAITED, len(forgotten))


def _after_fork_in_child() -> None:
    """A forked child starts with none of its parent's pending operations, and with a lock no other thread holds
    (the parent's flush thread may have held it at the fork)."""
    global _awaiting_lock
    _awaiting_lock = threading.RLock()
    _awaiting.clear()
    if _interceptor is not None:
        _interceptor.pending.clear()
        _interceptor.cuda_pending = []


os.register_at_fork(after_in_child=_after_fork_in_child)


# ---------------------------------------------------------------------- async flag of the eager API
_ASYNC_APIS = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "broadcast",
    "all_to_all", "all_to_all_single", "reduce", "gather", "scatter", "barrier", "send", "recv",
)
_ALWAYS_ASYNC = ("isend", "irecv", "batch_isend_irecv")


def _flag_async(fn: Any, always: bool) -> Any:
    try:  # async_op's place, for a call that passes it by position: all_reduce(t, op, group, True)
        at = list(inspect.signature(fn).parameters).index("async_op")
    except (ValueError, TypeError):  # no such parameter, or no signature to read
        at = -1

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if getattr(_tls, "depth", 0):  # an API implemented by another (send -> isend): the outer call decides
            return fn(*args, **kwargs)
        is_async = always or bool(kwargs["async_op"] if "async_op" in kwargs
                                  else args[at] if 0 <= at < len(args) else False)
        _tls.async_op = is_async
        _tls.depth = 1
        # A synchronous call waits before it returns: its ops complete then, with no Work future needed.
        sync_rows: list[list[Any]] | None = None if is_async else []
        _tls.sync_rows = sync_rows
        try:
            return fn(*args, **kwargs)
        finally:
            _tls.async_op = False
            _tls.depth = 0
            _tls.sync_rows = None
            if sync_rows:
                now = time.time_ns()
                for row in sync_rows:
                    row[12] = now
                    recorder.record("collectives", tuple(row))

    wrapper.__rltrace_wrapped__ = True  # type: ignore[attr-defined]  # a marker on the wrapper function
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

    def resume(self) -> None:
        """Generation (or an engine start-up) just ended: the train span starts at the next forward."""
        self.forward_start = None
        if self.handle is None:
            self.arm()

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
        steps.trains = True
        if self.forward_start is not None:
            rec.add("spans", (steps.train(), SELF, "train", "forward+backward", self.forward_start, self.opt_start))
        self.forward_start = None

    @recorder.guarded("optimizer hooks")
    def post_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        end = time.time_ns()
        name = type(optimizer).__name__ + ".step"
        recorder.record("spans", (steps.train(), SELF, "optimizer", name, self.opt_start, end))
        self.stepped = True
        if self.handle is None:
            self.arm()


_interceptor: Interceptor | None = None
_libraries: list[torch.library.Library] = []
_train: _TrainSpans | None = None


def _register_kernels(interceptor: Interceptor) -> int:
    """A Python kernel at BackendSelect for every known c10d op overload (and wait_tensor); returns how many."""
    count = 0
    for namespace in _COMM_NAMESPACES:
        lib = torch.library.Library(namespace, "IMPL")
        _libraries.append(lib)
        ops = getattr(torch.ops, namespace)
        for name in (*_OPS, "wait_tensor"):
            try:
                packet = getattr(ops, name)
            except (AttributeError, RuntimeError):
                continue
            for overload in packet.overloads():
                op = getattr(packet, overload)
                spec = None if name == "wait_tensor" else _spec(op)
                if spec is None and name != "wait_tensor":
                    continue
                qualified = name if overload == "default" else f"{name}.{overload}"
                lib.impl(qualified, interceptor.kernel(op, spec), "BackendSelect", with_keyset=True)
                count += 1
    return count


def install(_module: Any = None, *, min_ranks: int = 2) -> None:
    """Attach to torch in this process: the op kernels (again after :func:`uninstall`), and once per process
    the Work.wait wrapper, async flags and optimizer hooks."""
    global _interceptor, _train
    rec = recorder.current()
    if rec is None or _interceptor is not None:
        return
    with rec.guard("torch collector install"):
        rec.load_writer()
        _interceptor = Interceptor(min_ranks)
        rec.meta["c10d_kernels"] = _register_kernels(_interceptor)
        rec.flush_hooks.append(_interceptor.resolve_cuda)
        if _train is None:
            rec.flush_hooks.append(_prune_awaiting)
            _patch_async_flags()
            if not getattr(dist.Work.wait, "__rltrace_wrapped__", False):
                dist.Work.wait = _wrap_wait(dist.Work.wait)  # type: ignore[method-assign]  # wrapped on purpose
            _train = _TrainSpans()
            _train.arm()
            steps.after_generation.append(_train.resume)
            register_optimizer_step_pre_hook(_train.pre_step)
            register_optimizer_step_post_hook(_train.post_step)


def uninstall() -> None:
    """Remove the op kernels (the other hooks stay, inert once the process stops recording)."""
    global _interceptor
    for lib in _libraries:
        lib._destroy()
    _libraries.clear()
    _interceptor = None
    rec = recorder.current()
    if rec is not None:
        rec.flush_hooks[:] = [h for h in rec.flush_hooks if not isinstance(getattr(h, "__self__", None), Interceptor)]
