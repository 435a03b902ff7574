"""fully-async (AReaL, verl fully_async): generation runs ahead, bounded only by staleness.

Samples are produced continuously. A sample of nominal step s is admitted only while the generators' weight
version v satisfies s <= v + eta (AReaL's staleness bound: its policy lags at most eta versions at
admission). The trainer takes fixed-size batches of finished samples in finish order, as soon as a batch is
there and the previous update is synced.

With ``interruptible`` (AReaL's default), a weight update interrupts the running requests: their KV cache
is recomputed under the new weights and they go on as samples of the new version, so long samples do not
grow stale while they generate.

Past the recorded steps, generation goes on as a real run's would, until training ends: each further batch
answers a recorded step's prompts again, every sample taking the lengths of the next recorded response to its
prompt. So the last steps take the first samples to finish, not every straggler left in the record.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from rltrace.replay.events import Notice, NoticeKind, Tag
from rltrace.replay.job import Job
from rltrace.replay.schedulers.base import register
from rltrace.replay.schedulers.common import (
    REWARD,
    answer_again,
    disaggregated_pools,
    on_training_done,
    siblings,
    spread,
)
from rltrace.replay.schedulers.view import View

from rltrace.errors import ConfigError
from rltrace.limits import MAX_REQUESTS


@dataclass(frozen=True, kw_only=True, slots=True)
class FullyAsyncConfig:
    eta: int = 1
    """staleness bound: versions a sample's policy may lag when admitted"""
    interruptible: bool = True
    """re-prefill running requests under new weights at every update (AReaL), else they finish on old ones"""

    def __post_init__(self) -> None:
        if self.eta < 0:
            raise ConfigError(f"fully-async eta must be >= 0, got {self.eta}")


@register("fully-async")
class FullyAsync:
    Config = FullyAsyncConfig

    def __init__(self, config: FullyAsyncConfig) -> None:
        self.config = config

    def start(self, sim: View) -> None:
        ahead = self.config.eta * len(sim.jobs[0].starts(0))
        if ahead > MAX_REQUESTS:  # each launched batch is held in memory: 100,000 of them were a kernel OOM kill
            raise ConfigError(f"fully-async eta {self.config.eta:,} launches {ahead:,} requests ahead of the trainer, "
                              f"above the {MAX_REQUESTS:,} a replay holds")
        self.instances = disaggregated_pools(sim, sim.jobs[0])
        self.answers = siblings(sim, sim.jobs[0])  # (step, prompt) -> its recorded responses
        self.ready: deque[int] = deque()  # finished, not yet trained on
        self.version = 0
        self.launched = -1
        self.training = False
        self.trained = 0
        self._admit(sim)

    def _admit(self, sim: View) -> None:
        job = sim.jobs[0]
        while self.trained < job.steps and self.launched + 1 <= self.version + self.config.eta:
            self.launched += 1
            by_load = sorted(self.instances, key=lambda i: i.load)
            spread(sim, by_load, job.starts(self.launched) if self.launched < job.steps else self._again(sim, job))

    def _again(self, sim: View, job: Job) -> list[int]:
        """A batch past the record: recorded step ``launched mod steps`` answered again, each sample taking the
        lengths of the next recorded response to its prompt (one further on each round)."""
        rounds = self.launched // job.steps
        return [answer_again(sim, self.answers, head, rounds) for head in job.starts(self.launched % job.steps)]

    def _train(self, sim: View) -> None:
        job = sim.jobs[0]
        step = self.trained
        if self.training or step >= job.steps or len(self.ready) < len(job.requests(step)):
            return
        batch = [self.ready.popleft() for _ in job.requests(step)]
        self.training = True
        sim.consume(job.id, step, batch, version=self.version)
        sim.work("reward", job.reward_s[step], Tag(REWARD, job.id, step), kind="reward", step=step)

    def on_event(self, sim: View, notice: Notice) -> None:
        job = sim.jobs[0]
        if notice.kind is NoticeKind.FINISHED:
            self.ready.extend(notice.requests)
        elif on_training_done(sim, job, notice.tag):
            step = notice.tag.step
            self.training = False
            self.trained = step + 1
            self.version = step + 1
            sim.set_version(self.version)
            sim.end_step(job.id, step)
            if self.trained >= job.steps:
                sim.stop()  # what is still generating is discarded (dropped), as when a real run ends
                return
            if self.config.interruptible:
                for inst in self.instances:
                    if inst.batch:
                        sim.reconfigure(inst)  # running requests resume under the new weights
            self._admit(sim)
        self._train(sim)
