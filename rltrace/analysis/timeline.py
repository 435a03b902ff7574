"""Timeline frames: the Gantt rows of a run (resources x busy intervals), reduced to what a browser can draw.

A replay of a million requests has a million request intervals; the report draws at most ``max_segments``.
The reduction is stated with the frame (``Gantt.method``) and printed on the figure:

1. request intervals are drawn one per lane (a request's lane is its slot in the instance's running batch)
   while they fit; past half the budget they are replaced by the instance's busy spans;
2. past ``max_instances``, generation instances are sampled at an even stride; only the ``max_links``
   busiest links get a row (the link heatmap shows them all); other rows all stay;
3. past the budget still, intervals of one row and kind closer than 1/2000 of the run are merged (below a
   pixel at any screen width), then closer than 4x, 16x... that until the budget holds.
"""

from __future__ import annotations

import heapq
import itertools
import re
from dataclasses import dataclass

import numpy as np
import polars as pl

from rltrace.analysis.runs import Run
from rltrace.replay.metrics import union_spans
from rltrace.replay.phases import GENERATION_KINDS
from rltrace.scalars import number

PIXELS = 2000
"""merge gaps below makespan / PIXELS"""

# The `type: ignore[arg-type]` on each .cast(COLUMNS): polars types cast()'s mapping keys as str | Selector |
# DataType, which a dict[str, ...] constant cannot match (a mapping's key type is invariant).
COLUMNS = {"resource": pl.String, "kind": pl.String, "step": pl.Int32, "job": pl.Int32, "id": pl.Int64,
           "start_s": pl.Float64, "end_s": pl.Float64, "lane": pl.Int32, "lanes": pl.Int32}


@dataclass(frozen=True, slots=True)
class Gantt:
    """Rows to draw, their order, and how they were reduced."""

    frame: pl.DataFrame
    """resource, kind, step, job, id, start_s, end_s, lane, lanes (request lanes within the row; 0/1 otherwise)"""
    resources: list[str]
    """row order, top to bottom"""
    method: str
    """"all intervals" or the reductions applied, in words"""
    total: int
    """intervals before reduction"""


def several_jobs(timeline: pl.DataFrame) -> bool:
    """Whether the timeline holds the work of more than one job (a multi-job run: rollmux)."""
    return timeline.filter(pl.col("job") >= 0)["job"].n_unique() > 1


def lanes(resource: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Greedy interval partitioning per resource: each interval's lane (no two overlapping intervals share
    one) and the lane count of its resource. Input in any order; O(n log n)."""
    lane = np.zeros(len(start), np.int32)
    count = np.ones(len(start), np.int32)
    order = np.lexsort((end, start, resource))
    bounds = np.flatnonzero(np.concatenate([[True], resource[order][1:] != resource[order][:-1], [True]]))
    for a, b in itertools.pairwise(bounds):
        free: list[int] = []
        busy: list[tuple[float, int]] = []  # (end, lane), a heap
        used = 0
        for i in order[a:b]:
            while busy and busy[0][0] <= start[i]:
                heapq.heappush(free, heapq.heappop(busy)[1])
            if free:
                k = heapq.heappop(free)
            else:
                k, used = used, used + 1
            lane[i] = k
            heapq.heappush(busy, (end[i], k))
        count[order[a:b]] = max(used, 1)
    return lane, count


_NATURAL = re.compile(r"(\D*)(\d*)")


def row_order(names: list[str]) -> list[str]:
    """Resource names top to bottom: generation instances (numerically; a job group's after the shared pool's),
    trainers, weight syncs, host work (reward, environment), links."""
    rank = {"generation": 0, "trainer": 1, "sync": 2, "link": 4}

    def key(name: str) -> tuple[int, int, tuple[tuple[str, int], ...]]:
        head = name.split("/", 1)[0]
        natural = tuple((text, int(number) if number else -1) for text, number in _NATURAL.findall(name))
        return rank.get(head, 3), name.count("/"), natural

    return sorted(names, key=key)


def merge_close(frame: pl.DataFrame, gap_s: float) -> pl.DataFrame:
    """Merge intervals of one (resource, kind, job, lane) whose gap is below ``gap_s`` (overlaps merge too)."""
    f = frame.sort("resource", "kind", "job", "lane", "start_s")
    keys = ["resource", "kind", "job", "lane"]
    f = f.with_columns(pl.col("end_s").cum_max().over(keys).alias("_reach"))
    f = f.with_columns(
        (pl.col("start_s") > pl.col("_reach").shift(1).over(keys) + gap_s).fill_null(True).cum_sum().alias("_run"))
    return (f.group_by(*keys, "_run", maintain_order=True)
            .agg(pl.col("step").first(), pl.col("id").first(), pl.col("start_s").min(), pl.col("end_s").max(),
                 pl.col("lanes").first())
            .select(list(COLUMNS)).cast(COLUMNS))  # type: ignore[arg-type]


def busy_spans(timeline: pl.DataFrame) -> pl.DataFrame:
    """When each generation instance ran anything: the union of its requests and of its attempts cut short,
    as ``busy`` intervals (the timeline's columns). From the work itself, because an instance that never
    idles closes no busy span of its own (fully-async, rollart), and aborted or migrated attempts were work."""
    served = timeline.filter(pl.col("kind") == "request")["resource"].unique()
    work = timeline.filter(pl.col("kind").is_in(GENERATION_KINDS), pl.col("resource").is_in(served.implode()))
    return (union_spans(work, ["resource"])
            .select("resource", pl.lit("busy").alias("kind"), pl.lit(-1).alias("step"), pl.lit(-1).alias("job"),
                    pl.lit(-1).alias("id"), "start_s", "end_s", pl.lit(0).alias("lane"), pl.lit(1).alias("lanes"))
            .cast(COLUMNS))  # type: ignore[arg-type]


def gantt(run: Run, *, max_segments: int = 20_000, max_instances: int = 32, max_links: int = 12) -> Gantt:
    """The run's timeline (and its busiest links' busy intervals) as Gantt rows within the budget."""
    t = run.timeline.select("resource", "kind", "step", "job", "id", "start_s", "end_s")
    notes: list[str] = []
    if run.links is not None and run.links.height:
        busiest = run.links.group_by("link").agg(pl.col("bytes").sum()).sort("bytes", "link", descending=[True, False])
        if busiest.height > max_links:
            notes.append(f"busiest {max_links} of {busiest.height} links")
        chosen = run.links.filter(pl.col("link").is_in(busiest.head(max_links)["link"].to_list()))
        t = pl.concat([t, chosen.select(("link/" + pl.col("link")).alias("resource"), pl.col("what").alias("kind"),
                                        "step", "job", pl.lit(-1, pl.Int64).alias("id"), "start_s", "end_s")
                       .cast(t.schema)])
    total = t.height
    requests = t.filter(pl.col("kind") == "request")
    rest = t.filter(pl.col("kind") != "request")
    names = row_order(t["resource"].unique().to_list())
    instances = [n for n in names if n.startswith("generation")]
    if len(instances) > max_instances:
        stride = -(-len(instances) // max_instances)
        shown = set(instances[::stride])
        names = [n for n in names if not n.startswith("generation") or n in shown]
        notes.append(f"1 in {stride} of {len(instances)} generation instances")
        requests = requests.filter(pl.col("resource").is_in(list(shown)))
        rest = rest.filter(pl.col("resource").is_in(names))
    if requests.height and requests.height <= max_segments // 2:
        lane, count = lanes(requests["resource"].to_numpy(), requests["start_s"].to_numpy(),
                            requests["end_s"].to_numpy())
        requests = requests.with_columns(pl.Series("lane", lane), pl.Series("lanes", count))
        rest = rest.filter(pl.col("kind") != "busy")  # the request lanes show the same thing, in detail
    else:
        if requests.height:
            notes.append(f"{requests.height:,} requests shown as their instances' busy spans")
            # Busy = when the instance ran anything, from the work itself: an instance that never idles
            # closes no busy span of its own, and its aborted or migrated attempts were work too.
            busy = busy_spans(pl.concat([requests, rest]))
            rest = pl.concat([rest.filter(pl.col("kind") != "busy"), busy.select(rest.columns).cast(rest.schema)])
        requests = requests.clear().with_columns(pl.lit(0, pl.Int32).alias("lane"), pl.lit(1, pl.Int32).alias("lanes"))
    rest = rest.with_columns(pl.lit(0, pl.Int32).alias("lane"), pl.lit(1, pl.Int32).alias("lanes"))
    frame = pl.concat([requests.cast(COLUMNS), rest.cast(COLUMNS)])  # type: ignore[arg-type]
    if frame.height > max_segments:
        # Merge gaps below a pixel first; widen the gap 4x at a time until the budget holds (or every row
        # and kind is one interval).
        span = number(frame["end_s"].max()) - number(frame["start_s"].min())
        gap, unmerged = span / PIXELS, frame
        while True:
            frame = merge_close(unmerged, gap)
            if frame.height <= max_segments or gap >= span:
                break
            gap *= 4
        notes.append(f"intervals closer than {gap:.3g} s merged ({gap / span:.2%} of the run)")
    method = "; ".join(notes) if notes else "all intervals"
    drawn = set(frame["resource"].to_list())
    return Gantt(frame.sort("resource", "start_s"), [n for n in names if n in drawn], method, total)
