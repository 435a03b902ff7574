"""rollmux (RollMux, arXiv 2512.11306): several RL jobs multiplexed on shared rollout and training pools.

- **Co-execution groups, round-robin.** Jobs in a group share one rollout pool and one training pool. Each
  job runs one rollout phase and one training phase per cycle; each pool serves its queue FIFO, so while
  job A trains, job B generates.
- **Context switches.** A pool switching to another job pays a warm cost when that job's state is resident
  in host memory (at most ``resident_jobs`` per pool, least recently used evicted) and a cold cost
  otherwise: the job's model state over each GPU's host link plus an engine floor
  (:mod:`rltrace.replay.costmodels.switching`; RollMux's measured 7B/32B figures are its validation). A
  pool whose GPUs still hold the job (it ran the job's last phase there) does not switch, and a job's first
  load on a pool is its start-up, which no scheduler charges. Each switch is a ``switch`` span (one per
  instance, one on the trainer), counted in ``metrics.extra`` ``warm_switches``/``cold_switches``.
- **Placement on arrival.** A group holds at most ``resident_jobs`` jobs (the paper's residency constraint:
  every member's state stays in host memory, so its switches are warm; ``residency = false`` lifts it), and
  every member must meet its SLO (T_coexec <= SLO x T_solo, with conservative estimates: every response at
  the job's length cap, known before any response is generated, or ``length_cap`` where the source records
  none, and a switch per phase; T_solo on the job's own pools; ``oracle``: at the step's true longest). Of the
  options, the job takes the one that adds the least $/hour: pack into a group as it is (free), scale a group's
  rollout pool by the fewest instances that make it fit (at most by the job's own instances, and only while cheaper
  than a new group), or open a new group on the job's own pools (a job list's jobs may each give their own). A job
  joins only a group of its own rollout TP with at least its own training GPUs, since its training time was priced
  on its own.
- **Long-tail migration.** Once ``migrate_at`` (80%) of a rollout phase's requests are done and another job's
  rollout is queued, the rest are consolidated on as few instances as their batch needs, and the queued
  rollout starts on the freed ones (not before: it would otherwise start whole on whatever one instance an
  earlier tail left free).
- **Departure.** When a group's last job is done its pools go back to the cluster, and billing stops.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from rltrace.replay.cluster import Cluster
from rltrace.replay.costmodels.switching import job_state, switch_seconds
from rltrace.replay.entities.instance import GenerationInstance
from rltrace.replay.events import Notice, NoticeKind, Tag
from rltrace.replay.job import Job
from rltrace.replay.schedulers.base import Capabilities, register
from rltrace.replay.schedulers.common import take_half
from rltrace.replay.schedulers.view import View

from rltrace.errors import ConfigError


@dataclass(frozen=True, kw_only=True, slots=True)
class RollMuxConfig:
    resident_jobs: int = 2
    """jobs whose state a pool keeps in host memory (warm switches)"""
    migrate_at: float = 0.8
    """share of a rollout phase done before its long tail is consolidated"""
    residency: bool = True
    """a group holds at most ``resident_jobs`` jobs (off: more, paying cold switches)"""
    scale_rollout: bool = True
    """placement may grow a group's rollout pool instead of opening a new group"""
    length_cap: int = 0
    """output tokens to assume per response for a job whose source records no cap (0: what one instance's
    KV cache holds beside the prompt, the most any response can run)"""
    oracle: bool = False
    """estimate at the true longest response of the job's first step (an upper bound; the metrics say so)"""

    def __post_init__(self) -> None:
        if self.resident_jobs < 1 or not 0 < self.migrate_at <= 1 or self.length_cap < 0:
            raise ConfigError("rollmux needs resident_jobs >= 1, 0 < migrate_at <= 1 and length_cap >= 0")


@dataclass(slots=True)
class Group:
    index: int
    pool: str
    instances: list[GenerationInstance]
    trainer: str
    trainer_pool: str
    sync: str
    tp: int
    """its rollout instances' TP (the opening job's)"""
    max_seqs: int
    """its rollout instances' running-sequence limit (the opening job's engine setting)"""
    train_gpus: int
    """its training pool's GPUs (the opening job's)"""
    members: list[int] = field(default_factory=list)
    """jobs placed here and not yet done"""
    closed: bool = False
    """every member is done and the pools were released"""
    rollouts: deque[tuple[int, int]] = field(default_factory=deque)
    trainings: deque[tuple[int, int]] = field(default_factory=deque)
    training_busy: bool = False
    warm: dict[str, OrderedDict[int, None]] = field(
        default_factory=lambda: {"rollout": OrderedDict(), "training": OrderedDict()})
    owner: dict[int, int] = field(default_factory=dict)
    """instance id -> job generating on it"""
    held: dict[int, int] = field(default_factory=dict)
    """instance id (-1: the trainer) -> the job whose state its GPUs hold now"""
    started: dict[str, set[int]] = field(default_factory=lambda: {"rollout": set(), "training": set()})
    """role -> jobs whose first load (start-up) the pool has done"""


@dataclass(slots=True)
class Rollout:
    job: int
    step: int
    total: int
    done: int = 0
    migrated: bool = False


@register("rollmux")
class RollMux:
    Config = RollMuxConfig
    capabilities = Capabilities(several_jobs=True)

    def __init__(self, config: RollMuxConfig) -> None:
        self.config = config

    def start(self, sim: View) -> None:
        self.groups: list[Group] = []
        self.group_of: dict[int, Group] = {}
        self.active: dict[int, Rollout] = {}  # job -> its running rollout
        self.oracle = sim.oracle() if self.config.oracle else None
        for job in sim.jobs:
            sim.timer(job.arrival_s, Tag("arrive", job.id))

    # ---- placement ---------------------------------------------------------------------------------------------

    @staticmethod
    def _own(sim: View, job: Job) -> Cluster:
        """The job's own pools (a job list's job), else the replay's."""
        return job.cluster or sim.cluster

    def _estimate(self, sim: View, job: Job, instances: int, tp: int, max_seqs: int) -> tuple[float, float]:
        """Conservative (generation, training) seconds of one step on ``instances`` rollout instances of TP ``tp``,
        each running at most ``max_seqs`` sequences:
        every response at max length (the job's length cap, which placement knows before any response is
        generated; ``length_cap``, or the KV cache's bound, where the source records none)."""
        req = sim.requests
        rids = job.requests(0)
        if self.oracle is not None:
            longest = max(self.oracle.output(r) for r in rids)
        else:
            longest = job.max_new_tokens or self.config.length_cap or \
                job.generation.kv_capacity_tokens(tp) - req.prompt[rids[0]]
        per_instance = math.ceil(len(rids) / instances)
        batch = min(max_seqs, per_instance)
        model = job.generation.iteration_model(tp)
        rounds = math.ceil(per_instance / max_seqs)
        gen = model.seconds(batch, batch * req.prompt[rids[0]], longest) * rounds
        return gen, job.trainer_seconds(0) + job.sync_s[0]

    def _fits(self, sim: View, members: list[Job], group: Group, instances: int) -> bool:
        """Whether every member meets its SLO sharing ``group`` grown to ``instances`` rollout instances (T_solo:
        each on its own pools)."""
        est = [self._estimate(sim, j, instances, group.tp, group.max_seqs) for j in members]
        solo = [sum(self._estimate(sim, j, own.instances, own.tp, own.max_seqs))
                for j, own in ((j, self._own(sim, j)) for j in members)]
        resident = len(members) <= self.config.resident_jobs  # warm switches, else cold
        c = sim.cluster
        switch = [(switch_seconds(job_state(j), "rollout", c.gen_gpu, tp=group.tp, warm=resident,
                                  calibration=j.calibration),
                   switch_seconds(job_state(j), "training", c.train_gpu, gpus=group.train_gpus, warm=resident,
                                  calibration=j.calibration))
                  for j in members]
        cycle = max(sum(g + w for (g, _), (w, _) in zip(est, switch)),
                    sum(t + w for (_, t), (_, w) in zip(est, switch)))
        return all(cycle <= j.extra.get("slo", 2.0) * s for j, s in zip(members, solo))

    def _place(self, sim: View, job: Job) -> Group:
        """The cheapest placement ($/hour added) that keeps every SLO: pack, scale a rollout pool, or open. A job
        joins only a group of its own rollout TP with at least its own training GPUs (its trainer time was priced
        on those)."""
        c, own = sim.cluster, self._own(sim, job)
        group_rate = own.gen_gpus * c.usd_per_gpu_hour(c.gen_gpu) + own.train_gpus * c.usd_per_gpu_hour(c.train_gpu)
        best: tuple[float, Group, int] | None = None
        for group in self.groups:
            if group.closed or group.tp != own.tp or group.train_gpus < own.train_gpus:
                continue
            if self.config.residency and len(group.members) >= self.config.resident_jobs:
                continue  # the residency constraint: every member's state stays in host memory (warm switches)
            members = [sim.jobs[j] for j in group.members] + [job]
            instance_rate = group.tp * c.usd_per_gpu_hour(c.gen_gpu)
            grow = own.instances if self.config.scale_rollout else 0
            extra = next((k for k in range(grow + 1)
                          if self._fits(sim, members, group, len(group.instances) + k)), None)
            if extra is not None and (best is None or extra * instance_rate < best[0]):
                best = (extra * instance_rate, group, extra)
        if best is None or (best[2] and best[0] >= group_rate):
            return self._open(sim, job)
        _, group, extra = best
        if extra:
            self._scale(sim, group, extra, job)
        group.members.append(job.id)
        return group

    def _scale(self, sim: View, group: Group, extra: int, job: Job) -> None:
        """Add ``extra`` instances to a group's rollout pool (billed from now on)."""
        group.instances += [sim.add_instance(group.pool, group.tp, job.generation, max_seqs=group.max_seqs)
                            for _ in range(extra)]
        sim.allocate(group.pool, len(group.instances) * group.tp, sim.cluster.gen_gpu)
        sim.extra["scaled_instances"] = sim.extra.get("scaled_instances", 0) + extra

    def _open(self, sim: View, job: Job) -> Group:
        """A new group on the job's own pools."""
        c, own, k = sim.cluster, self._own(sim, job), len(self.groups)
        suffix = "" if k == 0 else f"/g{k}"
        sim.allocate(f"generation{suffix}", own.gen_gpus, c.gen_gpu)
        sim.allocate(f"training{suffix}", own.train_gpus, c.train_gpu)
        trainer, sync = f"trainer{suffix}", f"sync{suffix}"
        sim.add_resource(trainer, f"training{suffix}", gpus=own.train_gpus)
        sim.add_resource(sync, "network")
        if k == 0:
            sim.add_resource("reward", "cpu")
        instances = [sim.add_instance(f"generation{suffix}", own.tp, job.generation, max_seqs=own.max_seqs)
                     for _ in range(own.instances)]
        group = Group(k, f"generation{suffix}", instances, trainer, f"training{suffix}", sync, own.tp, own.max_seqs,
                      own.train_gpus, [job.id])
        self.groups.append(group)
        sim.extra["groups"] = len(self.groups)
        return group

    # ---- the two pools -----------------------------------------------------------------------------------------

    def _switch(self, sim: View, group: Group, role: str, job: Job, count: int) -> float:
        """Seconds for ``count`` instances (or the trainer) of a pool whose GPUs do not hold ``job`` to take it
        up in ``role`` (0: none to switch, or the job's start-up); each is a switch span, counted in
        ``metrics.extra``."""
        lru = group.warm[role]
        warm = job.id in lru
        lru[job.id] = None
        lru.move_to_end(job.id)
        while len(lru) > self.config.resident_jobs:
            lru.popitem(last=False)
        if count == 0:
            return 0.0  # the job's state never left these GPUs
        if job.id not in group.started[role]:
            group.started[role].add(job.id)  # its first load: start-up, as in every other scheduler
            return 0.0
        key = "warm_switches" if warm else "cold_switches"
        sim.extra[key] = sim.extra.get(key, 0) + count
        c = sim.cluster
        if role == "rollout":
            return switch_seconds(job_state(job), role, c.gen_gpu, tp=group.tp, warm=warm, calibration=job.calibration)
        return switch_seconds(job_state(job), role, c.train_gpu, gpus=group.train_gpus, warm=warm,
                              calibration=job.calibration)

    def _start_rollouts(self, sim: View, group: Group) -> None:
        if group.rollouts:
            # FIFO per pool: the next rollout takes the pool once the running one has finished or had its long
            # tail consolidated; starting it on the odd instance a finished tail left free would run a whole
            # rollout on one instance.
            for ro in [self.active[j] for j in set(group.owner.values()) if not self.active[j].migrated]:
                if ro.done < self.config.migrate_at * ro.total:
                    return
                self._migrate_tail(sim, group, ro)
        free = [i for i in group.instances if i.id not in group.owner]
        if not free:
            return
        if not group.rollouts:
            self._lend(sim, group, free)
            return
        job_id, step = group.rollouts.popleft()
        job = sim.jobs[job_id]
        other = [i for i in free if group.held.get(i.id) != job_id]
        seconds = self._switch(sim, group, "rollout", job, len(other))
        for inst in free:
            sim.reconfigure(inst, cost=job.generation, switch_s=seconds if inst in other else 0.0, job=job_id)
            group.owner[inst.id] = group.held[inst.id] = job_id
        sim.set_version(step, free)  # each job's weights carry its own version
        rids = list(job.starts(step))
        self.active[job_id] = Rollout(job_id, step, len(job.requests(step)))  # every turn finishes
        for i, inst in enumerate(free):
            chunk = rids[i::len(free)]
            if chunk:
                sim.submit(inst, chunk)

    def _lend(self, sim: View, group: Group, free: list[GenerationInstance]) -> None:
        """Idle instances take queued requests of a running rollout of the same model (no switch needed)."""
        for inst in free:
            owned = (i for i in group.instances if i.id in group.owner)
            busiest = max(owned, key=lambda i: len(i.waiting), default=None)
            if busiest is None or len(busiest.waiting) < 2 or busiest.cost is not inst.cost:
                return
            sim.set_version(busiest.version, [inst])
            take_half(sim, busiest, inst)
            group.owner[inst.id] = group.owner[busiest.id]

    def _start_training(self, sim: View, group: Group) -> None:
        if group.training_busy or not group.trainings:
            return
        job_id, step = group.trainings.popleft()
        job = sim.jobs[job_id]
        group.training_busy = True
        switch = self._switch(sim, group, "training", job, int(group.held.get(-1) != job_id))
        group.held[-1] = job_id
        sim.consume(job_id, step, job.requests(step), version=step)
        if switch > 0:  # FIFO on the trainer: training starts when the switch ends
            sim.work(group.trainer, switch, Tag("switched", job_id, step), kind="switch", step=step, job=job_id)
        sim.work(group.trainer, job.trainer_seconds(step), Tag("train", job_id, step), kind="train", step=step,
                 job=job_id)

    def _migrate_tail(self, sim: View, group: Group, ro: Rollout) -> None:
        """Consolidate a rollout's long tail on as few instances as its batch needs; free the rest."""
        mine = [i for i in group.instances if group.owner.get(i.id) == ro.job]
        left = sum(i.load for i in mine)
        keep_n = max(1, math.ceil(left / group.max_seqs))
        if keep_n >= len(mine):
            return
        mine.sort(key=lambda i: -i.load)
        keep, release = mine[:keep_n], mine[keep_n:]
        for k, inst in enumerate(release):
            sim.migrate(sim.requests_on(inst), keep[k % keep_n])
            del group.owner[inst.id]
        ro.migrated = True
        sim.extra["tail_migrations"] = sim.extra.get("tail_migrations", 0) + 1

    # ---- events ------------------------------------------------------------------------------------------------

    def on_event(self, sim: View, notice: Notice) -> None:
        if notice.kind is NoticeKind.TIMER:
            job = sim.jobs[notice.tag.job]
            group = self._place(sim, job)
            self.group_of[job.id] = group
            group.rollouts.append((job.id, 0))
            self._start_rollouts(sim, group)
            return
        if notice.kind is NoticeKind.FINISHED:
            req = sim.requests
            for rid in notice.requests:
                ro = self.active[req.job[rid]]
                ro.done += 1
                group = self.group_of[ro.job]
                if ro.done == ro.total:
                    del self.active[ro.job]
                    for iid in [i for i, j in group.owner.items() if j == ro.job]:
                        del group.owner[iid]
                    sim.work("reward", sim.jobs[ro.job].reward_s[ro.step], Tag("reward", ro.job, ro.step),
                             kind="reward", step=ro.step, job=ro.job)
            for group in self.groups:
                self._start_rollouts(sim, group)
            return
        what, job_id, step = notice.tag.what, notice.tag.job, notice.tag.step
        job, group = sim.jobs[job_id], self.group_of[job_id]
        if what == "reward":
            group.trainings.append((job_id, step))
            self._start_training(sim, group)
        elif what == "train":
            group.training_busy = False
            sim.work(group.sync, job.sync_s[step], Tag("sync", job_id, step), kind="weight_sync", step=step,
                     job=job_id)
            self._start_training(sim, group)
        elif what == "sync":
            sim.end_step(job_id, step)
            if step + 1 < job.steps:
                group.rollouts.append((job_id, step + 1))
                self._start_rollouts(sim, group)
                return
            group.members.remove(job_id)
            if not group.members:  # the group's last job is done: its pools go back to the cluster
                group.closed = True
                sim.release(group.pool)
                sim.release(group.trainer_pool)
