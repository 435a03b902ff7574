"""How far a replay from a recording can be trusted: its spread, next to its point estimate.

A replay from a recording has two sources of error that a single run hides:

- **seed**: a retargeted workload (``--steps/--prompts/--samples``) is a random draw of the recorded
  lengths. With long-tailed outputs one draw more or less of a 200-token sample moves a step by tens of
  percent (issue 25: changing only ``--seed`` moved one prediction by 29-41 points).
- **fit**: generation costs fitted to the recording (``cost.generation=auto`` on its own hardware) carry the
  machine's drift between steps. Each replicate refits on the recorded steady steps drawn with replacement
  (a bootstrap over steps, so a slow stretch of the machine weighs as it happened, in whole steps).

``replicate`` reruns the replay ``count`` times, each with the next seed and its own bootstrap draw, and
``Spread`` gives the median and the 5%-95% range of each headline metric. A replay with neither source (no
resampling, costs from the roofline) is deterministic and gets no spread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from rltrace.replay.loading import Shape, from_bundle
from rltrace.replay.run import CostConfig, Prepared, ReplayConfig, replay
from rltrace.replay.workload import WARMUP_STEPS

from rltrace.bundle import Bundle

DEFAULT_REPLICATES = 10
KEYS: tuple[tuple[str, ...], ...] = (
    ("same_work", "samples_per_s"), ("throughput_samples_per_s",), ("throughput_tokens_per_s",),
    ("step_time_s", "mean"), ("step_time_s", "steady_mean"), ("makespan_s",), ("usd_per_1k_samples",),
)
"""the metrics a spread covers (paths into metrics.json); same-work samples/s first, the headline every view
prints"""


@dataclass(frozen=True, slots=True)
class Spread:
    """Replicated values of the headline metrics of one scheduler's replay."""

    sources: tuple[str, ...]
    """what varied between replicates: "seed" (the resampled workload) and/or "fit" (a bootstrap of the
    recorded steps behind the fitted generation cost)"""
    values: dict[str, list[float]]
    """metric path joined with "." -> one value per replicate"""

    @property
    def replicates(self) -> int:
        return len(next(iter(self.values.values()), []))

    def summary(self) -> dict[str, Any]:
        """metrics.json's ``spread``: replicates, sources and, per metric, its median and 90% interval."""
        out: dict[str, Any] = {"replicates": self.replicates, "sources": list(self.sources)}
        for key, vals in self.values.items():
            p05, p50, p95 = np.quantile(np.asarray(vals, dtype=np.float64), (0.05, 0.5, 0.95))
            out[key] = {"median": float(p50), "p05": float(p05), "p95": float(p95)}
        return out


def sources(prepared: Prepared, shape: Shape) -> tuple[str, ...]:
    """What a replicate of this replay can vary (empty: the replay is deterministic)."""
    return tuple(name for name, on in (("seed", shape.reshapes), ("fit", bool(prepared.fitted_steps))) if on)


def bootstrap(steps: tuple[int, ...], rng: np.random.Generator) -> dict[int, float]:
    """One draw of the steady ``steps`` with replacement, as a weight per step (the warm-up step, which the
    fit leaves out, keeps weight 1 so that it stays out the same way)."""
    ordered = sorted(steps)
    steady = ordered[WARMUP_STEPS:] if len(ordered) > WARMUP_STEPS + 1 else ordered
    drawn = rng.choice(np.asarray(steady), size=len(steady), replace=True)
    weights = {s: 0.0 for s in ordered}
    weights.update({s: 1.0 for s in ordered[: len(ordered) - len(steady)]})
    for s, n in zip(*np.unique(drawn, return_counts=True)):
        weights[int(s)] = float(n)
    return weights


def _value(metrics: dict[str, Any], path: tuple[str, ...]) -> float:
    value: Any = metrics
    for key in path:
        value = value.get(key, float("nan")) if isinstance(value, dict) else float("nan")
    return float(value)


def replicate(bundle: Bundle, shape: Shape, cost: CostConfig, prepared: Prepared, schedulers: dict[str, Any],
              config: ReplayConfig, prices: dict[str, float] | None = None, *, count: int = DEFAULT_REPLICATES,
              progress: Callable[[int, int], None] | None = None) -> dict[str, Spread]:
    """Replay ``count`` replicates of ``prepared`` (made from ``bundle`` with ``shape``) under each scheduler
    (name -> its Config or a mapping of its fields): replicate k uses seed ``shape.seed + 1 + k`` (None: 0) and its own
    bootstrap of the fitted steps. Returns one :class:`Spread` per scheduler; empty when nothing can vary or
    ``count`` < 2. ``progress(done, total)`` is called after each replay."""
    varied = sources(prepared, shape)
    if not varied or count < 2:
        return {}
    seed = 0 if shape.seed is None else shape.seed
    rng = np.random.default_rng(seed)
    values: dict[str, dict[str, list[float]]] = {name: {".".join(p): [] for p in KEYS} for name in schedulers}
    total, done = count * len(schedulers), 0
    for k in range(count):
        weights = bootstrap(prepared.fitted_steps, rng) if "fit" in varied else None
        draw = replace(shape, seed=seed + 1 + k) if "seed" in varied else shape
        copy = from_bundle(bundle, draw, cost, prices, step_weights=weights)
        for name, settings in schedulers.items():
            metrics = replay(copy, name, config, settings).metrics
            for path in KEYS:
                values[name][".".join(path)].append(_value(metrics, path))
            done += 1
            if progress is not None:
                progress(done, total)
    return {name: Spread(varied, vals) for name, vals in values.items()}
