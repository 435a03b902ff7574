"""Real collectives on N local processes (Gloo on CPU, NCCL on CUDA), issued in a given order and timed.

Every rank creates the same process groups up front (torch.distributed requires all ranks to create every
group, in one order), then runs the operations one by one: a barrier on the operation's group, the
operation, a device synchronisation; the wall time of the operation on its group's first rank is the
measurement, whichever rank that is (on CUDA the operation ends with a synchronize, so the wall clock covers
the GPU's work). Recorded ranks beyond N fold onto
``rank % N``; an operation whose group folds to one rank, or a send to itself, is skipped and reported.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.multiprocessing.spawn import start_processes

from rltrace.errors import ConfigError
from rltrace.units import dtype_bytes

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
          "int64": torch.int64, "int32": torch.int32, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
          "none": torch.uint8}
BY_WIDTH = {1: torch.uint8, 2: torch.float16, 4: torch.float32, 8: torch.float64}
"""a dtype of each width, for the names torch does not use (a profiler's "Float", "long int"; ET's "4-byte")"""
# torch 2.13 renamed the tensor forms of all-gather and reduce-scatter (*_single); older torch has only *_tensor.
ALL_GATHER = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send", "barrier", "reduce")


@dataclass(frozen=True, slots=True)
class Op:
    """One operation: ``count`` elements of ``dtype`` per rank (the input), over ``ranks`` (folded); ``root``
    is the broadcast/reduce root or the send's source, ``peer`` the send's destination."""

    op: str
    count: int
    dtype: str
    ranks: tuple[int, ...]
    root: int = 0
    peer: int = -1
    width: int = 0
    """bytes per element as recorded (bytes over count; 0: unknown), for a dtype name torch does not use"""

    @property
    def tensor_dtype(self) -> torch.dtype:
        """The torch dtype to issue it in: torch's own name, else a dtype of the name's or the recorded width (a
        Kineto "Float" is 4 bytes an element, not 1)."""
        if self.dtype in DTYPES:
            return DTYPES[self.dtype]
        return BY_WIDTH.get(self._width, torch.uint8)

    @property
    def elements(self) -> int:
        """Elements of :attr:`tensor_dtype` to issue: ``count``, or its bytes as uint8 for a width no dtype here has
        (a 16-byte complex)."""
        odd = self.dtype not in DTYPES and self._width not in BY_WIDTH and self._width > 1
        return self.count * self._width if odd else self.count

    @property
    def _width(self) -> int:
        return dtype_bytes(self.dtype) or self.width


def fold(ranks: list[int], world: int) -> tuple[int, ...]:
    return tuple(sorted({r % world for r in ranks}))


def run(ops: list[Op], world: int, device: str = "cpu", warmup: int = 1,
        progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """Seconds of every operation (NaN where skipped), measured on ``world`` local processes; ``progress(done,
    total)`` about every ``PROGRESS_S`` with the operations rank 0 has gone past."""
    if world < 1:
        raise ConfigError(f"--ranks must be >= 1, got {world}")
    for o in ops:
        if o.op not in OPS:
            raise ConfigError(f"cannot replay collective {o.op!r} (known: {', '.join(OPS)})")
    if device.startswith("cuda") and torch.cuda.device_count() < world:
        raise ConfigError(f"{world} ranks need {world} GPUs; this machine has {torch.cuda.device_count()}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "seconds"
        ranks = start_processes(_worker, args=(world, ops, device, warmup, tmp, str(out)), nprocs=world,
                                join=False, start_method="spawn")
        try:
            while not ranks.join(timeout=PROGRESS_S):
                if progress is not None:
                    progress(_progress(tmp), len(ops))
            if progress is not None:
                progress(len(ops), len(ops))
        except BaseException:  # interrupted (Ctrl-C, SIGTERM) or a rank failed: no rank is left running
            for process in ranks.processes:
                if process.is_alive():
                    process.terminate()
            for process in ranks.processes:
                process.join(timeout=10)
            raise
        # each operation is timed by its group's first rank, which may be any rank: every rank's file counts
        seconds: np.ndarray = np.fmax.reduce([np.load(f"{out}{r}.npy") for r in range(world)], axis=0)
        return seconds


PROGRESS_S = 0.5
"""how often rank 0 reports the operations it has gone past, and the caller hears of them"""


def _progress(tmp: str) -> int:
    try:
        return int(Path(tmp, "progress").read_text(encoding="ascii") or 0)
    except (OSError, ValueError):  # not written yet, or caught between its write and rename
        return 0


def backend_of(device: str) -> str:
    """The collective backend the ranks run on ``device``: NCCL on CUDA, Gloo on CPU."""
    return "nccl" if device.startswith("cuda") else "gloo"


def _worker(rank: int, world: int, ops: list[Op], device: str, warmup: int, tmp: str, out: str) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    backend = backend_of(device)
    dev = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(dev)
    dist.init_process_group(backend, init_method=f"file://{tmp}/store", rank=rank, world_size=world)
    groups = {g: dist.new_group(list(g)) for g in sorted({o.ranks for o in ops if len(o.ranks) > 1})}
    seconds = np.full(len(ops), np.nan)
    told = time.perf_counter()
    for i, o in enumerate(ops):
        if rank == 0 and time.perf_counter() - told >= PROGRESS_S:  # the caller polls; whole, by rename
            Path(tmp, "progress.part").write_text(str(i), encoding="ascii")
            os.replace(Path(tmp, "progress.part"), Path(tmp, "progress"))
            told = time.perf_counter()
        if len(o.ranks) < 2 or (o.op == "send" and o.root == o.peer):
            continue  # folded onto one rank: nothing to communicate
        if rank not in o.ranks:
            continue
        group = groups[o.ranks]
        buf = torch.zeros(max(o.elements, 1), dtype=o.tensor_dtype, device=dev)
        for attempt in range(warmup + 1):
            dist.barrier(group=group)
            t0 = time.perf_counter()
            _issue(o, buf, group, rank)
            if backend == "nccl":
                torch.cuda.synchronize(dev)
            if attempt == warmup and rank == o.ranks[0]:
                seconds[i] = time.perf_counter() - t0
    np.save(f"{out}{rank}.npy", seconds)
    dist.barrier()
    dist.destroy_process_group()


def _issue(o: Op, buf: torch.Tensor, group: dist.ProcessGroup, rank: int) -> None:
    n = len(o.ranks)
    if o.op == "all_reduce":
        dist.all_reduce(buf, group=group)
    elif o.op == "reduce":
        dist.reduce(buf, dst=o.root, group=group)
    elif o.op == "broadcast":
        dist.broadcast(buf, src=o.root if o.root in o.ranks else o.ranks[0], group=group)
    elif o.op == "all_gather":
        ALL_GATHER(buf.new_empty(buf.numel() * n), buf, group=group)
    elif o.op == "reduce_scatter":
        size = max(buf.numel() // n, 1)
        REDUCE_SCATTER(buf.new_empty(size), buf[: size * n] if buf.numel() >= n else buf.repeat(n),
                                   group=group)
    elif o.op == "all_to_all":
        size = max(buf.numel() // n, 1) * n
        src = buf[:size] if buf.numel() >= size else buf.repeat(-(-size // buf.numel()))[:size]
        dist.all_to_all_single(src.new_empty(size), src, group=group)
    elif o.op == "send":
        if rank == o.root:
            dist.send(buf, dst=o.peer, group=group)
        elif rank == o.peer:
            dist.recv(buf, src=o.root, group=group)
    elif o.op == "barrier":
        dist.barrier(group=group)
