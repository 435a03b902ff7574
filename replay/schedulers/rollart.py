"""rollart (RollArt, arXiv 2512.22560): hardware affinity, trajectory-level asynchrony, serverless reward.

- **Hardware-affinity mapping.** Generation runs on two pools from the same GPU budget: the cluster's
  generation GPUs (bandwidth-rich, e.g. H20) and ``prefill_gpus`` compute-rich GPUs (``prefill_gpu``, e.g.
  H800). Each turn goes where it is estimated to finish first: its prefill on that GPU kind (nothing for the
  part of its context cached on the instance that ran its previous turn), then the median output of the last
  B finished turns (before any has finished: ``prior_tokens``, or half the job's length cap; the turn's own
  length with ``oracle``) at that instance's decode speed for its batch, times the rounds its queue implies.
  Prefill-heavy turns (a multi-turn trajectory's growing context) thus gain the compute-rich GPUs and decode-heavy
  ones the bandwidth-rich, without starving either pool. Environment work runs on CPU workers (the engine's "env"
  resource, one lane per trajectory).
- **Trajectory-level asynchrony.** There are no rollout phases: trajectories start as soon as the version gap
  allows, and the trainer takes the first B finished trajectories (B = a recorded step's trajectories) as
  one training step. Weights are updated between turns, so a trajectory may span versions. A trajectory
  may start at most ``alpha`` batches ahead of the trainer (``alpha = 0`` is synchronous: the next batch
  generates after the weight sync), and one whose first turn's weights fall more than ``alpha`` versions
  behind (still running, or finished and waiting for the trainer) is aborted and run again from its first
  turn. The new run is a new response to the same prompt: it takes the lengths and environment times of
  the next recorded trajectory of that prompt (rotating on each rerun), not the aborted one's again, which
  would keep a straggler a straggler. Past the recorded trajectories, new ones are drawn the same way (the
  record's prompts again, in order) until training ends, so the last step takes the first B to finish, as a
  real run's would, not every straggler left in the record.
- **Statefulness-aware computation.** Reward is stateless and runs on an elastic serverless pool: every
  trajectory is scored at once when its last turn finishes (no queue), billed per second of use
  (``serverless_reward = false``: one reward worker, FIFO, as the baselines have).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass

from rltrace.replay.costmodels.generation import GenerationCost, RooflineGeneration
from rltrace.replay.entities.instance import GenerationInstance
from rltrace.replay.entities.requests import State
from rltrace.replay.events import Notice, NoticeKind, Tag
from rltrace.replay.job import Job
from rltrace.replay.schedulers.base import Capabilities, register
from rltrace.replay.schedulers.common import answer_again, siblings
from rltrace.replay.schedulers.predict import RecentLengths, prior_tokens
from rltrace.replay.schedulers.view import View

from rltrace.catalog import get_gpu
from rltrace.errors import ConfigError
from rltrace.limits import MAX_REQUESTS

# AWS Lambda on x86: $0.0000166667 per GB-second (aws.amazon.com/lambda/pricing, 2025); a 2 GB reward function.
SERVERLESS_USD_PER_S = 2 * 0.0000166667


@dataclass(frozen=True, kw_only=True, slots=True)
class RollArtConfig:
    prefill_gpu: str = "H800"
    """compute-rich GPU kind for prefill-heavy turns"""
    prefill_gpus: int = -1
    """GPUs of ``prefill_gpu`` taken from the generation budget (-1: half of it; 0: no affinity pool)"""
    alpha: int = 1
    """version gap: trajectories run at most alpha versions behind the trainer"""
    serverless_reward: bool = True
    reward_usd_per_s: float = SERVERLESS_USD_PER_S
    prior_tokens: int = 0
    """a turn's output assumed before any has finished (0: half the job's length cap)"""
    oracle: bool = False
    """place each turn by its true output length (an upper bound; the metrics say so)"""

    def __post_init__(self) -> None:
        if self.alpha < 0 or self.prefill_gpus < -1 or self.reward_usd_per_s < 0 or self.prior_tokens < 0:
            raise ConfigError("rollart: alpha >= 0, prefill_gpus >= -1, reward_usd_per_s >= 0, prior_tokens >= 0")


@dataclass(slots=True)
class Trajectory:
    step: int
    """the recorded step it comes from (its reward time share)"""
    turns: list[int]
    """its requests so far, first turn first"""
    version: int
    """the weights its first turn started under"""
    origin: int = -1
    """the recorded first turn it runs (again), -1: its own"""


@register("rollart")
class RollArt:
    Config = RollArtConfig
    capabilities = Capabilities(places_turns=True)  # each turn goes where it is estimated to finish first

    def __init__(self, config: RollArtConfig) -> None:
        self.config = config

    def start(self, sim: View) -> None:
        job, c, cfg = sim.jobs[0], sim.cluster, self.config
        affinity = c.gen_gpus // 2 if cfg.prefill_gpus < 0 else cfg.prefill_gpus
        affinity -= affinity % c.tp
        if affinity >= c.gen_gpus:
            raise ConfigError(f"rollart: prefill_gpus ({affinity}) must leave generation GPUs "
                              f"(of {c.gen_gpus}) for decode-heavy turns")
        sim.allocate("generation", c.gen_gpus - affinity, c.gen_gpu)
        self.decode = [sim.add_instance("generation", c.tp, job.generation)
                       for _ in range((c.gen_gpus - affinity) // c.tp)]
        self.prefill: list[GenerationInstance] = []
        if affinity:
            sim.allocate("generation/prefill", affinity, cfg.prefill_gpu)
            cost = self._cost_on(job.generation, cfg.prefill_gpu)
            self.prefill = [sim.add_instance("generation/prefill", c.tp, cost, name=f"prefill/instance{i}")
                            for i in range(affinity // c.tp)]
        sim.allocate("training", c.train_gpus, c.train_gpu)
        sim.add_resource("trainer", "training", gpus=c.train_gpus)
        sim.add_resource("sync", "network")
        if cfg.serverless_reward:
            sim.add_resource("reward", "serverless", slots=0, usd_per_s=cfg.reward_usd_per_s)
        else:
            sim.add_resource("reward", "cpu")
        self.batch = len(job.starts(0))
        if self.batch * cfg.alpha > MAX_REQUESTS:  # alpha 100,000 grew without end at 0 events
            raise ConfigError(f"rollart alpha {cfg.alpha:,} starts {self.batch * cfg.alpha:,} trajectories ahead of "
                              f"the trainer, above the {MAX_REQUESTS:,} requests a replay holds")
        self.heads = [head for s in range(job.steps) for head in job.starts(s)]  # recorded trajectories, in order
        self.queue: deque[int] = deque(self.heads)  # not started yet
        self.prompt_heads = siblings(sim, job)  # (step, prompt) -> its recorded trajectories
        self.reruns: dict[int, int] = {}  # recorded first turn -> times its trajectory ran again
        self.extra = 0  # trajectories drawn past the record
        self.of: dict[int, Trajectory] = {}  # request -> its trajectory
        self.before: dict[int, int] = {}  # a later turn -> the turn before it
        self.done: deque[Trajectory] = deque()  # scored, waiting for the trainer
        self.recent = RecentLengths(self.batch, prior_tokens(cfg.prior_tokens, job.max_new_tokens), job.max_new_tokens)
        self.oracle = sim.oracle() if cfg.oracle else None
        self.launched = self.trained = self.version = 0
        self.training = False
        self._launch(sim)

    @staticmethod
    def _cost_on(cost: GenerationCost, gpu: str) -> GenerationCost:
        """The generation cost on another GPU kind (a trace-fitted cost has no GPU to swap: kept as it is)."""
        if isinstance(cost, RooflineGeneration):
            return dataclasses.replace(cost, gpu=get_gpu(gpu))
        return cost

    # ---- placement -----------------------------------------------------------------------------------------

    def _place(self, sim: View, rid: int, previous: GenerationInstance | None) -> None:
        """Hardware affinity: the instance, of either GPU kind, where the turn is estimated to finish first."""
        req = sim.requests
        output = self.oracle.output(rid) if self.oracle is not None else self.recent.median()
        prompt = req.prompt[rid]
        before = self.before.get(rid)  # the previous turn's context sits in its instance's prefix cache
        cached = min(req.prompt[before] + req.output[before], prompt) if before is not None else 0

        def finish_s(inst: GenerationInstance) -> float:
            queued = inst.load + 1  # (load counts the waiting requests already)
            batch = min(queued, inst.max_seqs)
            rounds = -(-queued // inst.max_seqs)
            new = prompt - cached if inst is previous else prompt
            decode = inst.cost.iteration_model(inst.tp).seconds(batch, batch * (prompt + output / 2), int(output))
            return inst.cost.prefill_seconds(new, 1, inst.tp) + decode * rounds

        target = min(self.decode + self.prefill, key=lambda i: (finish_s(i), i.id))
        if target in self.prefill:
            sim.extra["prefill_pool_turns"] = sim.extra.get("prefill_pool_turns", 0) + 1
        sim.submit(target, [rid])

    def _launch(self, sim: View) -> None:
        """Start trajectories while the version gap allows (at most alpha batches ahead of the trainer)."""
        limit = self.batch * (self.version + 1 + self.config.alpha)
        while self.launched < limit:
            self.launched += 1
            if self.queue:
                head = self.queue.popleft()
                self.of[head] = Trajectory(int(sim.requests.step[head]), [head], self.version)
                self._place(sim, head, None)
            else:  # past the recorded trajectories: a real run keeps drawing prompts until training ends
                self._run_again(sim, self.heads[self.extra % len(self.heads)])
                self.extra += 1

    # ---- events --------------------------------------------------------------------------------------------

    def on_event(self, sim: View, notice: Notice) -> None:
        job, req = sim.jobs[0], sim.requests
        if notice.kind is NoticeKind.FINISHED:
            for rid in notice.requests:
                self.recent.observe(req.output[rid])
                t = self.of.get(rid)
                if t is not None and req.next_turn[rid] < 0:  # its last turn: score it
                    share = job.reward_s[t.step] / max(len(job.starts(t.step)), 1)
                    sim.work("reward", share, Tag("reward", item=rid), kind="reward", step=t.step, item=rid)
        elif notice.kind is NoticeKind.TURN:
            rid = notice.requests[0]
            t = self.of.get(notice.tag.item)  # the trajectory of the turn before it
            if t is not None:
                t.turns.append(rid)
                self.of[rid] = t
                self.before[rid] = notice.tag.item
                self._place(sim, rid, notice.instance)
        elif notice.tag.what == "reward":
            t = self.of.get(notice.tag.item)
            if t is not None:
                self.done.append(t)
            self._train(sim, job)
        elif notice.tag.what == "train":
            step = notice.tag.step
            sim.work("sync", job.sync_s[step % job.steps], Tag("sync", step=step), kind="weight_sync", step=step)
        elif notice.tag.what == "sync":
            self._synced(sim, job, notice.tag.step)

    def _train(self, sim: View, job: Job) -> None:
        """Book a training step on the first B scored trajectories, when the trainer is free."""
        if self.training or len(self.done) < self.batch or self.trained >= job.steps:
            return
        batch = [self.done.popleft() for _ in range(self.batch)]
        step = self.trained
        rids = [r for t in batch for r in t.turns]
        for rid in rids:
            del self.of[rid]
            self.before.pop(rid, None)
        sim.consume(job.id, step, rids, version=self.version)
        self.training = True
        recorded = step % job.steps
        sim.work("trainer", job.trainer_seconds(recorded), Tag("train", step=step), kind="train", step=step)

    def _synced(self, sim: View, job: Job, step: int) -> None:
        self.training = False
        self.trained += 1
        self.version = step + 1
        sim.set_version(self.version)
        sim.end_step(job.id, step)
        if self.trained >= job.steps:
            sim.stop()
            return
        self._abort_stale(sim)
        self._launch(sim)
        self._train(sim, job)

    def _run_again(self, sim: View, origin: int) -> None:
        """A new response to ``origin``'s prompt: the turns of that prompt's next recorded trajectory (rotating
        on each run), started now under the current weights."""
        self.reruns[origin] = self.reruns.get(origin, 0) + 1
        first = answer_again(sim, self.prompt_heads, origin, self.reruns[origin])
        self.of[first] = Trajectory(int(sim.requests.step[origin]), [first], self.version, origin)
        self._place(sim, first, None)

    def _abort_stale(self, sim: View) -> None:
        """Trajectories whose first turn's weights lag more than alpha versions are aborted and run again,
        whether still running or finished and waiting for the trainer."""
        oldest = self.version - self.config.alpha
        stale = {id(t): t for t in self.of.values() if t.version < oldest}
        self.done = deque(t for t in self.done if t.version >= oldest)
        for inst in self.decode + self.prefill:
            sim.requests_on(inst)  # brings each instance to now: a planned drain may run ahead of it
        state = sim.requests.state
        for t in stale.values():
            # Each turn of an aborted trajectory was running (an "aborted" span), queued (never started: an
            # aborted attempt without a span) or finished (its span stays; the work is thrown away); a next
            # turn still waiting on its environment is none of them.
            running = sum(state[r] == State.RUNNING for r in t.turns)
            queued = sum(state[r] == State.WAITING for r in t.turns)
            finished = sum(state[r] == State.FINISHED for r in t.turns)
            sim.abort(t.turns)
            for rid in t.turns:
                self.of.pop(rid, None)
            sim.mark("rollart", "stale_abort", t.step, sim.now, sim.now, item=t.turns[0])
            for key, n in (("stale_aborts", 1), ("stale_running_turns", running), ("stale_queued_turns", queued),
                           ("stale_finished_turns", finished)):
                sim.extra[key] = sim.extra.get(key, 0) + n
            self._run_again(sim, t.origin if t.origin >= 0 else t.turns[0])
