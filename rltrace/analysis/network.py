"""Network views of a run: link utilisation over time and weight-sync durations."""

from __future__ import annotations

import numpy as np
import polars as pl

from rltrace.analysis.runs import Run
from rltrace.scalars import number


def link_utilization(run: Run, *, bins: int = 200, max_links: int = 64) -> tuple[pl.DataFrame, str]:
    """link, bin, start_s, end_s, utilization (time-weighted mean over the bin), peak (highest utilisation of
    any transfer in the bin), and the method in words. Links are ranked by bytes carried; past ``max_links``
    only the busiest are kept. The peak is what shows a hot link: a 0.3 s weight sync at 90% is 3% of a 9 s
    bin's mean."""
    empty = pl.DataFrame(schema={"link": pl.String, "bin": pl.Int32, "start_s": pl.Float64, "end_s": pl.Float64,
                                 "utilization": pl.Float64, "peak": pl.Float64})
    links = run.links
    if links is None or not links.height:
        return empty, "no network model in this run (replay with --topology)"
    ranked = links.group_by("link").agg(pl.col("bytes").sum()).sort("bytes", "link", descending=[True, False])
    method = f"{ranked.height} links, {bins} time bins"
    if ranked.height > max_links:
        method = f"busiest {max_links} of {ranked.height} links (by bytes), {bins} time bins"
        ranked = ranked.head(max_links)
    names = ranked["link"].to_list()
    chosen = links.filter(pl.col("link").is_in(names))
    horizon = max(float(run.metrics.get("makespan_s", 0.0)), number(chosen["end_s"].max()))
    edges = np.linspace(0.0, horizon, bins + 1)
    code = chosen["link"].replace_strict({n: i for i, n in enumerate(names)}, return_dtype=pl.Int64).to_numpy()
    s, e, u = chosen["start_s"].to_numpy(), chosen["end_s"].to_numpy(), chosen["utilization"].to_numpy()
    grid = np.zeros((len(names), bins))
    peak = np.zeros((len(names), bins))
    # Overlap of every interval with every bin, one chunk of intervals at a time (bounded memory).
    for a in range(0, len(s), 4096):
        lo = np.maximum(s[a:a + 4096, None], edges[None, :-1])
        hi = np.minimum(e[a:a + 4096, None], edges[None, 1:])
        overlap = np.clip(hi - lo, 0.0, None)
        np.add.at(grid, code[a:a + 4096], overlap * u[a:a + 4096, None])
        np.maximum.at(peak, code[a:a + 4096], np.where(overlap > 0, u[a:a + 4096, None], 0.0))
    grid /= np.diff(edges)[None, :]
    return pl.DataFrame({
        "link": np.repeat(names, bins), "bin": np.tile(np.arange(bins, dtype=np.int32), len(names)),
        "start_s": np.tile(edges[:-1], len(names)), "end_s": np.tile(edges[1:], len(names)),
        "utilization": np.clip(grid, 0.0, 1.0).ravel(), "peak": np.clip(peak, 0.0, 1.0).ravel()}), method


def sync_durations(runs: list[Run]) -> pl.DataFrame:
    """run, step, start_s, duration_s: each run's weight-sync seconds per step (the timeline's weight_sync spans; in
    a run of several jobs, the mean over the jobs that synced at that step, each job's syncs summed as metrics.json's
    ``weight_sync_s`` sums them per job and step)."""
    parts = [run.timeline.filter(pl.col("kind") == "weight_sync").group_by("job", "step").agg(
        pl.col("start_s").min(), (pl.col("end_s") - pl.col("start_s")).sum().alias("duration_s"))
        .group_by("step").agg(pl.col("start_s").min(), pl.col("duration_s").mean())
        .select(pl.lit(run.name).alias("run"), "step", "start_s", "duration_s") for run in runs]
    return pl.concat(parts).sort("run", "step")
