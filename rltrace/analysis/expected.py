"""Is it normal: each phase's measured time beside what the hardware should give, and beside published runs.

Per phase, the mean measured seconds a step over the judged steps (``rltrace.replay.workload.extract``: a phase
is its slowest actor's spans) beside:

- **expected**: the cost models for the recorded devices, model and batch. Generation is the recording
  replayed as it ran with the roofline generation cost (``cost.generation=roofline``); training is the 6N
  rule at the published MFU (``rltrace.replay.costmodels.training``) over each step's tokens on the recorded
  training devices; the optimizer reads and writes Adam's state once; the weight sync moves one copy of the
  weights (every engine receives its copy at once) at the default sync bandwidth. A device the GPU catalog lacks
  (``cpu``) needs a profile measured on it (``rltrace calibrate --device cpu [--ranks 2]``): its measured peaks,
  efficiencies and broadcast rate.
- **published**: the same phase in the project's published-runs set (``rltrace estimate validate-rl``'s 38
  runs) where one ran the same model on the same GPU kind, scaled to this bundle's samples per step and devices.

A phase taking at least ``SLOW_RATIO`` times its expected time, by more than the diagnosis's floor, is a
``slow_phase`` finding costing the difference, where the expectation is the cost models' for a catalogued GPU
(``judged``). One from a profile of a device the catalog lacks is shown, not judged: on this project's 2-core VM a
tiny model's CPU profile read 2.6% compute efficiency in one calibration and 76-94% in others, its expectations
from 10x what a healthy recording took to a fortieth of it. The weight sync's slowness is judged by ``transfers``
instead.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from rltrace.analysis.findings import Context, Finding
from rltrace.bundle import Bundle
from rltrace.calibration.defaults import ADAM_BYTES_PER_PARAM, SYNC_GBPS
from rltrace.catalog import GPUSpec, get_gpu
from rltrace.errors import ConfigError
from rltrace.replay.costmodels.profile import device_from_profile, factors
from rltrace.replay.costmodels.training import step_seconds
from rltrace.replay.described.validation import read_runs
from rltrace.replay.loading import Shape, from_bundle
from rltrace.replay.run import CostConfig, ReplayConfig, model_spec, replay
from rltrace.replay.workload import Workload
from rltrace.scalars import number

SLOW_RATIO = 2.0
"""a phase this many times its expected time is slow"""
PHASES = (("generate", "generation_s", "gen_s"), ("train", "train_s", "train_s"),
          ("reference", "reference_s", None), ("optimizer", "optimizer_s", None),
          ("weight_sync", "weight_sync_s", "refit_s"))
"""(phase, workload column, published-runs column); ``reference`` holds the forward-only log-prob passes and a
PPO critic's update (rltrace.replay.workload.REFERENCE_PHASES), listed only where the recording has them"""
COLLECTIVE = ("gloo", "nccl")
"""the sync methods a profile's broadcasts time"""
SCHEMA = {"phase": pl.String, "measured_s": pl.Float64, "expected_s": pl.Float64, "expected_from": pl.String,
          "ratio": pl.Float64, "judged": pl.Boolean, "published_s": pl.Float64, "published_run": pl.String}
UNJUDGED = " (shown, not judged: a profile's estimate on a device the GPU catalog lacks)"
"""what ``expected_from`` adds where ``judged`` is false"""


def _device(name: str | None, profile: pl.DataFrame | None) -> tuple[GPUSpec | None, float | None]:
    """The device's peaks and, for a device only a profile knows, the compute efficiency it measured (its
    MFU: the published figures are GPUs'); (None, None) when nothing knows the device."""
    if name is None:
        return None, None
    try:
        return get_gpu(name), None
    except ConfigError:
        device = device_from_profile(profile, name) if profile is not None else None
    if device is None or profile is None:
        return None, None
    try:
        return device, factors(profile, name, 1).compute_efficiency
    except ConfigError:  # peaks without GEMM rows: the published MFU
        return device, None


def _catalogued(device: str | None) -> bool:
    try:
        return device is not None and get_gpu(device) is not None
    except ConfigError:
        return False


def _no_model(device: str | None, profile: pl.DataFrame | None) -> str:
    """Why a recorded device has no expected time: no profile given, or one of other devices."""
    if profile is None:
        return f"no cost model for {device!r}: give --profile"
    return (f"no cost model for {device!r}: the profile is of {', '.join(sorted(set(profile['gpu'].to_list())))} "
            "(measure one on it: rltrace calibrate --device)")


def _generation(bundle: Bundle, cost: CostConfig, max_seqs: int | None,
                profile: pl.DataFrame | None) -> tuple[float | None, str]:
    rollout = bundle.manifest.cluster.get("rollout")
    try:
        prepared = from_bundle(bundle, Shape(max_seqs=max_seqs), CostConfig(generation="roofline",
                                                                            profile=cost.profile))
        metrics = replay(prepared, "as-recorded", ReplayConfig()).metrics
    except ConfigError as e:
        device = rollout.device if rollout else None
        return None, (_no_model(device, profile) if device and "roofline" in str(e)
                      else f"no roofline ({str(e).split(':')[0]})")
    return float(metrics["phases_s_per_step"].get("generation", 0.0)), "roofline replay of the recorded requests"


def phase_table(bundle: Bundle, workload: Workload, ctx: Context, cost: CostConfig,
                profile: pl.DataFrame | None, max_seqs: int | None = None,
                transport: tuple[float, float] | None = None) -> pl.DataFrame:
    """One row per phase (see the module text): phase, measured_s, expected_s, expected_from, ratio (measured
    over expected), judged (whether a slow phase is a finding), published_s, published_run; nulls where nothing
    gives a figure."""
    steps = workload.steps.filter(pl.col("step").is_in(ctx.steps))
    m = bundle.manifest
    trainer, rollout = m.cluster.get("trainer"), m.cluster.get("rollout")
    try:
        spec = model_spec(m.model)
    except ConfigError:
        spec = None
    train_gpu, mfu = _device(trainer.device if trainer else None, profile)
    gpus = trainer.count if trainer else 1
    tokens = (steps["prompt_tokens"] + steps["output_tokens"]).cast(pl.Float64).to_numpy()
    per_sample = tokens / np.maximum(steps["samples"].to_numpy(), 1)
    expected: dict[str, tuple[float | None, str]] = {"generate": _generation(bundle, cost, max_seqs, profile)}
    catalogued = {phase: _catalogued(pool.device if pool else None) for phase, pool in
                  (("generate", rollout), ("train", trainer), ("optimizer", trainer))}
    device = trainer.device if trainer else None
    why = "no model recorded" if spec is None else _no_model(device, profile)
    if spec is not None and train_gpu is not None:
        train = [step_seconds(spec, train_gpu, tokens=t, gpus=gpus, seq_len=s, mfu=mfu).seconds
                 for t, s in zip(tokens, per_sample)]
        expected["train"] = (float(np.mean(train)) if train else None,
                             "6N FLOPs at the published MFU" if mfu is None else
                             f"6N FLOPs at the profile's compute efficiency ({mfu:.1%})")
        expected["optimizer"] = (ADAM_BYTES_PER_PARAM * spec.params / gpus / train_gpu.hbm_bytes_per_s,
                                 "Adam's state read and written once")
    else:
        expected["train"] = expected["optimizer"] = (None, why)
    # a step's sync bytes hold one copy of the weights per engine, moved to every engine at once (as replay prices
    # them): the time is one copy's
    engines = rollout.instances if rollout else 1
    sync_bytes = number(steps["sync_bytes"].mean() or 0.0) / engines
    if transport is not None:
        rate, per_op = transport
        step = pl.coalesce("step", pl.col("version") - 1)
        sends = bundle.weight_syncs.filter(pl.col("src").str.starts_with("trainer/"), step.is_in(ctx.steps),
                                           pl.col("method").is_in(COLLECTIVE))
        # the tensors of one copy (each engine's flow carries them all)
        per_step = number(sends.select(pl.col("tensors").sum()).collect().item()) / max(len(ctx.steps), 1) / engines
        expected["weight_sync"] = (sync_bytes / rate + per_step * per_op, "the profile's broadcasts")
    elif train_gpu is not None and profile is None:
        expected["weight_sync"] = (sync_bytes / (SYNC_GBPS * 1e9), f"{SYNC_GBPS:g} GB/s, the default sync bandwidth")
    elif profile is None:
        expected["weight_sync"] = (None, "no transport rate: give --profile")
    else:  # given, but it timed no broadcast (rltrace calibrate --ranks 2 and more does)
        expected["weight_sync"] = (None, ("no transport rate: the profile timed no broadcast (measure one with "
                                         "rltrace calibrate --device ... --ranks 2)"))
    published = _published(m.model.name if m.model else None, trainer.device if trainer else None,
                           number(steps["samples"].mean() or 0.0),
                           (trainer.count if trainer else 0) + (rollout.count if rollout else 0))
    expected["reference"] = (None, "log-prob passes and a critic: measured only")
    rows = []
    for phase, column, _ in PHASES:
        present = column in steps.columns and steps[column].null_count() < steps.height
        measured = number(steps[column].mean()) if present else None
        if phase == "reference" and not measured:
            continue  # a job without them (GRPO without a KL term): no row
        value, basis = expected[phase]
        judged = value is not None and catalogued.get(phase, True)
        pub = published.get(phase, (None, None))
        rows.append({"phase": phase, "measured_s": measured, "expected_s": value,
                     "expected_from": basis if judged or value is None else basis + UNJUDGED,
                     "ratio": measured / value if measured is not None and value else None, "judged": judged,
                     "published_s": pub[0], "published_run": pub[1]})
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


def _published(model: str | None, gpu: str | None, samples: float, devices: int) -> dict[str, tuple[float, str]]:
    """phase -> (seconds a step scaled to this bundle, run id) of the closest comparable published run."""
    if model is None or gpu is None or not samples or not devices:
        return {}
    runs = read_runs().filter(pl.col("model").str.to_lowercase() == model.lower(),
                              pl.col("gpu").str.to_lowercase() == gpu.lower())
    if not runs.height:
        return {}
    runs = runs.with_columns((pl.col("prompts") * pl.col("samples")).alias("_batch"))
    run = runs.sort((pl.col("_batch") - samples).abs()).row(0, named=True)
    scale = samples / max(run["_batch"] or 1, 1) * (run["gpus"] or devices) / devices
    return {phase: (float(run[col]) * scale, str(run["run_id"])) for phase, _, col in PHASES
            if col is not None and run.get(col) is not None}


def slow_phases(table: pl.DataFrame, ctx: Context) -> list[Finding]:
    """Judged phases at least ``SLOW_RATIO`` times their expected time (the weight sync left to ``transfers``)."""
    findings = []
    for row in table.filter(pl.col("ratio") >= SLOW_RATIO, pl.col("phase") != "weight_sync",
                            pl.col("judged")).iter_rows(named=True):
        lost = row["measured_s"] - row["expected_s"]
        if lost < ctx.floor():
            continue
        published = (f"; the comparable published run {row['published_run']} gives {row['published_s']:.3g} s "
                     "scaled to this batch" if row["published_s"] is not None else "")
        findings.append(Finding(
            kind="slow_phase", phase=row["phase"], lost_s_per_step=lost,
            evidence=(f"{row['phase']} took {row['measured_s']:.3f} s a step, {row['ratio']:.1f}x the "
                      f"{row['expected_s']:.3f} s the cost model gives ({row['expected_from']}){published}."),
            fix=(f"Profile the {row['phase']} phase (torch.profiler, or rltrace calibrate on this machine to check "
                 "the expectation): look for small kernels, host synchronisation, recomputation or a slow "
                 "precision path.")))
    return findings
