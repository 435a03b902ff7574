"""The discrete-event simulator, and the verbs a scheduler drives it with.

A scheduler (see :mod:`.schedulers.base`) drives these verbs through its view of the run
(:mod:`.schedulers.view`, built in ``run``), never through this object: it dispatches requests to generation
instances (``submit``), aborts and resubmits them (``abort``, ``migrate``), grows, shrinks and regroups
pools (``add_instance``, ``retire``, ``reconfigure``), books work
on resources (``work``: training, weight sync, reward, environment, switches), sets timers, and marks
which samples each training step consumed and when a step ends. The loop below moves time forward from
event to event (typed events, :mod:`.events`); the per-step and per-trajectory bookkeeping lives in
:mod:`.stepbook`, and what the run leaves behind in its :class:`~.record.RunRecord`. Nothing here knows any
scheduling policy.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
from rltrace.replay.cluster import Cluster
from rltrace.replay.costmodels.generation import GenerationCost
from rltrace.replay.entities.instance import GenerationInstance
from rltrace.replay.entities.requests import Requests, State
from rltrace.replay.entities.resource import Resource
from rltrace.replay.events import Done, EventQueue, Generated, Notice, NoticeKind, Planned, Tag, Timer, TurnReady
from rltrace.replay.job import Job
from rltrace.replay.record import PoolUse, RunRecord, Segment
from rltrace.replay.schedulers.base import capabilities
from rltrace.replay.schedulers.view import View
from rltrace.replay.stepbook import StepBook

from rltrace.errors import ConfigError

__all__ = ["Simulator"]


class Simulator:
    """Owns time, the event queue, the live instances and resources; writes what happens to ``record``."""

    def __init__(self, requests: Requests, jobs: list[Job], cluster: Cluster, *, keep_log: bool = False,
                 fast_path: bool = True):
        self.now = 0.0
        self.requests = requests
        self.jobs = jobs
        for job in jobs:  # what each step's trainer time was measured on, before any scheduler looks
            if job.step_tokens is None:
                per_request = np.asarray(requests.prompt, np.float64) + np.asarray(requests.output, np.float64)
                job.step_tokens = [float(per_request[job.first[s]:job.first[s + 1]].sum()) for s in range(job.steps)]
        self.cluster = cluster
        self.max_seqs = cluster.max_seqs
        self.record = RunRecord(requests, jobs, cluster)
        self.instances: list[GenerationInstance] = []
        """live instances (``record.instances`` keeps retired ones too)"""
        self.resources: dict[str, Resource] = self.record.resources
        self.queue = EventQueue(keep_log)
        self._dirty: dict[int, GenerationInstance] = {}
        self._stopped = False
        self._next_id = 0
        self.multi_turn = max(requests.next_turn, default=-1) >= 0
        """some requests are turns of multi-turn trajectories"""
        self.book = StepBook(requests, self.queue, self.multi_turn)
        self.fast_path = fast_path and not self.multi_turn
        """let quiet-mode instances plan whole queues at once (off: the per-event path, same results). Off for
        multi-turn work: each finished turn starts its trajectory's environment work at once"""
        self._places_turns = False
        """A finished turn with a successor books the successor's environment time on the "env" resource
        (CPU workers, one lane per trajectory). Then, False: the engine queues the next turn on the instance
        that ran the previous one (its prefix cache is there); True (a scheduler whose capabilities say it
        places turns): the scheduler gets a "turn" notice and places it itself"""
        if self.multi_turn:
            self.add_resource("env", "cpu", slots=0)
        self._view: Any = None  # what the scheduler sees (set by ``run``)

    @property
    def quiet(self) -> bool:
        """False (default): a "finished" notice for every request as it finishes. True: one "generated"
        notice (tag ``(job, step)``) when all of a step's submitted requests have finished; instances then
        plan whole queues at once (the fast path), and the loop runs one event per queue, not per request."""
        return self.book.quiet

    @quiet.setter
    def quiet(self, value: bool) -> None:
        self.book.quiet = value
        for inst in self.instances:
            inst.fast = value and self.fast_path

    def _touch(self, inst: GenerationInstance) -> None:
        """Bring an instance to now before changing it (cutting a planned drain short if it has one). A cut
        plan voids the instance's next event, so the instance is planned again even if nothing changes it
        (an abort of requests that had already finished there, a scheduler only looking at its queue)."""
        if inst.drain is None:
            if inst.advance_to(self.now):
                self._dirty[inst.id] = inst
            return
        self.book.cut(inst.cut_drain(self.now), inst.id)
        self._dirty[inst.id] = inst

    # ---- pools and instances -----------------------------------------------------------------------------------

    def allocate(self, pool: str, gpus: int, gpu: str, *, billed: bool = True) -> None:
        """From now on ``pool`` holds ``gpus`` GPUs of kind ``gpu`` (unbilled: shares GPUs billed elsewhere)."""
        if gpus < 0:
            raise ConfigError(f"pool {pool!r} cannot hold {gpus} GPUs")
        self.record.pools.append(PoolUse(pool, gpu, gpus, self.now, billed))

    def release(self, pool: str) -> None:
        """From now on ``pool`` holds no GPUs: they go back to the cluster and billing stops."""
        last = next(p for p in reversed(self.record.pools) if p.pool == pool)
        self.allocate(pool, 0, last.gpu, billed=last.billed)

    def add_instance(self, pool: str, tp: int, cost: GenerationCost, *, name: str | None = None,
                     max_seqs: int | None = None) -> GenerationInstance:
        """A new, empty generation instance of ``tp`` GPUs, ready now."""
        iid = self._next_id
        self._next_id += 1
        inst = GenerationInstance(iid, name or f"{pool}/instance{iid}", pool, tp, cost, max_seqs or self.max_seqs,
                                  self.requests, self.now, self.record.segments)
        inst.fast = self.book.quiet and self.fast_path
        self.instances.append(inst)
        self.record.instances.append(inst)
        return inst

    def retire(self, inst: GenerationInstance) -> list[int]:
        """Remove an instance; its running and queued requests return to the scheduler (reset)."""
        self._touch(inst)
        back = self.abort(self.requests_on(inst))
        inst.plan(self.now)  # closes its busy interval
        inst.retired = True
        self.instances.remove(inst)
        self._dirty.pop(inst.id, None)
        return back

    def reconfigure(self, inst: GenerationInstance, *, tp: int | None = None, cost: GenerationCost | None = None,
                    switch_s: float = 0.0, job: int = -1) -> None:
        """Change an instance's TP degree or model; it is busy ``switch_s`` (a switch span of ``job``, the one it
        switches to), and its running requests are preempted to the head of its queue (their tokens are
        recomputed afterwards)."""
        self._touch(inst)
        inst.reconfigure(self.now, tp=tp, cost=cost, switch_s=switch_s, job=job)
        self._dirty[inst.id] = inst

    def migrate(self, rids: Iterable[int], dst: GenerationInstance, *, front: bool = True) -> list[int]:
        """Move waiting or running requests to ``dst`` keeping their progress: running ones are preempted by
        recompute (their generated tokens are prefilled again on ``dst``). Returns the ones moved."""
        req, moved = self.requests, []
        for src, group in self._live_groups(rids, skip=dst.id):
            src.remove(group, kind="migrated")
            for rid in group:
                req.state[rid] = State.PENDING
            self._dirty[src.id] = src
            moved.extend(group)
        if moved:
            self.book.withdrawn(moved)  # submit counts them again
            self.submit(dst, moved, front=front)
        return moved

    def _live_groups(self, rids: Iterable[int], skip: int = -1) -> Iterator[tuple[GenerationInstance, list[int]]]:
        """Those of ``rids`` still waiting or running on a live instance other than ``skip``, by instance; each
        instance is brought to now just before its group is read (a planned drain may have marked them finished
        ahead of time), so the caller changes one instance before the next is touched."""
        req, by_inst = self.requests, dict[int, list[int]]()
        for rid in rids:
            if req.instance[rid] >= 0 and req.instance[rid] != skip:
                by_inst.setdefault(req.instance[rid], []).append(rid)
        live = {i.id: i for i in self.instances}
        for iid, group in by_inst.items():
            if (inst := live.get(iid)) is not None:  # (a retired one runs nothing any more)
                self._touch(inst)
                yield inst, [r for r in group if req.state[r] in (State.WAITING, State.RUNNING)]

    def requests_on(self, inst: GenerationInstance) -> list[int]:
        """Requests running or queued on an instance."""
        self._touch(inst)
        return inst.request_ids()

    # ---- requests ---------------------------------------------------------------------------------------------

    def submit(self, inst: GenerationInstance, rids: Iterable[int], *, front: bool = False) -> None:
        """Queue requests on an instance, at the back (or the front) of its waiting queue, in this order."""
        if inst.retired:
            raise ConfigError(f"submit to retired instance {inst.name}")
        self._touch(inst)
        rids = self.requests.queue(rids, inst.id, self.now)
        self.book.submitted(rids)
        if front:
            inst.waiting.extendleft(reversed(rids))
        else:
            inst.waiting.extend(rids)
        self._dirty[inst.id] = inst

    def abort(self, rids: Iterable[int]) -> list[int]:
        """Stop these requests wherever they are; their partial responses are discarded. Returns the ones
        that were waiting or running (now pending again, resubmittable). A trajectory's next turn that is
        waiting on its environment work is not queued when that ends (unless submitted again)."""
        req, gone, rids = self.requests, list[int](), list(rids)
        if self.multi_turn:
            for rid in rids:
                if req.instance[rid] < 0 and req.state[rid] == State.PENDING:  # waiting on its environment
                    self.book.stop_trajectory(rid, self.now)
        for inst, group in self._live_groups(rids):
            if group:
                for rid in inst.remove(group):
                    req.reset(rid)
                    gone.append(rid)
                self._dirty[inst.id] = inst
        self.book.withdrawn(gone)
        return gone

    def mark(self, resource: str, kind: str, step: int, start_s: float, end_s: float, item: int = -1,
             job: int = -1) -> None:
        """Put a span of the scheduler's own on the timeline (a round, a phase, a decision), on a track of its own:
        a resource's name is its bookings' (what it bills, what the run's end cuts)."""
        if resource in self.resources:
            raise ConfigError(f"mark: {resource!r} is a resource; a mark goes on a track of its own name")
        self.record.segments.append((resource, kind, step, item, start_s, end_s, job))

    def set_version(self, version: int, instances: Iterable[GenerationInstance] | None = None) -> None:
        """The policy version the instances now serve (requests admitted from now on carry it)."""
        for inst in self.instances if instances is None else instances:
            inst.set_version(version, self.now)

    # ---- other work, timers, bookkeeping ------------------------------------------------------------------

    def add_resource(self, name: str, pool: str, *, gpus: int = 0, slots: int = 1, usd_per_s: float = 0.0) -> Resource:
        """A FIFO server for ``work`` with ``slots`` lanes (0: unbounded), billed ``usd_per_s`` of use."""
        if name in self.resources:
            raise ConfigError(f"resource {name!r} exists")
        self.resources[name] = res = Resource(name, pool, gpus, slots, usd_per_s)
        return res

    def work(self, resource: str, seconds: float, tag: Tag, *, kind: str, step: int = -1, item: int = -1,
             job: int = -1) -> float:
        """Book ``seconds`` on a resource (FIFO); a "done" notice with ``tag`` comes at the end, returned. The
        timeline span carries ``job`` (-1: a run's only job, or none in particular)."""
        if seconds < 0:
            raise ConfigError(f"{kind} on {resource} cannot take {seconds} s")
        if not isinstance(tag, Tag):
            raise TypeError(f"work's tag is a Tag (rltrace.replay.events), not {type(tag).__name__}")
        start, end = self.resources[resource].book(self.now, seconds)
        self.record.segments.append((resource, kind, step, item, start, end, job))
        self.queue.push(end, Done(tag))
        return end

    def timer(self, delay_s: float, tag: Tag) -> None:
        """A "timer" notice with ``tag`` after ``delay_s`` seconds (now, if negative)."""
        if not isinstance(tag, Tag):
            raise TypeError(f"a timer's tag is a Tag (rltrace.replay.events), not {type(tag).__name__}")
        self.queue.push(self.now + max(delay_s, 0.0), Timer(tag))

    def consume(self, job: int, train_step: int, rids: Iterable[int], version: int) -> None:
        """Training step ``train_step`` (weights at ``version``) consumed these finished samples."""
        index = np.asarray(rids if isinstance(rids, range) else list(rids), dtype=np.int64)
        self.record.consumed.append((job, train_step, index, version - self.requests.versions(index)))

    def end_step(self, job: int, step: int) -> None:
        """Step ``step`` of ``job`` is complete (its weights are wherever the scheduler needs them)."""
        self.record.step_end_s[(job, step)] = self.now

    def stop(self) -> None:
        """End the run after the current event, even with work still queued."""
        self._stopped = True

    # ---- the loop ---------------------------------------------------------------------------------------------

    def run(self, scheduler: Any, progress: Callable[[int], None] | None = None) -> RunRecord:
        """Start ``scheduler`` and fire events until none are left or it stops the run; returns the run's
        record. The scheduler sees the run through a :class:`~rltrace.replay.schedulers.view.View` (what a real
        system could know, within what its declared capabilities cover), never through this object."""
        can = capabilities(scheduler)
        self._places_turns = can.places_turns
        self._view = View(self, several_jobs=can.several_jobs)
        self.record.jobs = self._view.jobs  # the jobs it replays: a one-job scheduler's run is the first job's alone
        scheduler.start(self._view)
        self._replan()
        # The loop allocates a few short-lived objects per event and no reference cycles; the cyclic collector
        # would only rescan the long-lived request lists, over and over (2x the loop's time at 800k requests).
        paused = gc.isenabled()
        gc.disable()
        try:
            self._loop(self.queue, scheduler.on_event, progress)
        finally:
            if paused:
                gc.enable()
        if self._stopped:  # what still generates is discarded: the timeline keeps the work it did until now
            for inst in self.instances:
                self._touch(inst)
                inst.close(self.now)
            self._cut_bookings(self.now)
        stuck = [i.name for i in self.instances if i.batch or i.waiting] if not self._stopped else []
        if stuck:  # every busy instance has a next event; a run that ran dry with work left is a bug, not a result
            raise RuntimeError(f"replay stalled at {self.now:.3f} s: {', '.join(stuck[:3])} still hold requests "
                               "but have no next event (an rltrace bug; please report it)")
        self.record.event_log = self.queue.log
        return self.record

    def _cut_bookings(self, end_s: float) -> None:
        """The run ends at ``end_s``, and with it the work booked on resources past it (an environment's queued
        turns, a reward still computing): what had not started never runs, what ran is cut at ``end_s``, on the
        timeline and in the time each resource bills."""
        late = {name: r for name, r in self.resources.items() if r.last_end_s > end_s}
        if not late:
            return
        kept: list[Segment] = []
        for seg in self.record.segments:
            resource, start, end = seg[0], seg[4], seg[5]
            if end > end_s and resource in late:  # only bookings carry a resource's name (marks name their own)
                late[resource].busy_s -= end - max(start, end_s)
                if start >= end_s:
                    continue
                seg = (resource, seg[1], seg[2], seg[3], start, end_s, seg[6])
            kept.append(seg)
        self.record.segments[:] = kept
        for r in late.values():
            r.last_end_s = end_s

    def _loop(self, queue: EventQueue, on_event: Callable[[Any, Notice], None],
              progress: Callable[[int], None] | None) -> None:
        events, pop, view, book = 0, queue.pop, self._view, self.book
        while len(queue) and not self._stopped:
            time_s, _, _, event = pop()
            self.now = time_s
            if type(event) is Planned:  # (the common event first, by exact type: the cheapest test)
                inst = event.instance
                done = inst.fire(event.epoch)
                if done is None:
                    continue  # stale plan
                self._dirty[inst.id] = inst
                if done:
                    if self.multi_turn:  # finished turns with a successor: their environment works first
                        book.environment(done, inst.id, time_s, self.resources["env"], self.record.segments)
                    if book.quiet:
                        book.finished(done, time_s)
                    else:
                        on_event(view, Notice(time_s, NoticeKind.FINISHED, instance=inst, requests=done))
            elif isinstance(event, Generated):
                if not book.current(event):
                    continue  # withdrawn: a drain it counted on was cut short
                on_event(view, Notice(time_s, NoticeKind.GENERATED, Tag("generated", *event.key)))
            elif isinstance(event, TurnReady):
                self._turn(event, on_event)
            elif isinstance(event, (Done, Timer)):
                on_event(view, Notice(time_s, event.kind, event.tag))
            if self._dirty:
                self._replan()
            events += 1
            if progress is not None and not events & 0x3FFF:
                progress(events)
        self.record.events = events

    def _turn(self, event: TurnReady, on_event: Callable[[Any, Notice], None]) -> None:
        """A next turn is ready: the scheduler places it (it declared ``places_turns``), or it joins its previous
        instance (the least loaded of that pool when that one was retired)."""
        rid = event.request
        if self.requests.state[rid] != State.PENDING or rid in self.book.dropped:
            return  # the scheduler already took it elsewhere, or stopped its trajectory
        live = [i for i in self.instances if i.id == event.instance]
        if self._places_turns:
            on_event(self._view, Notice(self.now, NoticeKind.TURN, Tag("turn", item=event.before),
                                        live[0] if live else None, [rid]))
            return
        if not live:
            pool = next(i.pool for i in self.record.instances if i.id == event.instance)
            live = sorted((i for i in self.instances if i.pool == pool), key=lambda i: (i.load, i.id))
            if not live:
                raise ConfigError(f"no instance left in pool {pool!r} for a trajectory's next turn")
        self.submit(live[0], [rid])

    def _replan(self) -> None:
        push, now = self.queue.push, self.now
        for inst in self._dirty.values():
            drained = inst.drain
            at = inst.plan(now)
            if at is not None:
                push(at, Planned(inst, inst.epoch))
                if inst.drain is not None and inst.drain is not drained:
                    self.book.drained(inst.drain, inst.id)
        self._dirty.clear()
