"""one-step-async (verl's one_step_off_policy): generation of step k+1 overlaps training of step k.

Generation of step k+1 starts as soon as step k's samples are generated, with the weights of step k-1 (one
step stale); weights sync once per step, after each training step, and generation of step k+2 waits for
that sync. Throughput approaches one step per max(generation, training + sync).
"""

from __future__ import annotations

from dataclasses import dataclass

from rltrace.replay.events import Notice, NoticeKind
from rltrace.replay.schedulers.base import register
from rltrace.replay.schedulers.common import (
    disaggregated_pools,
    on_training_done,
    spread,
    start_training,
)
from rltrace.replay.schedulers.view import View


@dataclass(frozen=True, kw_only=True, slots=True)
class OneStepAsyncConfig:
    """No knobs: the staleness is one step by construction."""


@register("one-step-async")
class OneStepAsync:
    Config = OneStepAsyncConfig

    def __init__(self, config: OneStepAsyncConfig) -> None:
        self.config = config

    def start(self, sim: View) -> None:
        sim.quiet = True
        self.instances = disaggregated_pools(sim, sim.jobs[0])
        self.generated = -1  # last step whose samples are all in
        self.synced = 0  # weight version the generators hold
        self.launched = -1
        self._maybe_launch(sim)

    def _maybe_launch(self, sim: View) -> None:
        job, nxt = sim.jobs[0], self.launched + 1
        # Step nxt may run on weights at most one version old: it needs version nxt - 1.
        if nxt < job.steps and self.generated == self.launched and self.synced >= nxt - 1:
            self.launched = nxt
            spread(sim, self.instances, job.starts(nxt))

    def on_event(self, sim: View, notice: Notice) -> None:
        job = sim.jobs[0]
        if notice.kind is NoticeKind.GENERATED:
            self.generated = step = notice.tag.step
            start_training(sim, job, step, version=step)
        elif on_training_done(sim, job, notice.tag):
            step = notice.tag.step
            self.synced = step + 1
            sim.set_version(step + 1)
            sim.end_step(job.id, step)
        self._maybe_launch(sim)
