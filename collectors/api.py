"""The recording API a job may call directly (all no-ops when the process is not recording).

    rltrace.set_step(k)
    with rltrace.span("reward", step=k): ...
    with rltrace.weight_sync(version=k, src="trainer/rank0", dst="rollout/engine0", bytes=n): ...
    rltrace.log_flow(version=k, src=..., dst=..., bytes=n, start_ns=t0, end_ns=t1, method="rdma")

Steps: an explicit ``set_step`` wins; otherwise trainers count optimizer steps and generators count
``LLM.generate`` calls (the collectors bump those counters when the next step's work begins).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rltrace.collectors import recorder

from rltrace.table_names import SYNC_METHODS

SELF = "self"  # placeholder actor: the merge names the process (e.g. trainer/rank1, rollout/engine0)


class _Steps:
    """Process-wide step counters.

    A step's work ends with what follows its update (a weight sync after step k's optimizer step belongs to
    step k), so the inferred counters advance when the next step's work begins: a trainer's at its first
    forward after an optimizer step, a generator's at its next generate call.
    """

    def __init__(self) -> None:
        self.explicit: int | None = None
        self.optimizer = 0  # optimizer steps whose step has been left (advanced at the next forward)
        self.generate_calls = 0
        self.weight_version = 0
        self.trains = False  # this process has run an optimizer step: its generation is its trainer's step
        # called when generation (or an engine's start-up) ends: its forward passes are not training
        self.after_generation: list[Callable[[], None]] = []

    def train(self) -> int:
        return self.explicit if self.explicit is not None else self.optimizer

    def gen(self) -> int:
        return self.explicit if self.explicit is not None else max(self.generate_calls - 1, 0)

    def rollout(self) -> int:
        """The step of samples generated now: a trainer's optimizer step (its generation opens the step),
        else the generator's own step."""
        if self.explicit is not None:
            return self.explicit
        return self.optimizer if self.trains else self.gen()

    def current(self) -> int:
        if self.explicit is not None:
            return self.explicit
        return max(self.optimizer, self.gen())


steps = _Steps()


def generation_ended() -> None:
    """Tell the train-span tracker that generation (or an engine start-up) just ended in this process: the
    next ``train`` span starts at the first forward pass after it, so no generation lies inside a train span."""
    for listener in steps.after_generation:
        try:
            listener()
        except Exception as e:  # noqa: BLE001 - recording must never break the job
            rec = recorder.current()
            if rec is not None:
                rec.error("generation listener", e)


def set_step(step: int) -> None:
    """Declare the RL step this process is working on (overrides the inferred step)."""
    steps.explicit = int(step)


@contextmanager
def span(phase: str, *, step: int | None = None, name: str = "", actor: str = SELF) -> Iterator[None]:
    """Record a phase span around a block (``phase``: reward, reference, environment, ...)."""
    start = time.time_ns()
    try:
        yield
    finally:
        s = steps.current() if step is None else step
        recorder.record("spans", (s, actor, phase, name or phase, start, time.time_ns()))


def log_flow(
    *,
    version: int,
    src: str,
    dst: str,
    bytes: int,  # the schema's column name, though it shadows the builtin
    start_ns: int,
    end_ns: int,
    tensors: int = 0,
    method: str = "other",
) -> None:
    """Record a weight-sync flow over a transport the collectors cannot see (CUDA IPC, RDMA, HTTP, files)."""
    rec = recorder.current()
    if rec is None:
        return
    with rec.guard("log_flow"):
        if method not in SYNC_METHODS:
            raise ValueError(f"method {method!r} is not one of {', '.join(SYNC_METHODS)}")
        if end_ns < start_ns or bytes < 0:
            raise ValueError(f"impossible flow: bytes={bytes}, start_ns={start_ns}, end_ns={end_ns}")
        rec.add(
            "weight_syncs",
            (version, src, dst, int(bytes), int(tensors), method, int(start_ns), int(end_ns), steps.current()),
        )


@contextmanager
def weight_sync(
    *,
    version: int,
    src: str,
    dst: str,
    bytes: int,
    tensors: int = 0,
    method: str = "other",
) -> Iterator[None]:
    """Time a block that moves weights, and record it as one flow."""
    start = time.time_ns()
    try:
        yield
    finally:
        log_flow(version=version, src=src, dst=dst, bytes=bytes, tensors=tensors, method=method,
                 start_ns=start, end_ns=time.time_ns())
