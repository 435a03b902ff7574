"""Fidelity: how close a replay comes to the measured step time of a real recording.

``as_recorded_error`` replays a bundle as it was recorded; ``retarget_error`` replays bundle A reshaped to
bundle B's batch (prompts and samples per prompt, steps) and holds it against B's measurement;
``cost_transfer_error`` is the part of that error that A's fitted iteration cost carries on B's own recorded
iterations. The first two compare mean step time over the steady steps: step 0 of a recording carries one-time
start-up (vLLM's first-request compilation and allocation) that no steady-state model reproduces, so the first step
of each side is left out. Each comes with the 90% interval of its replicates (replay/uncertainty.py): seeds of the
retargeted draw and bootstrap draws of the steps the generation cost is fitted to.

A and B may also be two sets of steps of one recording that alternates two settings step by step
(``settings`` finds them): interleaved, both settings see the same machine, so a drift in the machine's
speed between two separate recordings does not count against the replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from rltrace.replay.costmodels.iteration_fit import fit_iterations, iteration_features
from rltrace.replay.loading import Shape, from_bundle
from rltrace.replay.run import CostConfig, ReplayConfig, replay
from rltrace.replay.uncertainty import DEFAULT_REPLICATES, replicate
from rltrace.replay.workload import WARMUP_STEPS, extract, renumber_steps, steady

from rltrace.bundle import Bundle
from rltrace.scalars import integer


@dataclass(frozen=True, slots=True)
class Fidelity:
    measured_s: float
    """mean measured step time over the steady steps"""
    replayed_s: float
    """mean replayed step time over the same steps: the median over the replicates when there are any (the
    point estimate a retarget should be judged by, not one seed's draw), else the single replay's"""
    notes: list[str]
    low_s: float = float("nan")
    """5% quantile of the replicates' mean steady step time (NaN without replicates)"""
    high_s: float = float("nan")
    """95% quantile of the same"""
    measured_se: float = float("nan")
    """standard error of the measured mean, as a share of it (step-to-step spread over sqrt(steps)): how far
    the measurement itself could be from its setting's expected step time. A contention burst on a shared
    machine shows here (one tiny RL recording: 16.8% where quiet ones give 2.5-9%)"""

    @property
    def error(self) -> float:
        """(replayed - measured) / measured"""
        return self.replayed_s / self.measured_s - 1

    @property
    def interval(self) -> tuple[float, float]:
        """the replicates' 90% interval as errors against the measurement"""
        return self.low_s / self.measured_s - 1, self.high_s / self.measured_s - 1


def settings(bundle: Bundle) -> dict[int, tuple[int, ...]]:
    """The recorded steps by their number of samples, smallest setting first."""
    per_step = extract(bundle).steps.group_by("samples").agg(pl.col("step").sort()).sort("samples")
    return {int(k): tuple(v) for k, v in zip(per_step["samples"], per_step["step"])}


def _measured(bundle: Bundle, steps: Sequence[int] | None) -> tuple[float, float]:
    """Mean measured steady step time and its relative standard error."""
    recorded = extract(bundle).steps
    if steps is not None:
        recorded = renumber_steps(recorded, steps).sort("step")
    wall = recorded["wall_s"][WARMUP_STEPS:].to_numpy()
    mean = float(wall.mean())
    se = float(wall.std(ddof=1) / np.sqrt(len(wall)) / mean) if len(wall) > 1 else float("nan")
    return mean, se


def _replayed(bundle: Bundle, shape: Shape, cost: CostConfig, measurement: tuple[float, float],
              replicates: int) -> Fidelity:
    measured, se = measurement
    prepared = from_bundle(bundle, shape, cost)
    config = ReplayConfig()
    point = float(replay(prepared, "as-recorded", config).metrics["step_time_s"]["steady_mean"])
    spread = replicate(bundle, shape, cost, prepared, {"as-recorded": {}}, config, count=replicates)
    if not spread:
        return Fidelity(measured, point, prepared.notes, measured_se=se)
    summary = spread["as-recorded"].summary()["step_time_s.steady_mean"]
    median = summary["median"] if "seed" in spread["as-recorded"].sources else point
    return Fidelity(measured, median, prepared.notes, summary["p05"], summary["p95"], se)


def _tuple(steps: Sequence[int] | None) -> tuple[int, ...] | None:
    return None if steps is None else tuple(steps)


def as_recorded_error(bundle: Bundle, cost: CostConfig | None = None, *,
                      steps: Sequence[int] | None = None, replicates: int = DEFAULT_REPLICATES) -> Fidelity:
    """Replay ``bundle`` (only its recorded ``steps`` when given) on its own layout and timings; compare mean
    steady step time. The point estimate is the replay with the full fit; ``replicates`` bootstrap draws of
    the fitted steps give its interval."""
    return _replayed(bundle, Shape(source_steps=_tuple(steps)), cost or CostConfig(), _measured(bundle, steps),
                     replicates)


def retarget_error(source: Bundle, target: Bundle, cost: CostConfig | None = None, *,
                   source_steps: Sequence[int] | None = None, target_steps: Sequence[int] | None = None,
                   replicates: int = DEFAULT_REPLICATES) -> Fidelity:
    """Replay ``source`` reshaped to ``target``'s batch shape; compare with ``target``'s measured step time.
    ``source_steps`` and ``target_steps`` restrict either side to some of its recorded steps. The estimate is
    the median over ``replicates`` seeds (each with its own bootstrap of the fitted steps), with their 90%
    interval."""
    rl = extract(target).samples
    if target_steps is not None:
        rl = renumber_steps(rl, target_steps)
    groups = rl.group_by("step", "group").len()
    shape = Shape(steps=rl["step"].n_unique(), prompts_per_step=integer(groups.group_by("step").len()["len"].median()),
                  samples_per_prompt=integer(groups["len"].median()), source_steps=_tuple(source_steps))
    return _replayed(source, shape, cost or CostConfig(), _measured(target, target_steps), replicates)


def _features(bundle: Bundle, steps: Sequence[int] | None) -> pl.DataFrame:
    features = iteration_features(bundle.iterations.collect(), bundle.requests.collect())
    return features if steps is None else renumber_steps(features, steps)


def cost_transfer_error(source: Bundle, target: Bundle, *, source_steps: Sequence[int] | None = None,
                        target_steps: Sequence[int] | None = None) -> float:
    """How far the engine-iteration cost fitted to ``source`` misses ``target``'s recorded iterations, as a share
    of ``target``'s mean steady step time: (predicted - measured) iteration seconds per steady step over the
    measured step time. The part of a retarget's error that is the cost fit carried to other batches on this
    machine, not the replay's reshaping of the work. NaN when either side has too few recorded iterations."""
    fit = fit_iterations(_features(source, source_steps))
    target_features = steady(_features(target, target_steps))
    if fit is None or not target_features.height:
        return float("nan")
    miss_s = float(fit.predict(target_features).sum() - target_features["seconds"].sum())
    measured_s, _ = _measured(target, target_steps)
    return miss_s / target_features["step"].n_unique() / measured_s
