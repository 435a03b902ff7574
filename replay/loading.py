"""What a bundle gives a replay: the :class:`Shape` a user asks of it (pools, GPU kinds, batch), the workload
it draws (:func:`load_workload`, shared by every point of a sweep) and that workload prepared on a cluster
(:func:`prepare_loaded`, or both at once with :func:`from_bundle`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl
from rltrace.replay.cluster import Cluster
from rltrace.replay.run import CostConfig, Prepared, model_spec, prepare
from rltrace.replay.workload import Workload, extract, renumber_steps, retarget, select_steps

from rltrace.bundle import Bundle
from rltrace.catalog import ModelSpec, get_gpu, get_model
from rltrace.errors import ConfigError, HardwareUnknown
from rltrace.limits import check_shape
from rltrace.manifest import Pool

DEFAULT_MAX_SEQS = 256


@dataclass(frozen=True, kw_only=True, slots=True)
class Shape:
    """How to reshape the recorded workload and cluster (None keeps what the bundle recorded)."""

    gen_gpus: int | None = None
    train_gpus: int | None = None
    gpu: str | None = None
    """GPU kind of both pools"""
    gen_gpu: str | None = None
    """GPU kind of the generation pool (overrides ``gpu``)"""
    train_gpu: str | None = None
    """GPU kind of the training pool (overrides ``gpu``)"""
    tp: int | None = None
    max_seqs: int | None = None
    """vLLM's max_num_seqs per instance (None: 256, vLLM's server default; a described job's framework's)"""
    model: str | None = None
    steps: int | None = None
    prompts_per_step: int | None = None
    samples_per_prompt: int | None = None
    max_new_tokens: int | None = None
    seed: int | None = None
    """seed of the resampled draw (None: 0, or a described job's own ``seed``)"""
    source_steps: tuple[int, ...] | None = None
    """replay (and fit costs to) only these recorded steps, renumbered 0, 1, ...; None takes them all"""

    @property
    def reshapes(self) -> bool:
        """Whether the workload is drawn anew from the recorded one (seeded) rather than replayed as it is."""
        return any(v is not None for v in (self.steps, self.prompts_per_step, self.samples_per_prompt,
                                           self.max_new_tokens, self.model))

    def __post_init__(self) -> None:
        check_shape(self)  # types and limits (rltrace.limits) before any resampling allocates

    def drawn(self) -> Shape:
        """Only what draws the workload (:func:`load_workload` reads no pool or GPU kind): the key under which
        the points of a sweep or advise share one loaded workload."""
        return Shape(model=self.model, steps=self.steps, prompts_per_step=self.prompts_per_step,
                     samples_per_prompt=self.samples_per_prompt, max_new_tokens=self.max_new_tokens, seed=self.seed,
                     source_steps=self.source_steps)


def _given(value: int | None, default: int) -> int:
    return default if value is None else value


@dataclass(frozen=True, slots=True)
class Loaded:
    """A bundle's workload as a shape draws it (steps, prompts, lengths, model), before any cluster: what every
    pool size and GPU kind of one sweep or advise shares (:func:`load_workload`, then :func:`prepare_loaded`)."""

    path: Path
    workload: Workload
    recorded_pools: dict[str, Pool]
    """the recording's pools (rollout, trainer) by role, as extracted"""
    recording: pl.DataFrame
    iterations: pl.LazyFrame
    measured: bool
    """timings from a real run (``rltrace record`` or an import)"""
    model_known: bool
    """whether the recorded model's architecture is known (``--model`` rescales the collectives only then)"""


def check_replayable(bundle: Bundle) -> None:
    """Refuse a bundle with no requests (no RL step to replay), naming what can use it instead."""
    if bundle.requests.select(pl.len()).collect().item() == 0:
        raise ConfigError(f"{bundle.path}: no requests, so no RL step to replay (an imported profiler or execution "
                          "trace holds collectives only): `rltrace replay-comms BUNDLE --ranks N` re-issues them")


def load_workload(bundle: Bundle, shape: Shape) -> Loaded:
    """Extract a bundle's workload and retarget it as ``shape`` asks; ``shape``'s pools and GPU kinds are not read."""
    check_replayable(bundle)
    workload = extract(bundle)
    recording, iterations = bundle.requests, bundle.iterations
    steps = shape.source_steps
    if steps is None:  # a replay's steps are 0, 1, ...: a bundle's that start later or skip some are renumbered
        recorded = workload.steps["step"].to_list()
        steps = None if recorded == list(range(len(recorded))) else tuple(recorded)
    if steps is not None:
        workload = select_steps(workload, steps)
        recording = renumber_steps(recording, steps)
        iterations = renumber_steps(iterations, steps)
    pools = dict(workload.cluster)
    if shape.reshapes:
        workload = retarget(workload, steps=shape.steps, prompts_per_step=shape.prompts_per_step,
                            samples_per_prompt=shape.samples_per_prompt, max_new_tokens=shape.max_new_tokens,
                            seed=_given(shape.seed, 0))
    before: ModelSpec | None = None
    if shape.model:  # measured phase times belong to the recorded model: use FLOPs for the new one
        measured = ("train_s", "reference_s", "optimizer_s", "weight_sync_s")
        # so do the volumes: a sync delivers a copy of the new model (0: its weights, in prepare), and the
        # recorded training collectives (data-parallel gradients and weights) carry its parameters instead, in the
        # trainer's precision whatever the checkpoint's (an FP8 serving copy does not halve them)
        try:
            before = model_spec(workload.model)
        except ConfigError:  # a half-written architecture: --model is the way to replay such a bundle
            before = None
        ratio = get_model(shape.model).params / before.params if before else 1.0
        unmeasured = workload.steps.with_columns(*(pl.lit(None, pl.Float64).alias(c) for c in measured),
                                                 pl.lit(0.0).alias("sync_bytes"),  # 0: a copy of the new model
                                                 pl.col("collective_bytes") * ratio)
        workload = replace(workload, steps=unmeasured)
    return Loaded(bundle.path, workload, pools, recording.collect(), iterations, bundle.manifest.source == "record",
                  before is not None)


def prepare_loaded(loaded: Loaded, shape: Shape, cost: CostConfig, prices: dict[str, float] | None = None, *,
                   step_weights: dict[int, float] | None = None) -> Prepared:
    """Prepare a loaded workload on the cluster ``shape`` gives (its pools, GPU kinds, TP, batch limit)."""
    rollout, trainer = loaded.recorded_pools.get("rollout"), loaded.recorded_pools.get("trainer")
    recorded = {p.device for p in (rollout, trainer) if p is not None}
    for asked in (shape.gpu, shape.gen_gpu, shape.train_gpu):  # a recorded device may be uncatalogued ("cpu")
        if asked is not None and asked not in recorded:
            get_gpu(asked)
    gen_gpu = shape.gen_gpu or shape.gpu or (rollout.device if rollout else None)
    train_gpu = shape.train_gpu or shape.gpu or (trainer.device if trainer else gen_gpu)
    if gen_gpu is None or train_gpu is None:
        raise HardwareUnknown("the bundle records no GPU kind: give --gpu")
    for role, pool, given, flag in (("rollout", rollout, shape.gen_gpus, "--gen-gpus"),
                                    ("trainer", trainer, shape.train_gpus, "--train-gpus")):
        if pool is not None and given is None and pool.count < 1:  # "pools need at least one GPU each", unexplained
            raise ConfigError(f"the bundle records {pool.count} GPUs for its {role} pool (manifest.json "
                              f"cluster.{role}.count): replay it with {flag} N")
    cluster = Cluster(
        gen_gpus=_given(shape.gen_gpus, rollout.count if rollout else 1),
        train_gpus=_given(shape.train_gpus, trainer.count if trainer else 1),
        gen_gpu=gen_gpu,
        train_gpu=train_gpu,
        tp=_given(shape.tp, rollout.tp if rollout else 1),
        max_seqs=shape.max_seqs or DEFAULT_MAX_SEQS,
        price_per_gpu_hour=prices,
    )
    workload = loaded.workload
    prepared = prepare(workload, cluster, cost, recording=loaded.recording, iterations=loaded.iterations,
                       measured=loaded.measured, model=shape.model, step_weights=step_weights)
    if shape.model and not loaded.model_known and workload.steps["collective_bytes"].sum():
        prepared.notes.append("training collectives as recorded: the recorded model is unknown, so they are not "
                              f"rescaled to {shape.model}")
    return prepared


def from_bundle(bundle: Bundle, shape: Shape, cost: CostConfig, prices: dict[str, float] | None = None, *,
                step_weights: dict[int, float] | None = None) -> Prepared:
    """Extract, retarget (when ``shape`` asks) and prepare a bundle's workload on the cluster ``shape`` gives;
    ``step_weights`` weighs the (renumbered) recorded steps in a generation-cost fit to the trace."""
    return prepare_loaded(load_workload(bundle, shape), shape, cost, prices, step_weights=step_weights)
