"""The engine's step and turn bookkeeping: when a step's generation is complete, and which trajectories go on.

Two things the simulator's verbs (submit, abort, migrate) and its loop keep up to date here:

- quiet mode (one "generated" notice per step, not a notice per finish): per ``(job, step)``, how many
  submitted requests have not finished and the latest finish among those that did; a step whose count
  reaches zero gets a :class:`~.events.Generated` event at its last finish. A planned drain counts its
  finishes ahead of time (the latest per instance); cutting it short gives the unfinished ones back, voids
  that instance's planned finishes (not those other instances' drains still hold) and withdraws the notice
  (a ``token`` per step that the event carries).
- multi-turn work: a finished turn with a successor passes its step's count on to that next turn
  (``carried``), and a next turn aborted while its environment worked ends its trajectory (``dropped``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from rltrace.replay.entities.drain import Drain
from rltrace.replay.entities.requests import Requests
from rltrace.replay.entities.resource import Resource
from rltrace.replay.events import EventQueue, Generated, TurnReady
from rltrace.replay.record import Segment


class StepBook:
    """Per-step counts of unfinished requests (quiet mode) and the state of multi-turn trajectories."""

    __slots__ = ("_happened", "_left", "_planned", "_queue", "_req", "_token", "carried", "dropped", "multi_turn",
                 "quiet")

    def __init__(self, requests: Requests, queue: EventQueue, multi_turn: bool) -> None:
        self._req, self._queue = requests, queue
        self.multi_turn = multi_turn
        self.quiet = False
        """count finishes per step and notify whole steps (the scheduler's choice)"""
        self._left: dict[tuple[int, int], int] = {}  # requests of (job, step) submitted and not finished
        self._happened: dict[tuple[int, int], float] = {}  # ... the latest finish among those that did, one by one
        self._planned: dict[tuple[int, int], dict[int, float]] = {}  # ... and per instance, its drains' latest
        self._token: dict[tuple[int, int], int] = {}  # bumps when a planned "generated" notice is withdrawn
        self.carried: set[int] = set()
        """quiet mode: next turns that inherit their trajectory's count (not counted again when submitted)"""
        self.dropped: set[int] = set()
        """next turns aborted while their environment worked: not queued when it ends"""

    def current(self, event: Generated) -> bool:
        """Whether a "generated" event still stands (no drain it counted on was cut short since)."""
        return event.token == self._token.get(event.key, 0)

    def _count(self, rids: Iterable[int], delta: int) -> None:
        index = np.asarray(rids if isinstance(rids, range) else list(rids), dtype=np.int64)
        if not len(index):
            return
        req, left = self._req, self._left
        keys, counts = np.unique((req.job_arr[index] << 32) | req.step_arr[index], return_counts=True)
        for k, c in zip(keys.tolist(), counts.tolist()):
            key = (k >> 32, k & 0xFFFFFFFF)
            left[key] = left.get(key, 0) + delta * c

    def _latest(self, key: tuple[int, int], floor_s: float = -1.0) -> float:
        """The latest finish of ``key``'s requests that happened or that a standing drain plans (at least
        ``floor_s``)."""
        return max(floor_s, self._happened.get(key, -1.0), *self._planned.get(key, {}).values())

    def _complete(self, key: tuple[int, int], at_s: float) -> None:
        self._queue.push(at_s, Generated(key, self._token.get(key, 0)))

    # ---- the verbs' side ---------------------------------------------------------------------------------------

    def submitted(self, rids: list[int] | range) -> None:
        """Requests were queued: a dropped next turn submitted again goes on; quiet mode counts them (a carried
        next turn's count came with its trajectory)."""
        if self.dropped:
            self.dropped.difference_update(rids)
        if not self.quiet:
            return
        if self.carried:
            self._count([r for r in rids if r not in self.carried], +1)
            self.carried.difference_update(rids)
        else:
            self._count(rids, +1)

    def withdrawn(self, rids: list[int]) -> None:
        """Queued or running requests were aborted or taken off to be submitted again: uncount them."""
        if self.quiet:
            self._count(rids, -1)

    def stop_trajectory(self, rid: int, now_s: float) -> None:
        """A next turn still waiting on its environment was aborted: its trajectory ends here; a step whose
        count it carried may now be complete (noticed now: its last finish has passed)."""
        self.dropped.add(rid)
        if rid not in self.carried:
            return
        self.carried.discard(rid)
        key = (self._req.job[rid], self._req.step[rid])
        self._left[key] -= 1
        if not self._left[key]:
            self._complete(key, self._latest(key, now_s))

    # ---- the loop's side ---------------------------------------------------------------------------------------

    def environment(self, done: list[int], instance: int, now_s: float, lanes: Resource,
                    segments: list[Segment]) -> None:
        """Turns finished on ``instance``: each one's next turn, if any, is ready after its environment time
        on ``lanes`` (a :class:`~.events.TurnReady` event then; the span goes on the timeline)."""
        req = self._req
        nxt, env, step, job = req.next_turn, req.env_s, req.step, req.job
        for rid in done:
            k = nxt[rid]
            if k >= 0:
                start, end = lanes.book(now_s, env[k])
                segments.append(("env", "environment", step[k], k, start, end, job[k]))
                self._queue.push(end, TurnReady(k, rid, instance))

    def finished(self, rids: list[int], at_s: float) -> None:
        """Quiet mode: count finishes; a step whose last request finished gets its "generated" event. A turn
        with a successor passes its count on to it: the step is not generated until its trajectories end."""
        job, step, left, happened = self._req.job, self._req.step, self._left, self._happened
        if self.multi_turn:
            nxt = self._req.next_turn
            self.carried.update(nxt[r] for r in rids if nxt[r] >= 0)
            rids = [r for r in rids if nxt[r] < 0]
        for rid in rids:
            key = (job[rid], step[rid])
            left[key] -= 1
            if at_s > happened.get(key, -1.0):
                happened[key] = at_s
            if not left[key]:
                self._complete(key, self._latest(key))

    def drained(self, d: Drain, instance: int) -> None:
        """Quiet mode: a drain was planned on ``instance``; count its finishes per step (vectorised)."""
        req = self._req
        keys = (req.job_arr[d.rids] << 32) | req.step_arr[d.rids]
        order = np.argsort(keys, kind="stable")
        uniq, first = np.unique(keys[order], return_index=True)
        counts = np.diff(np.r_[first, len(order)])
        latest = np.maximum.reduceat(d.finish_s[order], first)
        left, planned = self._left, self._planned
        for k, c, t in zip(uniq.tolist(), counts.tolist(), latest.tolist()):
            key = (k >> 32, k & 0xFFFFFFFF)
            left[key] -= c
            mine = planned.setdefault(key, {})
            mine[instance] = max(t, mine.get(instance, -1.0))
            if not left[key]:
                self._complete(key, self._latest(key))

    def cut(self, back: list[int], instance: int) -> None:
        """A planned drain on ``instance`` was cut short: ``back`` had not finished by then; their steps' planned
        notices are void, and counting starts again for them. The instance's planned finishes go (those that
        happened are earlier than any of ``back``'s to come); other instances' drains still stand."""
        job, step = self._req.job, self._req.step
        for key in {(job[r], step[r]) for r in back}:
            self._token[key] = self._token.get(key, 0) + 1
            self._planned.get(key, {}).pop(instance, None)
        self._count(back, +1)
