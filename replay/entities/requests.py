"""Every replayed request's work and state, as parallel Python lists indexed by request id.

Lists, not numpy arrays: the engine touches one request at a time in its hot loop, where a list index costs a
third of a numpy scalar read. ``to_frame`` turns them into one DataFrame at the end.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum

import numpy as np
import polars as pl

from rltrace.errors import ConfigError


class State(IntEnum):
    PENDING = 0
    """not submitted, or aborted and back with the scheduler"""
    WAITING = 1
    RUNNING = 2
    FINISHED = 3


class Requests:
    """Work (job, step, group, prompt and output tokens) and state of every request of a replay."""

    def __init__(self, job: np.ndarray, step: np.ndarray, group: np.ndarray, prompt: np.ndarray,
                 output: np.ndarray, next_turn: np.ndarray | None = None, env_s: np.ndarray | None = None) -> None:
        n = len(step)
        self.n = n
        self._arrays: tuple[np.ndarray, ...] = ()
        self._arrays_n = -1
        self.touched = False
        """some request was preempted, migrated or aborted: ``remaining``/``recompute`` differ from the
        arrays above somewhere (the fast path then reads the lists)"""
        self.job: list[int] = job.tolist()
        self.step: list[int] = step.tolist()
        self.group: list[int] = group.tolist()
        self.prompt: list[int] = prompt.tolist()
        self.output: list[int] = output.tolist()
        self.remaining: list[int] = list(self.output)
        """decode iterations still to run"""
        self.recompute: list[int] = [0] * n
        """tokens generated before a preemption, prefilled again with the prompt on readmission"""
        self.admit_iter: list[int] = [0] * n
        self.instance: list[int] = [-1] * n
        self.state: list[int] = [State.PENDING] * n
        self.submit_s: list[float] = [float("nan")] * n
        """first time the request was queued on an instance (kept through aborts, migrations and preemptions):
        its arrival, from which queueing, TTFT and end-to-end latency count"""
        self.start_s: list[float] = [float("nan")] * n
        self.admitted_s: list[float] = [float("nan")] * n
        """its latest admission into a batch: where its current stretch on an instance began (after a preemption or
        a migration, where it resumed; ``start_s`` keeps the attempt's first), and its timeline span with it"""
        self.first_token_s: list[float] = [float("nan")] * n
        self.finish_s: list[float] = [float("nan")] * n
        self.version: list[int] = [-1] * n
        """policy version of the weights the request was (last) admitted under"""
        self.preemptions: list[int] = [0] * n
        self.aborts: list[int] = [0] * n
        self.next_turn: list[int] = [-1] * n if next_turn is None else next_turn.tolist()
        """the request of the trajectory's next turn (-1: this turn ends its trajectory)"""
        self.env_s: list[float] = [0.0] * n if env_s is None else env_s.tolist()
        """environment time between the previous turn's finish and this turn's start (0 for a first turn)"""

    def add(self, job: int, step: int, group: int, prompt: list[int], output: list[int],
            env_s: list[float] | None = None) -> range:
        """New requests (a scheduler's extra responses, or a trajectory run again); returns their ids. With
        ``env_s`` the new requests are one trajectory's turns, in order, with that environment time before each."""
        k = len(prompt)
        if len(output) != k or (env_s is not None and len(env_s) != k):
            raise ValueError("prompt, output and env_s need one entry per request")
        first = self.n
        self.n += k
        chained = env_s is not None
        self.next_turn.extend([first + i + 1 if chained and i + 1 < k else -1 for i in range(k)])
        self.env_s.extend(env_s if env_s is not None else [0.0] * k)
        for name, values in (("job", [job] * k), ("step", [step] * k), ("group", [group] * k), ("prompt", prompt),
                             ("output", output), ("remaining", output), ("recompute", [0] * k),
                             ("admit_iter", [0] * k), ("instance", [-1] * k), ("state", [State.PENDING] * k),
                             ("submit_s", [float("nan")] * k), ("start_s", [float("nan")] * k),
                             ("admitted_s", [float("nan")] * k), ("first_token_s", [float("nan")] * k),
                             ("finish_s", [float("nan")] * k), ("version", [-1] * k), ("preemptions", [0] * k),
                             ("aborts", [0] * k)):
            getattr(self, name).extend(values)
        return range(first, self.n)

    def _columns(self) -> tuple[np.ndarray, ...]:
        if self._arrays_n != self.n:  # rebuilt only after requests were added
            columns = ("job", "step", "prompt", "output")
            self._arrays = tuple(np.asarray(getattr(self, c), dtype=np.int64) for c in columns)
            self._arrays_n = self.n
        return self._arrays

    @property
    def job_arr(self) -> np.ndarray:
        return self._columns()[0]

    @property
    def step_arr(self) -> np.ndarray:
        return self._columns()[1]

    @property
    def prompt_arr(self) -> np.ndarray:
        return self._columns()[2]

    @property
    def output_arr(self) -> np.ndarray:
        """output tokens as recorded (``remaining`` differs once a request was preempted: see ``touched``)"""
        return self._columns()[3]

    def queue(self, rids: Iterable[int], instance: int, now_s: float) -> list[int] | range:
        """Mark pending requests waiting on ``instance`` (a request's first submission is its arrival); returns
        them as a list, or as the range given (a contiguous batch: slice writes, no Python loop). A request not
        pending is an error."""
        state, submitted = self.state, self.submit_s
        if isinstance(rids, range) and rids.step == 1:
            a, b = rids.start, rids.stop
            if state[a:b].count(State.PENDING) != b - a:
                bad = next(r for r in rids if state[r] != State.PENDING)
                raise ConfigError(f"request {bad} is already {State(state[bad]).name.lower()}")
            state[a:b] = [int(State.WAITING)] * (b - a)
            self.instance[a:b] = [instance] * (b - a)
            submitted[a:b] = [t if t == t else now_s for t in submitted[a:b]]  # noqa: PLR0124 (t != t: NaN, never queued)
            return rids
        rids = list(rids)
        for rid in rids:
            if state[rid] != State.PENDING:
                raise ConfigError(f"request {rid} is already {State(state[rid]).name.lower()}")
            state[rid] = State.WAITING
            self.instance[rid] = instance
            if submitted[rid] != submitted[rid]:  # NaN: never queued before
                submitted[rid] = now_s
        return rids

    def versions(self, index: np.ndarray) -> np.ndarray:
        """The policy versions these requests were (last) admitted under."""
        # (a gather through a list is the cheapest read of a few thousand list items)
        return np.fromiter(map(self.version.__getitem__, index.tolist()), dtype=np.int64, count=len(index))

    def reset(self, rid: int) -> None:
        """Back to the scheduler with nothing generated (an abort discards the partial response)."""
        self.touched = True
        self.state[rid] = State.PENDING
        self.remaining[rid] = self.output[rid]
        self.recompute[rid] = 0
        self.instance[rid] = -1
        self.first_token_s[rid] = float("nan")
        self.aborts[rid] += 1

    def to_frame(self) -> pl.DataFrame:
        """One row per request: its work, what happened to it and its latency (docs/replay.md "Output").

        Latency columns, null for a request that did not finish: ``queue_s`` (first submission to the admission
        of the attempt that finished: earlier aborted attempts count as waiting), ``ttft_s`` (first submission
        to that attempt's first token), ``tpot_s`` (first token to finish over the remaining output tokens),
        ``e2e_s`` (first submission to finish); so ``e2e_s = ttft_s + tpot_s x (output_tokens - 1)``."""
        frame = pl.DataFrame(
            {
                "request": np.arange(self.n, dtype=np.int64),
                "job": np.asarray(self.job, dtype=np.int32),
                "step": np.asarray(self.step, dtype=np.int32),
                "group": np.asarray(self.group, dtype=np.int32),
                "prompt_tokens": np.asarray(self.prompt, dtype=np.int64),
                "output_tokens": np.asarray(self.output, dtype=np.int64),
                "instance": np.asarray(self.instance, dtype=np.int32),
                "finished": np.asarray(self.state, dtype=np.int8) == State.FINISHED,
                "submit_s": np.asarray(self.submit_s),
                "start_s": np.asarray(self.start_s),
                "admitted_s": np.asarray(self.admitted_s),
                "first_token_s": np.asarray(self.first_token_s),
                "finish_s": np.asarray(self.finish_s),
                "version": np.asarray(self.version, dtype=np.int32),
                "preemptions": np.asarray(self.preemptions, dtype=np.int32),
                "aborts": np.asarray(self.aborts, dtype=np.int32),
            }
        )
        done = pl.col("finished")
        return frame.with_columns(
            pl.when(done).then(pl.col("start_s") - pl.col("submit_s")).alias("queue_s"),
            pl.when(done).then(pl.col("first_token_s") - pl.col("submit_s")).alias("ttft_s"),
            pl.when(done & (pl.col("output_tokens") > 1))
            .then((pl.col("finish_s") - pl.col("first_token_s")) / (pl.col("output_tokens") - 1)).alias("tpot_s"),
            pl.when(done).then(pl.col("finish_s") - pl.col("submit_s")).alias("e2e_s"),
        )
