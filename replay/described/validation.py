"""Described jobs against published RL runs: every row of ``data/rl_runs.csv`` (a measured RL step of a named
framework, with its source and setup) replayed from its stated setup under the scheduler it ran, step time and
phases compared with what the source measured (``rltrace estimate validate-rl``; docs/described.md).

A row's ``split`` is "fit" (the runs the described model's constants were chosen beside) or "held out" (never
looked at while choosing them); both are reported apart. A row is ``scored`` only where its source states every
input that moves the step (the mean response above all); the others are kept, predicted and reported as their own
set, with the reason in the column. Rows sharing a ``pair`` label are the same workload under
two schedules (synchronous and asynchronous, colocated and disaggregated): the check is whether the model orders
them as the measurement does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
from rltrace.replay.described.description import Description, parse_description
from rltrace.replay.described.frameworks import Calibration
from rltrace.replay.described.prepare import from_description
from rltrace.replay.loading import Shape
from rltrace.replay.run import CostConfig, ReplayConfig, replay

from rltrace.errors import ConfigError, RltraceError
from rltrace.limits import check_input
from rltrace.scalars import first_not_positive

RUNS_CSV = Path(__file__).parent / "data" / "rl_runs.csv"
SCHEDULERS = {"colocated": "colocated-sync", "disaggregated": "disagg-sync", "one-step-async": "one-step-async",
              "fully-async": "fully-async"}
"""a row's ``mode`` -> the scheduler that replays it"""
PHASES = {"gen_s": ("generation",), "logprob_s": ("old_logprob",), "ref_s": ("reference",),
          "logprobs_s": ("old_logprob", "reference"), "train_s": ("train", "optimizer"), "refit_s": ("refit",)}
"""measured phase columns -> the replay's phases they hold (``metrics.json``'s ``phases_s_per_step``): a framework's
"update" or "policy training" time is the update's passes and its optimizer steps; ``logprobs_s`` is a source's one
figure for the old-policy and reference passes together (NeMo-RL's "get logprobs")"""
_INT = ("gpus", "gen_gpus", "train_gpus", "prompts", "samples", "train_batch", "max_seq", "max_response", "gen_tp",
        "gen_pp", "train_tp", "train_cp", "train_ep", "train_pp", "epochs")
_FLOAT = ("mean_response", "mean_prompt", "step_s", *PHASES)
REQUIRED = ("run_id", "publisher", "source", "framework", "mode", "model", "gpu", "prompts", "samples",
            "mean_response", "step_s", "split")


def read_runs(path: str | Path | None = None) -> pl.DataFrame:
    """The runs CSV (default: the shipped set), its numeric columns typed; a missing column is one line."""
    p = check_input(path or RUNS_CSV)
    try:
        frame = pl.read_csv(p, infer_schema=False)
    except pl.exceptions.PolarsError as e:
        raise ConfigError(f"{p}: not a readable CSV ({str(e).splitlines()[0]})") from None
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise ConfigError(f"{p}: missing column {missing[0]!r} (a runs file needs {', '.join(REQUIRED)})")
    if "scored" not in frame.columns:  # a user's own runs: every one stated in full unless it says otherwise
        frame = frame.with_columns(pl.lit("yes").alias("scored"))
    if frame.is_empty():
        raise ConfigError(f"{p}: no runs")
    casts = [pl.col(c).cast(pl.Int64, strict=False) for c in _INT if c in frame.columns]
    casts += [pl.col(c).cast(pl.Float64, strict=False) for c in _FLOAT if c in frame.columns]
    typed = frame.with_columns(casts)
    blank = typed["step_s"].is_null().arg_true()
    i = int(blank[0]) if len(blank) else first_not_positive(typed["step_s"])
    if i is not None:  # the measurement every error is taken against: 0 was scored as an infinite error
        raise ConfigError(f"{p}: line {i + 2} ({frame['run_id'][i]}): step_s must be a positive number of seconds, "
                          f"got {frame['step_s'][i]!r}")
    return typed


def _given(row: dict[str, Any], key: str) -> Any:
    value = row.get(key)
    return None if value is None or value == "" or (isinstance(value, float) and math.isnan(value)) else value


def description(row: dict[str, Any]) -> Description:
    """A row's stated setup as a described job."""
    mode = str(row["mode"])
    if mode not in SCHEDULERS:
        raise ConfigError(f"mode must be one of {', '.join(SCHEDULERS)}, got {mode!r}")
    table: dict[str, dict[str, Any]] = {"cluster": {"gpu": row["gpu"]}, "batch": {}, "generation": {},
                                        "training": {}, "algorithm": {}}
    for key in ("gpus", "gen_gpus", "train_gpus"):
        if _given(row, key) is not None:
            table["cluster"][key] = int(row[key])
    for key in ("prompts", "samples", "train_batch", "max_seq", "max_response"):
        if _given(row, key) is not None:
            table["batch"][key] = int(row[key])
    for key in ("mean_response", "mean_prompt"):
        if _given(row, key) is not None:
            table["batch"][key] = float(row[key])
    for key in ("tp", "pp"):
        if _given(row, f"gen_{key}") is not None:
            table["generation"][key] = int(row[f"gen_{key}"])
    for key in ("tp", "cp", "ep", "pp"):
        if _given(row, f"train_{key}") is not None:
            table["training"][key] = int(row[f"train_{key}"])
    if _given(row, "epochs") is not None:
        table["training"]["epochs"] = int(row["epochs"])
    if _given(row, "train_backend") is not None:
        table["training"]["backend"] = row["train_backend"]
    if _given(row, "algorithm") is not None:
        table["algorithm"]["name"] = row["algorithm"]
    for key in ("reference", "recompute_logprobs"):
        if _given(row, key) is not None:
            table["algorithm"][key] = str(row[key]).lower() == "true"
    data: dict[str, Any] = {"name": row["run_id"], "model": row["model"], "framework": row["framework"],
                            "mode": "colocated" if mode == "colocated" else "disaggregated",
                            "source": row["source"], **{k: v for k, v in table.items() if v}}
    if _given(row, "precision") is not None:
        data["precision"] = row["precision"]
    return parse_description(data, f"run {row['run_id']}")


def predict(row: dict[str, Any], cost: CostConfig | None = None,
            calibration: Calibration | None = None) -> dict[str, float]:
    """A row replayed: its steady step time (steps after the first) and phases, seconds (``calibration`` replaces the
    framework's own)."""
    scheduler = SCHEDULERS[str(row["mode"])]
    config = ReplayConfig() if cost is None else ReplayConfig(cost=cost)
    prepared = from_description(description(row), Shape(), config.cost, calibration=calibration)
    result = replay(prepared, scheduler, config)
    return {"step_s": float(result.metrics["step_time_s"]["steady_mean"]), **result.metrics["phases_s_per_step"]}


def validate_runs(path: str | Path | None = None, cost: CostConfig | None = None,
                  progress: Callable[[int, int], None] | None = None,
                  calibration: Calibration | None = None, where: pl.Expr | None = None) -> pl.DataFrame:
    """Every run (``where`` chooses some) predicted: run_id, publisher, split, scored, mode, pair, measured and
    predicted step and phase seconds, the step's signed error ((predicted - measured) / measured), and why a run was
    not predicted."""
    runs = read_runs(path)
    if where is not None:
        runs = runs.filter(where)
    rows: list[dict[str, Any]] = []
    for i, row in enumerate(runs.iter_rows(named=True)):
        out: dict[str, Any] = {k: row.get(k) for k in ("run_id", "publisher", "framework", "split", "mode", "pair",
                                                       "model", "gpu")}
        out["scored"] = row["scored"] or "yes"
        out["measured_step_s"] = row["step_s"]
        try:
            got = predict(row, cost, calibration)
            out["predicted_step_s"], out["skipped"] = got["step_s"], ""
        except RltraceError as e:
            got, out["predicted_step_s"], out["skipped"] = {}, None, str(e).splitlines()[0]
        for column, phase in PHASES.items():
            out[f"measured_{column}"] = _given(row, column)
            out[f"predicted_{column}"] = (sum(got.get(p, 0.0) for p in phase) if got and _given(row, column) is not None
                                          else None)
        rows.append(out)
        if progress is not None:
            progress(i + 1, runs.height)
    frame = pl.DataFrame(rows, infer_schema_length=None)  # seconds as floats even where every prediction was refused
    frame = frame.with_columns(pl.col("^(measured|predicted)_.*$").cast(pl.Float64))
    return frame.with_columns(((pl.col("predicted_step_s") - pl.col("measured_step_s"))
                               / pl.col("measured_step_s")).alias("error"))


def summary(results: pl.DataFrame) -> pl.DataFrame:
    """Per set (the scored runs of each split, then every unscored run together, whatever its split): runs
    predicted, publishers, median and 90th-percentile |step error|, share within 15% and 20%, bias."""
    scored = results.filter(pl.col("error").is_not_null()).with_columns(
        pl.col("error").abs().alias("abs_error"),
        pl.when(pl.col("scored") == "yes").then(pl.col("split")).otherwise(pl.lit("not scored")).alias("set"))
    return scored.group_by("set").agg(
        pl.len().alias("runs"),
        pl.col("publisher").n_unique().alias("publishers"),
        pl.col("abs_error").median().alias("median_abs_error"),
        pl.col("abs_error").quantile(0.9, "higher").alias("p90_abs_error"),
        (pl.col("abs_error") <= 0.15).mean().alias("within_15pct"),
        (pl.col("abs_error") <= 0.20).mean().alias("within_20pct"),
        pl.col("error").median().alias("median_error"),
    ).sort(pl.col("set").replace_strict({"fit": 0, "held out": 1, "not scored": 2}))


def pairs(results: pl.DataFrame) -> pl.DataFrame:
    """Every pair of runs sharing a ``pair`` label: the measured and predicted ratio of the first run's step time to
    each other's, and whether the prediction orders them as measured (within 5% counts as a tie either way)."""
    scored = results.filter(pl.col("pair").is_not_null() & (pl.col("pair") != "") & pl.col("error").is_not_null())
    out: list[dict[str, Any]] = []
    for (label,), group in scored.group_by("pair", maintain_order=True):
        first = group.row(0, named=True)
        for other in group.slice(1).iter_rows(named=True):
            measured = first["measured_step_s"] / other["measured_step_s"]
            predicted = first["predicted_step_s"] / other["predicted_step_s"]
            tie = abs(measured - 1) < 0.05
            both = "yes" if first["scored"] == other["scored"] == "yes" else "no"
            out.append({"pair": label, "split": first["split"], "scored": both, "a": first["run_id"],
                        "b": other["run_id"],
                        "measured_ratio": measured, "predicted_ratio": predicted,
                        "ratio_error": predicted / measured - 1,
                        "direction_right": tie or (measured > 1) == (predicted > 1)})
    schema = {"pair": pl.Utf8, "split": pl.Utf8, "scored": pl.Utf8, "a": pl.Utf8, "b": pl.Utf8,
              "measured_ratio": pl.Float64,
              "predicted_ratio": pl.Float64, "ratio_error": pl.Float64, "direction_right": pl.Boolean}
    return pl.DataFrame(out, schema=schema)
