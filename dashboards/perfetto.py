"""Chrome trace-event JSON (ui.perfetto.dev, chrome://tracing) from a replay run or a recorded bundle.

Layout: one process per actor (generation instance, trainer rank, link, ...), one thread per role (requests,
train, weight_sync, a process group's collectives...). Complete events ("X") on one thread never partially
overlap: intervals that do (requests in one running batch, async collectives) are spread over extra lanes,
threads named "role #2", "role #3"... Counters ("C") carry running and waiting requests per instance and each
link's utilisation. Times are microseconds since the run's (or bundle's) first event.

Everything is built as polars frames and serialised frame by frame (``DataFrame.write_json``); only the lane
assignment walks intervals one by one (a heap per thread, O(n log n)).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import polars as pl

from rltrace.analysis.recorded import time_origin_ns
from rltrace.analysis.runs import Run
from rltrace.analysis.timeline import lanes, row_order, several_jobs
from rltrace.bundle import Bundle

SPANS = {"process": pl.String, "role": pl.String, "name": pl.String, "start_us": pl.Float64, "end_us": pl.Float64,
         "step": pl.Int64}
COUNTERS = {"process": pl.String, "name": pl.String, "ts_us": pl.Float64, "value": pl.Float64}


@dataclass(frozen=True, slots=True)
class Trace:
    """Complete events and counter samples, before serialisation."""

    spans: pl.DataFrame
    """process, role, name, start_us, end_us, step"""
    counters: pl.DataFrame
    """process, name, ts_us, value"""
    metadata: dict[str, str]

    def to_json(self) -> str:
        """The trace as one JSON object: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}."""
        spans = self.spans.with_columns(
            pl.Series("lane", lanes(*(self.spans[c].to_numpy() for c in ("_key", "start_us", "end_us")))[0]))
        spans = spans.with_columns(pl.when(pl.col("lane") == 0).then(pl.col("role"))
                                   .otherwise(pl.format("{} #{}", "role", pl.col("lane") + 1)).alias("thread"))
        processes = row_order(sorted(set(spans["process"].to_list()) | set(self.counters["process"].to_list())))
        pid = {p: i + 1 for i, p in enumerate(processes)}
        threads = spans.select("process", "role", "lane", "thread").unique().sort("process", "role", "lane")
        threads = threads.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("process").alias("tid"))
        spans = spans.join(threads.select("process", "thread", "tid"), on=["process", "thread"], how="left")
        complete = spans.select(
            "name", pl.lit("rltrace").alias("cat"), pl.lit("X").alias("ph"), pl.col("start_us").alias("ts"),
            (pl.col("end_us") - pl.col("start_us")).alias("dur"),
            pl.col("process").replace_strict(pid, return_dtype=pl.Int64).alias("pid"), "tid",
            pl.struct("step").alias("args"))
        counters = self.counters.select(
            "name", pl.lit("C").alias("ph"), pl.col("ts_us").alias("ts"),
            pl.col("process").replace_strict(pid, return_dtype=pl.Int64).alias("pid"), pl.lit(0, pl.Int64).alias("tid"),
            pl.struct("value").alias("args"))
        meta = [{"name": "process_name", "ph": "M", "pid": pid[p], "tid": 0, "args": {"name": p}} for p in processes]
        meta += [{"name": "process_sort_index", "ph": "M", "pid": pid[p], "tid": 0, "args": {"sort_index": pid[p]}}
                 for p in processes]
        meta += [{"name": "thread_name", "ph": "M", "pid": pid[p], "tid": t, "args": {"name": name}}
                 for p, name, t in threads.select("process", "thread", "tid").iter_rows()]  # hundreds at most
        parts = [json.dumps(meta)[1:-1]] + [f.write_json()[1:-1] for f in (complete, counters) if f.height]
        body = ",".join(p for p in parts if p)
        other = json.dumps({"generator": "rltrace", **self.metadata})
        return f'{{"traceEvents":[{body}],"displayTimeUnit":"ms","otherData":{other}}}'


def _trace(spans: pl.DataFrame, counters: pl.DataFrame, metadata: dict[str, str]) -> Trace:
    spans = spans.cast(SPANS).filter(pl.col("end_us") >= pl.col("start_us"))  # type: ignore[arg-type]
    # One lane key per (process, role): lanes() partitions each key's intervals.
    spans = spans.with_columns(pl.concat_str("process", pl.lit("\x00"), "role").alias("_key"))
    return Trace(spans, counters.cast(COUNTERS).sort("process", "name", "ts_us"), metadata)  # type: ignore[arg-type]


def _occupancy(process: pl.Expr, start: pl.Expr, end: pl.Expr, name: str, frame: pl.DataFrame) -> pl.DataFrame:
    """A counter of how many intervals are open, per process: +1 at each start, -1 at each end."""
    edges = pl.concat([
        frame.select(process.alias("process"), start.alias("ts_us"), pl.lit(1.0).alias("delta")),
        frame.select(process.alias("process"), end.alias("ts_us"), pl.lit(-1.0).alias("delta"))])
    edges = edges.drop_nulls().sort("process", "ts_us", "delta")
    samples = edges.with_columns(pl.col("delta").cum_sum().over("process").alias("value"))
    # Several changes at one instant: keep the last (the counter's value after all of them).
    return (samples.group_by("process", "ts_us", maintain_order=True).agg(pl.col("value").last())
            .select("process", pl.lit(name).alias("name"), "ts_us", "value"))


def from_run(run: Run) -> Trace:
    """A replay run: its timeline (requests in batch-slot lanes, phases), links' busy intervals, running
    requests per instance and link utilisation as counters."""
    t = run.timeline.filter(pl.col("kind") != "busy")  # instance busy spans only repeat their requests
    name = pl.when(pl.col("kind") == "request").then(pl.format("request {}", "id")).otherwise(pl.col("kind"))
    if several_jobs(t):  # several jobs share the pools: say whose each span is
        name = pl.when(pl.col("job") >= 0).then(pl.format("{} (job {})", name, "job")).otherwise(name)
    spans = t.select(pl.col("resource").alias("process"), pl.when(pl.col("kind") == "request").then(pl.lit("requests"))
                     .otherwise(pl.col("kind")).alias("role"), name.alias("name"),
                     (pl.col("start_s") * 1e6).alias("start_us"), (pl.col("end_s") * 1e6).alias("end_us"),
                     pl.col("step").cast(pl.Int64))
    reqs = t.filter(pl.col("kind") == "request")
    counters = [_occupancy(pl.col("resource"), pl.col("start_s") * 1e6, pl.col("end_s") * 1e6, "running requests", reqs)]
    if run.links is not None and run.links.height:
        link = "link/" + pl.col("link")
        spans = pl.concat([spans, run.links.select(link.alias("process"), pl.col("what").alias("role"),
                                                   pl.col("what").alias("name"), (pl.col("start_s") * 1e6).alias("start_us"),
                                                   (pl.col("end_s") * 1e6).alias("end_us"), pl.col("step").cast(pl.Int64))])
        # Utilisation: +u at a transfer's start, -u at its end, summed per link (overlaps add).
        edges = pl.concat([run.links.select(link.alias("process"), (pl.col("start_s") * 1e6).alias("ts_us"),
                                            pl.col("utilization").alias("delta")),
                           run.links.select(link.alias("process"), (pl.col("end_s") * 1e6).alias("ts_us"),
                                            (-pl.col("utilization")).alias("delta"))]).sort("process", "ts_us", "delta")
        util = (edges.with_columns(pl.col("delta").cum_sum().over("process").clip(0.0, None).alias("value"))
                .group_by("process", "ts_us", maintain_order=True).agg(pl.col("value").last())
                .select("process", pl.lit("utilization").alias("name"), "ts_us", "value"))
        counters.append(util)
    return _trace(spans, pl.concat(counters), {"run": run.name, "scheduler": run.scheduler})


def from_bundle(bundle: Bundle) -> Trace:
    """A recorded bundle: phase spans per actor, requests per engine (lanes), collectives per rank and
    process group, weight-sync flows on their source; waiting and running requests per engine as counters."""
    origin = time_origin_ns(bundle)

    def us(column: str) -> pl.Expr:
        return (pl.col(column) - origin) / 1e3

    spans = bundle.spans.select(pl.col("actor").alias("process"), pl.col("phase").alias("role"),
                                pl.when(pl.col("name") == "").then(pl.col("phase")).otherwise(pl.col("name")).alias("name"),
                                us("start_ns").alias("start_us"), us("end_ns").alias("end_us"), "step")
    requests = bundle.requests.filter(pl.col("finish_ns").is_not_null())
    start = pl.coalesce("scheduled_ns", "arrival_ns")
    served = requests.select(pl.col("engine").alias("process"), pl.lit("requests").alias("role"),
                             pl.format("{} ({} tokens)", "request_id", "output_tokens").alias("name"),
                             ((start - origin) / 1e3).alias("start_us"), us("finish_ns").alias("end_us"), "step")
    actors = set(bundle.spans.select(pl.col("actor").unique()).collect()["actor"].to_list())
    ranks = bundle.collectives.select(pl.col("rank").unique()).collect()["rank"].to_list()
    process_of = {r: f"trainer/rank{r}" if f"trainer/rank{r}" in actors else f"rank{r}" for r in ranks}
    collectives = bundle.collectives.select(
        pl.col("rank").replace_strict(process_of, return_dtype=pl.String).alias("process"),
        pl.format("collectives ({})", "pg").alias("role"), pl.format("{} {} B", "op", "bytes_in").alias("name"),
        us("start_ns").alias("start_us"), us("end_ns").alias("end_us"), "step")
    syncs = bundle.weight_syncs.select(pl.col("src").alias("process"), pl.lit("weight_sync").alias("role"),
                                       pl.format("v{} → {} ({} B)", "version", "dst", "bytes").alias("name"),
                                       us("start_ns").alias("start_us"), us("end_ns").alias("end_us"), "step")
    frames = pl.collect_all([f.cast(SPANS) for f in (spans, served, collectives, syncs)])  # type: ignore[arg-type]
    r = requests.select("engine", us("arrival_ns").alias("a"), ((start - origin) / 1e3).alias("s"),
                        us("finish_ns").alias("f")).collect()
    counters = pl.concat([_occupancy(pl.col("engine"), pl.col("a"), pl.col("s"), "waiting requests", r),
                          _occupancy(pl.col("engine"), pl.col("s"), pl.col("f"), "running requests", r)])
    return _trace(pl.concat(frames), counters, {"bundle": str(bundle.path), "run_id": bundle.manifest.run_id})
