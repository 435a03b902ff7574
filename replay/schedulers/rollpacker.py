"""rollpacker (RollPacker, arXiv 2509.21009): tail batching, training kept synchronous and on-policy.

Short rounds over-launch: eta x P0 prompts with eta x R0 responses each (eta = 1.25). A prompt completes with
its first R0 responses; the round ends as soon as P0 prompts have completed. Their surplus responses are
discarded, and every prompt that had not completed is aborted and queued as a *long* prompt. A long round
runs once at least P0 long prompts are queued, with no over-launch (P0 prompts x R0 responses), so its
responses can run to full length together instead of holding up every short round. Each round is one
training step on P0 x R0 samples.

Two co-designs, each off by default:

- **TP planner** (``tp_planner``): after a round whose preemptions rose above ``tp_rise`` (1.05) x the
  previous round's, the next round runs at twice the TP (half as many instances, more KV cache each: the
  weights are stored once per instance); after ``tp_calm_rounds`` (4) rounds without a preemption, half the
  TP again. A change reloads the new weight shards from host memory (``reload_seconds``).
- **Stream trainer** (``stream_trainer``): once ``stream_from`` (20%) to ``stream_until`` (50%) of a round's
  responses are done and the KV cache of half the instances holds what all of them cache now, the other half
  moves to training (a warm training switch, RollMux's measurement): their in-flight requests migrate by
  recompute, and they train on the samples of completed prompts (GRPO needs a prompt's group whole) as they
  arrive (at their peak bf16 FLOP/s relative to a training GPU's). After the round the trainers finish the
  rest with those GPUs added; the GPUs return to rollout (a warm rollout switch) when the next round starts.

A prompt's responses are the recorded ones (the extra eta share drawn, seeded, from the same prompt's
recorded responses): re-running a long prompt regenerates the same lengths from scratch. On a multi-turn
workload a response is a whole trajectory (its turns with the environment work between them), complete when
its last turn finishes.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from rltrace.replay.costmodels.switching import job_state, reload_seconds, switch_seconds
from rltrace.replay.entities.instance import KV_WATERMARK
from rltrace.replay.events import Notice, NoticeKind, Tag
from rltrace.replay.job import Job
from rltrace.replay.schedulers.base import register
from rltrace.replay.schedulers.common import REWARD, TRAIN, disaggregated_pools, splits, spread
from rltrace.replay.schedulers.view import View

from rltrace.catalog import get_gpu
from rltrace.errors import ConfigError
from rltrace.limits import MAX_PER_STEP, MAX_SEED, check_int


@dataclass(frozen=True, kw_only=True, slots=True)
class RollPackerConfig:
    eta: float = 1.25
    """over-launch factor of short rounds (prompts and responses per prompt)"""
    prompts: int = 0
    """P0, prompts per training step (0: as recorded)"""
    responses: int = 0
    """R0, responses per prompt (0: as recorded)"""
    seed: int = 0
    tp_planner: bool = False
    """double TP after a round whose preemptions rose, halve it after calm rounds"""
    tp_rise: float = 1.05
    """preemptions above this x the previous round's double TP (RollPacker's threshold)"""
    tp_calm_rounds: int = 4
    """rounds without a preemption before TP is halved"""
    max_tp: int = 8
    stream_trainer: bool = False
    """move half the rollout GPUs to training in a round's tail"""
    stream_from: float = 0.2
    """share of a round's responses done before the stream trainer may start"""
    stream_until: float = 0.5
    """... and after which it no longer starts"""

    def __post_init__(self) -> None:
        check_int("rollpacker seed", self.seed, 0, MAX_SEED)  # numpy's generator refused a negative one in a traceback
        if self.eta < 1:
            raise ConfigError(f"rollpacker eta must be >= 1, got {self.eta}")
        if self.prompts < 0 or self.responses < 0:
            raise ConfigError("rollpacker prompts and responses must be >= 0 (0: as recorded)")
        if self.tp_rise < 1 or self.tp_calm_rounds < 1 or self.max_tp < 1:
            raise ConfigError("rollpacker needs tp_rise >= 1, tp_calm_rounds >= 1 and max_tp >= 1")
        if not 0 <= self.stream_from <= self.stream_until <= 1:
            raise ConfigError("rollpacker needs 0 <= stream_from <= stream_until <= 1")


@dataclass(slots=True)
class Prompt:
    """One prompt of the workload and what the current round did with it."""

    step: int
    responses: list[Response]
    """the recorded responses, the over-launch's extra ones last"""
    done: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Response:
    """One recorded response (a whole trajectory on a multi-turn workload), by its first turn: running it
    again regenerates its lengths (``View.rerun``), which the scheduler does not see until they finish."""

    head: int


@dataclass(slots=True)
class Round:
    index: int
    long: bool
    prompts: list[Prompt]
    target: int
    """prompts that must complete"""
    start_s: float
    owner: dict[int, Prompt] = field(default_factory=dict)
    turns: dict[int, range] = field(default_factory=dict)
    """a response's last turn -> all its turns"""
    completed: list[Prompt] = field(default_factory=list)
    responses: int = 0
    """responses launched"""
    finished: int = 0
    """responses finished (their last turn)"""


@dataclass(slots=True)
class Stream:
    """GPUs lent from rollout to training for the rest of a round."""

    gpus: float
    """in training GPUs' worth (an H20 trains at 148 / 989 of an H800's peak)"""
    from_s: float
    """when they can train (after the switch)"""


def _training_speed(sim: View) -> float:
    """A generation GPU's training speed relative to a training GPU's (peak bf16 FLOP/s; 1 if uncatalogued)."""
    c = sim.cluster
    try:
        return get_gpu(c.gen_gpu).flops / get_gpu(c.train_gpu).flops
    except ConfigError:
        return 1.0


@register("rollpacker")
class RollPacker:
    Config = RollPackerConfig

    def __init__(self, config: RollPackerConfig) -> None:
        self.config = config

    def start(self, sim: View) -> None:
        job = sim.jobs[0]
        self.instances = disaggregated_pools(sim, job)
        prompts, r0 = self._prompts(sim, job)
        self.p0 = self.config.prompts or max(1, round(len(prompts) / job.steps))
        self.r0 = self.config.responses or r0
        launched = math.ceil(self.config.eta * self.p0) * math.ceil(self.config.eta * self.r0)
        if launched > MAX_PER_STEP:  # responses = 100,000 was a kernel OOM kill
            raise ConfigError(f"rollpacker launches {launched:,} responses a round (eta {self.config.eta:g} x "
                              f"{self.p0:,} prompts x {self.r0:,} responses), above the {MAX_PER_STEP:,} a step holds")
        self.fresh: deque[Prompt] = deque(prompts)
        self.long: deque[Prompt] = deque()
        self.rounds = 0
        self.tp = self.next_tp = sim.cluster.tp
        self.preemptions, self.calm = 0, 0
        self.stream: Stream | None = None
        self.lent = 0  # instances lent to training, returned at the next launch
        self._launch(sim)

    def _prompts(self, sim: View, job: Job) -> tuple[list[Prompt], int]:
        """The workload's prompts in order, each with ceil(eta x R0) responses."""
        req, rng = sim.requests, np.random.default_rng(self.config.seed)
        by_prompt: dict[tuple[int, int], list[Response]] = {}
        for step in range(job.steps):
            for rid in job.starts(step):
                by_prompt.setdefault((step, req.group[rid]), []).append(Response(rid))
        r0 = self.config.responses or int(np.median([len(v) for v in by_prompt.values()]))
        want = math.ceil(self.config.eta * r0)
        prompts = []
        for (step, _), recorded in by_prompt.items():
            responses = (recorded * math.ceil(r0 / len(recorded)))[:r0]  # the first R0: as recorded
            extra = rng.choice(len(recorded), want - r0).tolist() if want > r0 else []
            prompts.append(Prompt(step, responses + [recorded[i] for i in extra]))
        return prompts, r0

    def _launch(self, sim: View) -> None:
        job = sim.jobs[0]
        if self.rounds >= job.steps:
            return
        long = len(self.long) >= self.p0 or (not self.fresh and bool(self.long))
        if long:
            chosen = [self.long.popleft() for _ in range(min(self.p0, len(self.long)))]
            per_prompt, target = self.r0, len(chosen)
        else:
            chosen = [self.fresh.popleft() for _ in range(min(math.ceil(self.config.eta * self.p0), len(self.fresh)))]
            per_prompt, target = math.ceil(self.config.eta * self.r0), min(self.p0, len(chosen))
        if not chosen:
            return  # the workload's prompts are used up
        self._restore(sim, job)
        rnd = Round(self.rounds, long, chosen, target, sim.now)
        firsts: list[int] = []
        for i, p in enumerate(chosen):
            p.done = []
            for r in p.responses[:per_prompt]:
                new = sim.rerun(r.head, step=rnd.index, group=i)
                rnd.owner.update(dict.fromkeys(new, p))
                rnd.turns[new[-1]] = new
                firsts.append(new[0])
        rnd.responses = len(firsts)
        self.round = rnd
        spread(sim, self.instances, firsts)

    def on_event(self, sim: View, notice: Notice) -> None:
        job, rnd = sim.jobs[0], self.round
        if notice.kind is NoticeKind.FINISHED:
            next_turn = sim.requests.next_turn
            for rid in notice.requests:
                p = rnd.owner.get(rid)
                if p is None or next_turn[rid] >= 0:
                    continue  # a turn with more to come
                rnd.finished += 1
                if len(p.done) >= self.r0:
                    continue  # a surplus response of a completed prompt
                p.done.append(rid)
                if len(p.done) == self.r0:
                    rnd.completed.append(p)
            if len(rnd.completed) >= rnd.target and rnd.owner:
                self._end_round(sim, job, rnd)
            elif self.config.stream_trainer and self.stream is None and rnd.owner:
                self._maybe_stream(sim, job, rnd)
            return
        what, step = notice.tag.what, notice.tag.step
        if what == REWARD:
            sim.work("trainer", self._train_s, Tag(TRAIN, job.id, step), kind="train", step=step)
        elif what == TRAIN:
            sim.work("sync", job.sync_s[min(step, job.steps - 1)], Tag("sync", job.id, step), kind="weight_sync",
                     step=step)
        else:
            sim.set_version(step + 1)
            sim.end_step(job.id, step)
            self.rounds += 1
            self._launch(sim)

    def _end_round(self, sim: View, job: Job, rnd: Round) -> None:
        keep = {rid for p in rnd.completed[: rnd.target] for last in p.done for rid in rnd.turns[last]}
        batch = [rid for rid in rnd.owner if rid in keep]
        rest = [rid for rid in rnd.owner if rid not in keep]
        self._plan_tp(sim, rnd)
        sim.abort(rest)  # surplus responses and the unfinished prompts' partial work are dropped
        for p in rnd.prompts:
            if p not in rnd.completed[: rnd.target]:
                self.long.append(p)  # re-run later, from scratch, in a long round
        rnd.owner.clear()
        rnd.turns.clear()
        sim.mark("rollpacker", "long_round" if rnd.long else "short_round", rnd.index, rnd.start_s, sim.now)
        step = rnd.index
        sim.consume(job.id, step, batch, version=step)
        recorded = min(step, job.steps - 1)
        self._train_s = sim.train_seconds(job, recorded, batch)
        if self.stream is not None:
            self._train_s = self._streamed(sim, rnd, self._train_s)
        sim.work("reward", job.reward_s[recorded], Tag(REWARD, job.id, step), kind="reward", step=step)

    # ---- TP planner ----------------------------------------------------------------------------------------

    def _plan_tp(self, sim: View, rnd: Round) -> None:
        """Choose the next round's TP from this round's preemptions."""
        if not self.config.tp_planner:
            return
        count = sum(sim.requests.preemptions[r] for r in rnd.owner)
        c, tp = sim.cluster, self.tp
        if count > self.config.tp_rise * self.preemptions:
            up = 2 * tp
            if up <= min(self.config.max_tp, c.gen_gpus) and not c.gen_gpus % up and splits(sim.jobs[0].generation, up):
                self.next_tp = up
        elif count == 0:
            self.calm += 1
            if self.calm >= self.config.tp_calm_rounds and tp > c.tp:
                self.next_tp, self.calm = tp // 2, 0
        if count:
            self.calm = 0
        self.preemptions = count

    def _set_tp(self, sim: View, job: Job, tp: int) -> None:
        """Regroup the (idle) generation pool into instances of ``tp`` GPUs."""
        n = sim.cluster.gen_gpus // tp
        for inst in self.instances[n:]:
            sim.retire(inst)
        self.instances = self.instances[:n]
        for inst in self.instances:
            sim.reconfigure(inst, tp=tp, switch_s=reload_seconds(inst.cost, tp))
        while len(self.instances) < n:
            inst = sim.add_instance("generation", tp, job.generation)
            sim.reconfigure(inst, switch_s=reload_seconds(inst.cost, tp))
            self.instances.append(inst)
        key = "tp_doublings" if tp > self.tp else "tp_halvings"
        sim.extra[key] = sim.extra.get(key, 0) + 1
        self.tp = tp

    def _restore(self, sim: View, job: Job) -> None:
        """Before a round: lent GPUs back to rollout, and the TP the planner chose."""
        if self.lent:
            back = switch_seconds(job_state(job), "rollout", sim.cluster.gen_gpu, tp=self.tp,
                                  calibration=job.calibration)
            for _ in range(self.lent):
                inst = sim.add_instance("generation", self.tp, job.generation)
                sim.reconfigure(inst, switch_s=back)
                self.instances.append(inst)
            self.lent, self.stream = 0, None
        if self.next_tp != self.tp:
            self._set_tp(sim, job, self.next_tp)

    # ---- stream trainer ------------------------------------------------------------------------------------

    def _maybe_stream(self, sim: View, job: Job, rnd: Round) -> None:
        """In the stream window, lend half the instances to training if the other half can cache it all."""
        done = rnd.finished / max(rnd.responses, 1)
        if not self.config.stream_from <= done <= self.config.stream_until or len(self.instances) < 2:
            return
        on = {inst.id: sim.requests_on(inst) for inst in self.instances}  # (brings every instance to now)
        ranked = sorted(self.instances, key=lambda i: -i.load)
        keep, lend = ranked[: math.ceil(len(ranked) / 2)], ranked[math.ceil(len(ranked) / 2):]
        cached = sum(i.kv_tokens() for i in self.instances)
        if cached > sum(i.kv_capacity for i in keep) * (1 - KV_WATERMARK):
            return
        for k, inst in enumerate(lend):
            sim.migrate(on[inst.id], keep[k % len(keep)])
            sim.retire(inst)
        self.instances = keep
        self.lent = len(lend)
        switch = switch_seconds(job_state(job), "training", sim.cluster.gen_gpu, gpus=len(lend) * self.tp,
                                calibration=job.calibration)
        self.stream = Stream(len(lend) * self.tp * _training_speed(sim), sim.now + switch)
        sim.extra["stream_trainer_rounds"] = sim.extra.get("stream_trainer_rounds", 0) + 1

    def _streamed(self, sim: View, rnd: Round, train_s: float) -> float:
        """Trainer seconds left after the lent GPUs trained, from their switch to now, on the samples of
        prompts as each completed (a FIFO server; work in proportion to tokens)."""
        assert self.stream is not None
        req, gpus, lent = sim.requests, sim.cluster.train_gpus, self.stream
        prompts = rnd.completed[: rnd.target]
        ready = np.array([max(max(req.finish_s[r] for r in p.done), lent.from_s) for p in prompts])
        tokens = np.array([sum(req.prompt[r] + req.output[r] for r in p.done) for p in prompts], dtype=float)
        order = np.argsort(ready, kind="stable")
        ready, work = ready[order], train_s * gpus * tokens[order] / tokens.sum()  # GPU-seconds
        busy = work / lent.gpus  # seconds on the lent GPUs
        spent = np.cumsum(busy)
        ends = spent + np.maximum.accumulate(ready - (spent - busy))  # FIFO: c_i = max(c_(i-1), a_i) + s_i
        starts = ends - busy
        done = np.clip(sim.now - starts, 0.0, busy)
        early = float(done.sum() * lent.gpus)
        worked = done > 1e-9  # (not a prompt that completed with the round, a rounding error before now)
        if worked.any():  # one span, from the first sample to the last (idle gaps between prompts included)
            last = float((starts + done)[worked].max())
            sim.mark("stream_trainer", "stream_train", rnd.index, float(starts[0]), last)
        sim.extra["stream_trained_gpu_s"] = sim.extra.get("stream_trained_gpu_s", 0.0) + early
        return (train_s * gpus - early) / (gpus + lent.gpus)
