"""Run-against-run comparison: the report's header and its bubble breakdown."""

from __future__ import annotations

import os

import polars as pl

from rltrace.analysis.runs import Run
from rltrace.errors import ConfigError

# (column, metrics.json path, better when higher): what the header compares, in order.
HEADLINE = (
    ("samples_per_s", ("throughput_samples_per_s",), True),
    ("tokens_per_s", ("throughput_tokens_per_s",), True),
    ("step_time_s", ("step_time_s", "mean"), False),
    ("usd_per_1k_samples", ("usd_per_1k_samples",), False),
)


def baseline_index(runs: list[Run], baseline: str | None) -> int:
    """Position of the baseline run: the one named by its label, its folder or its scheduler, else the first. A
    scheduler's name that two runs share is refused (their labels tell them apart)."""
    if baseline is None:
        return 0
    path = os.path.abspath(baseline)
    folders = [os.path.abspath(r.folder) if r.folder is not None else None for r in runs]
    for names in ([r.name for r in runs], folders, [r.scheduler for r in runs]):
        hits = [i for i, name in enumerate(names) if name in (baseline, path)]
        if len(hits) > 1:
            raise ConfigError(f"--baseline {baseline!r} names {len(hits)} runs "
                              f"({', '.join(runs[i].name for i in hits)}): give one's label")
        if hits:
            return hits[0]
    raise ConfigError(f"--baseline {baseline!r} is none of the runs ({', '.join(r.name for r in runs)})")


def summary(runs: list[Run], baseline: str | None = None) -> pl.DataFrame:
    """One row per run: the headline figures and, for each, its ratio to the baseline run (``<col>_x``).

    A ratio above 1 means more than the baseline (for step time and cost, that is worse). The headline figures are
    each run's own (metrics.json); runs with a spread (replay/uncertainty.py) add the 5% and 95% quantiles of their
    samples/s on the same work over the replicates (``same_work_samples_per_s_p05``/``_p95``: the table's and the
    report's rate, not the run's own: a run that trains shorter samples first has the higher own rate)."""
    rows = []
    for run in runs:
        row: dict[str, object] = {"run": run.name, "scheduler": run.scheduler}
        for column, path, _ in HEADLINE:
            value: object = run.metrics
            for key in path:
                value = value.get(key, 0.0) if isinstance(value, dict) else 0.0
            row[column] = float(value)  # type: ignore[arg-type]  # a metric's leaf: a number
        row["steps"] = int(run.metrics.get("steps", 0))
        row["samples"] = int(run.metrics.get("samples", 0))
        row["makespan_s"] = float(run.metrics.get("makespan_s", 0.0))
        row["stale_max"] = int(run.metrics.get("staleness", {}).get("max", 0))
        spread = run.metrics.get("spread", {})  # same-work samples/s, as the table shows it (older runs: own rate)
        rate = spread.get("same_work.samples_per_s") or spread.get("throughput_samples_per_s")
        if any("spread" in r.metrics for r in runs):  # a replay from a recording: its 90% interval beside it
            row["same_work_samples_per_s_p05"] = float(rate["p05"]) if rate else None
            row["same_work_samples_per_s_p95"] = float(rate["p95"]) if rate else None
        rows.append(row)
    frame = pl.DataFrame(rows)
    base = frame.row(baseline_index(runs, baseline), named=True)
    return frame.with_columns(
        [(pl.col(c) / base[c] if base[c] else pl.lit(None, pl.Float64)).alias(f"{c}_x") for c, _, _ in HEADLINE]
        + [pl.col("run").eq(base["run"]).alias("baseline")])


def bubbles(runs: list[Run]) -> pl.DataFrame:
    """run, pool, part (used / dependency / skewness: ``gpu_utilization`` and ``bubble_fraction``, which add up
    to 1), fraction of the pool's GPU-time (metrics.json)."""
    rows = []
    for run in runs:
        used = run.metrics.get("gpu_utilization", {})
        for pool, parts in run.metrics.get("bubble_fraction", {}).items():
            rows += [(run.name, pool, "used", float(used.get(pool, 0.0))),
                     (run.name, pool, "dependency bubble", float(parts.get("dependency", 0.0))),
                     (run.name, pool, "skewness bubble", float(parts.get("skewness", 0.0)))]
    return pl.DataFrame(rows, schema={"run": pl.String, "pool": pl.String, "part": pl.String, "fraction": pl.Float64},
                        orient="row")


LATENCY = (("queue_s", "queueing"), ("ttft_s", "time to first token"), ("tpot_s", "time per output token"),
           ("e2e_s", "end to end"))
"""per-request latency parts replay writes under metrics.json ``latency`` (docs/format.md), in page order"""


def latency(runs: list[Run]) -> pl.DataFrame:
    """run, part, label, mean, p50, p90, p99, max (seconds) of each run's replayed per-request latency; runs
    whose metrics.json has none (written before replay recorded it) are left out."""
    rows = []
    for run in runs:
        lat = run.metrics.get("latency")
        if not isinstance(lat, dict):
            continue
        for part, label in LATENCY:
            q = lat.get(part)
            if isinstance(q, dict):
                rows.append({"run": run.name, "part": part, "label": label,
                             **{k: float(q.get(k, 0.0)) for k in ("mean", "p50", "p90", "p99", "max")}})
    schema = {"run": pl.String, "part": pl.String, "label": pl.String, "mean": pl.Float64, "p50": pl.Float64,
              "p90": pl.Float64, "p99": pl.Float64, "max": pl.Float64}
    return pl.DataFrame(rows, schema=schema)


def phases(runs: list[Run]) -> pl.DataFrame:
    """run, phase, seconds: each run's mean seconds per step by phase (metrics.json's ``phases_s_per_step``), phases
    of zero left out; empty when no run has the breakdown (a run folder from before it)."""
    rows = [{"run": run.name, "phase": phase, "seconds": float(seconds)} for run in runs
            for phase, seconds in (run.metrics.get("phases_s_per_step") or {}).items() if seconds]
    return pl.DataFrame(rows, schema={"run": pl.Utf8, "phase": pl.Utf8, "seconds": pl.Float64})
