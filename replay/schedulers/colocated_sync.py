"""colocated-sync (verl's hybrid engine): every GPU generates, then every GPU trains.

One pool of ``gen_gpus + train_gpus`` GPUs alternates roles. Switching costs time both ways: to training
(free the KV cache, drop the inference weights, load weights and optimizer state from host memory) and back
to generation (reshard the new weights into the inference engine, which replaces a network weight sync, while
the training state goes back to host memory). By default both are the model's bytes over the GPU's host link
plus an engine floor (:mod:`rltrace.replay.costmodels.switching`); a switch span on the trainer shows each. The
trainer time is the whole cluster's (:meth:`~rltrace.replay.job.Job.colocated_trainer_seconds`), so every split of
the same GPUs gives one answer; a described job brings its framework's switches too (``Job.colocated``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rltrace.replay.costmodels.switching import job_state, move_seconds
from rltrace.replay.events import Notice, NoticeKind, Tag
from rltrace.replay.schedulers.base import Capabilities, register
from rltrace.replay.schedulers.common import REWARD, TRAIN, generation_pool, spread
from rltrace.replay.schedulers.view import View


@dataclass(frozen=True, kw_only=True, slots=True)
class ColocatedSyncConfig:
    to_train_s: float | None = None
    """switch from generation to training (None: the training state onto each GPU over its host link)"""
    to_generate_s: float | None = None
    """switch back, weights resharded into the inference engine (None: the training state off each GPU, the
    serving weights on, over its host link)"""


@register("colocated-sync")
class ColocatedSync:
    Config = ColocatedSyncConfig
    capabilities = Capabilities(colocates=True)

    def __init__(self, config: ColocatedSyncConfig) -> None:
        self.config = config

    def start(self, sim: View) -> None:
        c, job = sim.cluster, sim.jobs[0]
        sim.quiet = True
        gpus = job.colocated.gpus if job.colocated else c.gen_gpus + c.train_gpus  # a described job's own cluster
        self.instances = generation_pool(sim, job, gpus)
        sim.allocate("training", gpus, c.gen_gpu, billed=False)  # the same GPUs in their training role
        sim.add_resource("trainer", "training", gpus=gpus)
        sim.add_resource("reward", "cpu")
        state, cfg, cal = job_state(job), self.config, job.calibration
        train_bytes, serve_bytes = state.training_bytes(gpus, cal), state.rollout_bytes(c.tp)
        # a described job prices its own switches (its framework's sleep, refit and wake) on the whole cluster
        to_train = (job.colocated.to_train_s if job.colocated
                    else move_seconds(train_bytes, 0.0, c.gen_gpu, calibration=cal))
        to_generate = (job.colocated.to_generate_s if job.colocated
                       else move_seconds(serve_bytes, train_bytes, c.gen_gpu, calibration=cal))
        self.to_train = to_train if cfg.to_train_s is None else cfg.to_train_s
        self.to_generate = to_generate if cfg.to_generate_s is None else cfg.to_generate_s
        spread(sim, self.instances, job.starts(0))

    def on_event(self, sim: View, notice: Notice) -> None:
        job = sim.jobs[0]
        if notice.kind is NoticeKind.GENERATED:
            step = notice.tag.step
            sim.work("reward", job.reward_s[step], Tag(REWARD, job.id, step), kind="reward", step=step)
            sim.consume(job.id, step, job.requests(step), version=step)
            return
        what, step = notice.tag.what, notice.tag.step
        if what == REWARD:
            # Trainer GPUs are the generators: the switch, then forward/backward/optimizer (FIFO on the
            # trainer: the train span starts when the switch ends), then back.
            sim.work("trainer", self.to_train, Tag("to_train", job.id, step), kind="switch", step=step)
            trainer = job.colocated_trainer_seconds(step, sim.cluster)
            sim.work("trainer", trainer, Tag(TRAIN, job.id, step), kind="train", step=step)
        elif what == "to_train":
            return
        elif what == TRAIN:
            sim.work("trainer", self.to_generate, Tag("resharded", job.id, step), kind="switch", step=step)
        else:
            sim.set_version(step + 1)
            sim.end_step(job.id, step)
            if step + 1 < job.steps:
                spread(sim, self.instances, job.starts(step + 1))
