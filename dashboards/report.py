"""The comparison report: runs (and optionally the bundle they replay) in, one HTML page out.

``build`` returns the page as a string; the caller writes it. Sections: runs compared, bubbles, timelines,
output lengths, load per instance, network, and, with a bundle, what it recorded."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
from rltrace.dashboards import (
    bubbles,
    collectives,
    flows,
    header,
    latency,
    links,
    load,
    steps,
    sweep,
    syncs,
    timeline,
)
from rltrace.dashboards import lengths as lengths_fig
from rltrace.dashboards.page import Page

from rltrace.analysis import compare, lengths, network, recorded
from rltrace.analysis.runs import Run
from rltrace.analysis.timeline import gantt
from rltrace.bundle import Bundle
from rltrace.errors import ConfigError

SUMMARY_FORMATS = {"samples_per_s": ".3g", "tokens_per_s": ",.0f", "step_time_s": ".3g", "usd_per_1k_samples": ".3f",
                   "makespan_s": ".4g", "samples_per_s_x": ".2f", "tokens_per_s_x": ".2f", "step_time_s_x": ".2f",
                   "usd_per_1k_samples_x": ".2f", "samples_per_s_p05": ".3g", "samples_per_s_p95": ".3g"}


@dataclass(frozen=True, kw_only=True, slots=True)
class ReportConfig:
    """How much of each run the report draws (the size budget)."""

    max_segments: int = 20_000
    """timeline intervals per run, after reduction (analysis/timeline.py)"""
    max_instances: int = 32
    """generation instances in a run's timeline (sampled at an even stride past it)"""
    timeline_links: int = 12
    """busiest links given a timeline row"""
    max_links: int = 32
    """links in a run's utilisation heatmap (the busiest, by bytes)"""
    time_bins: int = 200

    def __post_init__(self) -> None:
        if min(self.max_segments, self.max_instances, self.timeline_links, self.max_links, self.time_bins) < 1:
            raise ConfigError("report limits must be positive")


def build(runs: list[Run], bundle: Bundle | None = None, baseline: str | None = None,
          config: ReportConfig | None = None, title: str = "rltrace report") -> str:
    """The whole report as HTML."""
    if not runs:
        raise ConfigError("the report needs at least one run")
    config = config or ReportConfig()
    page = Page(title)
    summary = compare.summary(runs, baseline)
    page.section("Runs compared", "throughput, step time and cost per run; ratios (x) are against the baseline run "
                 "(highlighted)")
    if bundle is not None:
        page.definitions(recorded.overview(bundle))
    page.table(summary.drop("scheduler"), SUMMARY_FORMATS, highlight="baseline")
    page.figure(header.figure(summary))
    notes = sorted({n for r in runs for n in r.config.get("notes", [])})
    for note in notes:
        page.text(f"note: {note}")

    page.section("Bubbles", "each pool's GPU-time split into busy time, dependency bubbles and skewness bubbles")
    page.figure(bubbles.figure(compare.bubbles(runs)))

    page.section("Timelines", "one row per resource; requests drawn in their batch slot, phases as bars")
    for run in runs:
        page.figure(timeline.figure(run.name, gantt(run, max_segments=config.max_segments,
                                                    max_instances=config.max_instances,
                                                    max_links=config.timeline_links)))

    page.section("Output lengths", "rollout output tokens: the skew behind skewness bubbles")
    groups = lengths.workload_groups(runs)  # runs that replayed the same lengths share one distribution
    shown = [group[0] for group in groups.values()]
    labels = {group[0].name: label for label, group in groups.items()}
    page.figure(lengths_fig.figure(lengths.histogram(shown), lengths.ccdf(shown), labels))
    for label, group in groups.items():
        page.figure(steps.figure(lengths.per_step(group[0]), label))
    page.section("Load per instance")
    page.figure(load.figure(lengths.instance_load(runs)))

    page.section("Network", "weight syncs per step; link utilisation for runs replayed on a topology")
    durations = network.sync_durations(runs)
    if durations.height:
        page.figure(syncs.figure(durations))
    else:
        page.text("no weight syncs in these runs")
    for run in runs:
        grid, method = network.link_utilization(run, bins=config.time_bins, max_links=config.max_links)
        if grid.height:
            page.figure(links.figure(grid, run.name, method))
        else:
            page.text(f"{run.name}: {method}")
    if bundle is not None:
        _recorded(page, bundle)
    return page.render()


def _recorded(page: Page, bundle: Bundle) -> None:
    page.section("Recorded bundle", f"what {bundle.manifest.run_id} recorded")
    by_op = recorded.collectives(bundle)
    if by_op.height:
        page.figure(collectives.figure(by_op))
    else:
        page.text("no collectives recorded")
    flows_frame = recorded.weight_syncs(bundle)
    if flows_frame.height:
        page.figure(flows.figure(flows_frame))
    else:
        page.text("no weight-sync flows recorded")
    lat = recorded.latency(bundle)
    if lat.height and lat.select(pl.col("queue_s", "prefill_s", "decode_s").sum()).row(0) != (0.0, 0.0, 0.0):
        page.figure(latency.figure(lat))
    else:
        page.text("no request timings recorded")


SWEEP_COLUMNS = ("samples_per_s", "tokens_per_s", "step_time_s", "usd_per_1k_samples", "usd_per_hour",
                 "gen_dependency_bubble", "gen_skewness_bubble", "train_dependency_bubble", "stale_max")


def build_sweep(frame: pl.DataFrame, axes: list[str], failed: dict[str, str] | None = None,
                title: str = "rltrace sweep", top: int = 25) -> str:
    """The report of a sweep: the best points, throughput against cost with its Pareto front, and what each
    varied parameter does. ``frame`` is the sweep's Parquet (one row per point)."""
    if not frame.height:
        raise ConfigError("the sweep has no finished point to report")
    page = Page(title)
    page.section("Best points", f"the {min(top, frame.height)} highest-throughput of {frame.height} points")
    shown = frame.sort("samples_per_s", descending=True, nulls_last=True).head(top)
    page.table(shown.select("point_id", *axes, *[c for c in SWEEP_COLUMNS if c in frame.columns]),
               {c: ".3g" for c in SWEEP_COLUMNS})
    for pid, error in (failed or {}).items():
        page.text(f"failed: {pid}: {error}")
    page.section("Throughput against cost")
    page.figure(sweep.frontier(frame, axes))
    page.section("Parameters")
    page.figure(sweep.effects(frame, axes))
    return page.render()
