"""disagg-sync: separate generation and training pools, strictly on-policy.

Each step generates all its samples on the generation pool, scores them, trains on the training pool and
syncs the weights back before the next step starts: the training pool idles during generation and the
generation pool during training and sync (dependency bubbles), and both wait for the longest sample.
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
class DisaggSyncConfig:
    """No knobs: the pool split comes from the cluster (--gen-gpus / --train-gpus)."""


@register("disagg-sync")
class DisaggSync:
    Config = DisaggSyncConfig

    def __init__(self, config: DisaggSyncConfig) -> None:
        self.config = config

    def start(self, sim: View) -> None:
        sim.quiet = True  # whole steps are enough: one "generated" notice per step
        self.instances = disaggregated_pools(sim, sim.jobs[0])
        spread(sim, self.instances, sim.jobs[0].starts(0))

    def on_event(self, sim: View, notice: Notice) -> None:
        job = sim.jobs[0]
        if notice.kind is NoticeKind.GENERATED:
            start_training(sim, job, notice.tag.step, version=notice.tag.step)
        elif on_training_done(sim, job, notice.tag):
            step = notice.tag.step
            sim.set_version(step + 1)
            sim.end_step(job.id, step)
            if step + 1 < job.steps:
                spread(sim, self.instances, job.starts(step + 1))
