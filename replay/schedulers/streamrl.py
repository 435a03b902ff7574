"""streamrl (StreamRL, arXiv 2504.15930): stream generation, skewness-aware dispatch, stage balancing.

- **Stream generation.** Each finished sample goes to the trainer at once: its reward starts on arrival, and
  training runs in micro-batches as soon as enough samples are in (dynamic-batch pipelining), so only the
  last micro-batch waits for the long tail. ``mode="sync"`` keeps training on-policy (the next step generates
  after the weight sync); ``mode="async"`` is one-step off-policy: step k+1 generates while step k trains,
  and the weight transfer overlaps training.
- **Skewness-aware dispatch.** An output-length ranker marks the predicted longest ``long_fraction`` (20%)
  of a step's samples as long-tail, with ``recall`` on the true longest 20% (the paper measured 87%; a
  :class:`~.predict.LongTailRanker`), or exactly with ``oracle``. Long-tail samples are estimated at the P90
  of the lengths of the last two steps' worth of finished samples, the rest at the P50 (before any has
  finished: ``prior_tokens``, or half the job's length cap, as the P50 and the cap as the P90); an
  instance's time is the per-token latency at its batch size x length x decode rounds. Every split of the
  instances between long-tail and regular is tried and the one with the least time kept; within an instance
  the ranker's order is kept: longest first for the oracle, none (random) for a ranker that only marks.
- **Stage balancing** (``balance``): the generation/training split of all the GPUs that minimises
  max(T_gen, T_train); ``dynamic`` then moves one replica's GPUs from training to generation after a step
  whose generation outlasted training by more than that replica would save.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from rltrace.replay.events import Notice, NoticeKind, Tag
from rltrace.replay.job import Job
from rltrace.replay.schedulers.base import register
from rltrace.replay.schedulers.predict import RecentLengths, prior_tokens
from rltrace.replay.schedulers.view import View

from rltrace.errors import ConfigError
from rltrace.limits import MAX_SEED, check_int

PAPER_RECALL = 0.87  # StreamRL's ranker: recall on the longest 20% of samples (arXiv 2504.15930)


@dataclass(frozen=True, kw_only=True, slots=True)
class StreamRLConfig:
    mode: str = "async"
    """"sync" (on-policy) or "async" (one-step off-policy)"""
    recall: float = PAPER_RECALL
    """the ranker's accuracy: share of the true long tail it marks"""
    oracle: bool = False
    """rank by the true lengths (an upper bound no real ranker reaches; the metrics say so)"""
    prior_tokens: int = 0
    """median output assumed before any sample has finished (0: half the job's length cap)"""
    long_fraction: float = 0.2
    microbatches: int = 8
    """training micro-batches per step"""
    balance: bool = False
    dynamic: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("streamrl seed", self.seed, 0, MAX_SEED)  # numpy's generator refused a negative one in a traceback
        if self.mode not in ("sync", "async"):
            raise ConfigError("streamrl: mode is sync or async")
        if (not 0 <= self.recall <= 1 or not 0 < self.long_fraction < 1 or self.microbatches < 1
                or self.prior_tokens < 0):
            raise ConfigError(
                "streamrl: recall in [0, 1], long_fraction in (0, 1), microbatches >= 1, prior_tokens >= 0")


@register("streamrl")
class StreamRL:
    Config = StreamRLConfig

    def __init__(self, config: StreamRLConfig) -> None:
        self.config = config

    # ---- layout ---------------------------------------------------------------------------------------------

    def start(self, sim: View) -> None:
        job, c = sim.jobs[0], sim.cluster
        cfg = self.config
        self.ranker = sim.oracle() if cfg.oracle else sim.ranker(recall=cfg.recall, seed=cfg.seed)
        # Recent lengths of finished samples (two steps' worth)
        self.history = RecentLengths(2 * len(job.requests(0)), prior_tokens(cfg.prior_tokens, job.max_new_tokens),
                                     job.max_new_tokens)
        gen_gpus, train_gpus = c.gen_gpus, c.train_gpus
        if self.config.balance:
            gen_gpus, train_gpus = self._balance(sim, job, c.gen_gpus + c.train_gpus)
            sim.extra["gen_gpus"] = gen_gpus
        sim.allocate("generation", gen_gpus, c.gen_gpu)
        sim.allocate("training", train_gpus, c.train_gpu)
        self.train_gpus = train_gpus
        sim.add_resource("trainer", "training", gpus=train_gpus)
        sim.add_resource("reward", "cpu")
        sim.add_resource("sync", "network")
        self.instances = [sim.add_instance("generation", c.tp, job.generation) for _ in range(gen_gpus // c.tp)]
        self.ready: dict[int, int] = {}  # step -> rewarded samples not yet booked for training
        self.booked: dict[int, int] = {}  # step -> samples booked for training
        self.generated: dict[int, int] = {}
        self.gen_span: dict[int, tuple[float, float]] = {}
        self.version = 0
        self.launched = -1
        self.gen_done = -1
        self._launch(sim)

    def _train_scale(self, sim: View, gpus: int) -> float:
        return sim.cluster.train_gpus / gpus  # measured trainer time scales with training GPUs

    def _balance(self, sim: View, job: Job, total: int) -> tuple[int, int]:
        """The split of ``total`` GPUs minimising max(estimated generation, training) of step 0."""
        tp, best = sim.cluster.tp, None
        for gen in range(tp, total, tp):
            t_gen = self._estimate_step(sim, job, 0, gen // tp)
            t_train = job.trainer_seconds(0) * sim.cluster.train_gpus / (total - gen)
            if best is None or max(t_gen, t_train) < best[0]:
                best = (max(t_gen, t_train), gen)
        assert best is not None
        return best[1], total - best[1]

    # ---- skewness-aware dispatch --------------------------------------------------------------------------

    def _predict_long(self, rids: list[int]) -> np.ndarray:
        """Boolean mask over ``rids``: predicted long-tail."""
        return self.ranker.long_tail(rids, self.config.long_fraction)

    def _time(self, sim: View, job: Job, count: int, length: float, n: int) -> float:
        """Per-token latency at the instance's batch x length x decode rounds, for ``count`` samples on ``n``."""
        if count == 0 or n == 0:
            return 0.0 if count == 0 else math.inf
        per = count / n
        batch = max(1, min(sim.max_seqs, math.ceil(per)))
        rounds = math.ceil(per / sim.max_seqs)
        model = job.generation.iteration_model(sim.cluster.tp)
        return model.iteration(batch, batch * length / 2) * length * rounds

    def _estimate_step(self, sim: View, job: Job, step: int, n_inst: int) -> float:
        rids = list(job.requests(step))
        long = self._predict_long(rids)
        p50, p90 = self.history.quantiles([50, 90])
        return min(max(self._time(sim, job, int(long.sum()), p90, m),
                       self._time(sim, job, int((~long).sum()), p50, n_inst - m))
                   for m in range(1, n_inst)) if n_inst > 1 else self._time(sim, job, len(rids), p90, 1)

    def _dispatch(self, sim: View, job: Job, rids: list[int]) -> None:
        n_inst = len(self.instances)
        long = self._predict_long(rids)
        p50, p90 = self.history.quantiles([50, 90])
        n_long, n_reg = int(long.sum()), int((~long).sum())
        if n_inst == 1:
            split = 1
        else:
            split = min(range(1, n_inst), key=lambda m: max(self._time(sim, job, n_long, p90, m),
                                                            self._time(sim, job, n_reg, p50, n_inst - m)))
        sim.extra["long_tail_instances"] = split
        rid_arr = np.array(rids)
        groups = [(rid_arr[long], self.instances[:split]), (rid_arr[~long], self.instances[split:] or self.instances)]
        for members, targets in groups:
            order = self.ranker.order(members.tolist())  # the ranker's order (longest first for the oracle)
            for i, inst in enumerate(targets):
                mine = order[i :: len(targets)]
                if mine:
                    sim.submit(inst, mine)
        for i, inst in enumerate(self.instances):
            sim.mark(inst.name, "long_tail" if i < split else "regular", self.launched, sim.now, sim.now)

    # ---- the step pipeline ----------------------------------------------------------------------------------

    def _launch(self, sim: View) -> None:
        job, nxt = sim.jobs[0], self.launched + 1
        if nxt >= job.steps or self.gen_done < self.launched:
            return
        behind = nxt - self.version  # weights the generators hold vs the step they would generate
        if behind > (1 if self.config.mode == "async" else 0):
            return
        self.launched = nxt
        self.generated[nxt] = 0
        self.ready[nxt] = self.booked[nxt] = 0
        self.gen_span[nxt] = (sim.now, sim.now)
        self._dispatch(sim, job, list(job.starts(nxt)))

    def on_event(self, sim: View, notice: Notice) -> None:
        job = sim.jobs[0]
        if notice.kind is NoticeKind.FINISHED:
            req = sim.requests
            for rid in notice.requests:
                step = req.step[rid]
                self.generated[step] += 1
                per_sample = job.reward_s[step] / len(job.requests(step))
                sim.work("reward", per_sample, Tag("reward", step=step, item=rid), kind="reward", step=step, item=rid)
                self.history.observe(req.output[rid])
                if self.generated[step] == len(job.requests(step)):
                    self.gen_done = step
                    self.gen_span[step] = (self.gen_span[step][0], sim.now)
            self._launch(sim)
            return
        what, step, item = notice.tag.what, notice.tag.step, notice.tag.item
        if what == "reward":
            self.ready[step] += 1
            self._book(sim, job, step)
        elif what == "micro" and self.booked[step] == len(job.requests(step)) and item:
            sim.work("trainer", job.optimizer_s[step] * self._train_scale(sim, self.train_gpus),
                     Tag("optimizer", step=step), kind="train", step=step)
        elif what == "optimizer":
            sim.consume(job.id, step, job.requests(step), version=step)
            sim.work("sync", job.sync_s[step], Tag("sync", step=step), kind="weight_sync", step=step)
        elif what == "sync":
            self.version = step + 1
            sim.set_version(self.version)
            sim.end_step(job.id, step)
            self._adjust(sim, job, step)
            self._launch(sim)

    def _book(self, sim: View, job: Job, step: int) -> None:
        """Book a training micro-batch once enough rewarded samples are in (or the step's last ones)."""
        n = len(job.requests(step))
        size = math.ceil(n / self.config.microbatches)
        while self.ready[step] >= size or (self.ready[step] and self.booked[step] + self.ready[step] == n):
            take = min(size, self.ready[step])
            self.ready[step] -= take
            self.booked[step] += take
            last = self.booked[step] == n
            seconds = (job.train_s[step] + job.forward_s[step]) * take / n * self._train_scale(sim, self.train_gpus)
            sim.work("trainer", seconds, Tag("micro", step=step, item=int(last)), kind="train", step=step)

    def _adjust(self, sim: View, job: Job, step: int) -> None:
        """Dynamic stage balancing: move one replica's GPUs from training to generation when generation
        outlasts training by more than one more replica would save, and the move lowers max(T_gen, T_train)."""
        tp = sim.cluster.tp
        if not self.config.dynamic or self.train_gpus <= tp or step + 1 >= job.steps:
            return
        start, end = self.gen_span[step]
        t_gen = end - start
        t_train = job.trainer_seconds(step) * self._train_scale(sim, self.train_gpus)
        n = len(self.instances)
        saving = max(self._estimate_step(sim, job, step + 1, n) - self._estimate_step(sim, job, step + 1, n + 1), 0.0)
        t_train_after = job.trainer_seconds(step) * self._train_scale(sim, self.train_gpus - tp)
        if t_gen - t_train > saving and max(t_gen - saving, t_train_after) < max(t_gen, t_train):
            self.train_gpus -= tp
            sim.allocate("training", self.train_gpus, sim.cluster.train_gpu)
            sim.resources["trainer"].gpus = self.train_gpus
            sim.allocate("generation", (n + 1) * tp, sim.cluster.gen_gpu)
            self.instances.append(sim.add_instance("generation", tp, job.generation))
            sim.extra["replicas_added"] = sim.extra.get("replicas_added", 0) + 1
