"""SGLang's per-request metrics export as a requests table (``rltrace import sglang``).

An SGLang server started with ``--enable-metrics --export-metrics-to-file --export-metrics-to-file-dir DIR``
appends one JSON object per finished request to ``DIR/sglang-request-metrics-YYYYMMDD_HH.log``
(``FileRequestMetricsExporter`` in ``sglang/srt/observability/request_metrics_exporter.py``): the request's
parameters as a JSON string (``request_parameters``) beside its output's ``meta_info``: ``id``,
``prompt_tokens``, ``completion_tokens``, ``cached_tokens``, ``finish_reason`` (``{"type": "stop" | "length" |
"abort", ...}``), ``weight_version``, ``e2e_latency`` (s), and, with ``--enable-metrics``,
``request_received_ts`` and ``request_finished_ts`` (wall clock, s), ``first_token_latency`` (s),
``forward_entry_time`` (wall clock, s: the request's first forward batch), ``queue_time`` (s) and ``dp_rank``.
Field names as in sglang 0.5.23's ``tokenizer_manager.py`` and ``observability/req_time_stats.py``.

Each file is one server (give one per server); a server's data-parallel ranks are engines of their own. Requests
with the same prompt (``text`` or ``input_ids`` of their parameters) form one GRPO group. A numeric
``weight_version`` is the request's policy version, and then each version is a step.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import polars as pl
from rltrace.collectors.importers.base import Imported, ImportOptions, register, window_steps

from rltrace.errors import ConfigError
from rltrace.limits import check_input
from rltrace.manifest import Pool

REQUIRED = ("prompt_tokens", "completion_tokens", "request_received_ts")
OPTIONAL = {"id": pl.String, "cached_tokens": pl.Int64, "request_finished_ts": pl.Float64, "e2e_latency": pl.Float64,
            "first_token_latency": pl.Float64, "forward_entry_time": pl.Float64, "queue_time": pl.Float64,
            "dp_rank": pl.Int64, "weight_version": pl.String, "request_parameters": pl.String,
            "num_retractions": pl.Int64}
FINISH = {"stop": "stop", "length": "length", "abort": "abort"}
"""SGLang's finish types; any other, or none, is recorded as abort"""


def _first_bad_line(path: Path) -> str | None:
    """Which line is not a JSON object, in words (the reader's own message names a character of its tape)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                if line.strip() and not isinstance(_json_or_none(line), dict):
                    return f"line {number} is not a JSON object"
    except OSError:
        return None
    return None


def _json_or_none(line: str) -> object:
    try:
        return json.loads(line)
    except ValueError:
        return None


def _read(path: Path, index: int) -> pl.DataFrame:
    check_input(path)
    try:
        frame = pl.read_ndjson(path, infer_schema_length=None)
    except (pl.exceptions.PolarsError, OSError, ValueError) as e:
        why = _first_bad_line(path) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: not an SGLang request-metrics export (JSON lines): {why}") from None
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        hint = " (the server needs --enable-metrics for request times)" if "request_received_ts" in missing else ""
        raise ConfigError(f"{path}: not an SGLang request-metrics export: no field {missing[0]!r}{hint}")
    kind = frame.schema.get("finish_reason")
    finish = (pl.col("finish_reason").struct.field("type") if isinstance(kind, pl.Struct)
              else pl.col("finish_reason") if kind == pl.String else pl.lit(None, pl.String))
    optional = (pl.col(c).cast(t) if c in frame.columns else pl.lit(None, t).alias(c) for c, t in OPTIONAL.items())
    try:
        return frame.select(*(pl.col(c).cast(pl.Float64) for c in REQUIRED), *optional,
                            finish.cast(pl.String).alias("finish_type"), pl.lit(index).alias("file"))
    except pl.exceptions.PolarsError as e:  # text where a number belongs, an object where a string does
        raise ConfigError(f"{path}: a field of the wrong type: {str(e).splitlines()[0]}") from None


TIME_FIELDS = ("request_received_ts", "request_finished_ts", "e2e_latency", "first_token_latency", "queue_time",
               "forward_entry_time")
"""the export's times, seconds (since the epoch, or from the request's arrival)"""
MAX_SECONDS = 9.2e9
"""the most seconds an int64 of nanoseconds holds (about year 2262 from the epoch)"""


def _ns(seconds: pl.Expr) -> pl.Expr:
    return (seconds.cast(pl.Float64) * 1e9).round().cast(pl.Int64)


def _within(value: pl.Expr, low: pl.Expr, high: pl.Expr | None = None) -> pl.Expr:
    """``value`` kept between ``low`` and ``high`` where they are known (the schema's order: arrival <= scheduled
    <= first token <= finish; clocks of two processes can disagree by a hair); an unknown value stays unknown."""
    bounded = pl.max_horizontal(value, low)
    return pl.when(value.is_not_null()).then(bounded if high is None else pl.min_horizontal(bounded, high))


@register("sglang")
def sglang(files: list[Path], options: ImportOptions, progress: Callable[[int, int], None] | None = None) -> Imported:
    """SGLang's request-metrics export (``--export-metrics-to-file``), one file per server."""
    try:
        source = pl.concat([_read(path, i) for i, path in enumerate(files)], how="vertical_relaxed")
    except pl.exceptions.PolarsError as e:  # files whose fields disagree in type
        raise ConfigError(f"the files' fields disagree in type: {str(e).splitlines()[0]}") from None
    total = source.height
    for column in TIME_FIELDS:  # seconds that nanoseconds since the epoch cannot hold would overflow silently
        if column in source.columns and source.schema[column].is_numeric():
            worst = source.select(pl.col(column).cast(pl.Float64).abs().max()).item()
            if worst is not None and not worst < MAX_SECONDS:
                raise ConfigError(f"{column}: {worst:g} s is not a usable time (at most {MAX_SECONDS:.3g} s)")
    source = source.with_row_index("row").with_columns(pl.col("dp_rank").fill_null(0))
    arrival = _ns(pl.col("request_received_ts"))
    finish = _within(pl.coalesce(_ns(pl.col("request_finished_ts")), arrival + _ns(pl.col("e2e_latency"))), arrival)
    first = _within(arrival + _ns(pl.col("first_token_latency")), arrival, finish)
    # queue_time counts from the scheduler's queue and is negative for a request never scheduled: only a
    # non-negative one stands in for a missing forward_entry_time
    queued = pl.when(pl.col("queue_time") >= 0).then(arrival + _ns(pl.col("queue_time")))
    scheduled = _within(pl.coalesce(_ns(pl.col("forward_entry_time")), queued), arrival, pl.coalesce(first, finish))
    prompt = pl.coalesce(pl.col("request_parameters").str.json_path_match("$.input_ids"),
                         pl.col("request_parameters").str.json_path_match("$.text"))
    version = pl.col("weight_version").str.to_integer(strict=False)
    engines = source.select("file", "dp_rank").unique().sort("file", "dp_rank").with_row_index("e")
    frame = source.join(engines, on=["file", "dp_rank"], how="left").sort("row").select(
        pl.col("prompt_tokens").cast(pl.Int64), pl.col("completion_tokens").cast(pl.Int64).alias("output_tokens"),
        arrival.alias("arrival_ns"), pl.col("cached_tokens"),
        pl.coalesce(pl.col("id"), pl.format("r{}", "row")).alias("request_id"),
        pl.when(prompt.is_not_null()).then(pl.format("p{}", prompt.hash().cast(pl.String)))
        .otherwise(pl.format("r{}", "row")).alias("group_id"),
        pl.format("rollout/engine{}", "e").alias("engine"),
        scheduled.alias("scheduled_ns"), first.alias("first_token_ns"), finish.alias("finish_ns"),
        pl.col("finish_type").replace_strict(FINISH, default="abort").alias("finish_reason"),
        version.cast(pl.Int32).alias("policy_version"), pl.lit(0, pl.Int32).alias("turn"),
        pl.col("num_retractions").fill_null(0).cast(pl.Int32).alias("num_preemptions"))
    notes = [("arrival, first-token and finish times are the server's request_received_ts, first_token_latency and "
              "request_finished_ts; scheduled is its forward_entry_time (else arrival + a non-negative queue_time)"),
             "engines: one per file and data-parallel rank; groups: requests with the same prompt"]
    numeric = frame["policy_version"].null_count() == 0 and frame.height > 0
    if numeric:
        frame = frame.with_columns((pl.col("policy_version").rank("dense") - 1).alias("step"))
        notes.append("steps: one per weight_version, in order"
                     + (" (--window-s is not used: every request has a weight version)" if options.window_s else ""))
    elif options.window_s:
        frame = frame.with_columns(window_steps(frame["arrival_ns"], options.window_s))
        notes.append(f"steps are {options.window_s:g} s windows of arrival time")
    else:
        frame = frame.with_columns(pl.lit(0).alias("step"))
        notes.append("one step: every request in step 0 (give --window-s for steps by arrival time)")
    frame = frame.with_columns(pl.col("step").cast(pl.Int32))
    ok = (pl.col("prompt_tokens") >= 0) & (pl.col("output_tokens") >= 0) & pl.col("arrival_ns").is_not_null()
    imported = Imported({"requests": frame.filter(ok.fill_null(False))}, notes,
                        {"rollout": Pool(device=options.gpu or "unknown", count=engines.height)})
    bad = total - imported.tables["requests"].height
    if bad:
        imported.skipped["negative token count or missing request_received_ts"] = bad
    return imported
