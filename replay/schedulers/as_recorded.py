"""as-recorded: the recording's own pool layout, request-to-engine assignment and order; the fidelity
baseline.

Each step's requests go to the engine that served them, in recorded arrival order; then reward, training,
optimizer and weight sync take their measured times, and the step's measured time that no phase explains
(host-side batch movement, checkpoint writes) is added before the next step starts, as it was recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

from rltrace.replay.events import Notice, NoticeKind, Tag
from rltrace.replay.schedulers.base import Capabilities, register
from rltrace.replay.schedulers.common import (
    disaggregated_pools,
    on_training_done,
    spread,
    start_training,
)
from rltrace.replay.schedulers.view import View


@dataclass(frozen=True, kw_only=True, slots=True)
class AsRecordedConfig:
    """No knobs: everything comes from the bundle."""


@register("as-recorded")
class AsRecorded:
    Config = AsRecordedConfig
    capabilities = Capabilities(replays_recording=True)

    def __init__(self, config: AsRecordedConfig) -> None:
        self.config = config

    def start(self, sim: View) -> None:
        job = sim.jobs[0]
        sim.quiet = True
        self.instances = disaggregated_pools(sim, job)
        sim.add_resource("host", "cpu")
        self._launch(sim, 0)

    def _launch(self, sim: View, step: int) -> None:
        job = sim.jobs[0]
        rids = job.starts(step)
        if job.engine is None:  # retargeted: no recorded assignment to follow
            spread(sim, self.instances, rids)
            return
        by_engine: dict[int, list[int]] = {}
        for rid in rids:
            by_engine.setdefault(job.engine[rid] % len(self.instances), []).append(rid)
        for engine, mine in sorted(by_engine.items()):
            sim.submit(self.instances[engine], mine)

    def on_event(self, sim: View, notice: Notice) -> None:
        job = sim.jobs[0]
        if notice.kind is NoticeKind.GENERATED:
            start_training(sim, job, notice.tag.step, version=notice.tag.step)
        elif notice.tag.what == "host":
            step = notice.tag.step
            sim.end_step(job.id, step)
            if step + 1 < job.steps:
                self._launch(sim, step + 1)
        elif on_training_done(sim, job, notice.tag):
            step = notice.tag.step
            sim.set_version(step + 1)
            sim.work("host", job.other_s[step], Tag("host", job.id, step), kind="host", step=step)
