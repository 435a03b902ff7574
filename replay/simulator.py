"""The discrete-event simulator, and the verbs a scheduler drives it with.

A scheduler (see :mod:`.schedulers.base`) drives these verbs through its view of the run
(:mod:`.schedulers.view`, built in ``run``), never through this object: it dispatches requests to generation
instances (``submit``), aborts and resubmits them (``abort``, ``migrate``), grows, shrinks and regroups
pools (``add_instance``, ``retire``, ``reconfigure``), books work
on resources (``work``: training, weight sync, reward, environment, switches), sets timers, and marks
which samples each training step consumed and when a step ends. The loop below moves time forward from
event to event; nothing here knows any scheduling policy.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rltrace.replay.cluster import Cluster
from rltrace.replay.costmodels.generation import GenerationCost
from rltrace.replay.entities.instance import GenerationInstance
from rltrace.replay.entities.requests import Requests, State
from rltrace.replay.entities.resource import Resource
from rltrace.replay.events import EventQueue, Priority
from rltrace.replay.job import Job

from rltrace.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Notice:
    """What a scheduler is told: requests finished on an instance, work done, or a timer fired."""

    time_s: float
    kind: str
    """"finished" (requests finished), "generated" (quiet mode: all of step ``tag = (job, step)`` finished),
    "done" (work booked with ``work``), "timer", or "turn" (with ``route_turns``: a trajectory's next turn is
    ready; ``requests`` holds it, ``tag`` the previous turn's request and ``instance`` the instance that ran
    it, None if retired)"""
    tag: Any = None
    """the tag the scheduler gave ``work`` or ``timer``"""
    instance: GenerationInstance | None = None
    requests: list[int] = field(default_factory=list)


@dataclass(slots=True)
class PoolUse:
    """GPUs a pool holds from ``start_s`` on (a new entry when the scheduler resizes it)."""

    pool: str
    gpu: str
    gpus: int
    start_s: float
    billed: bool


class Simulator:
    """Owns time, the event queue, instances, resources and the record of what happened."""

    def __init__(self, requests: Requests, jobs: list[Job], cluster: Cluster, *, keep_log: bool = False,
                 fast_path: bool = True):
        self.now = 0.0
        self.requests = requests
        self.jobs = jobs
        self.cluster = cluster
        self.max_seqs = cluster.max_seqs
        self.instances: list[GenerationInstance] = []
        self.all_instances: list[GenerationInstance] = []
        """every instance ever added, retired ones too (the timeline names them)"""
        self.resources: dict[str, Resource] = {}
        self.pools: list[PoolUse] = []
        self.segments: list[tuple[str, str, int, int, float, float, int]] = []
        """timeline rows besides the requests: (resource, kind, step, id, start_s, end_s, job); job -1: no one
        job's (an instance's busy span, a switch no job asked for)"""
        self.consumed: list[tuple[int, int, np.ndarray, np.ndarray]] = []
        """per training step: (job, train step, requests, their staleness in versions)"""
        self.step_end_s: dict[tuple[int, int], float] = {}
        self.extra: dict[str, float] = {}
        """metrics a scheduler adds (names of its choosing)"""
        self.queue = EventQueue(keep_log)
        self._dirty: dict[int, GenerationInstance] = {}
        self._stopped = False
        self._next_id = 0
        self.events = 0
        self._quiet = False
        self.multi_turn = max(requests.next_turn, default=-1) >= 0
        """some requests are turns of multi-turn trajectories (see ``route_turns``)"""
        self.fast_path = fast_path and not self.multi_turn
        """let quiet-mode instances plan whole queues at once (off: the per-event path, same results). Off for
        multi-turn work: each finished turn starts its trajectory's environment work at once"""
        self.route_turns = False
        """A finished turn with a successor books the successor's environment time on the "env" resource
        (CPU workers, one lane per trajectory). Then, False: the engine queues the next turn on the instance
        that ran the previous one (its prefix cache is there); True: the scheduler gets a "turn" notice and
        places it itself"""
        self._carried: set[int] = set()  # quiet mode: next turns that inherit their trajectory's count
        self._dropped: set[int] = set()  # next turns aborted while their environment worked
        if self.multi_turn:
            self.add_resource("env", "cpu", slots=0)
        self._left: dict[tuple[int, int], int] = {}  # quiet mode: requests of (job, step) not finished
        self._last: dict[tuple[int, int], float] = {}  # ... and the latest finish among those that did
        self._token: dict[tuple[int, int], int] = {}  # bumps when a planned "generated" notice is withdrawn
        self._view: Any = None  # what the scheduler sees (set by ``run``)

    # ---- notification mode -------------------------------------------------------------------------------------

    @property
    def quiet(self) -> bool:
        """False (default): a "finished" notice for every request as it finishes. True: one "generated"
        notice (tag ``(job, step)``) when all of a step's submitted requests have finished; instances then
        plan whole queues at once (the fast path), and the loop runs one event per queue, not per request."""
        return self._quiet

    @quiet.setter
    def quiet(self, value: bool) -> None:
        self._quiet = value
        for inst in self.instances:
            inst.fast = value and self.fast_path

    def _count(self, rids: Iterable[int], delta: int) -> None:
        index = np.asarray(rids if isinstance(rids, range) else list(rids), dtype=np.int64)
        if not len(index):
            return
        req, left = self.requests, self._left
        keys, counts = np.unique((req.job_arr[index] << 32) | req.step_arr[index], return_counts=True)
        for k, c in zip(keys.tolist(), counts.tolist()):
            key = (k >> 32, k & 0xFFFFFFFF)
            left[key] = left.get(key, 0) + delta * c

    def _finished(self, rids: list[int], at_s: float) -> None:
        """Quiet mode: count finishes; a step whose last request finished gets its "generated" notice. A turn
        with a successor passes its count on to it: the step is not generated until its trajectories end."""
        job, step, left, last = self.requests.job, self.requests.step, self._left, self._last
        if self.multi_turn:
            nxt = self.requests.next_turn
            self._carried.update(nxt[r] for r in rids if nxt[r] >= 0)
            rids = [r for r in rids if nxt[r] < 0]
        for rid in rids:
            key = (job[rid], step[rid])
            left[key] -= 1
            if at_s > last.get(key, -1.0):
                last[key] = at_s
            if not left[key]:
                self.queue.push(last[key], Priority.DONE, None, ("generated", key, self._token.get(key, 0)))

    def _release(self, rid: int) -> None:
        """Quiet mode: a carried next turn will never run; its step may now be complete (noticed now, not
        at its last finish, which has passed)."""
        self._carried.discard(rid)
        key = (self.requests.job[rid], self.requests.step[rid])
        self._left[key] -= 1
        if not self._left[key]:
            at = max(self.now, self._last.get(key, self.now))
            self.queue.push(at, Priority.DONE, None, ("generated", key, self._token.get(key, 0)))

    def _drained(self, inst: GenerationInstance) -> None:
        """Quiet mode: a drain was planned; count its finishes per step (vectorised)."""
        d = inst.drain
        assert d is not None
        req = self.requests
        keys = (req.job_arr[d.rids] << 32) | req.step_arr[d.rids]
        order = np.argsort(keys, kind="stable")
        uniq, first = np.unique(keys[order], return_index=True)
        counts = np.diff(np.r_[first, len(order)])
        latest = np.maximum.reduceat(d.finish_s[order], first)
        left, last = self._left, self._last
        for k, c, t in zip(uniq.tolist(), counts.tolist(), latest.tolist()):
            key = (k >> 32, k & 0xFFFFFFFF)
            left[key] -= c
            if t > last.get(key, -1.0):
                last[key] = t
            if not left[key]:
                self.queue.push(last[key], Priority.DONE, None, ("generated", key, self._token.get(key, 0)))

    def _touch(self, inst: GenerationInstance) -> None:
        """Bring an instance to now before changing it (cutting a planned drain short if it has one). A cut
        plan voids the instance's next event, so the instance is planned again even if nothing changes it
        (an abort of requests that had already finished there, a scheduler only looking at its queue)."""
        if inst.drain is None:
            if inst.advance_to(self.now):
                self._dirty[inst.id] = inst
            return
        back = inst.cut_drain(self.now)
        self._dirty[inst.id] = inst
        job, step = self.requests.job, self.requests.step
        for key in {(job[r], step[r]) for r in back}:
            self._token[key] = self._token.get(key, 0) + 1  # its "generated" notice, if planned, is void
            self._last[key] = -1.0  # the finishes to come are all later than the ones that happened
        self._count(back, +1)

    # ---- pools and instances -----------------------------------------------------------------------------------

    def allocate(self, pool: str, gpus: int, gpu: str, *, billed: bool = True) -> None:
        """From now on ``pool`` holds ``gpus`` GPUs of kind ``gpu`` (unbilled: shares GPUs billed elsewhere)."""
        if gpus < 0:
            raise ConfigError(f"pool {pool!r} cannot hold {gpus} GPUs")
        self.pools.append(PoolUse(pool, gpu, gpus, self.now, billed))

    def release(self, pool: str) -> None:
        """From now on ``pool`` holds no GPUs: they go back to the cluster and billing stops."""
        last = next(p for p in reversed(self.pools) if p.pool == pool)
        self.allocate(pool, 0, last.gpu, billed=last.billed)

    def add_instance(self, pool: str, tp: int, cost: GenerationCost, *, name: str | None = None,
                     max_seqs: int | None = None) -> GenerationInstance:
        """A new, empty generation instance of ``tp`` GPUs, ready now."""
        iid = self._next_id
        self._next_id += 1
        inst = GenerationInstance(iid, name or f"{pool}/instance{iid}", pool, tp, cost, max_seqs or self.max_seqs,
                                  self.requests, self.now, self._segment)
        inst.fast = self._quiet and self.fast_path
        self.instances.append(inst)
        self.all_instances.append(inst)
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
        inst.time_s = max(inst.time_s, self.now)
        running = [r for r in self.requests_on(inst) if self.requests.state[r] == State.RUNNING]
        waiting = list(inst.waiting)
        inst.remove(running + waiting, kind="migrated")
        req = self.requests
        req.touched = True
        for rid in running:  # keep their progress: recompute, as a preemption does
            generated = inst.it - req.admit_iter[rid]
            req.remaining[rid] -= generated
            req.recompute[rid] += generated
        if cost is not None:
            inst.cost = cost
        inst.set_tp(tp or inst.tp)
        if switch_s > 0:
            self.segments.append((inst.name, "switch", -1, -1, inst.time_s, inst.time_s + switch_s, job))
            inst.time_s += switch_s
        for rid in running + waiting:
            req.state[rid] = State.WAITING
        inst.waiting.extend(running + waiting)
        self._dirty[inst.id] = inst

    def migrate(self, rids: Iterable[int], dst: GenerationInstance, *, front: bool = True) -> list[int]:
        """Move waiting or running requests to ``dst`` keeping their progress: running ones are preempted by
        recompute (their generated tokens are prefilled again on ``dst``). Returns the ones moved."""
        req, moved = self.requests, []
        by_inst: dict[int, list[int]] = {}
        for rid in rids:
            if req.instance[rid] >= 0 and req.instance[rid] != dst.id:
                by_inst.setdefault(req.instance[rid], []).append(rid)
        live = {i.id: i for i in self.instances}
        for iid, group in by_inst.items():
            src = live.get(iid)
            if src is None:
                continue
            self._touch(src)
            group = [r for r in group if req.state[r] in (State.WAITING, State.RUNNING)]
            generated = {r: src.it - req.admit_iter[r] for r in group if req.state[r] == State.RUNNING}
            src.remove(group, kind="migrated")  # (its batch sums use the pre-move recompute counts)
            for rid, tokens in generated.items():
                req.remaining[rid] -= tokens
                req.recompute[rid] += tokens
            req.touched = req.touched or bool(generated)
            for rid in group:
                req.state[rid] = State.PENDING
            self._dirty[iid] = src
            moved.extend(group)
        if moved:
            if self._quiet:
                self._count(moved, -1)  # submit counts them again
            self.submit(dst, moved, front=front)
        return moved

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
        req = self.requests
        if isinstance(rids, range) and rids.step == 1:  # a contiguous batch: slice operations, no Python loop
            a, b = rids.start, rids.stop
            if req.state[a:b].count(State.PENDING) != b - a:
                bad = next(r for r in rids if req.state[r] != State.PENDING)
                raise ConfigError(f"request {bad} is already {State(req.state[bad]).name.lower()}")
            req.state[a:b] = [int(State.WAITING)] * (b - a)
            req.instance[a:b] = [inst.id] * (b - a)
            now = self.now
            req.submit_s[a:b] = [t if t == t else now for t in req.submit_s[a:b]]  # (t != t: NaN, never queued)
        else:
            rids = list(rids)
            submitted, now = req.submit_s, self.now
            for rid in rids:
                if req.state[rid] != State.PENDING:
                    raise ConfigError(f"request {rid} is already {State(req.state[rid]).name.lower()}")
                req.state[rid] = State.WAITING
                req.instance[rid] = inst.id
                if submitted[rid] != submitted[rid]:  # NaN: its first submission is its arrival
                    submitted[rid] = now
        if self._dropped:
            self._dropped.difference_update(rids if isinstance(rids, list) else list(rids))
        if self._quiet:
            if self._carried:
                rids = list(rids)
                self._count([r for r in rids if r not in self._carried], +1)
                self._carried.difference_update(rids)
            else:
                self._count(rids, +1)
        if front:
            inst.waiting.extendleft(reversed(rids))
        else:
            inst.waiting.extend(rids)
        self._dirty[inst.id] = inst

    def abort(self, rids: Iterable[int]) -> list[int]:
        """Stop these requests wherever they are; their partial responses are discarded. Returns the ones
        that were waiting or running (now pending again, resubmittable). A trajectory's next turn that is
        waiting on its environment work is not queued when that ends (unless submitted again)."""
        by_inst: dict[int, list[int]] = {}
        req = self.requests
        for rid in rids:
            if req.instance[rid] >= 0:
                by_inst.setdefault(req.instance[rid], []).append(rid)
            elif req.state[rid] == State.PENDING and self.multi_turn:
                self._dropped.add(rid)  # a next turn waiting on its environment: its trajectory stops here
                if rid in self._carried:  # quiet mode: the trajectory's count ends with it
                    self._release(rid)
        gone: list[int] = []
        live = {i.id: i for i in self.instances}
        for iid, group in by_inst.items():
            inst = live.get(iid)
            if inst is None:
                continue  # retired: nothing of it is still running
            self._touch(inst)  # a planned drain may have marked them finished ahead of time
            group = [r for r in group if req.state[r] in (State.WAITING, State.RUNNING)]
            if not group:
                continue
            for rid in inst.remove(group):
                req.reset(rid)
                gone.append(rid)
            self._dirty[iid] = inst
        if self._quiet:
            self._count(gone, -1)
        return gone

    def spawn(self, job: int, step: int, group: int, prompt_tokens: list[int], output_tokens: list[int],
              env_s: list[float] | None = None) -> range:
        """Create requests during the run (extra responses; with ``env_s``, one trajectory's turns, run again
        from its first); returns their ids, pending."""
        return self.requests.add(job, step, group, prompt_tokens, output_tokens, env_s)

    def mark(self, resource: str, kind: str, step: int, start_s: float, end_s: float, item: int = -1,
             job: int = -1) -> None:
        """Put a span of the scheduler's own on the timeline (a round, a phase, a decision)."""
        self.segments.append((resource, kind, step, item, start_s, end_s, job))

    def set_version(self, version: int, instances: Iterable[GenerationInstance] | None = None) -> None:
        """The policy version the instances now serve (requests admitted from now on carry it)."""
        for inst in self.instances if instances is None else instances:
            inst.version = version
            d = inst.drain
            if d is not None:  # a planned drain's later admissions happen under the new weights
                later = d.rids[d.fresh & (d.start_s > self.now)].tolist()
                versions = self.requests.version
                for rid in later:
                    versions[rid] = version

    # ---- other work, timers, bookkeeping ------------------------------------------------------------------

    def add_resource(self, name: str, pool: str, *, gpus: int = 0, slots: int = 1, usd_per_s: float = 0.0) -> Resource:
        """A FIFO server for ``work`` with ``slots`` lanes (0: unbounded), billed ``usd_per_s`` of use."""
        if name in self.resources:
            raise ConfigError(f"resource {name!r} exists")
        self.resources[name] = res = Resource(name, pool, gpus, slots, usd_per_s)
        return res

    def work(self, resource: str, seconds: float, tag: Any, *, kind: str, step: int = -1, item: int = -1,
             job: int = -1) -> float:
        """Book ``seconds`` on a resource (FIFO); a "done" notice with ``tag`` comes at the end, returned. The
        timeline span carries ``job`` (-1: a run's only job, or none in particular)."""
        if seconds < 0:
            raise ConfigError(f"{kind} on {resource} cannot take {seconds} s")
        start, end = self.resources[resource].book(self.now, seconds)
        self.segments.append((resource, kind, step, item, start, end, job))
        self.queue.push(end, Priority.DONE, None, ("done", tag))
        return end

    def timer(self, delay_s: float, tag: Any) -> None:
        self.queue.push(self.now + max(delay_s, 0.0), Priority.TIMER, None, ("timer", tag))

    def consume(self, job: int, train_step: int, rids: Iterable[int], version: int) -> None:
        """Training step ``train_step`` (weights at ``version``) consumed these finished samples."""
        index = np.asarray(rids if isinstance(rids, range) else list(rids), dtype=np.int64)
        versions = self.requests.version
        # (a gather through a list is the cheapest read of a few thousand list items)
        was = np.fromiter(map(versions.__getitem__, index.tolist()), dtype=np.int64, count=len(index))
        self.consumed.append((job, train_step, index, version - was))

    def end_step(self, job: int, step: int) -> None:
        """Step ``step`` of ``job`` is complete (its weights are wherever the scheduler needs them)."""
        self.step_end_s[(job, step)] = self.now

    def stop(self) -> None:
        """End the run after the current event, even with work still queued."""
        self._stopped = True

    def _segment(self, resource: str, kind: str, step: int, item: int, start_s: float, end_s: float) -> None:
        """An instance's span; its ``item`` is a request (the span is that request's job's) or -1."""
        job = self.requests.job[item] if item >= 0 else -1
        self.segments.append((resource, kind, step, item, start_s, end_s, job))

    # ---- the loop ---------------------------------------------------------------------------------------------

    def run(self, scheduler: Any, progress: Callable[[int], None] | None = None) -> None:
        """Start ``scheduler`` and fire events until none are left or it stops the run. The scheduler sees the
        run through a :class:`~rltrace.replay.schedulers.view.View` (what a real system could know), never
        through this object."""
        from rltrace.replay.schedulers.view import View  # (the schedulers package imports this module)

        self._view = View(self)
        scheduler.start(self._view)
        self._replan()
        queue = self.queue
        # The loop allocates a few short-lived tuples per event and no reference cycles; the cyclic collector
        # would only rescan the long-lived request lists, over and over (2x the loop's time at 800k requests).
        paused = gc.isenabled()
        gc.disable()
        try:
            self._loop(queue, scheduler.on_event, progress)
        finally:
            if paused:
                gc.enable()
        stuck = [i.name for i in self.instances if i.batch or i.waiting] if not self._stopped else []
        if stuck:  # every busy instance has a next event; a run that ran dry with work left is a bug, not a result
            raise RuntimeError(f"replay stalled at {self.now:.3f} s: {', '.join(stuck[:3])} still hold requests "
                               "but have no next event (an rltrace bug; please report it)")

    def _loop(self, queue: EventQueue, on_event: Callable[[Any, Notice], None],
              progress: Callable[[int], None] | None) -> None:
        events, pop, view = 0, queue.pop, self._view
        while len(queue) and not self._stopped:
            time_s, _, _, inst, data = pop()
            self.now = time_s
            if inst is not None:
                done = inst.fire(data)
                if done is None:
                    continue  # stale plan
                self._dirty[inst.id] = inst
                if done:
                    if self.multi_turn:
                        self._environment(done, inst)
                    if self._quiet:
                        self._finished(done, time_s)
                    else:
                        on_event(view, Notice(time_s, "finished", None, inst, done))
            elif data[0] == "turn":
                self._turn(data[1], data[2], data[3], on_event)
            elif data[0] == "generated":
                if data[2] != self._token.get(data[1], 0):
                    continue  # withdrawn: a drain it counted on was cut short
                on_event(view, Notice(time_s, "generated", data[1]))
            else:
                on_event(view, Notice(time_s, data[0], data[1]))
            if self._dirty:
                self._replan()
            events += 1
            if progress is not None and not events & 0x3FFF:
                progress(events)
        self.events = events

    def _environment(self, done: list[int], inst: GenerationInstance) -> None:
        """Finished turns with a successor: the environment works, then the next turn is ready."""
        req = self.requests
        nxt, env, step = req.next_turn, req.env_s, req.step
        lanes = self.resources["env"]
        for rid in done:
            k = nxt[rid]
            if k >= 0:
                start, end = lanes.book(self.now, env[k])
                self.segments.append(("env", "environment", step[k], k, start, end, req.job[k]))
                self.queue.push(end, Priority.DONE, None, ("turn", k, rid, inst.id))

    def _turn(self, rid: int, before: int, previous: int, on_event: Callable[[Any, Notice], None]) -> None:
        """A next turn is ready: the scheduler places it (``route_turns``), or it joins its previous instance
        (the least loaded of that pool when that one was retired)."""
        if self.requests.state[rid] != State.PENDING or rid in self._dropped:
            return  # the scheduler already took it elsewhere, or stopped its trajectory
        live = [i for i in self.instances if i.id == previous]
        if self.route_turns:
            on_event(self._view, Notice(self.now, "turn", before, live[0] if live else None, [rid]))
            return
        if not live:
            pool = next(i.pool for i in self.all_instances if i.id == previous)
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
                push(at, Priority.INSTANCE, inst, inst.epoch)
                if inst.drain is not None and inst.drain is not drained:
                    self._drained(inst)
        self._dirty.clear()
