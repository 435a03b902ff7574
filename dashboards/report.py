"""The comparison report: runs (and optionally the bundle they replay) in, one HTML page out.

``build`` returns the page as a string; the caller writes it. Sections: with a diagnosis's findings, what to fix; runs
compared, bubbles, phases, timelines, output lengths, load per instance, network, and, with a bundle, what it
recorded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl
from rltrace.dashboards import (
    bubbles,
    collectives,
    fixes,
    flows,
    header,
    latency,
    links,
    load,
    phases,
    replay_latency,
    steps,
    sweep,
    syncs,
    timeline,
)
from rltrace.dashboards import lengths as lengths_fig
from rltrace.dashboards import work as work_fig
from rltrace.dashboards.page import Column, Page
from rltrace.replay.sweep.point import note_counts

from rltrace.analysis import compare, lengths, network, recorded, verdict
from rltrace.analysis.diagnose import Diagnosis
from rltrace.analysis.runs import Run
from rltrace.analysis.timeline import gantt
from rltrace.analysis.verdict import Objective
from rltrace.analysis.work import trained_ccdf
from rltrace.bundle import Bundle
from rltrace.errors import ConfigError

SUMMARY = [
    Column("run", "run"),
    Column("samples_per_s", "samples/s, same work", verdict.three_digits),
    Column("samples_per_s_x", "× baseline", ".2f"),
    Column("usd_per_1k_samples", "$ per 1k samples, same work", verdict.usd_label),
    Column("usd_per_1k_samples_x", "cost × baseline", ".2f"),
    Column("same_work_s", "time for the work (s)", verdict.three_digits), Column("step_time_s", "mean step (s)", ".3g"),
    Column("trained_samples", "trained samples", ",d"),
    Column("trained_tokens", "trained tokens", verdict.tokens_label),
    Column("tokens_share", "tokens / recorded", ".1%"), Column("lengths", "p99 / max length (tokens)"),
    Column("ks", "length shift (KS)", ".2f"), Column("staleness", "staleness mean / max"),
    Column("work", "work"),
]
"""the first screen's table: every run on the same work (analysis/verdict.py), human headers with units"""


def _gigabytes(value: float) -> str:
    """GB with one decimal, or three significant digits below 1 GB (a small model's 1.84 MB is 0.00184, not 0.0)."""
    return f"{value:,.1f}" if value >= 1 or value == 0 else f"{value:.3g}"


AS_RUN = [
    Column("run", "run"),
    Column("run_samples_per_s", "samples/s", ".3g"), Column("run_samples_per_s_x", "× baseline", ".2f"),
    Column("run_tokens_per_s", "tokens/s", ",.0f"), Column("run_tokens_per_s_x", "× baseline", ".2f"),
    Column("makespan_s", "run time (s)", verdict.three_digits),
    Column("run_usd_per_1k_samples", "$ per 1k samples", verdict.usd_label),
    Column("gen_busy", "generation busy (non-empty batch)", ".0%"),
    Column("gen_used", "generation used (batch against peak)", ".0%"),
    Column("train_used", "training busy (= used)", ".0%"),
    Column("stale_max", "staleness max", "d"), Column("pools", "GPUs and cost by pool"),
    Column("sync_gb", "weight sync per step, one model copy per generation instance (GB)", _gigabytes),
    Column("alltoall_gb", "expert all-to-all per step, sent by each training GPU (GB)", _gigabytes),
]
"""each run's own figures, whatever work it trained (what metrics.json says)"""


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
        for name in ("max_segments", "max_instances", "timeline_links", "max_links", "time_bins"):
            if getattr(self, name) < 1:  # max_segments is the dashboard's --max-segments
                flag = "--max-segments" if name == "max_segments" else name
                raise ConfigError(f"{flag} must be at least 1, got {getattr(self, name)}")


def build(runs: list[Run], bundle: Bundle | None = None, baseline: str | None = None,
          config: ReportConfig | None = None, title: str = "rltrace report", objective: Objective | None = None,
          diagnosis: Diagnosis | None = None) -> str:
    """The whole report as HTML. Its first screen names the run to choose for ``objective`` (default: most
    samples/s on the same work) and why; with a ``diagnosis`` (``rltrace.analysis.diagnose``), a "What to fix"
    section comes first, with its phase table and notes as the terminal prints them."""
    if not runs:
        raise ConfigError("the report needs at least one run")
    config = config or ReportConfig()
    objective = objective or Objective()
    page = Page(title)
    if diagnosis is not None:
        _fixes(page, diagnosis)
    _choice(page, runs, baseline, objective)

    page.section("Bubbles", "each pool's GPU-time split into used time, dependency bubbles and skewness bubbles")
    page.figure(bubbles.figure(compare.bubbles(runs)))
    per_phase = compare.phases(runs)
    if per_phase.height:
        page.section("Phases", "the mean step's time by phase: generation, reward, log-probs, update, weight sync")
        page.figure(phases.figure(per_phase))

    page.section("Timelines", "one row per resource; requests drawn in their batch slot, phases as bars")
    for run in runs:
        page.figure(timeline.figure(run.name, gantt(run, max_segments=config.max_segments,
                                                    max_instances=config.max_instances,
                                                    max_links=config.timeline_links)))

    page.section("Output lengths", "rollout output tokens: the skew behind skewness bubbles")
    groups = lengths.workload_groups(runs)  # runs that replayed the same lengths share one distribution
    shown = [group[0] for group in groups.values()]
    # a group's legend entry names its first run and counts the others (the full list is in its per-step title)
    labels = {group[0].name: group[0].name + (f" and {len(group) - 1} more" if len(group) > 1 else "")
              for group in groups.values()}
    page.figure(lengths_fig.figure(lengths.histogram(shown), lengths.ccdf(shown), labels))
    for label, group in groups.items():
        page.figure(steps.figure(lengths.per_step(group[0]), label))
    page.section("Load per instance")
    page.figure(load.figure(lengths.instance_load(runs)))

    page.section("Request latency", "per-request latency of each replayed run, with its percentiles")
    lat = compare.latency(runs)
    if lat.height:
        page.figure(replay_latency.figure(lat))
    missing = replay_latency.note(lat, [r.name for r in runs])
    if missing:
        page.text(missing)

    page.section("Network", "weight syncs per step; link utilisation for runs replayed on a topology")
    durations = network.sync_durations(runs)
    if durations.height:
        page.figure(syncs.figure(durations))
    else:
        page.text("no weight syncs in these runs")
    without, unpriced = [], []
    for run in runs:
        grid, method = network.link_utilization(run, bins=config.time_bins, max_links=config.max_links)
        if grid.height:
            page.figure(links.figure(grid, run.name, method))
        elif (run.config.get("replay", {}).get("network") or {}).get("topology"):
            unpriced.append(run.name)  # given a topology that does not price its step (a described colocated one)
        else:
            without.append(run.name)
    if without:  # one line for all of them, not one per run
        page.text(f"no link utilisation: no network model in {_runs_named(without, runs)} (replay with --topology)")
    if unpriced:
        page.text(f"no link utilisation in {_runs_named(unpriced, runs)}: replayed with a topology that does not "
                  "price its step (its notes say why)")
    if bundle is not None:
        _recorded(page, bundle)
    return page.render()


PHASE_COLUMNS = [Column("phase", "phase"), Column("measured_s", "measured (s per step)", ".3f"),
                 Column("expected_s", "expected (s per step)", ".3f"), Column("ratio", "x", ".2f"),
                 Column("expected_from", "expected from"), Column("published_s", "published (s per step)", ".3f"),
                 Column("published_run", "published run")]
"""the diagnosis's "Is it normal" table, as ``rltrace diagnose`` prints it"""


def _fixes(page: Page, diagnosis: Diagnosis) -> None:
    """What to fix: the diagnosis's findings, most seconds per step first, with their replayed gains; then each
    phase against what the hardware should give, and the notes that qualify both."""
    _findings(page, diagnosis)
    for note in diagnosis.notes:  # what the gains are measured against, and what could not be judged
        page.text(f"note: {note}")
    if diagnosis.phases.height:
        page.section("Is it normal", "seconds per step by phase: measured, what the cost models expect of the "
                     "recorded devices, and a published run of the same model and GPU kind")
        page.table(diagnosis.phases, PHASE_COLUMNS)


def _findings(page: Page, diagnosis: Diagnosis) -> None:
    findings = diagnosis.findings
    replayed = int(diagnosis.runs[0][1].metrics.get("steps", 0)) if diagnosis.runs else 0
    unjudged = replayed - len(diagnosis.steps)
    runs = ("the runs named 'fix N' below" if unjudged <= 0 else
            f"the runs named 'fix N' below, whose mean step also counts the {unjudged} replayed "
            f"step{'s' if unjudged > 1 else ''} not judged (the warm-up), which a fix to a rank or a transfer "
            f"leaves as it ran: {len(diagnosis.steps)}/{replayed} of such a gain shows there")
    page.section("What to fix", f"rltrace diagnose's findings over {diagnosis.judged}, most seconds per step first; "
                 "a gain is the time per judged step a what-if replay of the fix saves, with its 5%-95% range over "
                 f"bootstrap replicates ({runs})")
    if not findings.height:
        page.text("nothing to fix above the floor (10 ms and 2% of the step)")
        return
    page.figure(fixes.figure(findings))
    page.table(fixes.rows(findings), fixes.COLUMNS)
    page.definitions(fixes.details(findings))


def _choice(page: Page, runs: list[Run], baseline: str | None, objective: Objective) -> None:
    """The first screen: the run to choose and why, every run on the same work, what each trained."""
    table = verdict.table(runs, baseline)
    winner, why_not = verdict.choose(table, objective)
    how = verdict.workload_origin(table)
    mixed = table.select("recorded_samples", "recorded_tokens").n_unique() > 1  # e.g. rollmux's jobs against one
    page.section("Which run to choose", f"each run on its own {how} work: its samples and output tokens, long ones "
                 "included; ratios of rates against the baseline" if mixed else
                 f"every run on the same work: the {how} samples and output tokens, long ones included; ratios "
                 "against the baseline")
    if mixed:  # said before the verdict that rests on it
        page.text("the runs replayed different workloads (" + ", ".join(
            f"{r['run']}: {r['recorded_samples']:,} samples" for r in table.iter_rows(named=True))
            + f"): each is put on its own {how} work, and ratios compare rates, not the same samples")
    if winner is None:
        page.verdict(why_not, objective.describe(how), [], verdict.alternatives(table, objective.goal))
    else:
        row = table.filter(pl.col("run") == winner).row(0, named=True)
        label = (f" (it changes the trained work: {row['tokens_share']:.0%} of the {how} tokens)"
                 if row["changed"] else "")
        page.verdict(f"Run {winner}{label}", objective.describe(how), verdict.reasons(runs, table, winner),
                     verdict.alternatives(table, objective.goal))
    shown = table.with_columns(
        pl.format("{} / {}", _k(pl.col("trained_p99")), _k(pl.col("trained_max"))).alias("lengths"),
        pl.format("{} / {}", pl.col("stale_mean").round(2), pl.col("stale_max")).alias("staleness"),
        pl.when(~pl.col("changed")).then(pl.lit("as ") + pl.col("origin"))
        .otherwise(pl.lit("changed")).alias("work"),
        pl.col("run").eq(winner or "").alias("best"))
    shown = shown.with_columns(pl.when(pl.col("extrapolated")).then(pl.col("work") + ", extrapolated")
                               .otherwise(pl.col("work")).alias("work"))
    columns = [Column(c.name, f"tokens / {how}", c.spec) if c.name == "tokens_share" else c for c in SUMMARY]
    page.table(shown, columns, classes={"baseline": "base", "best": "best"})
    first = table.row(0, named=True)
    recorded_tokens = verdict.tokens_label(first["recorded_tokens"])
    page.text(f"{how} work: {first['recorded_samples']:,} samples, {recorded_tokens} output tokens, p99 / max "
              f"length {first['recorded_p99']:,.0f} / {first['recorded_max']:,.0f}. Same work: the "
              f"time by which a run had trained as many samples and tokens as {how} (extrapolated at its own rate "
              f"where it never did); changed: its trained lengths differ from the {how} (KS distance above "
              "0.05, or samples or tokens off by more than 2%).")
    if not table["known"].all():
        page.text("runs written before replay recorded what it trained: their finished requests count as trained")
    said: dict[str, list[str]] = {}  # each note once, with the runs it belongs to
    for r in runs:
        for n in dict.fromkeys(r.config.get("notes", [])):  # a run's note once, however often it was said
            said.setdefault(n, []).append(r.name)
    for note, owners in sorted(said.items()):
        whose = "every run" if len(owners) == len(runs) else ", ".join(owners)
        page.text(f"note ({whose}): {note}")
    page.figure(header.figure(table, winner))
    page.figure(work_fig.figure(trained_ccdf(runs), dict(zip(table["run"], table["changed"])),
                                verdict.workload_origin(table)))
    page.details("each run's own figures, whatever work it trained (metrics.json)")
    page.table(table, AS_RUN, classes={"baseline": "base"})
    if any("spread" in r.metrics for r in runs):
        low, high = "same_work_samples_per_s_p05", "same_work_samples_per_s_p95"
        spread = compare.summary(runs, baseline).select("run", low, high)
        page.table(spread, [Column("run", "run"), Column(low, "samples/s, 5% of replicates", ".3g"),
                            Column(high, "samples/s, 95% of replicates", ".3g")])
    page.end_details()


def _k(expr: pl.Expr) -> pl.Expr:
    """Tokens as text: 15.8k, 950."""
    return pl.when(expr >= 1000).then((expr / 1000).round(1).cast(pl.String) + "k").otherwise(
        expr.round(0).cast(pl.Int64).cast(pl.String))


def _runs_named(names: list[str], runs: list[Run]) -> str:
    if len(names) == len(runs):
        return "any run" if len(runs) > 1 else "this run"
    return ", ".join(names)


def _recorded(page: Page, bundle: Bundle) -> None:
    page.section("Recorded bundle", f"what {bundle.manifest.run_id} recorded")
    page.definitions(recorded.overview(bundle))
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


SWEEP_COLUMNS: dict[str, tuple[str, str | Callable[[float], str]]] = {
                 "samples_per_s": ("samples/s, same work", verdict.three_digits),
                 "run_samples_per_s": ("run samples/s", verdict.three_digits),
                 "work_changed": ("work", lambda changed: "changed" if changed else "same"),
                 "tokens_per_s": ("tokens/s", ",.0f"),
                 "step_time_s": ("step time (s)", ".3g"),
                 "usd_per_1k_samples": ("$ per 1k samples, same work", verdict.usd_label),
                 "usd_per_hour": ("$ per hour", ",.1f"),
                 "gen_dependency_bubble": ("generation dependency bubble", ".0%"),
                 "gen_skewness_bubble": ("generation skewness bubble", ".0%"),
                 "train_dependency_bubble": ("training dependency bubble", ".0%"),
                 "train_skewness_bubble": ("training skewness bubble", ".0%"),
                 "stale_max": ("staleness max", ".0f")}
"""a sweep's figures in its best-points table: header (in words, with units) and format; samples/s and $ per 1k
samples are on the same work (rltrace.replay.work), as every view shows them"""


def build_sweep(frame: pl.DataFrame, axes: list[str], failed: dict[str, str] | None = None,
                title: str = "rltrace sweep", top: int = 25) -> str:
    """The report of a sweep: the best points, throughput against cost with its Pareto front, and what each
    varied parameter does. ``frame`` is the sweep's Parquet (one row per point); ``failed``: each failed point's
    label (its id and grid values) -> its error."""
    if not frame.height:
        raise ConfigError("the sweep has no finished point to report")
    page = Page(title)
    page.section("Best points", f"the {min(top, frame.height)} highest-throughput of {frame.height} points")
    shown = frame.sort("samples_per_s", descending=True, nulls_last=True).head(top)
    columns = [Column("point_id", "point"), *(Column(a, a) for a in axes),  # grid keys as the grid names them
               *(Column(c, h, spec) for c, (h, spec) in SWEEP_COLUMNS.items() if c in frame.columns)]
    page.table(shown, columns)
    for pid, error in (failed or {}).items():
        page.text(f"failed: {pid}: {error}")
    for note, count in note_counts(frame):  # what `rltrace replay` of the points says beside them, each once
        page.text(f"note: {note}" + (f" ({count} of {frame.height} points)" if count < frame.height else ""))
    page.section("Throughput against cost")
    page.figure(sweep.frontier(frame, axes))
    page.section("Parameters")
    page.figure(sweep.effects(frame, axes))
    return page.render()
