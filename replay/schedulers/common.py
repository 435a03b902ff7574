"""Pieces the baseline schedulers share: laying out a generation pool, spreading a batch over instances,
counting a step's outstanding samples, and the reward -> train -> weight-sync chain after generation."""

from __future__ import annotations

from collections.abc import Sequence

from rltrace.replay.entities.instance import GenerationInstance
from rltrace.replay.job import Job
from rltrace.replay.simulator import Simulator

REWARD, TRAIN, SYNC = "reward", "train", "sync"


def generation_pool(sim: Simulator, job: Job, gpus: int, *, billed: bool = True) -> list[GenerationInstance]:
    """Allocate the "generation" pool and fill it with instances of the cluster's TP for ``job``'s model."""
    c = sim.cluster
    sim.allocate("generation", gpus, c.gen_gpu, billed=billed)
    return [sim.add_instance("generation", c.tp, job.generation) for _ in range(gpus // c.tp)]


def training_pool(sim: Simulator, gpus: int, gpu: str, *, billed: bool = True) -> None:
    """Allocate the "training" pool and the trainer, reward and weight-sync resources."""
    sim.allocate("training", gpus, gpu, billed=billed)
    sim.add_resource("trainer", "training", gpus=gpus)
    sim.add_resource("reward", "cpu")
    sim.add_resource("sync", "network")


def spread(sim: Simulator, instances: Sequence[GenerationInstance], rids: Sequence[int]) -> None:
    """Split a batch into contiguous, equal chunks, one per instance (how verl shards a batch over DP ranks)."""
    n, k = len(rids), len(instances)
    for i, inst in enumerate(instances):
        chunk = rids[i * n // k : (i + 1) * n // k]
        if len(chunk):
            sim.submit(inst, chunk)


class Outstanding:
    """Samples still generating per (job, step); ``finish`` reports the steps that just completed."""

    __slots__ = ("_jobs", "_left")

    def __init__(self, sim: Simulator) -> None:
        self._left: dict[tuple[int, int], int] = {}
        self._jobs = (sim.requests.job, sim.requests.step)

    def launch(self, job: int, step: int, count: int) -> None:
        self._left[(job, step)] = self._left.get((job, step), 0) + count

    def finish(self, rids: Sequence[int]) -> list[tuple[int, int]]:
        jobs, steps, left, done = self._jobs[0], self._jobs[1], self._left, []
        for rid in rids:
            key = (jobs[rid], steps[rid])
            left[key] -= 1
            if not left[key]:
                del left[key]
                done.append(key)
        return done

    def pending(self, job: int, step: int) -> int:
        return self._left.get((job, step), 0)


def start_training(sim: Simulator, job: Job, step: int, version: int) -> None:
    """Score the step's samples, then book the trainers; the "train" notice comes when the update is done."""
    sim.work("reward", job.reward_s[step], (REWARD, job.id, step), kind="reward", step=step)
    sim.consume(job.id, step, job.requests(step), version)


def on_training_done(sim: Simulator, job: Job, tag: tuple[str, int, int]) -> bool:
    """Advance the chain reward -> trainer -> sync; True when the step's weights have reached the generators."""
    what, _, step = tag
    if what == REWARD:
        sim.work("trainer", job.trainer_seconds(step), (TRAIN, job.id, step), kind="train", step=step)
    elif what == TRAIN:
        sim.work("sync", job.sync_s[step], (SYNC, job.id, step), kind="weight_sync", step=step)
    elif what == SYNC:
        return True
    return False
