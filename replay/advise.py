"""``rltrace advise``: the cheapest pool split, GPU kind, scheduler and fabric that reach a throughput.

The space is a set of *designs* (GPU kind x scheduler x generation share x topology) and GPU counts; a design at
a GPU count is a *candidate*. Each design is searched at growing GPU counts until it meets the target (more GPUs
only cost more). The search is cheapest-first: candidates run in rounds by their price floor
(replay/advise_bounds.py), the lowest first, all of a round together on the sweep runner (one local process pool
kept for every round, or Ray). Once ``top`` designs meet the target, a candidate whose floor is above the
``top``-th cheapest of them cannot be listed and is not replayed (*priced out*); a candidate whose trainer bound is
below the target cannot meet it and is skipped to the next GPU count (the scheduler's replays teach the bound how
that scheduler changes the trained work; one whose candidates the bound ruled out without any replay gets one, at
its nearest miss). ``exhaustive`` turns both off: every design is replayed at every count up to the one that meets
the target, as a check of the search. The listed designs are the same either way while the bounds hold, and every
replay checks them: one that breaks a bound switches it off for its scheduler and the search goes on without it.
replay/advise_verdict.py says why the others lost.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from rltrace.replay.advise_bounds import TOLERANCE, Bounds
from rltrace.replay.advise_verdict import FAILED, MET, MISSED, OVER_BUDGET, PRICED_OUT, Outcome, bottleneck, why
from rltrace.replay.schedulers.base import SCHEDULERS, capabilities
from rltrace.replay.sources import source_devices
from rltrace.replay.sweep.grid import Point, check, check_distinct, check_names, point_id
from rltrace.replay.sweep.point import note_counts
from rltrace.replay.sweep.runner import Store, local_pool, run_sweep

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
        """Every design of the space; a colocating scheduler's once per GPU kind and fabric (its GPUs all generate
        and all train, so every generation share is the same design; it runs on a split its TP divides)."""
        gpus = self.gpu or tuple(load_gpus())
        colocated = {s for s in self.scheduler if capabilities(SCHEDULERS.lookup(s)).colocates}
        return [{"gpu": g, "scheduler": s, "gen_share": share, "topology": t}
                for g, s, share, t in itertools.product(*map(dict.fromkeys, (gpus, self.scheduler, self.gen_share,
                                                                             self.topology)))
                if s not in colocated or share == self.gen_share[0]]


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
            searched = [k for k in SEARCHED if k in value]
            if searched:  # each point sets them, so a fixed value would be dropped without a word
                raise ConfigError(f"{path}: fixed.{searched[0]} is what the search chooses: give it as the space's "
                                  f"{SEARCHED[searched[0]]} (a list, or one value)")
            kwargs[key] = value
            continue
        values = tuple(value) if isinstance(value, list) else (value,)  # one value is a list of one
        want = _SPACE_TYPES[key]
        if not values or any(isinstance(v, bool) or not isinstance(v, want) for v in values):
            kind = "strings" if want is str else "whole numbers" if want is int else "numbers"
            raise ConfigError(f"{path}: {key} must be {kind} (one, or a non-empty list), got {value!r}")
        check_distinct(values, key, f"{path}: {key}", "design")
        kwargs[key] = values
    for name in kwargs.get("scheduler", ()):  # a design is one job's: not a recording's replay, not a job mix
        can = capabilities(SCHEDULERS.lookup(name))
        if can.replays_recording or can.several_jobs:
            why = "replays the recording's own decisions" if can.replays_recording else "runs a mix of several jobs"
            raise ConfigError(f"{path}: scheduler {name!r} {why}, not a design advise can choose (known designs: "
                              f"{', '.join(default_schedulers())})")
    return Space(**kwargs)


SEARCHED = {"scheduler": "scheduler", "gpu": "gpu", "gen_gpus": "gen_share and total_gpus",
            "train_gpus": "gen_share and total_gpus"}
"""replay parameters each candidate sets from its design and GPU count (:func:`point_of`), and the space keys that
choose them"""
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


@dataclass(frozen=True, slots=True)
class Advice:
    """Every design's outcome: the winners (met the target within budget, cheapest first) and the rest."""

    ranked: pl.DataFrame
    """one row per design that met the target, cheapest first (:data:`COLUMNS`)"""
    lost: pl.DataFrame
    """the same columns for every other design, best first: priced out, over budget, missed, failed"""
    replays: int
    """replays this search ran (failed ones included)"""
    reused: int = 0
    """candidates whose replay was already in the store (``-o`` of an earlier advise)"""
    failed: int = 0
    """replays that failed"""
    ruled_out: int = 0
    """candidates (a design at a GPU count) decided by a price floor or trainer bound without a replay"""
    notes: list[str] = field(default_factory=list)
    """bounds a replay broke, and what the search did about it"""
    replay_notes: list[tuple[str, int]] = field(default_factory=list)
    """the notes of the replays of the designs that met the target (as `rltrace replay` prints them), each with
    the number of those designs that gave it"""
    cutoff: float | None = None
    """USD/h of the ``top``-th cheapest design that met the target (what prices the others out)"""

    @property
    def designs(self) -> int:
        return self.ranked.height + self.lost.height


COLUMNS = ("gpu", "scheduler", "gen_share", "topology", "total_gpus", "gen_gpus", "train_gpus", "fabric",
           "samples_per_s", "usd_per_hour", "usd_per_1k_samples", "work", "bottleneck", "limit", "outcome",
           "replayed", "samples_per_s_max", "usd_per_hour_min", "why")
"""an advice row: the design, the candidate that decided it (GPUs, its sync fabric), the replay's figures (null
without one: ``samples_per_s_max`` / ``usd_per_hour_min`` give the bound that decided it instead; samples/s and $
per 1k samples on the same work, ``work`` "changed" where the replay trained another length distribution than the
recorded one, else "same"), its bottleneck
(the phase group, and ``limit`` in words), the outcome (replay/advise_verdict.py) and why"""


@dataclass(slots=True)
class _Design:
    """One design's replays so far: GPUs -> metrics row, or None where the replay failed (``errors`` says why)."""

    design: dict[str, Any]
    rows: dict[int, dict[str, Any] | None] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)


@dataclass(slots=True)
class _Search:
    """The state of one search and the rule that decides each design (module docstring)."""

    designs: list[_Design]
    sizes: list[int]
    fixed: dict[str, Any]
    target: float
    budget: float | None
    bounds: Bounds
    screen: bool
    """False: exhaustive (no bound rules anything out)"""
    shares: tuple[float, ...] = ()
    """the space's generation shares (a colocating design takes one whose split its TP divides)"""

    def point(self, i: int, total: int) -> Point:
        """Design ``i``'s candidate at ``total`` GPUs. A colocating design's split only has to give its generation
        pool whole instances: the first of its share and the space's others that does."""
        design = self.designs[i].design
        point = point_of(design, total, self.fixed)
        if not capabilities(SCHEDULERS.lookup(design["scheduler"])).colocates or self.bounds.takes(point):
            return point
        for share in self.shares:
            other = point_of({**design, "gen_share": share}, total, self.fixed)
            if self.bounds.takes(other):
                return other
        return point

    def walk(self, i: int, cutoff: float) -> Outcome:
        """Where design ``i`` stands, its GPU counts taken in order: a replayed count that missed or failed (a
        model that does not fit, a pool TP does not divide) moves on, one that met or went over budget decides; an
        unreplayed count is priced out, over budget, ruled out by the trainer bound (moves on) or the next to
        replay. A design whose every replayed count failed failed."""
        d, bounds, screened, last = self.designs[i], self.bounds, 0, None
        nearest: tuple[float, int] = (-math.inf, 0)  # the ruled-out candidate nearest the target: (bound, GPUs)
        failed: int | None = None  # the last count whose replay failed
        last_total = 0  # the count of ``last``
        for total in self.sizes:
            if total in d.rows:
                row = d.rows[total]
                if row is None:
                    failed = total
                    continue
                if self.budget is not None and (row["usd_per_hour"] or 0.0) > self.budget * (1 + TOLERANCE):
                    return Outcome(OVER_BUDGET, total, row, screened=screened, nearest=nearest)
                if (row["samples_per_s"] or 0.0) >= self.target:
                    return Outcome(MET, total, row, screened=screened, nearest=nearest)
                last, last_total = row, total
                continue
            if not self.screen:
                return Outcome("", total)
            point = self.point(i, total)
            floor = bounds.floor(point)
            if self.budget is not None and floor > self.budget * (1 + TOLERANCE):
                return Outcome(OVER_BUDGET, total, last=last, floor=floor, screened=screened, nearest=nearest)
            if floor > cutoff * (1 + TOLERANCE):
                return Outcome(PRICED_OUT, total, last=last, floor=floor, screened=screened, nearest=nearest)
            bound = bounds.bound(point)
            if bound >= self.target * (1 - TOLERANCE):
                return Outcome("", total, floor=floor)
            screened += 1
            nearest = max(nearest, (bound, total))
            if total == self.sizes[-1]:
                return Outcome(MISSED, total, last=last, bound=bound, screened=screened, nearest=nearest)
        if last is None:  # the loop returns unless the last count was replayed: it failed, as every other replay did
            assert failed is not None
            return Outcome(FAILED, failed, error=d.errors.get(failed, "no result"), screened=screened, nearest=nearest)
        beyond = (f"at {failed} GPUs it failed: {d.errors.get(failed, 'no result')}"
                  if failed is not None and failed > last_total else "")
        return Outcome(MISSED, last_total, last, error=beyond, screened=screened, nearest=nearest)

    def outcomes(self, top: int) -> tuple[list[Outcome], float]:
        """Every design's outcome, and the price that rules candidates out: the ``top``-th cheapest design that
        met the target (inf until ``top`` have)."""
        first = [self.walk(i, math.inf) for i in range(len(self.designs))]
        met_at = {point_id(self.point(i, o.total)): round(o.row["usd_per_hour"], 6)  # two shares at one split: one
                  for i, o in enumerate(first) if o.kind == MET and o.row is not None}
        met = sorted(met_at.values())
        cutoff = met[top - 1] if len(met) >= top else math.inf
        return [self.walk(i, cutoff) for i in range(len(self.designs))], cutoff

    def next_round(self, outcomes: list[Outcome], workers: int) -> list[tuple[int, int]]:
        """(design, GPUs) to replay now: exhaustive, every open design; else the open candidates of the lowest
        price floor (more tiers until every worker has one); when none is open, one replay for each scheduler
        that has none yet and whose trainer bound ruled a candidate out (its nearest miss), to learn its work
        ratio before the bound stands."""
        open_ = sorted((o.floor or 0.0, i, o.total) for i, o in enumerate(outcomes) if not o.kind)
        if not self.screen:
            return [(i, total) for _, i, total in open_]
        chosen: dict[int, int] = {}
        for _, group in itertools.groupby(open_, key=lambda c: round(c[0], 6)):
            if len(chosen) >= workers:
                break
            chosen.update({i: total for _, i, total in group})
        if chosen:
            return sorted(chosen.items())
        unchecked: dict[str, tuple[float, int, int]] = {}
        for i, o in enumerate(outcomes):
            scheduler = self.designs[i].design["scheduler"]
            if o.screened and not self.bounds.of(scheduler).replays:
                unchecked[scheduler] = max(unchecked.get(scheduler, (-math.inf, 0, 0)), (*o.nearest, i))
        return sorted((i, total) for _, total, i in unchecked.values())


def advise(bundle: str, target: float, store: Store, space: Space, *, budget: float | None = None, top: int = 5,
           workers: int = 2, ray: str | bool = False, progress: Callable[[int, int], None] | None = None,
           exhaustive: bool = False) -> Advice:
    """Search ``space`` for the cheapest designs reaching ``target`` samples/s (module docstring);
    ``progress(decided, designs)`` is called after every round."""
    if target <= 0:
        raise ConfigError(f"--target-throughput must be positive, got {target}")
    if top < 1:
        raise ConfigError(f"--top must be at least 1, got {top}")
    designs = space.designs()
    for design in designs:  # refuse a bad space before anything runs
        check([point_of(design, space.total_gpus[0], space.fixed)], "--space")
    recorded = source_devices(bundle)
    check_names([point_of(d, space.total_gpus[0], space.fixed) for d in designs], "--space", recorded)
    bundle = str(Path(bundle).resolve()) if Path(bundle).exists() else bundle
    bounds = Bounds(bundle)
    search = _Search([_Design(d) for d in designs], sorted(set(space.total_gpus)), space.fixed, target, budget,
                     bounds, not exhaustive, space.gen_share)
    replays = reused = failed = 0
    notes: list[str] = []
    with local_pool(workers, inline=True) if ray is False else nullcontext(None) as pool:
        if pool is not None:
            pool.warm(bundle, search.point(0, search.sizes[0]))
        while True:
            outcomes, cutoff = search.outcomes(top)
            if progress:
                progress(sum(1 for o in outcomes if o.kind), len(outcomes))
            todo = search.next_round(outcomes, workers)
            if not todo:
                break
            points = [search.point(i, total) for i, total in todo]
            result = run_sweep(bundle, points, store, workers=workers, ray=ray, pool=pool)
            replays, reused, failed = replays + result.ran + len(result.failed), reused + result.skipped, \
                failed + len(result.failed)
            rows = dict(_rows(store, points))
            for (i, total), point in zip(todo, points):
                pid = point_id(point)
                row = rows.get(pid)
                search.designs[i].rows[total] = row
                if row is None:
                    search.designs[i].errors[total] = result.failed.get(pid, "no result")
                elif not exhaustive:
                    notes += bounds.learn(point, row)
    prices = [o.row["usd_per_hour"] for o in outcomes if o.kind == MET and o.row is not None]
    met = [o.row.get("notes") or [] for o in outcomes if o.kind == MET and o.row is not None]
    met_notes = pl.DataFrame({"notes": met}, schema={"notes": pl.List(pl.String)})
    cheapest = min(prices) if prices else None
    frame = pl.DataFrame([_record(search, i, o, cheapest, cutoff, top) for i, o in enumerate(outcomes)],
                         schema_overrides={"samples_per_s_max": pl.Float64, "usd_per_hour_min": pl.Float64,
                                           "work": pl.String},
                         infer_schema_length=None)
    # two generation shares that round to one split at a size are one configuration (one point): listed once, by
    # its replay where it has one (a bound of the other share beside a replay of the same point would say two
    # figures)
    ids = [point_id(search.point(i, o.total)) for i, o in enumerate(outcomes)]
    frame = (frame.select(COLUMNS).with_columns(pl.Series("_point", ids)).with_row_index("_order")
             .sort("replayed", descending=True, maintain_order=True).unique("_point", keep="first", maintain_order=True)
             .sort("_order").drop("_order", "_point"))
    # (one price summed in another order differs in its last bits: ties go to the cheaper sample, not to the noise;
    # then to the design's own fields, so a search and an exhaustive one list tied designs alike)
    winners = frame.filter(pl.col("outcome") == MET).sort(
        pl.col("usd_per_hour").cast(pl.Float64).round(6), pl.col("usd_per_1k_samples").cast(pl.Float64).round(9),
        "gpu", "scheduler", "gen_gpus", "train_gpus", "fabric", maintain_order=True)
    order = {PRICED_OUT: 1, OVER_BUDGET: 2, MISSED: 3, FAILED: 4}
    losers = (frame.filter(pl.col("outcome") != MET)
              .with_columns(pl.col("outcome").replace_strict(order, return_dtype=pl.Int64).alias("_order"))
              .sort("_order", "usd_per_hour_min", pl.col("samples_per_s").fill_null(pl.col("samples_per_s_max")),
                    descending=[False, False, True], nulls_last=True).drop("_order"))
    ruled_out = sum(o.screened + (o.row is None and o.kind in (PRICED_OUT, OVER_BUDGET)) for o in outcomes)
    return Advice(winners, losers, replays, reused, failed, ruled_out, notes, note_counts(met_notes),
                  cutoff if math.isfinite(cutoff) else None)


def _record(search: _Search, i: int, outcome: Outcome, cheapest: float | None, cutoff: float,
            top: int) -> dict[str, Any]:
    """One advice row (:data:`COLUMNS`)."""
    design, row, total = search.designs[i].design, outcome.row, outcome.total
    point = search.point(i, total)
    fabric = (row or {}).get("fabric") or search.bounds.fabric(point)  # "": a workload the cluster cannot take
    group, limit = bottleneck(row) if row is not None else ("", "")
    if row:
        gen, train = row["gen_pool_gpus"], row["train_pool_gpus"]
    elif capabilities(SCHEDULERS.lookup(design["scheduler"])).colocates:  # unreplayed, as a replay would say it
        gen = train = total
    else:
        gen, train = point["gen_gpus"], point["train_gpus"]
    return {**design, "total_gpus": total, "gen_gpus": gen, "train_gpus": train,  # a colocated run: all, both
            "fabric": fabric or design["topology"] or "-",
            "samples_per_s": row["samples_per_s"] if row else None,
            "usd_per_hour": row["usd_per_hour"] if row else None,
            "usd_per_1k_samples": row["usd_per_1k_samples"] if row else None,
            "work": ("changed" if row.get("work_changed") else "same") if row else None,
            "bottleneck": group or None, "limit": limit or None, "outcome": outcome.kind, "replayed": row is not None,
            "samples_per_s_max": outcome.bound, "usd_per_hour_min": outcome.floor,
            "why": why(outcome, cheapest=cheapest, cutoff=cutoff if math.isfinite(cutoff) else None, top=top,
                       budget=search.budget)}


def _rows(store: Store, points: list[Point]) -> list[tuple[str, dict[str, Any]]]:
    """(point id, row) of the finished points: one per design of a round."""
    frame = store.frame(points)
    return [(r["point_id"], r) for r in frame.iter_rows(named=True)] if frame.height else []
