"""``rltrace advise``: the cheapest pool split, GPU kind, scheduler and fabric that reach a throughput.

The space is a set of *designs* (GPU kind x scheduler x generation share x topology) and GPU counts. Each
design is replayed at growing GPU counts, in rounds, until it meets the target (more GPUs only cost more)
or passes the budget; all designs of a round run together on the sweep runner (local pool or Ray). The
designs that meet the target rank by dollars per hour; the others say why they lost.

Bottleneck of a replay (from its bubbles, docs/replay.md): *network* when weight syncs take over a quarter of
the run; otherwise *generation* when the trainers wait for samples longer than the generators wait for the
trainers (training's dependency + skewness bubbles against generation's dependency bubble), else *training*.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from rltrace.replay.schedulers.base import SCHEDULERS, capabilities
from rltrace.replay.sources import source_devices
from rltrace.replay.sweep.grid import Point, check, check_names, point_id
from rltrace.replay.sweep.runner import Store, run_sweep

from rltrace.catalog import load_gpus
from rltrace.catalog._toml import load_toml
from rltrace.errors import ConfigError


def default_schedulers() -> tuple[str, ...]:
    """Every shipped scheduler that is a design for one job: not one that replays the recording's own decisions
    (as-recorded), nor one that needs several jobs (rollmux), as each declares (so a new scheduler file joins)."""
    return tuple(n for n in SCHEDULERS.shipped()
                 if not (can := capabilities(SCHEDULERS.lookup(n))).several_jobs and not can.replays_recording)


@dataclass(frozen=True, kw_only=True, slots=True)
class Space:
    """What advise may choose from (``--space`` TOML: the same keys at top level, [fixed] for the rest)."""

    gpu: tuple[str, ...] = ()
    """GPU kinds (default: every catalog GPU)"""
    scheduler: tuple[str, ...] = field(default_factory=default_schedulers)
    gen_share: tuple[float, ...] = (0.5, 0.75)
    """share of the GPUs in the generation pool"""
    total_gpus: tuple[int, ...] = (8, 16, 32, 64, 128)
    topology: tuple[str, ...] = ("",)
    """fabrics to try ("" = no network model: weight syncs at cost.sync_gbps)"""
    fixed: dict[str, Any] = field(default_factory=lambda: {"steps": 4})
    """parameters held for every replay (default: 4 steps, resampled from the bundle)"""

    def __post_init__(self) -> None:
        if any(not 0 < s < 1 for s in self.gen_share):
            raise ConfigError("gen_share values must be in (0, 1)")
        if any(n < 2 for n in self.total_gpus):
            raise ConfigError("total_gpus values must be at least 2 (a pool each)")

    def designs(self) -> list[dict[str, Any]]:
        gpus = self.gpu or tuple(load_gpus())
        return [{"gpu": g, "scheduler": s, "gen_share": share, "topology": t}
                for g, s, share, t in itertools.product(gpus, self.scheduler, self.gen_share, self.topology)]


def load_space(path: Path) -> Space:
    data = load_toml(path)
    known = {"gpu", "scheduler", "gen_share", "total_gpus", "topology", "fixed"}
    unknown = set(data) - known
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))})")
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key == "fixed":
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: fixed must be a table of replay parameters")
            kwargs[key] = value
            continue
        values = tuple(value) if isinstance(value, list) else (value,)  # one value is a list of one
        want = _SPACE_TYPES[key]
        if not values or any(isinstance(v, bool) or not isinstance(v, want) for v in values):
            kind = "strings" if want is str else "whole numbers" if want is int else "numbers"
            raise ConfigError(f"{path}: {key} must be {kind} (one, or a non-empty list), got {value!r}")
        kwargs[key] = values
    return Space(**kwargs)


# what each --space list holds: a string where a list belongs would otherwise be walked letter by letter
_SPACE_TYPES: dict[str, type | tuple[type, ...]] = {"gpu": str, "scheduler": str, "topology": str,
                                                     "gen_share": (int, float), "total_gpus": int}


def point_of(design: dict[str, Any], total: int, fixed: dict[str, Any]) -> Point:
    """The replay parameters of a design at ``total`` GPUs (the generation pool rounded, both pools >= 1)."""
    gen = min(max(round(total * design["gen_share"]), 1), total - 1)
    point = {**fixed, "scheduler": design["scheduler"], "gpu": design["gpu"],
             "gen_gpus": gen, "train_gpus": total - gen}
    if design["topology"]:
        point["topology"] = design["topology"]
    return point


def bottleneck(row: dict[str, Any]) -> str:
    """generation, training or network (module docstring)."""
    makespan = row.get("makespan_s") or 0.0
    sync = (row.get("weight_sync_s") or 0.0) * (row.get("steps") or 0)
    if makespan and sync / makespan > 0.25:
        return "network"
    train_wait = (row.get("train_dependency_bubble") or 0.0) + (row.get("train_skewness_bubble") or 0.0)
    return "generation" if train_wait >= (row.get("gen_dependency_bubble") or 0.0) else "training"


@dataclass(frozen=True, slots=True)
class Advice:
    """Every design's outcome: the winners (met the target within budget, cheapest first) and the rest."""

    ranked: pl.DataFrame
    """gpu, scheduler, gen_share, topology, gen_gpus, train_gpus, samples_per_s, usd_per_hour,
    usd_per_1k_samples, bottleneck; cheapest first"""
    lost: pl.DataFrame
    """the same columns for the designs that lost (their best try) and ``why``"""
    replays: int


def advise(bundle: str, target: float, store: Store, space: Space, *, budget: float | None = None, workers: int = 2,
           ray: str | bool = False, progress: Callable[[int, int], None] | None = None) -> Advice:
    """Search ``space`` for the cheapest designs reaching ``target`` samples/s (module docstring)."""
    if target <= 0:
        raise ConfigError(f"--target-throughput must be positive, got {target}")
    designs = space.designs()
    for design in designs:  # refuse a bad space before anything runs
        check([point_of(design, space.total_gpus[0], space.fixed)], "--space")
    recorded = source_devices(bundle)
    check_names([point_of(d, space.total_gpus[0], space.fixed) for d in designs], "--space", recorded)
    sizes = sorted(space.total_gpus)
    best: dict[int, tuple[int, dict[str, Any] | None, str | None]] = {}  # design -> (GPUs, row, error)
    open_designs, replays = list(range(len(designs))), 0
    for total in sizes:
        if not open_designs:
            break
        points = {i: point_of(designs[i], total, space.fixed) for i in open_designs}
        result = run_sweep(bundle, list(points.values()), store, workers=workers, ray=ray, progress=progress)
        replays += result.ran
        rows = {pid: row for pid, row in _rows(store, list(points.values()))}
        still = []
        for i, point in points.items():
            pid = point_id(point)
            row = rows.get(pid)
            best[i] = (total, row, result.failed.get(pid) or (None if row else "no result"))
            if row is None:
                continue  # a failed design stays failed
            over = budget is not None and (row["usd_per_hour"] or 0.0) > budget
            if (row["samples_per_s"] or 0.0) < target and not over:
                still.append(i)
        open_designs = still
    records = []
    for i, design in enumerate(designs):
        total, row, error = best[i]
        rec = {**design, "total_gpus": total, **_view(row)}
        if row is None:
            rec["why"] = f"failed: {error}"
        elif budget is not None and row["usd_per_hour"] > budget:
            rec["why"] = f"over budget at {total} GPUs"
        elif row["samples_per_s"] < target:
            rec["why"] = f"missed the target at {total} GPUs, the most tried"
        else:
            rec["why"] = ""
        records.append(rec)
    frame = pl.DataFrame(records, infer_schema_length=None)
    winners = frame.filter(pl.col("why") == "").sort("usd_per_hour", "usd_per_1k_samples")
    cheapest = winners["usd_per_hour"][0] if winners.height else None
    losers = frame.filter(pl.col("why") != "")
    if cheapest is not None:  # winners beyond the first lose on price
        winners = winners.with_columns(
            pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("cheapest"))
            .otherwise(pl.format("+${}/h", (pl.col("usd_per_hour") - cheapest).round(2))).alias("why"))
    return Advice(winners, losers.sort("samples_per_s", descending=True, nulls_last=True), replays)


def _rows(store: Store, points: list[Point]) -> list[tuple[str, dict[str, Any]]]:
    """(point id, row) of the finished points: one per design of a round."""
    frame = store.frame(points)
    return [(r["point_id"], r) for r in frame.iter_rows(named=True)] if frame.height else []


def _view(row: dict[str, Any] | None) -> dict[str, Any]:
    if row is None:
        return {"gen_gpus": None, "train_gpus": None, "samples_per_s": None, "usd_per_hour": None,
                "usd_per_1k_samples": None, "bottleneck": None}
    return {"gen_gpus": row["gen_pool_gpus"], "train_gpus": row["train_pool_gpus"],
            "samples_per_s": row["samples_per_s"],
            "usd_per_hour": row["usd_per_hour"], "usd_per_1k_samples": row["usd_per_1k_samples"],
            "bottleneck": bottleneck(row)}
