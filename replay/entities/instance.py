"""A generation instance batching continuously, like vLLM.

State between events is a constant batch: ``batch`` running sequences, a count of decode iterations ``it``
(every running sequence gains one token per iteration) and ``offset = sum(prompt_r - admit_iter_r)``, so
the KV cache holds ``offset + batch x it`` tokens at any iteration. A request admitted at iteration ``a``
with ``L`` tokens to go finishes at iteration ``a + L``; a heap keyed on that gives the next finish, and the
iteration model turns the iterations in between into seconds in closed form.

Admission follows the waiting queue's order (the scheduler sets it) while fewer than ``max_seqs`` run and
the prompt fits in the KV cache; a wave of admissions pays one prefill. When the next iteration would
overflow the cache, the most recently admitted sequence is preempted by recompute, as vLLM does: it goes
back to the head of the queue and its generated tokens are prefilled again with its prompt.
"""

from __future__ import annotations

import heapq
import math
import sys
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
from rltrace.replay.costmodels.generation import GenerationCost
from rltrace.replay.costmodels.iteration import IterationModel
from rltrace.replay.entities import drain as fastpath
from rltrace.replay.entities.drain import Drain
from rltrace.replay.entities.requests import Requests, State

from rltrace.errors import ConfigError

if TYPE_CHECKING:
    from rltrace.replay.record import Segment

RUNNING, WAITING, FINISHED = int(State.RUNNING), int(State.WAITING), int(State.FINISHED)  # plain ints: hot loop
KV_WATERMARK = 0.01  # vLLM's default: keep 1% of KV blocks free when admitting, to avoid instant preemption


class GenerationInstance:
    """One engine replica of ``tp`` GPUs in a pool; the simulator drives it, schedulers feed its queue."""

    __slots__ = (
        "_heap",
        "_order",
        "_planned",
        "_req",
        "_retry_drain_at",
        "_segments",
        "batch",
        "cost",
        "drain",
        "epoch",
        "fast",
        "id",
        "it",
        "kv_capacity",
        "max_seqs",
        "model",
        "name",
        "offset",
        "pool",
        "retired",
        "time_s",
        "tp",
        "version",
        "waiting",
    )

    def __init__(self, iid: int, name: str, pool: str, tp: int, cost: GenerationCost, max_seqs: int,
                 requests: Requests, now_s: float, segments: list[Segment]):
        self.id, self.name, self.pool = iid, name, pool
        self._req = requests
        self.max_seqs = max_seqs
        self.cost = cost
        self.waiting: deque[int] = deque()
        self._heap: list[tuple[int, int]] = []  # (finish iteration, request id)
        self._order: list[int] = []  # running requests in admission order (the preemption victim is last)
        self.batch = 0
        self.offset = 0
        self.it = 0
        self.time_s = now_s
        self.epoch = 0
        self.version = 0
        self._planned: tuple[int, float, bool] | None = None  # (iterations, seconds, ends in a preemption)
        self._segments = segments  # the run's timeline spans: it adds its own (preempted, aborted, migrated, dropped,
        # switch)
        self.retired = False
        self.fast = False
        """plan whole queues at once (the simulator's quiet mode: nobody needs each finish as it happens)"""
        self.drain: Drain | None = None
        self._retry_drain_at = sys.maxsize
        """load at or below which the fast path is worth trying again after the KV cache refused it"""
        self.set_tp(tp)

    def set_tp(self, tp: int) -> None:
        """Use ``tp`` GPUs from now on (the caller has emptied the batch)."""
        self.tp = tp
        self.model: IterationModel = self.cost.iteration_model(tp)
        self.kv_capacity = self.cost.kv_capacity_tokens(tp)

    @property
    def load(self) -> int:
        """Requests running or queued here (during a planned drain: as they were when it was planned)."""
        return self.batch + len(self.waiting)

    def request_ids(self) -> list[int]:
        """Requests running (in admission order) or queued (in queue order) here, as of the instance's own clock.

        Admission order, not the finish heap's: the heap is keyed on each request's finish iteration, so its
        order would tell a scheduler which request ends next."""
        return self._admitted() + list(self.waiting)

    def _admitted(self) -> list[int]:
        """The requests in the batch, in admission order (a re-admitted request: its latest admission)."""
        position = {rid: i for i, rid in enumerate(self._order)}
        return sorted((rid for _, rid in self._heap), key=lambda rid: position.get(rid, len(position)))

    def close(self, end_s: float) -> None:
        """The run ends at ``end_s`` (the instance brought there): each request still running here since before
        then leaves a ``dropped`` span to ``end_s``, the work it did before its tokens were discarded (the request
        itself is left as it is: it never finished, and no scheduler aborted it)."""
        req = self._req
        for _, rid in self._heap:
            if req.state[rid] == RUNNING and req.instance[rid] == self.id and req.admitted_s[rid] < end_s:
                self._segments.append((self.name, "dropped", req.step[rid], rid, req.admitted_s[rid], end_s,
                                       req.job[rid]))

    def reconfigure(self, now_s: float, *, tp: int | None, cost: GenerationCost | None, switch_s: float,
                    job: int) -> None:
        """Change TP degree or model at ``now_s`` (the caller brought the instance to now): busy ``switch_s`` (a
        switch span of ``job``); running requests are preempted to the head of the queue, keeping their
        progress (their tokens are recomputed afterwards)."""
        self.time_s = max(self.time_s, now_s)
        state = self._req.state
        running = [rid for rid in self._admitted() if state[rid] == RUNNING]  # not the heap's finish order
        queued = running + list(self.waiting)
        self.remove(queued, kind="migrated")
        if cost is not None:
            self.cost = cost
        self.set_tp(tp or self.tp)
        if switch_s > 0:
            self._segments.append((self.name, "switch", -1, -1, self.time_s, self.time_s + switch_s, job))
            self.time_s += switch_s
        for rid in queued:
            state[rid] = WAITING
        self.waiting.extend(queued)

    def set_version(self, version: int, now_s: float) -> None:
        """Serve policy ``version`` from ``now_s`` on: requests admitted later carry it (those a planned drain
        admits after ``now_s`` too)."""
        self.version = version
        versions = self._req.version
        if self.time_s > now_s:  # a switch put the clock ahead: its batch was admitted at the switch's end, not yet
            admitted = self._req.admitted_s
            for _, rid in self._heap:
                if admitted[rid] > now_s:
                    versions[rid] = version
        d = self.drain
        if d is not None:
            for rid in d.rids[d.fresh & (d.start_s > now_s)].tolist():
                versions[rid] = version

    def kv_tokens(self) -> int:
        return self.offset + self.batch * self.it

    # ---- moving through time -------------------------------------------------------------------------------

    def advance_to(self, t_s: float) -> bool:
        """Run whole iterations up to the first boundary at or after ``t_s``, short of the planned event.
        Returns whether the plan was cut there (the instance must then be planned again).

        New work joins a running batch at an iteration boundary, as in vLLM; a boundary that is the planned
        event itself is left to that event.
        """
        planned = self._planned
        if planned is None or t_s <= self.time_s:
            return False
        n_max, _, _ = planned
        ctx = self.kv_tokens()
        n = self.model.iterations_within(self.batch, ctx, t_s - self.time_s, n_max)
        if n < n_max and self.time_s + self.model.seconds(self.batch, ctx, n) < t_s:
            n += 1  # the boundary after t_s
        if n >= n_max:
            return False
        self.time_s += self.model.seconds(self.batch, ctx, n)
        self.it += n
        self._planned = None
        self.epoch += 1  # the old plan's event is stale
        return True

    def plan(self, now_s: float) -> float | None:
        """Admit what fits, then return the time of the next planned point (None when idle)."""
        self.epoch += 1
        self.time_s = max(self.time_s, now_s)
        if self.drain is not None:
            return self.drain.end_s  # still draining: re-arm its end under the new epoch
        if self.fast and (self.waiting or self.batch) and self.load <= self._retry_drain_at:
            planned = self._plan_drain()
            if planned is not None:
                return planned.end_s
        if self.waiting:
            self._admit()
        batch = self.batch
        while batch and self.offset + batch * (self.it + 1) > self.kv_capacity:
            self._preempt_last()  # not even one more iteration fits
            batch = self.batch
        if batch == 0:
            self._planned = None
            self._order.clear()
            return None
        it = self.it
        n = self._heap[0][0] - it
        n_fit = (self.kv_capacity - self.offset) // batch - it  # iterations before the cache is full
        preempt = n_fit < n
        if preempt:
            n = n_fit
        dt = self.model.seconds(batch, self.offset + batch * it, n)
        self._planned = (n, dt, preempt)
        return self.time_s + dt

    def fire(self, epoch: int) -> list[int] | None:
        """Reach the planned point; return the requests that finished there (None for a stale event).

        A drain's end returns no requests: they were all written when it was planned."""
        if self.drain is not None:
            if epoch != self.epoch:
                return None
            d, self.drain = self.drain, None
            self.it, self.time_s = int(d.iters[-1]), d.end_s
            self._heap, self.batch, self.offset = [], 0, 0
            self._order.clear()
            self.waiting.clear()
            return []
        planned = self._planned
        if epoch != self.epoch or planned is None:
            return None
        n, dt, preempt = planned
        self._planned = None
        self.time_s = now = self.time_s + dt
        self.it = it = self.it + n
        done: list[int] = []
        req, heap = self._req, self._heap
        state, finish, prompt, recompute, admit = req.state, req.finish_s, req.prompt, req.recompute, req.admit_iter
        while heap and heap[0][0] == it:
            rid = heapq.heappop(heap)[1]
            self.offset -= prompt[rid] + recompute[rid] - admit[rid]
            self.batch -= 1
            state[rid] = FINISHED
            finish[rid] = now
            done.append(rid)
        if preempt:
            self._preempt_last()
        return done

    # ---- the fast path -------------------------------------------------------------------------------------

    def _plan_drain(self) -> fastpath.Drain | None:
        """Plan the whole queue at once and write every request's times now (see :mod:`.drain`); the drain,
        or None when it cannot be planned."""
        req = self._req
        d = fastpath.plan(self._heap, list(self.waiting), req, it0=self.it, t0=self.time_s, offset0=self.offset,
                          max_seqs=self.max_seqs, kv_limit=self.kv_capacity * (1 - KV_WATERMARK), model=self.model,
                          cost=self.cost, tp=self.tp)
        if d is None:
            # The check is O(queue); a queue the KV cache can bind keeps binding while it only grows (a
            # bigger set has bigger worst-case peaks), so it is retried only once half of it has drained:
            # O(n) in all instead of O(n) per event (19k requests on one instance: 15 s -> well under 1 s).
            if self.load >= fastpath.MIN_REQUESTS:
                self._retry_drain_at = self.load // 2
            return None
        self._retry_drain_at = sys.maxsize
        rids = d.rids.tolist()
        start, first, finish, state = req.start_s, req.first_token_s, req.finish_s, req.state
        admitted = req.admitted_s
        if req.touched:
            untouched = np.array([req.remaining[r] == req.output[r] for r in rids])
        else:
            untouched = np.ones(len(rids), dtype=bool)
        lo, hi = rids[0], rids[-1] + 1
        contiguous = hi - lo == len(rids) and bool(np.all(np.diff(d.rids) == 1))
        if contiguous:  # the usual case (a chunk of a step on a fresh instance): slice reads and writes
            d.prior_start_s, d.prior_first_token_s = np.array(start[lo:hi]), np.array(first[lo:hi])
            d.prior_admitted_s = np.array(admitted[lo:hi])
        else:
            d.prior_start_s = np.array([start[r] for r in rids])
            d.prior_first_token_s = np.array([first[r] for r in rids])
            d.prior_admitted_s = np.array([admitted[r] for r in rids])
        new_start = np.where(d.fresh & untouched, d.start_s, d.prior_start_s).tolist()
        new_admitted = np.where(d.fresh, d.start_s, d.prior_admitted_s).tolist()
        new_first = np.where(np.isnan(d.prior_first_token_s) & d.fresh, d.first_token_s, d.prior_first_token_s).tolist()
        if contiguous:
            start[lo:hi], first[lo:hi], finish[lo:hi] = new_start, new_first, d.finish_s.tolist()
            admitted[lo:hi], state[lo:hi] = new_admitted, [FINISHED] * len(rids)
        else:
            for r, a, b, c, e in zip(rids, new_start, new_first, d.finish_s.tolist(), new_admitted):
                start[r], first[r], finish[r], admitted[r], state[r] = a, b, c, e, FINISHED
        version, admit = req.version, req.admit_iter
        for r, a in zip(d.rids[d.fresh].tolist(), d.admit_iter[d.fresh].tolist()):
            version[r], admit[r] = self.version, a
        self.drain, self._planned = d, None
        return d

    def cut_drain(self, t_s: float) -> list[int]:
        """Stop a planned drain at the first iteration boundary at or after ``t_s`` and take up the exact
        state the per-event path would have there; return the requests that had not finished by then."""
        d, self.drain = self.drain, None
        assert d is not None
        self.epoch += 1
        cut = fastpath.state_at(d, t_s, self.model)
        req = self._req
        running: list[int] = d.rids[cut.running].tolist()
        waiting: list[int] = d.rids[cut.waiting].tolist()
        # _plan_drain set both before it kept the drain
        assert d.prior_start_s is not None and d.prior_first_token_s is not None and d.prior_admitted_s is not None
        state, finish = req.state, req.finish_s
        for r in running:
            state[r], finish[r] = RUNNING, float("nan")
        back = cut.waiting
        for r, a, b, e in zip(waiting, d.prior_start_s[back].tolist(), d.prior_first_token_s[back].tolist(),
                              d.prior_admitted_s[back].tolist()):
            state[r], finish[r], req.start_s[r], req.first_token_s[r], req.admitted_s[r] = WAITING, math.nan, a, b, e
        admits = d.admit_iter[cut.running]
        self._heap = list(zip(d.finish_iter[cut.running].tolist(), running))
        heapq.heapify(self._heap)
        self._order = [running[i] for i in np.argsort(admits, kind="stable").tolist()]
        self.batch = len(running)
        self.offset = int((d.prompts[cut.running] - admits).sum())
        self.it, self.time_s = cut.it, cut.time_s
        self.waiting = deque(waiting)
        self._planned = None
        return running + waiting

    # ---- admission, preemption, removal ----------------------------------------------------------------------

    def _admit(self) -> None:
        req, waiting, heap, order = self._req, self.waiting, self._heap, self._order
        prompt, recompute, remaining, output = req.prompt, req.recompute, req.remaining, req.output
        limit = self.kv_capacity * (1 - KV_WATERMARK)
        it, now, version = self.it, self.time_s, self.version
        tokens = prompts = 0
        batch, offset = self.batch, self.offset
        while waiting and batch < self.max_seqs:
            rid = waiting[0]
            need = prompt[rid] + recompute[rid]
            if batch and offset + batch * it + need + batch > limit:
                break
            if need + remaining[rid] > self.kv_capacity:
                raise ConfigError(f"request {rid} needs {need + remaining[rid]:,} tokens of KV cache; an instance "
                                  f"of {self.name} holds {self.kv_capacity:,} (raise tp or lower max_new_tokens)")
            waiting.popleft()
            if remaining[rid] == output[rid]:
                req.start_s[rid] = now
            req.admitted_s[rid] = now
            req.state[rid] = RUNNING
            req.admit_iter[rid] = it
            req.version[rid] = version
            offset += need - it
            batch += 1
            heapq.heappush(heap, (it + remaining[rid], rid))
            order.append(rid)
            tokens += need
            prompts += 1
        self.batch, self.offset = batch, offset
        if prompts:
            self.time_s = now = now + self.cost.prefill_seconds(tokens, prompts, self.tp)
            first = req.first_token_s
            for rid in order[-prompts:]:
                if first[rid] != first[rid]:  # NaN: the first admission of this attempt
                    first[rid] = now

    def _leave(self, rid: int, keep: bool) -> None:
        """Take running ``rid`` out of the batch's sums. ``keep``: it keeps the tokens it generated in this
        admission, preempted by recompute (prefilled again with its prompt when next admitted, anywhere);
        else they are lost (an abort resets the request)."""
        req = self._req
        self.offset -= req.prompt[rid] + req.recompute[rid] - req.admit_iter[rid]  # (the sums use the old counts)
        self.batch -= 1
        if keep:
            generated = self.it - req.admit_iter[rid]
            req.remaining[rid] -= generated
            req.recompute[rid] += generated
            req.touched = True

    def _preempt_last(self) -> None:
        req, order = self._req, self._order
        while req.state[order[-1]] != RUNNING or req.instance[order[-1]] != self.id:
            order.pop()  # finished or removed since
        rid = order.pop()
        self._heap.remove((req.admit_iter[rid] + req.remaining[rid], rid))
        heapq.heapify(self._heap)
        self._leave(rid, keep=True)
        self._segments.append((self.name, "preempted", req.step[rid], rid, req.admitted_s[rid], self.time_s,
                               req.job[rid]))
        req.preemptions[rid] += 1
        req.state[rid] = WAITING
        self.waiting.appendleft(rid)

    def remove(self, rids: Iterable[int], kind: str = "aborted") -> list[int]:
        """Take these requests off this instance (running or waiting); return the ones that were here.

        Each running one leaves a timeline segment of ``kind``: "aborted" (its generated tokens are lost), or
        "migrated" (it moves, keeping them: preempted by recompute)."""
        req = self._req
        gone: list[int] = []
        drop = {r for r in rids if req.instance[r] == self.id and req.state[r] in (State.RUNNING, State.WAITING)}
        if not drop:
            return gone
        kept_heap = []
        for entry in self._heap:
            rid = entry[1]
            if rid in drop:
                self._leave(rid, keep=kind == "migrated")
                span = (self.name, kind, req.step[rid], rid, req.admitted_s[rid], self.time_s, req.job[rid])
                self._segments.append(span)
            else:
                kept_heap.append(entry)
        heapq.heapify(kept_heap)
        self._heap = kept_heap
        self.waiting = deque(r for r in self.waiting if r not in drop)
        self.epoch += 1
        self._planned = None
        return sorted(drop)
