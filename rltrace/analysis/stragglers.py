"""Stragglers: a rank or a generation instance whose phase time is off the others', and who waits for it.

**Ranks.** For each phase that two or more ranked actors (``trainer/rank<r>``) run in a step, each rank's
*busy* time is its spans of that phase (from the step's last generated sample on, as the replay counts
training) less the time it spent inside collectives during them: a healthy rank
that waits for a slow one waits inside a collective (DDP's gradient all-reduce, a loss all-reduce), so its
span is as long as the straggler's but its busy time is not. A rank is a straggler of the phase when its busy
time exceeds the median of the other ranks' by at least ``REL_EXCESS`` of it (and by the diagnosis's floor)
in at least ``CONSISTENT`` of the judged steps; it costs its median excess over the judged steps (one step
disturbed by something else on the host does not set it). The evidence names where the
others waited for it: the collectives it issued last, and each healthy rank's wait in them (the time from
its own issue to the straggler's).

**Instances.** With two or more generation instances, each instance's generation time per step (first
arrival to last finish) is held against its engine iterations in that time (the longest request's output
tokens where the bundle records no iterations) at the other instances' median seconds per iteration: an
instance's step lasts as many iterations as its longest request, however many tokens it serves.

Nodes are not judged: a bundle does not say which host ran which rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from rltrace.analysis.findings import Context, Finding, WhatIf, covered, rank_of, seconds
from rltrace.bundle import Bundle
from rltrace.scalars import number

REL_EXCESS = 0.5
"""a straggler's busy time is at least this share above the others' median"""
CONSISTENT = 0.9
"""... in at least this share of the judged steps: a persistent straggler (a bad node, a throttled device) is slow in
every step, where contention from other processes on the host slows a rank in some"""
MIN_WAIT_NS = 1e6
"""a wait shorter than this a step (1 ms) is not evidence"""
SKIP_PHASES = ("generate", "weight_sync", "engine_start")
"""phases that are not one rank's share of common work"""


@dataclass(frozen=True, slots=True)
class RankTimes:
    """Per phase, step and ranked actor: span and busy seconds (busy: outside collectives)."""

    frame: pl.DataFrame
    """phase, step, actor, rank, span_s, busy_s"""


def rank_times(bundle: Bundle) -> RankTimes:
    """Each ranked actor's time per phase and step, with the part spent outside collectives."""
    spans = bundle.spans.filter(~pl.col("phase").is_in(SKIP_PHASES)).collect()
    spans = spans.with_columns(pl.col("actor").map_elements(rank_of, return_dtype=pl.Int32).alias("rank"))
    spans = spans.filter(pl.col("rank").is_not_null())
    # only the work after the step's samples are all generated: a forward pass that overlaps generation (a
    # trainer's first forward after its update) shares the host with the generator, not with the other ranks
    generated = bundle.requests.group_by("step").agg(pl.col("finish_ns").max().alias("_after")).collect()
    spans = spans.join(generated, on="step", how="left").with_columns(
        pl.min_horizontal(pl.max_horizontal("start_ns", pl.col("_after").fill_null(0)), "end_ns").alias("start_ns"))
    coll = bundle.collectives.select("rank", "start_ns", "end_ns").collect()
    parts = []
    for (rank,), mine in spans.group_by("rank"):
        theirs = coll.filter(pl.col("rank") == rank)
        inside = covered(mine["start_ns"].to_numpy(), mine["end_ns"].to_numpy(), theirs["start_ns"].to_numpy(),
                         theirs["end_ns"].to_numpy())
        parts.append(mine.with_columns(pl.Series("_inside_ns", inside)))
    if not parts:
        return RankTimes(pl.DataFrame(schema={"phase": pl.String, "step": pl.Int32, "actor": pl.String,
                                              "rank": pl.Int32, "span_s": pl.Float64, "busy_s": pl.Float64}))
    joined = pl.concat(parts)
    per = joined.group_by("phase", "step", "actor", "rank").agg(
        ((pl.col("end_ns") - pl.col("start_ns")).sum() / 1e9).alias("span_s"),
        ((pl.col("end_ns") - pl.col("start_ns") - pl.col("_inside_ns")).sum() / 1e9).alias("busy_s"))
    return RankTimes(per.sort("phase", "step", "rank"))


def _others_median(frame: pl.DataFrame, value: str) -> pl.DataFrame:
    """Each row's median ``value`` over the other rows of its (phase, step): the others' typical time."""
    out = []
    for _, group in frame.group_by("phase", "step", maintain_order=True):
        values = group[value].to_numpy()
        medians = [float(np.median(np.delete(values, i))) if len(values) > 1 else float("nan")
                   for i in range(len(values))]
        out.append(group.with_columns(pl.Series("others_s", medians)))
    return pl.concat(out) if out else frame.with_columns(pl.lit(None, pl.Float64).alias("others_s"))


def rank_stragglers(bundle: Bundle, ctx: Context) -> list[Finding]:
    """Ranks slower than the others in a phase they share (see the module text)."""
    times = rank_times(bundle).frame.filter(pl.col("step").is_in(ctx.steps))
    shared = times.group_by("phase", "step").agg(pl.len().alias("_actors")).filter(pl.col("_actors") >= 2)
    times = times.join(shared, on=["phase", "step"], how="inner").drop("_actors")
    if not times.height:
        return []
    times = _others_median(times, "busy_s").with_columns((pl.col("busy_s") - pl.col("others_s"))
                                                                   .alias("excess_s"))
    findings = []
    for (phase, actor, rank), rows in times.group_by("phase", "actor", "rank", maintain_order=True):
        others = number(rows["others_s"].median())
        need = max(ctx.floor(), REL_EXCESS * others)
        slow = rows.filter(pl.col("excess_s") >= need)
        excess = number(rows["excess_s"].median())  # the typical step: one disturbed step does not set it
        if excess < need or slow.height < CONSISTENT * rows.height:
            continue
        waits = _waits(bundle, int(rank), ctx)
        busy = number(rows["busy_s"].median())
        evidence = (f"{actor}'s {phase} work outside collectives took {busy:.3f} s in the median step against "
                    f"{others:.3f} s for the other ranks, {excess:.3f} s more, slower in {slow.height} of "
                    f"{rows.height} steps. {waits}")
        fix = (f"Make rank {rank} as fast as the others: look for what else runs on its device or host (another "
               "process, a throttled or slower device, data loading or logging on that rank only) and move it "
               "off, or give the rank less of the batch.")
        less = dict(zip(rows["step"].to_list(), rows["excess_s"].clip(lower_bound=0).to_list()))
        findings.append(Finding(kind="straggler", phase=str(phase), rank=int(rank), lost_s_per_step=excess,
                                evidence=evidence, fix=fix,
                                whatif=WhatIf(label=f"rank {rank}'s {phase} time at the other ranks' median",
                                              train_less_s=less)))
    return findings


def _waits(bundle: Bundle, rank: int, ctx: Context) -> str:
    """The other ranks' waits in the collectives ``rank`` issued last, in words."""
    coll = (bundle.collectives.filter(pl.col("step").is_in(ctx.steps), pl.col("pg_ranks").list.contains(rank),
                                      pl.col("pg_ranks").list.len() >= 2)
            .select("step", "rank", "pg", "seq", "op", "start_ns").collect())
    if not coll.height:
        return "It shares no recorded collective with other ranks."
    ops = coll.group_by("pg", "seq").agg(pl.col("start_ns").max().alias("_last"),
                                         pl.col("rank").sort_by("start_ns").last().alias("_who"))
    waited = (coll.join(ops, on=["pg", "seq"]).filter(pl.col("_who") == rank, pl.col("rank") != rank)
              .with_columns((pl.col("_last") - pl.col("start_ns")).alias("wait_ns")))
    last = ops.filter(pl.col("_who") == rank).height
    if not waited.height:
        return f"It issued none of its {ops.height} shared collectives last: nobody waited for it there."
    steps = len(ctx.steps)
    per = (waited.group_by("rank", "op", "pg").agg(pl.col("wait_ns").sum(), pl.len().alias("ops"))
           .filter(pl.col("wait_ns") >= MIN_WAIT_NS * steps).sort("wait_ns", descending=True))
    if not per.height:
        return f"It issued {last} of its {ops.height} shared collectives last, but nobody waited a millisecond for it."
    parts = [f"rank {r} waited {seconds(w / steps)} a step in {op} on {pg} ({n / steps:.3g} operations a step)"
             for r, op, pg, w, n in per.head(3).select("rank", "op", "pg", "wait_ns", "ops").iter_rows()]
    return (f"It issued {last} of its {ops.height} shared collectives last, and the others waited in them: "
            + "; ".join(parts) + ".")


def _instance_steps(bundle: Bundle, ctx: Context) -> pl.DataFrame:
    """Per judged step and instance: gen_s (first arrival to last finish), iterations (engine iterations in
    that window; without an iterations table, the longest request's output tokens), tokens, _end."""
    per = (bundle.requests.filter(pl.col("step").is_in(ctx.steps), pl.col("finish_ns").is_not_null())
           .group_by("step", "engine").agg(pl.col("arrival_ns").min().alias("_start"),
                                           pl.col("finish_ns").max().alias("_end"),
                                           pl.col("output_tokens").cast(pl.Int64).sum().alias("tokens"),
                                           pl.col("output_tokens").max().cast(pl.Int64).alias("_longest"))
           .collect())
    iterations = bundle.iterations.select("engine", "start_ns", "end_ns").collect()
    if iterations.height:
        counted = (per.join(iterations, on="engine", how="left")
                   .filter(pl.col("start_ns") >= pl.col("_start"), pl.col("end_ns") <= pl.col("_end"))
                   .group_by("step", "engine").agg(pl.len().cast(pl.Int64).alias("iterations")))
        per = per.join(counted, on=["step", "engine"], how="left").with_columns(
            pl.col("iterations").fill_null(pl.col("_longest")))
    else:
        per = per.with_columns(pl.col("_longest").alias("iterations"))
    return per.with_columns(((pl.col("_end") - pl.col("_start")) / 1e9).alias("gen_s"),
                            pl.lit("generate").alias("phase"))


def instance_stragglers(bundle: Bundle, ctx: Context) -> list[Finding]:
    """Generation instances slower per engine iteration than the others (see the module text)."""
    per = _instance_steps(bundle, ctx)
    if per["engine"].n_unique() < 2:
        return []
    per = per.with_columns((pl.col("gen_s") / pl.col("iterations").clip(lower_bound=1)).alias("per_iteration"))
    per = _others_median(per, "per_iteration").with_columns(
        (pl.col("gen_s") - pl.col("iterations") * pl.col("others_s")).alias("excess_s"))
    ends = per.group_by("step").agg(pl.col("_end").max().alias("_step_end"))
    per = per.join(ends, on="step")
    findings = []
    for (engine,), rows in per.group_by("engine", maintain_order=True):
        expected = number((rows["iterations"] * rows["others_s"]).mean())
        need = max(ctx.floor(), REL_EXCESS * expected)
        excess = number(rows["excess_s"].mean())
        slow = rows.filter(pl.col("excess_s") >= need)
        if excess < need or slow.height < CONSISTENT * rows.height:
            continue
        last = rows.filter(pl.col("_end") == pl.col("_step_end")).height
        iterations, gen_s = number(rows["iterations"].mean()), number(rows["gen_s"].mean())
        mine_ms, theirs_ms = number(rows["per_iteration"].mean()) * 1e3, number(rows["others_s"].mean()) * 1e3
        evidence = (f"{engine} ran {iterations:,.0f} engine iterations a step in {gen_s:.3f} s: {mine_ms:.2f} ms "
                    f"each against {theirs_ms:.2f} ms on the other instances (median), {excess:.3f} s a step more, "
                    f"slower in {slow.height} of {rows.height} steps; it finished last in {last} of them, the others "
                    "idle until then.")
        fix = (f"Find why {engine} decodes slower (its device, host or tensor-parallel link) and fix or replace it; "
               "until then route it fewer requests.")
        findings.append(Finding(kind="straggler", phase="generate", instance=str(engine), lost_s_per_step=excess,
                                evidence=evidence, fix=fix))
    return findings
