"""orchestrrl (OrchestrRL, arXiv 2601.01209): adaptive generation parallelism, synchronous training.

As a step's running batch shrinks into its long tail, two instances of the same TP whose running and queued
requests together fit in ``merge_below`` of one instance's slots are regrouped into one instance of twice the
TP: fewer, faster instances for the few long samples left. The regroup costs a switch (the new TP's weight
shards reloaded from host memory) and the moved requests' KV cache is recomputed. An instance that runs dry
while another still queues work takes half of that queue (rebalancing stragglers). After the step, instances
return to the base TP for the next step's bulk. Weight sync and training are as in disagg-sync.
"""

from __future__ import annotations

from dataclasses import dataclass

from rltrace.replay.costmodels.switching import reload_seconds
from rltrace.replay.entities.instance import GenerationInstance
from rltrace.replay.events import Notice, NoticeKind
from rltrace.replay.schedulers.base import register
from rltrace.replay.schedulers.common import (
    disaggregated_pools,
    on_training_done,
    splits,
    spread,
    start_training,
    take_half,
)
from rltrace.replay.schedulers.view import View

from rltrace.errors import ConfigError


@dataclass(frozen=True, kw_only=True, slots=True)
class OrchestrRLConfig:
    max_tp: int = 8
    """largest TP an instance is regrouped to"""
    merge_below: float = 0.25
    """merge two instances when their requests fit in this share of one instance's max_seqs"""
    switch_s: float = 0.0
    """regroup cost in seconds; 0: the new TP's weight shard reloaded from host memory (`reload_seconds`)"""
    rebalance: bool = True

    def __post_init__(self) -> None:
        if self.max_tp < 1 or not 0 < self.merge_below <= 1 or self.switch_s < 0:
            raise ConfigError("orchestrrl needs max_tp >= 1, 0 < merge_below <= 1 and switch_s >= 0")


@register("orchestrrl")
class OrchestrRL:
    Config = OrchestrRLConfig

    def __init__(self, config: OrchestrRLConfig) -> None:
        self.config = config

    def start(self, sim: View) -> None:
        job = sim.jobs[0]
        self.base_tp = sim.cluster.tp
        self.instances = disaggregated_pools(sim, job)
        self.left: dict[int, int] = {}  # step -> its requests not finished yet
        self.regroups = 0
        self._launch(sim, 0)

    def _launch(self, sim: View, step: int) -> None:
        job = sim.jobs[0]
        self.left[step] = len(job.requests(step))
        spread(sim, self.instances, job.starts(step))

    def _switch_s(self, inst: GenerationInstance, tp: int) -> float:
        return self.config.switch_s or reload_seconds(inst.cost, tp)

    def _regroup(self, sim: View) -> None:
        """Merge pairs of same-TP instances deep in the tail; rebalance queues onto idle instances."""
        limit = self.config.merge_below * sim.max_seqs
        by_tp: dict[int, list[GenerationInstance]] = {}
        for inst in self.instances:
            by_tp.setdefault(inst.tp, []).append(inst)
        for tp, group in sorted(by_tp.items()):
            if 2 * tp > self.config.max_tp or not splits(group[0].cost, 2 * tp):
                continue
            group.sort(key=lambda i: i.load)
            while len(group) >= 2 and group[0].load + group[1].load <= limit:
                keep, gone = group.pop(1), group.pop(0)
                sim.migrate(sim.requests_on(gone), keep)
                sim.retire(gone)
                self.instances.remove(gone)
                sim.reconfigure(keep, tp=2 * tp, switch_s=self._switch_s(keep, 2 * tp))
                self.regroups += 1
                sim.extra["regroups"] = self.regroups
        if self.config.rebalance:
            idle = [i for i in self.instances if i.load == 0]
            busy = sorted((i for i in self.instances if len(i.waiting) > 1), key=lambda i: -len(i.waiting))
            for free, src in zip(idle, busy):
                take_half(sim, src, free)

    def _reset(self, sim: View) -> None:
        """Back to base-TP instances for the next step's bulk (merged instances split, paying the switch)."""
        job = sim.jobs[0]
        for inst in list(self.instances):
            if inst.tp == self.base_tp:
                continue
            extra = inst.tp // self.base_tp - 1
            sim.reconfigure(inst, tp=self.base_tp, switch_s=self._switch_s(inst, self.base_tp))
            for _ in range(extra):
                self.instances.append(sim.add_instance("generation", self.base_tp, job.generation))

    def on_event(self, sim: View, notice: Notice) -> None:
        job = sim.jobs[0]
        if notice.kind is NoticeKind.FINISHED:
            steps = sim.requests.step
            for rid in notice.requests:
                self.left[steps[rid]] -= 1
                if not self.left[steps[rid]]:
                    start_training(sim, job, steps[rid], version=steps[rid])
            if any(self.left.values()):
                self._regroup(sim)
        elif on_training_done(sim, job, notice.tag):
            step = notice.tag.step
            self._reset(sim)
            sim.set_version(step + 1)
            sim.end_step(job.id, step)
            if step + 1 < job.steps:
                self._launch(sim, step + 1)
