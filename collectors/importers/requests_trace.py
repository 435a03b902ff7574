"""Production request traces (arrival time, input and output tokens) as requests tables.

- ``azure-llm``: the Azure LLM inference traces 2023 (TIMESTAMP, ContextTokens, GeneratedTokens).
- ``mooncake``: Mooncake's JSON lines (timestamp in ms from start, input_length, output_length, hash_ids of
  512-token prompt blocks); a block seen in an earlier request counts as prefix-cached.
- ``csv``: any CSV, with ``--map arrival=COL,prompt=COL,output=COL`` and ``--time-unit``.

Files are read with polars (chunked, typed); several files concatenate in order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
from rltrace.collectors.importers.base import REQUEST_NOTES, Imported, ImportOptions, register, requests_table

from rltrace.errors import ConfigError
from rltrace.limits import check_input
from rltrace.manifest import Pool

MOONCAKE_BLOCK_TOKENS = 512  # Mooncake's trace README: hash_ids are ids of 512-token prompt blocks
UNITS = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}


def _read(path: Path, reader: Callable[[Path], pl.DataFrame], what: str) -> pl.DataFrame:
    check_input(path)
    try:
        return reader(path)
    except (pl.exceptions.PolarsError, OSError, ValueError) as e:
        why = (_bad_json_line(path) if reader is pl.read_ndjson else None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: not {what} ({why})") from None


def _bad_json_line(path: Path) -> str | None:
    """Where a JSON-lines file goes wrong, in its own terms (the reader's message names its internals): the first
    line that is not a JSON object, or the first field whose type differs from the first line's."""
    first: dict[str, type] | None = None
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except ValueError:
                return f"line {number} is not JSON"
            if not isinstance(row, dict):
                return f"line {number} is not a JSON object"
            types = {k: type(v) for k, v in row.items() if v is not None}
            if first is None:
                first = types
                continue
            for key, kind in types.items():
                if key in first and first[key] is not kind and {first[key], kind} != {int, float}:
                    return f"line {number}: {key!r} is {kind.__name__} here, {first[key].__name__} on the first line"
    return None if first is not None else "it holds no JSON lines"


def _read_all(files: list[Path], reader: Callable[[Path], pl.DataFrame], what: str, columns: list[str]) -> pl.DataFrame:
    """Every file read and checked for ``columns``, concatenated in order (``what``: "a ... trace", with its
    article)."""
    parts = []
    for path in files:
        frame = _read(path, reader, what)
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise ConfigError(f"{path}: not {what}: no column {missing[0]!r} (columns: {', '.join(frame.columns)})")
        parts.append(frame)
    return pl.concat(parts, how="diagonal_relaxed")


def _result(requests: pl.DataFrame, options: ImportOptions, notes: list[str]) -> Imported:
    ok = (pl.col("prompt_tokens") >= 0) & (pl.col("output_tokens") >= 0) & pl.col("arrival_ns").is_not_null()
    bad = requests.filter(~ok.fill_null(False))
    imported = Imported({"requests": requests.filter(ok.fill_null(False))}, [REQUEST_NOTES, *notes],
                        {"rollout": Pool(device=options.gpu or "unknown", count=options.engines)})
    if bad.height:
        imported.skipped["negative token count or missing arrival"] = bad.height
    if options.window_s:
        imported.notes.append(f"steps are {options.window_s:g} s windows of arrival time")
    else:
        imported.notes.append("one step: every request in step 0 (give --window-s for steps by arrival time)")
    return imported


LAST_NS_TIME = datetime(1970, 1, 1) + timedelta(microseconds=(2**63 - 1) // 1000)
"""the last microsecond an int64 of nanoseconds since 1970 holds (2262-04-11 23:47:16.854775)"""


@register("azure-llm")
def azure(files: list[Path], options: ImportOptions, progress: Callable[[int, int], None] | None = None) -> Imported:
    """Azure LLM inference trace 2023 (code or conversation)."""
    source = _read_all(files, pl.read_csv, "an Azure LLM trace (CSV)",
                       ["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
    # 7 fractional digits, no zone: the trace's wall clock, read as UTC
    stamp = "%Y-%m-%d %H:%M:%S%.f"
    latest = source.select(pl.col("TIMESTAMP").cast(pl.String).str.to_datetime(stamp, time_unit="us", strict=False)
                           .max()).item()
    if latest is not None and latest > LAST_NS_TIME:  # nanoseconds since 1970 would wrap
        raise ConfigError(f"TIMESTAMP {latest} is past {LAST_NS_TIME:%Y-%m-%d %H:%M:%S}, the last time nanoseconds "
                          "since 1970 hold")
    when = _timestamps(source, "TIMESTAMP", "")
    requests = requests_table(pl.col("ContextTokens"), pl.col("GeneratedTokens"), when, source, options)
    return _result(requests, options, ["arrival times are the trace's TIMESTAMP read as UTC"])


@register("mooncake")
def mooncake(files: list[Path], options: ImportOptions, progress: Callable[[int, int], None] | None = None) -> Imported:
    """Mooncake conversation/tool/synthetic traces (JSON lines)."""
    source = _read_all(files, pl.read_ndjson, "a Mooncake trace (JSON lines)",
                       ["timestamp", "input_length", "output_length"]).with_row_index("row")
    cached = None
    notes = ["arrival times are the trace's timestamp (ms from its start) from the epoch"]
    if "hash_ids" in source.columns:
        if not isinstance(source.schema["hash_ids"], pl.List):
            given = source.schema["hash_ids"]
            raise ConfigError(f"a Mooncake trace's hash_ids must be lists of block hashes, got {given} values")
        # A block is cached if an earlier request had it; a request's cached prefix is its leading run of
        # cached blocks (prefix caching reuses only a prefix).
        blocks = source.select("row", "hash_ids").explode("hash_ids").drop_nulls("hash_ids").with_columns(
            pl.int_range(pl.len()).over("row").alias("pos"))
        blocks = blocks.with_columns((pl.col("row").min().over("hash_ids") < pl.col("row")).alias("seen"))
        prefix = blocks.sort("row", "pos").with_columns(pl.col("seen").cast(pl.Int64).cum_prod().over("row").alias("p"))
        counts = prefix.group_by("row").agg(pl.col("p").sum().alias("cached_blocks"))
        source = source.join(counts, on="row", how="left")
        cached = pl.min_horizontal(pl.col("cached_blocks").fill_null(0) * MOONCAKE_BLOCK_TOKENS, pl.col("input_length"))
        notes.append(f"cached_tokens: the leading prompt blocks ({MOONCAKE_BLOCK_TOKENS} tokens each) whose hash id an "
                     "earlier request already had (an unbounded prefix cache)")
    requests = requests_table(pl.col("input_length"), pl.col("output_length"),
                              (pl.col("timestamp").cast(pl.Float64) * 1e6).round(), source, options, cached)
    return _result(requests, options, notes)


_ZONED = r"^(.*:\d{2}(?:[.,]\d+)?)\s*([Zz]|[+-]\d{2}(?::?\d{2})?)$"
"""a timestamp ending in a zone after its seconds: (local part, "Z" | "+01:00" | "-0500" | "+02")"""


def _datetime_ns(col: pl.Expr) -> pl.Expr:
    """ISO-like timestamps as ns since the epoch, named ``arrival``: one with a zone ("Z", "+01:00") converted to UTC,
    one without read as UTC; rows may mix both. Null where the value is not a timestamp."""
    text = col.cast(pl.String).str.strip_chars()
    zone = text.str.extract(_ZONED, 2)
    local = pl.coalesce(text.str.extract(_ZONED, 1), text).str.to_datetime(time_unit="ns", strict=False)
    digits = zone.str.replace_all(r"[^0-9]", "")
    hours, minutes = (digits.str.slice(at, 2).cast(pl.Int64, strict=False).fill_null(0) for at in (0, 2))
    offset_s = (hours * 3600 + minutes * 60) * pl.when(zone.str.starts_with("-")).then(-1).otherwise(1)
    return (local.dt.epoch("ns") - offset_s * 1_000_000_000).alias("arrival")


def _timestamps(source: pl.DataFrame, column: str, hint: str) -> pl.Expr:
    """``column`` of ``source`` as :func:`_datetime_ns` reads it; a value that is not a timestamp is a ConfigError
    naming the column and the data row (a blank one is a missing arrival, left to the table's checks)."""
    col = pl.col(column)
    arrival = _datetime_ns(col)
    unparsed = source.select(col.cast(pl.String).alias("value"), arrival.alias("parsed")).with_row_index(
        "row", offset=1).filter(pl.col("parsed").is_null() & (pl.col("value").str.strip_chars() != ""))
    if unparsed.height:
        row, value, _ = unparsed.row(0)
        raise ConfigError(f"column {column!r}, data row {row:,}: {value[:60]!r} is not a timestamp{hint}")
    return arrival


@register("csv")
def csv(files: list[Path], options: ImportOptions, progress: Callable[[int, int], None] | None = None) -> Imported:
    """Any request log in CSV: ``--map arrival=COL,prompt=COL,output=COL`` names the columns."""
    names = {"arrival", "prompt", "output"}
    if set(options.mapping) != names:
        unknown, missing = sorted(set(options.mapping) - names), sorted(names - set(options.mapping))
        said = "; ".join(part for part in (f"unknown {', '.join(unknown)}" if unknown else "",
                                           f"missing {', '.join(missing)}" if missing else "") if part)
        raise ConfigError(f"import csv needs --map arrival=COL,prompt=COL,output=COL ({said})")
    if options.time_unit not in (*UNITS, "datetime"):
        raise ConfigError(f"--time-unit must be one of s, ms, us, ns, datetime, got {options.time_unit!r}")
    source = _read_all(files, pl.read_csv, "a request log (CSV)", list(options.mapping.values()))
    col = pl.col(options.mapping["arrival"])
    if options.time_unit == "datetime":
        arrival = _timestamps(source, options.mapping["arrival"], " (--time-unit datetime)")
    else:
        arrival = (col.cast(pl.Float64) * UNITS[options.time_unit]).round()
    requests = requests_table(pl.col(options.mapping["prompt"]), pl.col(options.mapping["output"]), arrival, source,
                              options)
    mapped = ", ".join(f"{k}={v}" for k, v in sorted(options.mapping.items()))
    return _result(requests, options, [f"columns mapped: {mapped}; arrival in {options.time_unit}"])
