"""Pieces the baseline schedulers share: laying out a generation pool, spreading a batch over instances, and
the reward -> train -> weight-sync chain after generation."""

from __future__ import annotations

from collections.abc import Sequence

from rltrace.replay.costmodels.generation import GenerationCost
from rltrace.replay.entities.instance import GenerationInstance
from rltrace.replay.events import Tag
from rltrace.replay.job import Job
from rltrace.replay.schedulers.view import View

from rltrace.errors import ConfigError

REWARD, TRAIN, SYNC = "reward", "train", "sync"


def generation_pool(sim: View, job: Job, gpus: int, *, billed: bool = True) -> list[GenerationInstance]:
    """Allocate the "generation" pool and fill it with instances of the cluster's TP for ``job``'s model."""
    c = sim.cluster
    sim.allocate("generation", gpus, c.gen_gpu, billed=billed)
    return [sim.add_instance("generation", c.tp, job.generation) for _ in range(gpus // c.tp)]


def training_pool(sim: View, gpus: int, gpu: str, *, billed: bool = True) -> None:
    """Allocate the "training" pool and the trainer, reward and weight-sync resources."""
    sim.allocate("training", gpus, gpu, billed=billed)
    sim.add_resource("trainer", "training", gpus=gpus)
    sim.add_resource("reward", "cpu")
    sim.add_resource("sync", "network")


def disaggregated_pools(sim: View, job: Job) -> list[GenerationInstance]:
    """The cluster as two pools: generation instances for ``job``'s model, and the training side."""
    instances = generation_pool(sim, job, sim.cluster.gen_gpus)
    training_pool(sim, sim.cluster.train_gpus, sim.cluster.train_gpu)
    return instances


def splits(cost: GenerationCost, tp: int) -> bool:
    """Whether ``cost``'s model splits over ``tp`` GPUs (attention heads divide evenly, weights fit)."""
    try:
        cost.iteration_model(tp)
        cost.kv_capacity_tokens(tp)
    except ConfigError:
        return False
    return True


def answer_again(sim: View, answers: dict[tuple[int, int], list[int]], head: int, k: int) -> int:
    """A new response to the prompt of recorded trajectory ``head``: a trajectory spawned with the lengths (and,
    for later turns, environment times) of the k-th next recorded response to that prompt (cyclic; ``answers``
    from ``siblings``); returns its first turn, pending."""
    req = sim.requests
    step, group = int(req.step[head]), int(req.group[head])
    same = answers.get((step, group), [head])
    return sim.rerun(same[(same.index(head) + k) % len(same)], step=step, group=group)[0]


def siblings(sim: View, job: Job) -> dict[tuple[int, int], list[int]]:
    """(step, group) -> the recorded first turns answering that prompt, in order."""
    heads: dict[tuple[int, int], list[int]] = {}
    for s in range(job.steps):
        for head in job.starts(s):
            heads.setdefault((s, int(sim.requests.group[head])), []).append(head)
    return heads


def take_half(sim: View, src: GenerationInstance, dst: GenerationInstance) -> list[int]:
    """Move the back half of ``src``'s waiting queue to ``dst`` (an idle instance relieving a straggler)."""
    queued = list(src.waiting)
    return sim.migrate(queued[len(queued) // 2 :], dst, front=False)


def spread(sim: View, instances: Sequence[GenerationInstance], rids: Sequence[int]) -> None:
    """Split a batch into contiguous, equal chunks, one per instance (how verl shards a batch over DP ranks)."""
    n, k = len(rids), len(instances)
    for i, inst in enumerate(instances):
        chunk = rids[i * n // k : (i + 1) * n // k]
        if len(chunk):
            sim.submit(inst, chunk)


def start_training(sim: View, job: Job, step: int, version: int) -> None:
    """Score the step's samples, then book the trainers; the "train" notice comes when the update is done."""
    sim.work("reward", job.reward_s[step], Tag(REWARD, job.id, step), kind="reward", step=step)
    sim.consume(job.id, step, job.requests(step), version)


def on_training_done(sim: View, job: Job, tag: Tag) -> bool:
    """Advance the chain reward -> trainer -> sync; True when the step's weights have reached the generators."""
    what, step = tag.what, tag.step
    if what == REWARD:
        sim.work("trainer", job.trainer_seconds(step), Tag(TRAIN, job.id, step), kind="train", step=step)
    elif what == TRAIN:
        sim.work("sync", job.sync_s[step], Tag(SYNC, job.id, step), kind="weight_sync", step=step)
    elif what == SYNC:
        return True
    return False
