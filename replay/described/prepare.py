"""A described job made ready to replay: its requests drawn (:mod:`.lengths`), its generation priced by the roofline
(or, with ``cost.generation=kernels``, aiconfigurator-core's measured kernels) with the framework's engine settings,
its trainer side by :mod:`.rlstep`, for every scheduler.

``Shape`` (the replay's what-if options) reshapes the description before anything is drawn: ``gen_gpus`` and
``train_gpus`` set the disaggregated pools, ``gpu``/``gen_gpu``/``train_gpu`` the GPU kinds, ``tp`` the engines'
TP, ``model`` the model, ``steps``/``prompts_per_step``/``samples_per_prompt`` the batch, ``max_new_tokens`` the
response cap, ``max_seqs`` the engines' running limit, ``seed`` the draw.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
from rltrace.replay.cluster import Cluster
from rltrace.replay.costmodels.generation import catalog_generation
from rltrace.replay.costmodels.training import AllToAll
from rltrace.replay.described.description import Description
from rltrace.replay.described.frameworks import Calibration, get_framework
from rltrace.replay.described.lengths import draw_lengths
from rltrace.replay.described.rlstep import Phases, StepModel
from rltrace.replay.job import Colocated, Job
from rltrace.replay.loading import Shape
from rltrace.replay.network.weight_sync import local_fabric, reprice_syncs
from rltrace.replay.run import CostConfig, Prepared

from rltrace.catalog import ModelSpec, get_gpu, get_model
from rltrace.config import to_dict
from rltrace.errors import ConfigError


def reshape(d: Description, shape: Shape) -> Description:
    """``d`` with the replay's what-if options applied (checked again)."""
    cluster, batch, generation = d.cluster, d.batch, d.generation
    if shape.gen_gpus is not None or shape.train_gpus is not None:
        gen, train = d.pools
        cluster = dataclasses.replace(cluster, gen_gpus=shape.gen_gpus or gen, train_gpus=shape.train_gpus or train,
                                      gpus=0)
    gen_kind = shape.gen_gpu or shape.gpu
    train_kind = shape.train_gpu or shape.gpu
    if gen_kind:
        cluster = dataclasses.replace(cluster, gpu=gen_kind)
    if train_kind or gen_kind:  # the training pool keeps its kind ("": cluster.gpu's) when only generation's changes
        cluster = dataclasses.replace(cluster, train_gpu=train_kind or d.cluster.train_gpu or d.cluster.gpu)
    if shape.tp is not None:
        generation = dataclasses.replace(generation, tp=shape.tp)
    if shape.max_seqs is not None:
        generation = dataclasses.replace(generation, max_num_seqs=shape.max_seqs)
    changes = {k: v for k, v in (("steps", shape.steps), ("prompts", shape.prompts_per_step),
                                  ("samples", shape.samples_per_prompt), ("max_response", shape.max_new_tokens))
               if v is not None}
    if changes:
        batch = dataclasses.replace(batch, **changes)
        if shape.max_new_tokens is not None and batch.mean_response >= shape.max_new_tokens:
            raise ConfigError(f"--max-new-tokens {shape.max_new_tokens} is at or below the described mean response "
                              f"({batch.mean_response:g} tokens)")
        if shape.max_new_tokens is not None and batch.max_seq and shape.max_new_tokens >= batch.max_seq:
            # the draw clips at both caps, and every prompt holds a token of max_seq: this one would change nothing
            raise ConfigError(f"--max-new-tokens {shape.max_new_tokens}: the described batch.max_seq {batch.max_seq} "
                              "(prompt + response) caps every response below it; raise max_seq in the description")
    mode = d.mode or ("colocated" if d.colocated else "disaggregated")
    reshaped = dataclasses.replace(d, cluster=cluster, batch=batch, generation=generation, mode=mode,
                                   model=shape.model or d.model, seed=d.seed if shape.seed is None else shape.seed)
    given = [f"{name} {value}" for name, value in (
        ("gen_gpus", shape.gen_gpus), ("train_gpus", shape.train_gpus), ("gpu", shape.gpu),
        ("gen_gpu", shape.gen_gpu), ("train_gpu", shape.train_gpu), ("tp", shape.tp), ("max_seqs", shape.max_seqs),
        ("model", shape.model), ("steps", shape.steps), ("prompts", shape.prompts_per_step),
        ("samples", shape.samples_per_prompt), ("max_new_tokens", shape.max_new_tokens)) if value is not None]
    try:
        return reshaped.check()
    except ConfigError as e:
        if not given:
            raise
        raise ConfigError(f"the description reshaped ({', '.join(given)}): {e}") from None


def serving_model(spec: ModelSpec, precision: str) -> ModelSpec:
    """The engine's copy of the model: FP8 weights for an FP8 run (its KV cache stays BF16), else as trained."""
    return dataclasses.replace(spec, dtype_bytes=1) if precision == "fp8" and spec.dtype_bytes > 1 else spec


def from_description(d: Description, shape: Shape, cost: CostConfig, prices: dict[str, float] | None = None, *,
                     calibration: Calibration | None = None) -> Prepared:
    """Draw ``d``'s workload and price it for every scheduler: disaggregated ones on its generation and training
    pools, colocated ones on all its GPUs (:class:`~rltrace.replay.job.Colocated`); ``calibration`` replaces the
    framework's own (a fit starts from a neutral one)."""
    if shape.source_steps is not None:
        raise ConfigError("--recorded-steps picks steps of a recording; a described job has none (--steps sets how "
                          "many it replays)")
    d = reshape(d, shape)
    if cost.train_ep != 1:
        raise ConfigError(f"cost.train_ep {cost.train_ep}: a described job's trainer expert parallelism is its "
                          f"[training] ep ({d.training.ep}); set it there")
    constants = cost.constants()
    framework = get_framework(d.framework)
    if calibration is not None:
        framework = dataclasses.replace(framework, calibration=calibration)
    spec = get_model(d.model)
    gen_gpu, train_gpu = get_gpu(d.cluster.gpu), get_gpu(d.cluster.train_gpu or d.cluster.gpu)
    gen_gpus, train_gpus = d.pools
    instance = d.generation.tp * d.generation.pp
    g = d.generation
    cluster = Cluster(gen_gpus=gen_gpus, train_gpus=train_gpus, gen_gpu=gen_gpu.name, train_gpu=train_gpu.name,
                      tp=instance, max_seqs=g.max_num_seqs or framework.max_num_seqs, price_per_gpu_hour=prices)
    generation, priced = catalog_generation("kernels" if cost.generation == "kernels" else "roofline",
                                       model=serving_model(spec, d.precision), gpu=gen_gpu, engine=g.engine,
                                       memory_efficiency=cost.figure("memory_efficiency", constants),
                                       compute_efficiency=cost.figure("compute_efficiency", constants),
                                       gpu_memory_utilization=cost.gpu_memory_utilization  # a what-if first
                                       or g.gpu_memory_utilization or framework.gpu_memory_utilization,
                                       max_num_seqs=cluster.max_seqs,
                                       max_num_batched_tokens=framework.max_num_batched_tokens,
                                       calibration=constants)
    generation.iteration_model(instance)  # weights that do not fit: one message, now
    steps = d.batch.steps
    prompt, response, cap = draw_lengths(d, steps)
    per_step = d.batch.prompts * d.batch.samples
    step_of = np.repeat(np.arange(steps, dtype=np.int32), per_step)
    tokens = np.bincount(step_of, weights=(prompt + response).astype(np.float64), minlength=steps)
    model = StepModel(description=d, framework=framework, model=spec, gpu=train_gpu, mfu=cost.train_mfu,
                      constants=constants)
    whole = [model.phases(d.total_gpus, float(t), per_step) for t in tokens]
    notes: list[str] = [priced] if cost.generation == "kernels" else []
    if g.engine != "vllm" and cost.generation != "kernels":
        notes.append(f"generation.engine = {g.engine!r}: the roofline has no engine term, so generation is priced "
                     f"as vLLM's (cost.generation=kernels prices {g.engine}'s own measured kernels)")
    if g.pp > 1:
        notes.append(f"generation.pp = {g.pp}: each engine is priced as one tensor-parallel group of {instance} GPUs "
                     "(the generation model has no pipeline stages)")
    if gen_gpus + train_gpus != d.total_gpus:
        notes.append(f"cluster.gpus {d.total_gpus} has no split into whole {instance}-GPU generation instances and a "
                     f"training pool: colocated schedulers run on {d.total_gpus} GPUs, disaggregated ones on "
                     f"{gen_gpus} + {train_gpus} (give gen_gpus and train_gpus to choose)")
    pool_layout = True
    try:
        split = [model.phases(train_gpus, float(t), per_step) for t in tokens]
    except ConfigError as e:  # a colocated layout the training pool alone cannot hold (an EP wider than the pool)
        scale = d.total_gpus / train_gpus
        split = [Phases(**{k: v if k == "reward" else v * scale for k, v in p.as_dict().items()})
                 for p in whole]  # (the reward runs on the host: no GPU count changes it)
        pool_layout = False  # the whole cluster's layout, its time scaled: its all-to-alls too
        notes.append(f"the {train_gpus}-GPU training pool cannot run the described parallelism ({e}): disaggregated "
                     f"schedulers take the whole cluster's trainer time x {scale:g}")
    switch = model.switch(d.total_gpus, instance, gen_gpu.name)
    weights = float(spec.weight_bytes)
    moe = d.training.ep > 1 and spec.is_moe
    alltoall_whole = [model.alltoall_bytes(d.total_gpus, float(t), per_step) for t in tokens] if moe else None
    # on the training pool's own layout a network model re-times them; the whole cluster's, scaled, it cannot
    parts: list[tuple[AllToAll, ...] | None] | None = (
        [model.alltoalls(train_gpus, float(t), per_step) for t in tokens] if moe and pool_layout else None)
    sync = reprice_syncs([weights] * steps, gen_gpus, train_gpus, train_gpu.name, tensors=spec.tensors)
    job = Job(id=0, name=d.name or "described", first=[i * per_step for i in range(steps + 1)],
              generation=generation, train_s=[p.train for p in split],
              forward_s=[p.old_logprob + p.reference + p.critic for p in split],
              optimizer_s=[p.optimizer for p in split], sync_s=sync, reward_s=[p.reward for p in split],
              other_s=[0.0] * steps, engines=gen_gpus // instance, max_new_tokens=int(response.max()),
              sync_bytes=[weights] * steps, sync_tensors=spec.tensors,
              alltoalls=parts, alltoall_bytes=None if parts is not None else alltoall_whole,
              extra={"params": float(spec.params), "weight_bytes": weights},
              phases=[_trainer_phases(p) for p in split],
              calibration=constants,
              colocated=Colocated(trainer_s=[p.trainer for p in whole], to_train_s=switch.sleep,
                                  to_generate_s=switch.refit + switch.wake, gpus=d.total_gpus,
                                  phases={"sleep": switch.sleep, "refit": switch.refit, "wake": switch.wake},
                                  alltoall_bytes=alltoall_whole,
                                  trainer_phases=[_trainer_phases(p) for p in whole]))
    frame = pl.DataFrame({"step": step_of, "group": np.arange(step_of.size, dtype=np.int32) // d.batch.samples
                          % d.batch.prompts, "prompt_tokens": prompt.astype(np.int32),
                          "output_tokens": response.astype(np.int32), "env_s": np.zeros(step_of.size),
                          "job": np.zeros(step_of.size, np.int32), "next_turn": np.full(step_of.size, -1, np.int64)})
    described = (f"described job {d.name or '(unnamed)'}: {spec.name} {d.precision} on {d.total_gpus} {gen_gpu.name}"
                 f"{' + ' + train_gpu.name if train_gpu.name != gen_gpu.name else ''}, {framework.name} profile, "
                 f"{d.batch.prompts} x {d.batch.samples} samples a step, mean response {response.mean():,.0f} tokens "
                 f"({(response >= np.floor(cap)).mean():.0%} at the cap), generation TP {d.generation.tp} PP "
                 f"{d.generation.pp}, training TP {d.training.tp} CP {d.training.cp} EP {d.training.ep} PP "
                 f"{d.training.pp}")
    fabric = local_fabric(gen_gpus, train_gpus, train_gpu.name)  # where reprice_syncs priced the syncs
    if cost.sync_gbps is not None:
        notes.append(f"weight syncs priced on {fabric} (cost.sync_gbps unused; --topology, when given, prices them "
                     "instead)")
    return Prepared(frame, [job], cluster, [described, *notes], sync_fabric=fabric, calibration=constants,
                    recorded=False, source={"description": to_dict(d)})  # as replayed: --steps, --gen-gpus... in


def _trainer_phases(p: Phases) -> dict[str, float]:
    out = p.as_dict()
    del out["reward"]
    return out
