"""The importer contract and registry, and what every importer shares (manifest, skipped-event counts)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import polars as pl

from rltrace.catalog import get_model
from rltrace.errors import ConfigError, ValidationError
from rltrace.limits import MAX_NEW_TOKENS
from rltrace.manifest import Manifest, Pool
from rltrace.registry import Registry


@dataclass(frozen=True, kw_only=True, slots=True)
class ImportOptions:
    """What the command line may add to any import (none of it is in the source files)."""

    model: str | None = None
    """catalog model the trace ran (recorded in the manifest, for replay)"""
    gpu: str | None = None
    """GPU kind of the pools"""
    engines: int = 1
    """generation instances (request traces)"""
    window_s: float | None = None
    """request traces: one step per window of arrival time (default: one step)"""
    mapping: dict[str, str] = field(default_factory=dict)
    """csv: rltrace column -> source column (arrival, prompt, output)"""
    time_unit: str = "s"
    """csv: unit of the arrival column: s, ms, us, ns, or datetime"""


@dataclass(slots=True)
class Imported:
    """An importer's result: tables, the cluster it saw, and notes on what was inferred."""

    tables: dict[str, pl.DataFrame]
    notes: list[str] = field(default_factory=list)
    pools: dict[str, Pool] = field(default_factory=dict)
    skipped: Counter[str] = field(default_factory=Counter)
    """bad events inside good files, by reason (reported, not fatal)"""

    def manifest(self, kind: str, files: list[Path], options: ImportOptions) -> Manifest:
        """The bundle's manifest: source "import:<kind>" (docs/format.md), the command, the notes (and the
        skips, counted)."""
        model = None
        if options.model:
            model = get_model(options.model).info()
        pools = {name: Pool(device=options.gpu or p.device, count=p.count, tp=p.tp) for name, p in self.pools.items()}
        notes = [f"imported by `rltrace import {kind}` from {', '.join(f.name for f in files)}", *self.notes]
        notes += [f"skipped {n} event(s): {why}" for why, n in sorted(self.skipped.items())]
        if options.model:
            notes.append(f"model {options.model} given on the command line, not read from the trace")
        if options.gpu:
            notes.append(f"GPU kind {options.gpu} given on the command line, not read from the trace")
        return Manifest(run_id=files[0].name.split(".")[0], source=f"import:{kind}",
                        command=["rltrace", "import", kind], cluster=pools, model=model, notes=notes)


class Importer(Protocol):
    """Turns source files into tables."""

    def __call__(self, files: list[Path], options: ImportOptions,
                 progress: Callable[[int, int], None] | None) -> Imported:
        """``progress(done, total)`` in bytes read."""
        ...


IMPORTERS: Registry[Importer] = Registry("import kind")
"""Importers by kind; every module of this package is imported on the first lookup (one file per importer)."""
register = IMPORTERS.register
"""Function decorator: make an importer available as ``rltrace import NAME``. A duplicate name is an error."""
names = IMPORTERS.names


def importer(name: str) -> Importer:
    """The importer registered as ``name``; an unknown kind is a ConfigError listing the known ones."""
    found: Importer = IMPORTERS.lookup(name)
    return found


LAST_ARRIVAL_S = (2**63 - 1) / 1e9
"""the latest arrival an int64 of nanoseconds holds (about 292 years after the epoch)"""


def requests_table(prompt: pl.Expr, output: pl.Expr, arrival_ns: pl.Expr, source: pl.DataFrame,
                   options: ImportOptions, cached: pl.Expr | None = None) -> pl.DataFrame:
    """A requests table from request-log columns: ids by row, engines round-robin, steps by window."""
    try:
        counts = source.select(prompt.alias("prompt"), output.alias("output"))
    except pl.exceptions.PolarsError as e:
        raise ValidationError(f"token counts and arrival times must be numbers ({str(e).splitlines()[0]})") from None
    for name in ("prompt", "output"):  # a cast to integers would truncate 5.5 to 5 without a word
        if counts.schema[name].is_float():
            odd = counts.with_row_index("row", offset=1).filter(~pl.col(name).is_finite())
            if odd.height:
                raise ValidationError(f"{name} token counts must be numbers: data row {odd['row'][0]:,} has "
                                      f"{odd[name][0]} ({odd.height:,} of {counts.height:,} rows)")
            fractional = counts.with_row_index("row", offset=1).filter(pl.col(name) != pl.col(name).round())
            if fractional.height:
                row, value = fractional.row(0)[0], fractional.row(0)[counts.columns.index(name) + 1]
                raise ValidationError(f"{name} token counts must be whole numbers: data row {row:,} has {value:g} "
                                      f"({fractional.height:,} of {counts.height:,} rows are fractional)")
    try:  # in seconds, as the trace's own unit may not be: nanoseconds since the epoch end in 2262
        arrival_s = source.select((arrival_ns.cast(pl.Float64) / 1e9).alias("s")).with_row_index(
            "row", offset=1).filter((pl.col("s") < 0) | (pl.col("s") > LAST_ARRIVAL_S))
    except pl.exceptions.PolarsError:
        arrival_s = None  # text where a time belongs: refused with the counts below
    if arrival_s is not None and arrival_s.height:
        row, value = arrival_s.row(0)
        raise ValidationError(f"arrival times must be from 0 to {LAST_ARRIVAL_S:.3g} s: data row {row:,} arrives at "
                              f"{value:g} s ({arrival_s.height:,} of {source.height:,} rows)")
    try:
        frame = source.select(prompt.cast(pl.Int64).alias("prompt_tokens"),
                              output.cast(pl.Int64).alias("output_tokens"),
                              arrival_ns.cast(pl.Int64).alias("arrival_ns"),
                              (cached if cached is not None else pl.lit(None, pl.Int64)).alias("cached_tokens"))
    except pl.exceptions.PolarsError as e:  # text where a token count or a time belongs
        raise ValidationError(f"token counts and arrival times must be numbers ({str(e).splitlines()[0]})") from None
    for name in ("prompt_tokens", "output_tokens"):  # the format's int32 would refuse it, naming its own file
        over = frame.with_row_index("row", offset=1).filter(pl.col(name) > MAX_NEW_TOKENS)
        if over.height:
            raise ValidationError(f"{name.split('_')[0]} token counts must be at most {MAX_NEW_TOKENS:,}: data "
                                  f"row {over['row'][0]:,} has {over[name][0]:,} ({over.height:,} of {frame.height:,} "
                                  "rows)")
    n = frame.height
    return frame.with_columns(
        window_steps(frame["arrival_ns"], options.window_s), pl.format("r{}", pl.int_range(n)).alias("request_id"),
        pl.format("r{}", pl.int_range(n)).alias("group_id"),
        pl.format("rollout/engine{}", pl.int_range(n) % options.engines).alias("engine"),
        *(pl.lit(None, pl.Int64).alias(c) for c in ("scheduled_ns", "first_token_ns", "finish_ns")),
        pl.lit("stop").alias("finish_reason"), pl.lit(None, pl.Int32).alias("policy_version"),
        pl.lit(0, pl.Int32).alias("turn"), pl.lit(0, pl.Int32).alias("num_preemptions"))


MAX_STEP = 2**31 - 1
"""largest step id: the step column is Int32 (rltrace/schema.py)"""
NS_PER_S = 1_000_000_000


def window_ns(window_s: float) -> int:
    """``--window-s`` in whole nanoseconds; a ConfigError when it is not a finite number of seconds from 1 ns to
    the int64 nanoseconds a time column holds (292 years)."""
    most = (2**63 - 1) / NS_PER_S
    if not 1 / NS_PER_S <= window_s <= most:  # NaN fails too
        raise ConfigError(f"--window-s must be a number of seconds from 1e-09 (1 ns) to {most:.3g}, got {window_s:g}")
    return round(window_s * NS_PER_S)


def window_steps(arrival_ns: pl.Series, window_s: float | None) -> pl.Series:
    """The Int32 column ``step``: each arrival's window of ``window_s`` seconds from the first (all 0 without
    one); a ConfigError when the windows would number more than the step column holds."""
    if not window_s:
        return pl.Series("step", [0] * len(arrival_ns), pl.Int32)
    width = window_ns(window_s)
    first, last = arrival_ns.min(), arrival_ns.max()
    if isinstance(first, int) and isinstance(last, int) and (last - first) // width > MAX_STEP:
        raise ConfigError(f"--window-s {window_s:g} cuts {(last - first) / NS_PER_S:,.0f} s of arrivals into "
                          f"{(last - first) // width + 1:,} steps, more than the {MAX_STEP + 1:,} a bundle holds: give "
                          "a longer window")
    return ((arrival_ns - (first or 0)) // width).cast(pl.Int32).alias("step")


REQUEST_NOTES = ("request ids, group ids (one per request), engines (round-robin over --engines) and finish "
                 "reasons ('stop') are inferred; the trace records no scheduling, first-token or finish times")
