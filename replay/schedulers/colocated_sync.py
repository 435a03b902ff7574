"""colocated-sync (verl's hybrid engine): every GPU generates, then every GPU trains.

One pool of ``gen_gpus + train_gpus`` GPUs alternates roles. Switching costs time both ways: to training
(free the KV cache, offload the inference engine, load optimizer state) and back to generation (reshard the
new weights into the inference engine, which replaces a network weight sync). By default these are RollMux's
measured warm switch costs for the model's size (7B: training 4.1 s, rollout 0.9 s; 32B: 5.9 s, 1.7 s;
see :mod:`rltrace.replay.costmodels.switching`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rltrace.replay.costmodels.switching import model_params, switch_seconds
from rltrace.replay.schedulers.base import register
from rltrace.replay.schedulers.common import REWARD, TRAIN, generation_pool, spread
from rltrace.replay.simulator import Notice, Simulator


@dataclass(frozen=True, kw_only=True, slots=True)
class ColocatedSyncConfig:
    to_train_s: float | None = None
    """switch from generation to training (None: RollMux's warm training switch for the model's size)"""
    to_generate_s: float | None = None
    """switch back, weights resharded into the inference engine (None: RollMux's warm rollout switch)"""


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
        params = model_params(job.generation)
        cfg = self.config
        self.to_train = switch_seconds(params, "training", warm=True) if cfg.to_train_s is None else cfg.to_train_s
        self.to_generate = switch_seconds(params, "rollout", warm=True) if cfg.to_generate_s is None else cfg.to_generate_s
        spread(sim, self.instances, job.starts(0))

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
            seconds = self.to_train + job.trainer_seconds(step)
            sim.work("trainer", seconds, (TRAIN, job.id, step), kind="train", step=step)
        elif what == TRAIN:
            sim.work("trainer", self.to_generate, ("resharded", job.id, step), kind="switch", step=step)
        else:
            sim.set_version(step + 1)
            sim.end_step(job.id, step)
            if step + 1 < job.steps:
                spread(sim, self.instances, job.starts(step + 1))
