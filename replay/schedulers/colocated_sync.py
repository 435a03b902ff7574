"""colocated-sync (verl's hybrid engine): every GPU generates, then every GPU trains.

One pool of ``gen_gpus + train_gpus`` GPUs alternates roles. Switching costs time both ways: to training
(free the KV cache, offload the inference engine, load optimizer state) and back to generation (reshard the
new weights into the inference engine, which replaces a network weight sync). Defaults are RollMux's
measured warm switch costs for a 7B model (arXiv 2512.11306: rollout 0.9 s, training 4.1 s).
"""

from __future__ import annotations

from dataclasses import dataclass

from rltrace.replay.schedulers.base import register
from rltrace.replay.schedulers.common import REWARD, TRAIN, generation_pool, spread
from rltrace.replay.simulator import Notice, Simulator


@dataclass(frozen=True, kw_only=True, slots=True)
class ColocatedSyncConfig:
    to_train_s: float = 4.1
    """switch from generation to training (RollMux, 7B, warm)"""
    to_generate_s: float = 0.9
    """switch back, weights resharded into the inference engine (RollMux, 7B, warm)"""


@register("colocated-sync")
class ColocatedSync:
    Config = ColocatedSyncConfig

    def __init__(self, config: ColocatedSyncConfig) -> None:
        self.config = config

    def start(self, sim: Simulator) -> None:
        c, job = sim.cluster, sim.jobs[0]
        sim.quiet = True
        gpus = c.gen_gpus + c.train_gpus
        self.instances = generation_pool(sim, job, gpus)
        sim.allocate("training", gpus, c.gen_gpu, billed=False)  # the same GPUs in their training role
        sim.add_resource("trainer", "training", gpus=gpus)
        sim.add_resource("reward", "cpu")
        spread(sim, self.instances, job.requests(0))

    def on_event(self, sim: Simulator, notice: Notice) -> None:
        job = sim.jobs[0]
        if notice.kind == "generated":
            step = notice.tag[1]
            sim.work("reward", job.reward_s[step], (REWARD, job.id, step), kind="reward", step=step)
            sim.consume(job.id, step, job.requests(step), version=step)
            return
        what, _, step = notice.tag
        if what == REWARD:
            # Trainer GPUs are the generators: the switch, then forward/backward/optimizer, then back.
            seconds = self.config.to_train_s + job.trainer_seconds(step)
            sim.work("trainer", seconds, (TRAIN, job.id, step), kind="train", step=step)
        elif what == TRAIN:
            sim.work("trainer", self.config.to_generate_s, ("resharded", job.id, step), kind="switch", step=step)
        else:
            sim.set_version(step + 1)
            sim.end_step(job.id, step)
            if step + 1 < job.steps:
                spread(sim, self.instances, job.requests(step + 1))
