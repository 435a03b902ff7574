"""rollpacker (RollPacker, arXiv 2509.21009): tail batching, training kept synchronous and on-policy.

Short rounds over-launch: eta x P0 prompts with eta x R0 responses each (eta = 1.25). A prompt completes with
its first R0 responses; the round ends as soon as P0 prompts have completed. Their surplus responses are
discarded, and every prompt that had not completed is aborted and queued as a *long* prompt. A long round
runs once at least P0 long prompts are queued, with no over-launch (P0 prompts x R0 responses), so its
responses can run to full length together instead of holding up every short round. Each round is one
training step on P0 x R0 samples.

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
from rltrace.replay.job import Job
from rltrace.replay.schedulers.base import register
from rltrace.replay.schedulers.common import REWARD, TRAIN, disaggregated_pools, spread
from rltrace.replay.simulator import Notice, Simulator

from rltrace.errors import ConfigError


@dataclass(frozen=True, kw_only=True, slots=True)
class RollPackerConfig:
    eta: float = 1.25
    """over-launch factor of short rounds (prompts and responses per prompt)"""
    prompts: int = 0
    """P0, prompts per training step (0: as recorded)"""
    responses: int = 0
    """R0, responses per prompt (0: as recorded)"""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.eta < 1:
            raise ConfigError(f"rollpacker eta must be >= 1, got {self.eta}")
        if self.prompts < 0 or self.responses < 0:
            raise ConfigError("rollpacker prompts and responses must be >= 0 (0: as recorded)")


@dataclass(slots=True)
class Prompt:
    """One prompt of the workload and what the current round did with it."""

    step: int
    responses: list[Response]
    """the recorded responses, the over-launch's extra ones last"""
    done: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Response:
    """One response's turns (a single-turn response has one): prompt and output tokens and the environment
    seconds before each turn."""

    prompt_tokens: list[int]
    output_tokens: list[int]
    env_s: list[float]


@dataclass(slots=True)
class Round:
    index: int
    long: bool
    prompts: list[Prompt]
    target: int
    """prompts that must complete"""
    start_s: float
    owner: dict[int, Prompt] = field(default_factory=dict)
    completed: list[Prompt] = field(default_factory=list)


@register("rollpacker")
class RollPacker:
    Config = RollPackerConfig

    def __init__(self, config: RollPackerConfig) -> None:
        self.config = config

    def start(self, sim: Simulator) -> None:
        job = sim.jobs[0]
        self.instances = disaggregated_pools(sim, job)
        prompts, r0 = self._prompts(sim, job)
        self.p0 = self.config.prompts or max(1, round(len(prompts) / job.steps))
        self.r0 = self.config.responses or r0
        self.fresh: deque[Prompt] = deque(prompts)
        self.long: deque[Prompt] = deque()
        self.tokens_per_step = self._recorded_tokens(sim, job)
        self.rounds = 0
        self._launch(sim)

    def _prompts(self, sim: Simulator, job: Job) -> tuple[list[Prompt], int]:
        """The workload's prompts in order, each with ceil(eta x R0) responses."""
        req, rng = sim.requests, np.random.default_rng(self.config.seed)
        by_prompt: dict[tuple[int, int], list[Response]] = {}
        for step in range(job.steps):
            for rid in job.starts(step):
                turns = [rid]
                while req.next_turn[turns[-1]] >= 0:
                    turns.append(req.next_turn[turns[-1]])
                response = Response([req.prompt[r] for r in turns], [req.output[r] for r in turns],
                                    [req.env_s[r] for r in turns])
                by_prompt.setdefault((step, req.group[rid]), []).append(response)
        r0 = self.config.responses or int(np.median([len(v) for v in by_prompt.values()]))
        want = math.ceil(self.config.eta * r0)
        prompts = []
        for (step, _), recorded in by_prompt.items():
            responses = (recorded * math.ceil(r0 / len(recorded)))[:r0]  # the first R0: as recorded
            extra = rng.choice(len(recorded), want - r0).tolist() if want > r0 else []
            prompts.append(Prompt(step, responses + [recorded[i] for i in extra]))
        return prompts, r0

    @staticmethod
    def _recorded_tokens(sim: Simulator, job: Job) -> list[int]:
        req = sim.requests
        return [sum(req.prompt[r] + req.output[r] for r in job.requests(s)) for s in range(job.steps)]

    def _launch(self, sim: Simulator) -> None:
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
        rnd = Round(self.rounds, long, chosen, target, sim.now)
        firsts: list[int] = []
        for i, p in enumerate(chosen):
            p.done = []
            for r in p.responses[:per_prompt]:
                new = sim.spawn(job.id, rnd.index, i, r.prompt_tokens, r.output_tokens,
                                r.env_s if len(r.env_s) > 1 else None)
                rnd.owner.update(dict.fromkeys(new, p))
                firsts.append(new[0])
        self.round = rnd
        spread(sim, self.instances, firsts)

    def on_event(self, sim: Simulator, notice: Notice) -> None:
        job, rnd = sim.jobs[0], self.round
        if notice.kind == "finished":
            next_turn = sim.requests.next_turn
            for rid in notice.requests:
                p = rnd.owner.get(rid)
                if p is None or len(p.done) >= self.r0 or next_turn[rid] >= 0:
                    continue  # a surplus response of a completed prompt, or a turn with more to come
                p.done.append(rid)
                if len(p.done) == self.r0:
                    rnd.completed.append(p)
            if len(rnd.completed) >= rnd.target and rnd.owner:
                self._end_round(sim, job, rnd)
            return
        what, _, step = notice.tag
        if what == REWARD:
            sim.work("trainer", self._train_seconds(job, step), (TRAIN, job.id, step), kind="train", step=step)
        elif what == TRAIN:
            sim.work("sync", job.sync_s[min(step, job.steps - 1)], ("sync", job.id, step), kind="weight_sync", step=step)
        else:
            sim.set_version(step + 1)
            sim.end_step(job.id, step)
            self.rounds += 1
            self._launch(sim)

    def _end_round(self, sim: Simulator, job: Job, rnd: Round) -> None:
        done = {rid for p in rnd.completed[: rnd.target] for rid in p.done}
        ends = {rid: rid for rid in rnd.owner}  # each request -> the last turn of its response
        for rid in sorted(rnd.owner, reverse=True):  # (a chain's turns have increasing ids)
            nxt = sim.requests.next_turn[rid]
            if nxt >= 0:
                ends[rid] = ends[nxt]
        batch = [rid for rid in rnd.owner if ends[rid] in done]
        keep = set(batch)
        rest = [rid for rid in rnd.owner if rid not in keep]
        sim.abort(rest)  # surplus responses and the unfinished prompts' partial work are dropped
        for p in rnd.prompts:
            if p not in rnd.completed[: rnd.target]:
                self.long.append(p)  # re-run later, from scratch, in a long round
        rnd.owner.clear()
        sim.mark("rollpacker", "long_round" if rnd.long else "short_round", rnd.index, rnd.start_s, sim.now)
        step = rnd.index
        sim.consume(job.id, step, batch, version=step)
        self._batch_tokens = sum(sim.requests.prompt[r] + sim.requests.output[r] for r in batch)
        recorded = job.reward_s[min(step, job.steps - 1)]
        sim.work("reward", recorded, (REWARD, job.id, step), kind="reward", step=step)

    def _train_seconds(self, job: Job, step: int) -> float:
        """The recorded step's trainer time, scaled by this round's tokens over the recorded step's."""
        recorded = min(step, job.steps - 1)
        return job.trainer_seconds(recorded) * self._batch_tokens / max(self.tokens_per_step[recorded], 1)
