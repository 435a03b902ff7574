"""One sweep point: a replay from parameters to a flat row of metrics. A plain top-level function of
picklable arguments, so a process pool and Ray run exactly the same code."""

from __future__ import annotations

import functools
import json
import time
from typing import Any

from rltrace.replay.run import CostConfig, Prepared, Shape, replay
from rltrace.replay.settings import resolve
from rltrace.replay.sources import prepare_source
from rltrace.replay.sweep.grid import SHAPE_KEYS, Point, settings
from rltrace.sample_traces import list_samples, sample_path

METRICS = {
    # column: path in metrics.json
    "samples_per_s": ("throughput_samples_per_s",),
    "tokens_per_s": ("throughput_tokens_per_s",),
    "step_time_s": ("step_time_s", "mean"),
    "step_time_p95_s": ("step_time_s", "p95"),
    "makespan_s": ("makespan_s",),
    "cost_usd": ("cost_usd",),
    "usd_per_1k_samples": ("usd_per_1k_samples",),
    "gen_busy": ("gpu_utilization", "generation"),
    "gen_dependency_bubble": ("bubble_fraction", "generation", "dependency"),
    "gen_skewness_bubble": ("bubble_fraction", "generation", "skewness"),
    "train_busy": ("gpu_utilization", "training"),
    "train_dependency_bubble": ("bubble_fraction", "training", "dependency"),
    "train_skewness_bubble": ("bubble_fraction", "training", "skewness"),
    "weight_sync_s": ("weight_sync_s",),
    "stale_max": ("staleness", "max"),
    "max_link_utilization": ("network", "max_link_utilization"),
    "fabric_capex_usd": ("network", "fabric", "capex_usd"),
}
"""metrics.json values every row carries (null where a run has none, e.g. no network model)"""


def _path(bundle: str) -> str:
    return str(sample_path(bundle)) if bundle in list_samples() else bundle


@functools.lru_cache(maxsize=8)
def _prepared(bundle: str, shape: Shape, cost: CostConfig, prices: tuple[tuple[str, float], ...]) -> Prepared:
    """Points that differ only in scheduler or network share one prepared workload (per process)."""
    return prepare_source(_path(bundle), shape, cost, dict(prices))


def run_point(bundle: str, point: Point) -> dict[str, Any]:
    """Replay ``bundle`` with the point's parameters; returns the metrics row (parameters not included).

    ``metrics_json`` keeps the whole metrics.json; ``replay_wall_s`` is the only value that differs between
    two runs of the same point."""
    scheduler = point["scheduler"]
    resolved = resolve([scheduler], values=settings(point))
    shape = Shape(**{k: point[k] for k in SHAPE_KEYS if k in point})
    started = time.perf_counter()
    prepared = _prepared(bundle, shape, resolved.config.cost, tuple(sorted(resolved.prices.items())))
    result = replay(prepared, scheduler, resolved.config, resolved.per_scheduler[scheduler])
    row: dict[str, Any] = {}
    for column, path in METRICS.items():
        value: Any = result.metrics
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        row[column] = float(value) if value is not None else None
    row["steps"] = int(result.metrics["steps"])
    row["samples"] = int(result.metrics["samples"])
    row["gen_pool_gpus"] = prepared.cluster.gen_gpus
    row["train_pool_gpus"] = prepared.cluster.train_gpus
    makespan = result.metrics["makespan_s"]
    row["usd_per_hour"] = result.metrics["cost_usd"] / makespan * 3600 if makespan else None  # as billed
    row["metrics_json"] = json.dumps(result.metrics, sort_keys=True)
    row["replay_wall_s"] = time.perf_counter() - started
    return row
