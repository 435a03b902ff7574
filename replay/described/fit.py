"""The frameworks' calibration fitted to the fit split of the published RL runs (``data/rl_runs.csv``), written to
``data/framework_calibration.csv`` by ``benchmarks/fit_rl_calibration.py`` and re-fitted by a test.

Each scored run of the fit split (its inputs all stated) is replayed with a neutral calibration (every factor 1, a
refit rate of 1 GB/s); each phase the source measured gives one ratio:

- ``update_dense`` / ``update_moe``: the measured policy update (its optimizer steps included) over the closed form;
- ``logprob_dense`` / ``logprob_moe``: a measured old-policy or reference log-prob pass (or both, where the source
  times them together) over the closed form;
- ``refit_gbps``: the GB each GPU's serving shard holds over the measured colocated refit.

A framework takes the median of its own ratios where it has at least :data:`MIN_ROWS` of a quantity, else the
pooled median over every framework (the ``*`` row). Held-out runs are never read.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl
from rltrace.replay.described.frameworks import FACTORS, POOLED, Calibration
from rltrace.replay.described.validation import validate_runs

from rltrace.catalog import get_model
from rltrace.errors import ConfigError

MIN_ROWS = 2
NEUTRAL = Calibration(factors={}, refit_gbps=1.0, source="neutral")


def _ratios(results: pl.DataFrame) -> pl.DataFrame:
    """framework, quantity, ratio, run_id: one row per measured phase of a fit run."""
    kinds = {m: ("moe" if get_model(m).is_moe else "dense") for m in results["model"].unique().to_list()}
    r = results.with_columns(pl.col("model").replace_strict(kinds, return_dtype=pl.Utf8).alias("kind"))
    parts = [
        r.select("framework", pl.lit("update_") + pl.col("kind"),
                 pl.col("measured_train_s") / pl.col("predicted_train_s"), "run_id"),
        r.select("framework", pl.lit("logprob_") + pl.col("kind"),
                 pl.col("measured_logprob_s") / pl.col("predicted_logprob_s"), "run_id"),
        r.select("framework", pl.lit("logprob_") + pl.col("kind"), pl.col("measured_ref_s") / pl.col("predicted_ref_s"),
                 "run_id"),
        r.select("framework", pl.lit("logprob_") + pl.col("kind"),
                 pl.col("measured_logprobs_s") / pl.col("predicted_logprobs_s"), "run_id"),
        r.filter(pl.col("mode") == "colocated").select(
            "framework", pl.lit("refit_gbps"), pl.col("predicted_refit_s") / pl.col("measured_refit_s"), "run_id"),
    ]
    named = [p.rename(dict(zip(p.columns, ("framework", "quantity", "ratio", "run_id")))) for p in parts]
    return pl.concat(named).filter(pl.col("ratio").is_finite() & (pl.col("ratio") > 0))


def fit_calibration(path: str | Path | None = None,
                    progress: Callable[[int, int], None] | None = None) -> pl.DataFrame:
    """The calibration table: framework (or ``*``), quantity, value, rows, fitted_on (the run ids)."""
    chosen = (pl.col("split") == "fit") & (pl.col("scored") == "yes")
    results = validate_runs(path, calibration=NEUTRAL, progress=progress, where=chosen)
    if results.is_empty():
        raise ConfigError("no run of the fit split: nothing to fit the calibration to")
    ratios = _ratios(results.filter(pl.col("skipped") == ""))

    def table(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.group_by("framework", "quantity").agg(
            pl.col("ratio").median().alias("value"), pl.len().alias("rows"),
            pl.col("run_id").unique().sort().str.join(" ").alias("fitted_on"))

    own = table(ratios).filter(pl.col("rows") >= MIN_ROWS)
    pooled = table(ratios.with_columns(pl.lit(POOLED).alias("framework"))).filter(pl.col("rows") >= MIN_ROWS)
    order = {q: i for i, q in enumerate((*FACTORS, "refit_gbps"))}
    return (pl.concat([pooled, own]).with_columns(pl.col("quantity").replace_strict(order).alias("_o"))
            .sort(pl.col("framework") != POOLED, "framework", "_o").drop("_o")
            .with_columns(pl.col("value").round(4)))
