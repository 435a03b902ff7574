"""Workload extraction: what a bundle asks the replay engine to redo, step by step, and retargeting it.

``extract`` reads the samples (prompt and output tokens, grouped by prompt) and, per step, the measured
training work (phase spans), the weight-sync volume and the collective volume. ``retarget`` draws a new
workload of another shape from the recorded one: seeded, vectorised, and keeping each prompt's samples
together, so the within-group length correlation of GRPO-style batches survives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np
import polars as pl

from rltrace.bundle import Bundle
from rltrace.errors import ConfigError
from rltrace.manifest import ModelInfo, Pool
from rltrace.scalars import integer, number

REFERENCE_PHASES = ("reference", "old_logprob", "critic")
# A recording's first step carries one-time start-up (vLLM compiles and allocates on its first requests: decode
# ran 2-3x slower in step 0 of the tiny RL example, and its first training step up to 1.8x slower per token):
# with more than two steps, rates and fits leave it out.
WARMUP_STEPS = 1
Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)


@dataclass(frozen=True, slots=True)
class Workload:
    """Per-sample and per-step work, in DataFrames (see the column lists below)."""

    samples: pl.DataFrame
    """step, group (dense per step), prompt_tokens, output_tokens, truncated, engine (dense index of the
    recording's engine, null when retargeted), turn, trajectory (dense per step; a single-turn sample is its
    own), env_s (environment time between the trajectory's previous turn's finish and this turn's arrival; 0
    for a first turn): one row per sample (one per turn of a multi-turn trajectory), in recorded arrival
    order"""
    steps: pl.DataFrame
    """step, samples, prompt_tokens, output_tokens, train_s, reference_s, optimizer_s, weight_sync_s,
    reward_s, sync_bytes, collective_bytes, wall_s, generation_s, other_s. Phase times are the slowest actor's summed
    spans (null when not recorded); train and reference time count only after the step's last sample
    finished (what lies on a synchronous step's critical path); wall_s is the measured step time (first arrival to
    the next step's first arrival; the last step ends with its last recorded activity) and generation_s the first
    arrival to the last finish; other_s is the part of wall_s that no phase explains"""
    model: ModelInfo | None
    cluster: dict[str, Pool]
    max_new_tokens: int | None


def _phase_seconds(spans: pl.LazyFrame, phases: tuple[str, ...], name: str,
                   after: pl.LazyFrame | None = None) -> pl.LazyFrame:
    """Per step, the slowest actor's summed span time in ``phases``; with ``after`` (step, after_ns), only
    the part of each span after that time counts."""
    chosen = spans.filter(pl.col("phase").is_in(list(phases)))
    start = pl.col("start_ns")
    if after is not None:
        chosen = chosen.join(after, on="step", how="left")
        start = pl.max_horizontal("start_ns", pl.col("after_ns").fill_null(pl.col("start_ns")))
    per_actor = chosen.group_by("step", "actor").agg(
        ((pl.col("end_ns") - start).clip(lower_bound=0).sum() / 1e9).alias(name))
    return per_actor.group_by("step").agg(pl.col(name).max())  # the slowest actor bounds the phase


def _last_activity(bundle: Bundle) -> pl.LazyFrame:
    """Per step, the end of its last span, request or weight-sync flow (where the last step's time ends)."""
    ends = [
        bundle.spans.select("step", pl.col("end_ns")),
        bundle.requests.select("step", pl.col("finish_ns").alias("end_ns")),
        bundle.weight_syncs.select(pl.coalesce("step", pl.col("version") - 1).cast(pl.Int32).alias("step"), "end_ns"),
    ]
    return pl.concat(ends).group_by("step").agg(pl.col("end_ns").max().alias("_last_ns"))


def extract(bundle: Bundle) -> Workload:
    """The workload a bundle records."""
    req = bundle.requests
    trajectory = pl.coalesce("trajectory_id", "request_id")
    previous_finish = pl.col("finish_ns").sort_by("turn").shift(1).over("step", trajectory)
    turns = req.select("request_id", (pl.col("arrival_ns").sort_by("turn") - previous_finish).over("step", trajectory)
                       .alias("_gap_ns"))
    # A trajectory's prompt is its first turn's: later turns' prompts grow with the conversation, so a
    # collector that names groups by prompt gives each turn its own.
    prompt_group = pl.col("group_id").sort_by("turn").first().over("step", trajectory)
    samples = req.join(turns, on="request_id", how="left").sort("step", "arrival_ns", "turn", "request_id").select(
        "step",
        prompt_group.rank("dense").over("step").cast(pl.Int32).sub(1).alias("group"),
        "prompt_tokens",
        "output_tokens",
        (pl.col("finish_reason") == "length").alias("truncated"),
        pl.col("engine").rank("dense").cast(pl.Int32).sub(1).alias("engine"),
        "turn",
        trajectory.rank("dense").over("step").cast(pl.Int32).sub(1).alias("trajectory"),
        (pl.col("_gap_ns").fill_null(0).clip(lower_bound=0) / 1e9).alias("env_s"),
    )
    per_step = req.group_by("step").agg(
        pl.len().alias("samples"),
        pl.col("prompt_tokens").cast(pl.Int64).sum(),  # int32 columns: an int32 sum would wrap
        pl.col("output_tokens").cast(pl.Int64).sum(),
        pl.col("arrival_ns").min().alias("_first_ns"),
        ((pl.col("finish_ns").max() - pl.col("arrival_ns").min()) / 1e9).alias("generation_s"),
    )
    syncs = bundle.weight_syncs.with_columns(pl.coalesce("step", pl.col("version") - 1).cast(pl.Int32).alias("step"))
    # Trainer-sourced flows are the sync; a generator's own reload of what it received is not counted twice.
    from_trainers = syncs.filter(pl.col("src").str.starts_with("trainer/"))
    has_trainer_flows = from_trainers.select(pl.len()).collect().item() > 0
    sync = (from_trainers if has_trainer_flows else syncs).group_by("step").agg(
        pl.col("bytes").cast(pl.Float64).sum().alias("sync_bytes"))
    coll = bundle.collectives.group_by("step").agg(pl.col("bytes_in").cast(pl.Float64).sum().alias("collective_bytes"))
    # Training-side work counts from the moment the step's samples are all generated: a trainer span that
    # opened earlier (a forward pass overlapping generation, or waiting for the batch) is not on the step's
    # critical path before that.
    generated = req.group_by("step").agg(pl.col("finish_ns").max().alias("after_ns"))
    phases = [
        _phase_seconds(bundle.spans, ("train",), "train_s", generated),
        _phase_seconds(bundle.spans, REFERENCE_PHASES, "reference_s", generated),
        _phase_seconds(bundle.spans, ("optimizer",), "optimizer_s"),
        _phase_seconds(bundle.spans, ("weight_sync",), "weight_sync_s"),
        _phase_seconds(bundle.spans, ("reward",), "reward_s"),
        _last_activity(bundle),
        sync,
        coll,
    ]
    steps = per_step
    for frame in phases:
        steps = steps.join(frame, on="step", how="left")
    steps = steps.sort("step").with_columns(
        ((pl.col("_first_ns").shift(-1).fill_null(pl.col("_last_ns")) - pl.col("_first_ns")) / 1e9).alias("wall_s")
    ).drop("_first_ns", "_last_ns")
    # Measured step time that no phase explains (moving the batch to the trainers, writing weights, ...).
    explained = pl.sum_horizontal(pl.col(c).fill_null(0) for c in (
        "generation_s", "reward_s", "train_s", "reference_s", "optimizer_s", "weight_sync_s"))
    # A request log (an import) has arrivals but no finishes: nothing was measured, so nothing is left over.
    steps = steps.with_columns(pl.when(pl.col("generation_s").is_null()).then(0.0)
                               .otherwise((pl.col("wall_s") - explained).clip(lower_bound=0)).alias("other_s"))
    samples_df, steps_df = pl.collect_all([samples, steps])
    m = bundle.manifest
    return Workload(
        samples=samples_df,
        steps=steps_df.with_columns(pl.col("sync_bytes", "collective_bytes").fill_null(0)),
        model=m.model,
        cluster=dict(m.cluster),
        max_new_tokens=m.rl.max_new_tokens if m.rl else None,
    )


def steady(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows of ``frame`` (anything with a step column) after its first ``WARMUP_STEPS`` steps, when it holds
    more than two steps; else all of them."""
    steps = frame["step"].unique().sort()
    return frame.filter(pl.col("step") >= steps[WARMUP_STEPS]) if len(steps) > WARMUP_STEPS + 1 else frame


def renumber_steps(frame: Frame, steps: Sequence[int]) -> Frame:
    """The rows of ``frame`` in the recorded ``steps``, with the step column renumbered 0, 1, ... in step order."""
    wanted = sorted(set(steps))
    return frame.filter(pl.col("step").is_in(wanted)).with_columns(
        pl.col("step").replace_strict({s: i for i, s in enumerate(wanted)}, return_dtype=pl.Int32))


def step_ranges(steps: Sequence[int]) -> str:
    """Sorted step numbers as runs ("0..11", "3, 5..7"): a hundred steps read in one line, not a cut-off list."""
    runs: list[list[int]] = []
    for s in steps:
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return ", ".join(f"{a}" if a == b else f"{a}, {b}" if b == a + 1 else f"{a}..{b}" for a, b in runs)


def select_steps(workload: Workload, steps: Sequence[int]) -> Workload:
    """Only the recorded ``steps``, renumbered 0, 1, ... in step order: for example one setting's steps of a
    recording that alternates two settings step by step. Each step keeps what was measured in the full
    recording (its wall time still ends where the next recorded step began)."""
    present = set(workload.steps["step"].to_list())
    missing = sorted(set(steps) - present)
    if not steps or missing:
        which = (f"recorded step {missing[0]} is" if len(missing) == 1 else
                 f"recorded steps {step_ranges(missing) or '(none)'} are")
        raise ConfigError(f"{which} not in the bundle, whose steps are {step_ranges(sorted(present)) or '(none)'}")
    return replace(workload, samples=renumber_steps(workload.samples, steps),
                   steps=renumber_steps(workload.steps, steps))


def _whole_steps(rng: np.random.Generator, per_step: np.ndarray, sizes: np.ndarray, starts: np.ndarray,
                 steps: int, per: int) -> np.ndarray:
    """Trajectory indices for ``steps`` new steps made of whole recorded steps (see :func:`retarget`)."""
    recorded = len(per_step)
    order = np.concatenate([rng.permutation(recorded) for _ in range(-(-steps // recorded))])[:steps]
    first_group = np.concatenate([[0], np.cumsum(per_step)[:-1]]).astype(np.int64)
    picked = (first_group[order][:, None] + np.arange(per_step[0])).ravel()  # every group of each chosen step
    size = sizes[picked][:, None]
    # Without replacement: the first ``per`` of a random permutation of each group (keys past its size sort
    # last); a group smaller than ``per`` draws with replacement instead.
    keys = np.where(np.arange(size.max()) < size, rng.random((len(picked), int(size.max()))), 2.0)
    distinct = np.argsort(keys, axis=1)[:, :per] if per <= keys.shape[1] else np.zeros((len(picked), per), np.int64)
    repeated = np.floor(rng.random((len(picked), per)) * size).astype(np.int64)
    within = np.where(size >= per, distinct, repeated)
    rows: np.ndarray = (starts[picked][:, None] + within).ravel()
    return rows


def retarget(
    workload: Workload,
    *,
    steps: int | None = None,
    prompts_per_step: int | None = None,
    samples_per_prompt: int | None = None,
    max_new_tokens: int | None = None,
    seed: int = 0,
) -> Workload:
    """A workload of another shape drawn from the recorded one (same seed, same result).

    With the recorded number of prompts per step, each new step is a whole recorded step (its prompts
    together: a step's batch is one draw of the dataset, and with long tails which prompts share a step sets
    its time), the recorded steps taken in a seeded order, each once before any twice; each of its prompts
    gets ``samples_per_prompt`` of its recorded samples, drawn without replacement while there are enough (so
    4 of a prompt's 8 recorded responses are 4 distinct responses, as 4 fresh ones would be). With another
    number of prompts, new prompts are recorded prompts drawn with replacement and each new sample one of its
    prompt's recorded samples, drawn with replacement. A sample of a multi-turn recording is a whole trajectory: its
    turns, their lengths and the environment time between them travel together. A recording without groups (every
    sample alone in its group) has its samples drawn independently. Lengths are capped at
    ``max_new_tokens`` (per turn); a larger cap cannot lengthen samples the recording truncated (they stay at
    the recorded cap, marked truncated). Per-step training time scales with tokens at the recorded seconds
    per token; optimizer and sync times and the sync and collective volumes stay at their recorded per-step
    medians. Rates and medians leave out the first step (``WARMUP_STEPS``) when more than two were recorded.
    """
    # Each prompt's trajectories contiguous in recorded order (of their first turns), each trajectory's turns
    # contiguous and in order; single-turn samples keep their recorded order.
    rec = (workload.samples.with_row_index("first").with_columns(pl.col("first").min().over("step", "trajectory"))
           .sort("step", "group", "first", "turn", maintain_order=True).drop("first"))
    if rec.height == 0:
        raise ConfigError("the bundle has no requests to retarget")
    trajectories = rec.group_by("step", "group", "trajectory", maintain_order=True).agg(pl.len().alias("turns"))
    turns = trajectories["turns"].to_numpy().astype(np.int64)
    first_row = np.concatenate([[0], np.cumsum(turns)[:-1]])
    groups = trajectories.group_by("step", "group", maintain_order=True).agg(pl.len().alias("size"))
    sizes = groups["size"].to_numpy().astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    steps = rec["step"].n_unique() if steps is None else steps
    prompts = integer(groups.group_by("step").len()["len"].median()) if prompts_per_step is None else prompts_per_step
    per = int(np.median(sizes)) if samples_per_prompt is None else samples_per_prompt
    for name, value in (("steps", steps), ("prompts_per_step", prompts), ("samples_per_prompt", per)):
        if value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")
    if max_new_tokens is not None and max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be >= 1, got {max_new_tokens}")

    rng = np.random.default_rng(seed)
    n_groups = steps * prompts
    per_step = groups.group_by("step", maintain_order=True).len()["len"].to_numpy()
    if sizes.max() == 1:
        # No group structure recorded (every sample its own group): draw every sample on its own, or each
        # new prompt would be one recorded sample copied ``per`` times.
        drawn = rng.integers(0, len(turns), n_groups * per)
    elif (per_step == prompts).all():
        drawn = _whole_steps(rng, per_step, sizes, starts, steps, per)
    else:
        picked = rng.integers(0, len(sizes), n_groups)
        within = np.floor(rng.random((n_groups, per)) * sizes[picked][:, None]).astype(np.int64)
        drawn = (starts[picked][:, None] + within).ravel()
    # Expand each drawn trajectory into its turns' rows (no per-sample loop): row = its first row + turn index.
    count = turns[drawn]
    offset = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    rows = np.repeat(first_row[drawn], count) + offset
    out = rec["output_tokens"].to_numpy()[rows]
    truncated = rec["truncated"].to_numpy()[rows]
    if max_new_tokens is not None:
        truncated = truncated | (out >= max_new_tokens)
        out = np.minimum(out, max_new_tokens)
    samples = pl.DataFrame(
        {
            "step": np.repeat(np.repeat(np.arange(steps, dtype=np.int32), prompts * per), count),
            "group": np.repeat(np.tile(np.repeat(np.arange(prompts, dtype=np.int32), per), steps), count),
            "prompt_tokens": rec["prompt_tokens"].to_numpy()[rows],
            "output_tokens": out,
            "truncated": truncated,
            "engine": pl.Series([None] * len(rows), dtype=pl.Int32),
            "turn": rec["turn"].to_numpy()[rows],
            "trajectory": np.repeat(np.tile(np.arange(prompts * per, dtype=np.int32), steps), count),
            "env_s": rec["env_s"].to_numpy()[rows],
        }
    ).sort("step", "turn", maintain_order=True)  # arrival order: a step's first turns, then its later ones
    recorded = steady(workload.steps)
    tokens = number((recorded["prompt_tokens"] + recorded["output_tokens"]).sum())

    def seconds_per_token(column: str) -> float | None:
        measured = recorded[column]
        return None if measured.null_count() == recorded.height else number(measured.sum()) / tokens

    rate = {c: seconds_per_token(c) for c in ("train_s", "reference_s")}
    new_steps = samples.group_by("step").agg(
        pl.len().alias("samples"), pl.col("prompt_tokens").cast(pl.Int64).sum(),
        pl.col("output_tokens").cast(pl.Int64).sum(),
    ).sort("step")
    step_tokens = new_steps["prompt_tokens"] + new_steps["output_tokens"]
    # Per-step constants take the median: one stalled sync (0.34 s against 35-60 ms in the other steps of a tiny
    # RL recording) would otherwise add a tenth of itself to every step of a 10-step source.
    keep = {c: recorded[c].median() for c in ("optimizer_s", "weight_sync_s", "reward_s", "other_s", "sync_bytes",
                                                 "collective_bytes")}
    new_steps = new_steps.with_columns(
        *[(step_tokens * r if r is not None else pl.lit(None, pl.Float64)).alias(c) for c, r in rate.items()],
        *[pl.lit(v, pl.Float64).alias(c) for c, v in keep.items()],
        pl.lit(None, pl.Float64).alias("wall_s"),
        pl.lit(None, pl.Float64).alias("generation_s"),
    )
    return replace(workload, samples=samples, steps=new_steps, max_new_tokens=max_new_tokens or workload.max_new_tokens)
