"""One sweep point: a replay from parameters to a flat row of metrics. A plain top-level function of
picklable arguments, so a process pool and Ray run exactly the same code."""

from __future__ import annotations

import functools
import time
from typing import Any

import polars as pl
from rltrace.replay.described import is_description
from rltrace.replay.loading import Loaded, Shape, load_workload, prepare_loaded
from rltrace.replay.notes import run_notes
from rltrace.replay.run import CostConfig, Prepared, replay
from rltrace.replay.settings import Settings, resolve
from rltrace.replay.sources import prepare_source
from rltrace.replay.sweep.grid import Point, file_digest, settings, shape_of
from rltrace.sample_traces import list_samples, sample_path

from rltrace import jsontext
from rltrace.bundle import open_bundle

METRICS = {
    # column: path in metrics.json. samples/s and $ per 1k samples are on the same work (replay/work.py), as
    # every view shows them; the run's own figures are run_*
    "samples_per_s": ("same_work", "samples_per_s"),
    "usd_per_1k_samples": ("same_work", "usd_per_1k_samples"),
    "same_work_s": ("same_work", "same_work_s"),
    "run_samples_per_s": ("throughput_samples_per_s",),
    "run_usd_per_1k_samples": ("usd_per_1k_samples",),
    "tokens_per_s": ("throughput_tokens_per_s",),
    "step_time_s": ("step_time_s", "mean"),
    "step_time_p95_s": ("step_time_s", "p95"),
    "makespan_s": ("makespan_s",),
    "cost_usd": ("cost_usd",),
    "gen_used": ("gpu_utilization", "generation"),
    "gen_dependency_bubble": ("bubble_fraction", "generation", "dependency"),
    "gen_skewness_bubble": ("bubble_fraction", "generation", "skewness"),
    "train_used": ("gpu_utilization", "training"),
    "train_dependency_bubble": ("bubble_fraction", "training", "dependency"),
    "train_skewness_bubble": ("bubble_fraction", "training", "skewness"),
    "weight_sync_s": ("weight_sync_s",),
    "stale_max": ("staleness", "max"),
    "max_link_utilization": ("network", "max_link_utilization"),
    "fabric_capex_usd": ("network", "fabric", "capex_usd"),
}
"""metrics.json values every row carries (null where a run has none, e.g. no network model)"""
ROW_COLUMNS = (
    "samples_per_s", "usd_per_1k_samples", "same_work_s", "run_samples_per_s", "run_usd_per_1k_samples", "work_changed",
    "tokens_per_s", "step_time_s", "step_time_p95_s", "makespan_s", "cost_usd", "usd_per_hour",
    "gen_used", "gen_dependency_bubble", "gen_skewness_bubble", "train_used", "train_dependency_bubble",
    "train_skewness_bubble", "weight_sync_s", "stale_max", "max_link_utilization", "fabric_capex_usd",
    "steps", "samples", "trained_tokens", "gen_pool_gpus", "train_pool_gpus", "gpus", "fabric", "metrics_json",
    "replay_wall_s", "row_version", "notes",
)
"""a row's columns, in the order sweep.parquet gives them after the point's id and parameters (docs/sweeps.md)"""
if not set(METRICS) <= set(ROW_COLUMNS):
    raise ImportError(f"ROW_COLUMNS lacks {sorted(set(METRICS) - set(ROW_COLUMNS))}")
ROW_VERSION = 6
"""what a row's figures mean: 6, the generation pool's GPUs count those of its prefill pool (RollArt's); 5, it
keeps the replay's notes (``notes``, as `rltrace replay` prints them); 4, a colocated run trains on every GPU and
each request's timeline spans start at their own admission (the used shares and bubbles with them); 3, pool GPUs
as the run used them and the GPUs it held (2: the split asked for; 2 to 4, samples/s and $ per 1k samples on the
same work; 1: the run's own). A stored point of another version is run again (replay/sweep/runner.py)"""


def _path(bundle: str) -> str:
    return str(sample_path(bundle)) if bundle in list_samples() else bundle


@functools.lru_cache(maxsize=4)
def _loaded(path: str, drawn: Shape) -> Loaded:
    """A bundle read and its workload drawn once per process: every pool size and GPU kind shares it."""
    return load_workload(open_bundle(path), drawn)


@functools.lru_cache(maxsize=64)
def _prepared(bundle: str, shape: Shape, cost: CostConfig, prices: tuple[tuple[str, float], ...],
              files: tuple[str, ...]) -> Prepared:
    """Points that differ only in scheduler or network share one prepared workload (per process); ``files``, the
    digests of the calibration and profile the cost settings name, keep an edited file from a stale copy."""
    path = _path(bundle)
    if is_description(path):
        return prepare_source(path, shape, cost, dict(prices))
    return prepare_loaded(_loaded(path, shape.drawn()), shape, cost, dict(prices))


def prepared(bundle: str, point: Point) -> tuple[Prepared, Settings]:
    """The point's prepared workload (shared as :func:`run_point` shares it) and its resolved settings."""
    resolved = resolve([point["scheduler"]], values=settings(point))
    shape = shape_of(point)
    cost = resolved.config.cost
    files = tuple(file_digest(f) if f else "" for f in (cost.calibration, cost.profile))
    return _prepared(bundle, shape, cost, tuple(sorted(resolved.prices.items())), files), resolved


def run_point(bundle: str, point: Point) -> dict[str, Any]:
    """Replay ``bundle`` with the point's parameters; returns the metrics row (parameters not included).

    ``metrics_json`` keeps the whole metrics.json; ``replay_wall_s`` is the only value that differs between
    two runs of the same point."""
    scheduler = point["scheduler"]
    started = time.perf_counter()
    ready, resolved = prepared(bundle, point)
    result = replay(ready, scheduler, resolved.config, resolved.per_scheduler[scheduler])
    row: dict[str, Any] = {}
    for column, path in METRICS.items():
        value: Any = result.metrics
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        row[column] = float(value) if value is not None else None
    row["work_changed"] = bool(result.metrics["same_work"]["changed"])
    row["row_version"] = ROW_VERSION
    row["steps"] = int(result.metrics["steps"])
    row["samples"] = int(result.metrics["samples"])
    trained = result.requests.filter(pl.col("trained_step") >= 0)
    row["trained_tokens"] = int((trained["prompt_tokens"] + trained["output_tokens"]).sum())
    # the GPUs each role ran on (a colocated run's two roles share the whole cluster), and those it held
    used = result.metrics.get("gpus", {})
    generation = [n for role, n in used.items() if role == "generation" or role.startswith("generation/")]
    row["gen_pool_gpus"] = int(sum(generation)) if generation else ready.cluster.gen_gpus  # with a prefill pool
    row["train_pool_gpus"] = int(used.get("training", ready.cluster.train_gpus))
    row["gpus"] = int(sum(p["gpus"] for p in result.metrics["cost_by_pool"].values()))
    row["fabric"] = point.get("topology") or ready.sync_fabric  # a topology spec as the point wrote it
    makespan = result.metrics["makespan_s"]
    row["usd_per_hour"] = result.metrics["cost_usd"] / makespan * 3600 if makespan else None  # as billed
    row["metrics_json"] = jsontext.dumps(result.metrics, sort_keys=True)
    row["notes"] = run_notes(ready, result)  # what `rltrace replay` of the point would print beside it
    row["replay_wall_s"] = time.perf_counter() - started
    return {column: row[column] for column in ROW_COLUMNS}


def note_counts(frame: pl.DataFrame) -> list[tuple[str, int]]:
    """Each distinct note of a sweep's rows (``frame``: sweep.parquet, or rows with a ``notes`` list) with the
    number of points that gave it, most common first, then in the order the points first gave them."""
    if "notes" not in frame.columns or not frame.height:
        return []
    counts: dict[str, int] = {}
    for notes in frame["notes"].to_list():
        for note in dict.fromkeys(notes or ()):
            counts[note] = counts.get(note, 0) + 1
    return sorted(counts.items(), key=lambda kv: -kv[1])  # stable: ties keep first-seen order
