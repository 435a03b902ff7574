"""Rollout output lengths (the skew behind skewness bubbles) and per-instance load, binned for drawing.

Everything is reduced before it leaves here: a histogram is bin counts, a CCDF is at most ``points`` points,
a per-step distribution is its quantiles. A million requests become a few kilobytes."""

from __future__ import annotations

import numpy as np
import polars as pl

from rltrace.analysis.runs import Run
from rltrace.analysis.timeline import busy_spans


def _lengths(run: Run) -> np.ndarray:
    r = run.requests
    if "finished" in r.columns:
        r = r.filter(pl.col("finished"))
    return r["output_tokens"].to_numpy().astype(np.float64)


def workload_groups(runs: list[Run]) -> dict[str, list[Run]]:
    """Runs grouped by the output lengths they replayed (count, sum, sum of squares), labelled by their
    names: one distribution stands for each group."""
    groups: dict[tuple[int, float, float], list[Run]] = {}
    for run in runs:
        a = _lengths(run)
        groups.setdefault((len(a), float(a.sum()), float((a * a).sum())), []).append(run)
    return {", ".join(r.name for r in group): group for group in groups.values()}


def histogram(runs: list[Run], bins: int = 60) -> pl.DataFrame:
    """run, lo, hi, count: output tokens in log-spaced bins shared by all runs (bin 0 holds length 0)."""
    arrays = {r.name: _lengths(r) for r in runs}
    top = max((a.max() for a in arrays.values() if len(a)), default=1.0)
    edges = np.unique(np.concatenate([[0.0, 1.0], np.geomspace(1.0, max(top, 1.0) + 1, bins)]))
    parts = []
    for name, a in arrays.items():
        counts, _ = np.histogram(a, edges)
        parts.append(pl.DataFrame({"run": name, "lo": edges[:-1], "hi": edges[1:], "count": counts.astype(np.int64)}))
    return pl.concat(parts)


def ccdf(runs: list[Run], points: int = 400) -> pl.DataFrame:
    """run, tokens, ccdf: P(length > tokens) at up to ``points`` log-spaced lengths (every distinct length
    when there are fewer), so the tail survives any downsampling."""
    parts = []
    for run in runs:
        a = np.sort(_lengths(run))
        if not len(a):
            continue
        distinct = np.unique(a)
        xs = distinct if len(distinct) <= points else np.unique(
            np.concatenate([np.geomspace(max(distinct[0], 1.0), distinct[-1], points), distinct[-8:]]))
        above = 1.0 - np.searchsorted(a, xs, side="right") / len(a)
        parts.append(pl.DataFrame({"run": run.name, "tokens": xs, "ccdf": above}))
    if not parts:
        return pl.DataFrame(schema={"run": pl.String, "tokens": pl.Float64, "ccdf": pl.Float64})
    return pl.concat(parts)


def per_step(run: Run) -> pl.DataFrame:
    """step, count, min, q1, p50, q3, p90, p99, max, max_over_median of one run's output lengths."""
    r = run.requests.filter(pl.col("finished")) if "finished" in run.requests.columns else run.requests
    tokens = pl.col("output_tokens")
    return (r.group_by("step").agg(
        pl.len().alias("count"), tokens.min().alias("min"), tokens.quantile(0.25).alias("q1"),
        tokens.median().alias("p50"), tokens.quantile(0.75).alias("q3"), tokens.quantile(0.9).alias("p90"),
        tokens.quantile(0.99).alias("p99"), tokens.max().alias("max"))
        .with_columns((pl.col("max") / pl.col("p50").clip(lower_bound=1)).alias("max_over_median")).sort("step"))


def instance_load(runs: list[Run]) -> pl.DataFrame:
    """run, instance, requests, output_tokens, busy_s: how evenly each run spread its work (instances by the
    timeline's resource names; busy: when the instance ran any request, analysis/timeline.py busy_spans)."""
    parts = []
    for run in runs:
        t = run.timeline
        served = (t.filter(pl.col("kind") == "request")
                  .join(run.requests.select(pl.col("request").alias("id"), "output_tokens"), on="id", how="left")
                  .group_by("resource").agg(pl.len().alias("requests"), pl.col("output_tokens").sum()))
        busy = (busy_spans(t).group_by("resource")
                .agg((pl.col("end_s") - pl.col("start_s")).sum().alias("busy_s")))
        parts.append(served.join(busy, on="resource", how="left").select(
            pl.lit(run.name).alias("run"), pl.col("resource").alias("instance"), "requests",
            pl.col("output_tokens").cast(pl.Int64), pl.col("busy_s").fill_null(0.0)))
    number = pl.col("instance").str.extract(r"(\d+)$").cast(pl.Int64)  # instance2 before instance10
    return pl.concat(parts).sort("run", pl.col("instance").str.replace(r"\d+$", ""), number, maintain_order=True)
