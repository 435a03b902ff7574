"""The discrete-event simulator, and the verbs a scheduler drives it with.

A scheduler (see :mod:`.schedulers.base`) gets this object in ``start`` and in every ``on_event``. It
dispatches requests to generation instances (``submit``), reorders queues, aborts and resubmits
(``abort``), grows, shrinks and regroups pools (``add_instance``, ``retire``, ``reconfigure``), books work
on resources (``work``: training, weight sync, reward, environment, switches), sets timers, and marks
which samples each training step consumed and when a step ends. The loop below moves time forward from
event to event; nothing here knows any scheduling policy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

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
    """"finished", "done" or "timer\""""
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

    def __init__(self, requests: Requests, jobs: list[Job], cluster: Cluster, *, keep_log: bool = False):
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
        self.segments: list[tuple[str, str, int, int, float, float]] = []
        """timeline rows besides the requests: (resource, kind, step, id, start_s, end_s)"""
        self.consumed: list[tuple[int, int, int, int]] = []
        """(job, train step, request, staleness in versions)"""
        self.step_end_s: dict[tuple[int, int], float] = {}
        self.extra: dict[str, float] = {}
        """metrics a scheduler adds (names of its choosing)"""
        self.queue = EventQueue(keep_log)
        self._dirty: dict[int, GenerationInstance] = {}
        self._stopped = False
        self._next_id = 0
        self.events = 0

    # ---- pools and instances -----------------------------------------------------------------------------------

    def allocate(self, pool: str, gpus: int, gpu: str, *, billed: bool = True) -> None:
        """From now on ``pool`` holds ``gpus`` GPUs of kind ``gpu`` (unbilled: shares GPUs billed elsewhere)."""
        if gpus < 0:
            raise ConfigError(f"pool {pool!r} cannot hold {gpus} GPUs")
        self.pools.append(PoolUse(pool, gpu, gpus, self.now, billed))

    def add_instance(self, pool: str, tp: int, cost: GenerationCost, *, name: str | None = None,
                     max_seqs: int | None = None) -> GenerationInstance:
        """A new, empty generation instance of ``tp`` GPUs, ready now."""
        iid = self._next_id
        self._next_id += 1
        inst = GenerationInstance(iid, name or f"{pool}/instance{iid}", pool, tp, cost, max_seqs or self.max_seqs,
                                  self.requests, self.now, self._segment)
        self.instances.append(inst)
        self.all_instances.append(inst)
        return inst

    def retire(self, inst: GenerationInstance) -> list[int]:
        """Remove an instance; its running and queued requests return to the scheduler (reset)."""
        back = self.abort(self._held_by(inst))
        inst.plan(self.now)  # closes its busy interval
        inst.retired = True
        self.instances.remove(inst)
        self._dirty.pop(inst.id, None)
        return back

    def reconfigure(self, inst: GenerationInstance, *, tp: int | None = None, cost: GenerationCost | None = None,
                    switch_s: float = 0.0) -> None:
        """Change an instance's TP degree or model; it is busy ``switch_s``, and its running requests are
        preempted to the head of its queue (their tokens are recomputed afterwards)."""
        inst.advance_to(self.now)
        inst.time_s = max(inst.time_s, self.now)
        running = [r for r in self._held_by(inst) if self.requests.state[r] == State.RUNNING]
        waiting = list(inst.waiting)
        inst.remove(running + waiting, kind="migrated")
        req = self.requests
        for rid in running:  # keep their progress: recompute, as a preemption does
            generated = inst.it - req.admit_iter[rid]
            req.remaining[rid] -= generated
            req.recompute[rid] += generated
        if cost is not None:
            inst.cost = cost
        inst.set_tp(tp or inst.tp)
        if switch_s > 0:
            self._segment(inst.name, "switch", -1, -1, inst.time_s, inst.time_s + switch_s)
            inst.time_s += switch_s
        for rid in running + waiting:
            req.state[rid] = State.WAITING
        inst.waiting.extend(running + waiting)
        self._dirty[inst.id] = inst

    def _held_by(self, inst: GenerationInstance) -> list[int]:
        return [e[1] for e in inst._heap] + list(inst.waiting)

    # ---- requests ---------------------------------------------------------------------------------------------

    def submit(self, inst: GenerationInstance, rids: Iterable[int], *, front: bool = False) -> None:
        """Queue requests on an instance, at the back (or the front) of its waiting queue, in this order."""
        if inst.retired:
            raise ConfigError(f"submit to retired instance {inst.name}")
        inst.advance_to(self.now)
        rids = list(rids)
        req = self.requests
        for rid in rids:
            if req.state[rid] != State.PENDING:
                raise ConfigError(f"request {rid} is already {State(req.state[rid]).name.lower()}")
            req.state[rid] = State.WAITING
            req.instance[rid] = inst.id
        if front:
            inst.waiting.extendleft(reversed(rids))
        else:
            inst.waiting.extend(rids)
        self._dirty[inst.id] = inst

    def abort(self, rids: Iterable[int]) -> list[int]:
        """Stop these requests wherever they are; their partial responses are discarded. Returns the ones
        that were waiting or running (now pending again, resubmittable)."""
        by_inst: dict[int, list[int]] = {}
        req = self.requests
        for rid in rids:
            if req.state[rid] in (State.WAITING, State.RUNNING):
                by_inst.setdefault(req.instance[rid], []).append(rid)
        gone: list[int] = []
        live = {i.id: i for i in self.instances}
        for iid, group in by_inst.items():
            inst = live[iid]
            inst.advance_to(self.now)
            for rid in inst.remove(group):
                req.reset(rid)
                gone.append(rid)
            self._dirty[iid] = inst
        return gone

    def reorder(self, inst: GenerationInstance, key: Callable[[int], Any]) -> None:
        """Sort an instance's waiting queue by ``key(request id)`` (running requests are not affected)."""
        inst.waiting = type(inst.waiting)(sorted(inst.waiting, key=key))
        self._dirty[inst.id] = inst

    def set_version(self, version: int, instances: Iterable[GenerationInstance] | None = None) -> None:
        """The policy version the instances now serve (requests admitted from now on carry it)."""
        for inst in self.instances if instances is None else instances:
            inst.version = version

    # ---- other work, timers, bookkeeping ------------------------------------------------------------------

    def add_resource(self, name: str, pool: str, *, gpus: int = 0, slots: int = 1) -> Resource:
        if name in self.resources:
            raise ConfigError(f"resource {name!r} exists")
        self.resources[name] = res = Resource(name, pool, gpus, slots)
        return res

    def work(self, resource: str, seconds: float, tag: Any, *, kind: str, step: int = -1, item: int = -1) -> float:
        """Book ``seconds`` on a resource (FIFO); a "done" notice with ``tag`` comes at the end, returned."""
        if seconds < 0:
            raise ConfigError(f"{kind} on {resource} cannot take {seconds} s")
        start, end = self.resources[resource].book(self.now, seconds)
        self.segments.append((resource, kind, step, item, start, end))
        self.queue.push(end, Priority.DONE, None, ("done", tag))
        return end

    def timer(self, delay_s: float, tag: Any) -> None:
        self.queue.push(self.now + max(delay_s, 0.0), Priority.TIMER, None, ("timer", tag))

    def consume(self, job: int, train_step: int, rids: Iterable[int], version: int) -> None:
        """Training step ``train_step`` (weights at ``version``) consumed these finished samples."""
        req = self.requests
        self.consumed.extend((job, train_step, r, version - req.version[r]) for r in rids)

    def end_step(self, job: int, step: int) -> None:
        """Step ``step`` of ``job`` is complete (its weights are wherever the scheduler needs them)."""
        self.step_end_s[(job, step)] = self.now

    def stop(self) -> None:
        """End the run after the current event, even with work still queued."""
        self._stopped = True

    def _segment(self, resource: str, kind: str, step: int, item: int, start_s: float, end_s: float) -> None:
        self.segments.append((resource, kind, step, item, start_s, end_s))

    # ---- the loop ---------------------------------------------------------------------------------------------

    def run(self, scheduler: Any, progress: Callable[[int], None] | None = None) -> None:
        """Start ``scheduler`` and fire events until none are left or it stops the run."""
        scheduler.start(self)
        self._replan()
        queue, on_event, events = self.queue, scheduler.on_event, 0
        pop = queue.pop
        while len(queue) and not self._stopped:
            time_s, _, _, inst, data = pop()
            self.now = time_s
            if inst is not None:
                done = inst.fire(data)
                if done is None:
                    continue  # stale plan
                self._dirty[inst.id] = inst
                if done:
                    on_event(self, Notice(time_s, "finished", None, inst, done))
            else:
                on_event(self, Notice(time_s, data[0], data[1]))
            if self._dirty:
                self._replan()
            events += 1
            if progress is not None and not events & 0x3FFF:
                progress(events)
        self.events = events

    def _replan(self) -> None:
        push, now = self.queue.push, self.now
        for inst in self._dirty.values():
            at = inst.plan(now)
            if at is not None:
                push(at, Priority.INSTANCE, inst, inst.epoch)
        self._dirty.clear()
