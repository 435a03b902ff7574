"""Chrome trace-event JSON (ui.perfetto.dev, chrome://tracing) from a replay run or a recorded bundle.

Layout: one process per actor (generation instance, trainer rank, link, ...), one thread per role (requests,
train, weight_sync, a process group's collectives...). Complete events ("X") on one thread never partially
overlap: intervals that do (requests in one running batch, async collectives) are spread over extra lanes,
threads named "role #2", "role #3"... Counters ("C") carry running and waiting requests per instance and each
link's utilisation. A bundle's request that has no finish time (a request log: arrivals and lengths only) is an
instant event ("i") at its arrival, on its engine's "arrivals" thread. Times are microseconds since the run's (or
bundle's) first event.

Slices carry args: ``step`` always, ``job`` in a run, and on a request's slices ``request``, ``prompt_tokens``
and ``output_tokens``. Flow events (arrows in Perfetto, the format's "s"/"t"/"f" phases, each bound to the
slice that encloses it: "bp": "e") join:

- weight syncs: a run's training slice to its step's sync, and the sync to each generation instance's first
  request that starts after it (the first generated with the new weights); a bundle's trainer-side transfer
  to the generator that received it (drawn there as a "weight_sync in" slice of the same interval);
- a request's attempts (preempted, aborted, migrated, then the one that finished), in order, across
  instances.

A flow event sits just inside its slice (1 us in, or half the slice when shorter), never on a boundary, where
the enclosing slice would be ambiguous; a slice of zero width carries no flow event.

Everything is built as polars frames and serialised frame by frame (``DataFrame.write_json``); only the lane
assignment walks intervals one by one (a heap per thread, O(n log n)).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import polars as pl
from rltrace.replay.phases import GENERATION_KINDS

from rltrace.analysis.recorded import time_origin_ns
from rltrace.analysis.runs import Run
from rltrace.analysis.timeline import lanes, row_order, several_jobs
from rltrace.bundle import Bundle

# The `type: ignore[arg-type]` on each .cast(SPANS/COUNTERS/FLOWS/RAW_FLOWS): polars types cast()'s mapping
# keys as str | Selector | DataType, which a dict[str, ...] constant cannot match (a mapping's key type is
# invariant).
SPANS = {"process": pl.String, "role": pl.String, "name": pl.String, "start_us": pl.Float64, "end_us": pl.Float64,
         "step": pl.Int64, "job": pl.Int64, "request": pl.String, "prompt_tokens": pl.Int64,
         "output_tokens": pl.Int64}
"""``job`` and the request columns are null where they do not apply (a bundle has no job; a phase no request)"""
COUNTERS = {"process": pl.String, "name": pl.String, "ts_us": pl.Float64, "value": pl.Float64}
FLOWS = {"id": pl.Int64, "order": pl.Float64, "row": pl.UInt32, "at": pl.String, "name": pl.String}
"""one row per flow event: flow ``id``, its place in the flow (0 first), the span it binds to (``row``, the
span's row in ``Trace.spans``), where in that span ("start" or "end"), and the flow's name"""
INSTANTS = {"process": pl.String, "role": pl.String, "name": pl.String, "ts_us": pl.Float64, "step": pl.Int64,
            "request": pl.String, "prompt_tokens": pl.Int64, "output_tokens": pl.Int64}
"""one row per instant event (a request's arrival), on thread ``role`` of ``process``"""
INSIDE_US = 1.0
REQUEST_ARGS = ["request", "prompt_tokens", "output_tokens"]


@dataclass(frozen=True, slots=True)
class Trace:
    """Complete events and counter samples, before serialisation."""

    spans: pl.DataFrame
    """process, role, name, start_us, end_us, step"""
    counters: pl.DataFrame
    """process, name, ts_us, value"""
    metadata: dict[str, str]
    flows: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=FLOWS))
    """flow events (``FLOWS``)"""
    instants: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=INSTANTS))
    """instant events (``INSTANTS``)"""

    @property
    def events(self) -> int:
        """Spans, counter samples and instant events: zero means there is nothing to draw."""
        return self.spans.height + self.counters.height + self.instants.height

    def to_json(self) -> str:
        """The trace as one JSON object: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}."""
        spans = self.spans.with_columns(
            pl.Series("lane", lanes(*(self.spans[c].to_numpy() for c in ("_key", "start_us", "end_us")))[0]))
        spans = spans.with_columns(pl.when(pl.col("lane") == 0).then(pl.col("role"))
                                   .otherwise(pl.format("{} #{}", "role", pl.col("lane") + 1)).alias("thread"))
        processes = row_order(sorted(set(spans["process"].to_list()) | set(self.counters["process"].to_list())
                                     | set(self.instants["process"].to_list())))
        pid = {p: i + 1 for i, p in enumerate(processes)}
        instant_threads = self.instants.select("process", "role", pl.lit(0, spans["lane"].dtype).alias("lane"),
                                               pl.col("role").alias("thread"))
        threads = (pl.concat([spans.select("process", "role", "lane", "thread"), instant_threads]).unique()
                   .sort("process", "role", "lane"))
        threads = threads.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("process").alias("tid"))
        spans = spans.join(threads.select("process", "thread", "tid"), on=["process", "thread"], how="left")
        spans = spans.with_columns(pl.col("process").replace_strict(pid, return_dtype=pl.Int64).alias("pid"))
        complete = [_complete(spans.filter(pl.col("job").is_null() == no_job, pl.col("request").is_null() == no_req),
                              no_job, no_req) for no_job in (True, False) for no_req in (True, False)]
        flows = _flow_events(self.flows, spans)
        instants = self.instants.join(threads.select("process", "thread", "tid"), left_on=["process", "role"],
                                      right_on=["process", "thread"], how="left").select(
            "name", pl.lit("rltrace").alias("cat"), pl.lit("i").alias("ph"), pl.lit("t").alias("s"),
            pl.col("ts_us").alias("ts"), pl.col("process").replace_strict(pid, return_dtype=pl.Int64).alias("pid"),
            "tid", pl.struct(["step", *REQUEST_ARGS]).alias("args"))
        counters = self.counters.select(
            "name", pl.lit("C").alias("ph"), pl.col("ts_us").alias("ts"),
            pl.col("process").replace_strict(pid, return_dtype=pl.Int64).alias("pid"), pl.lit(0, pl.Int64).alias("tid"),
            pl.struct("value").alias("args"))
        meta = [{"name": "process_name", "ph": "M", "pid": pid[p], "tid": 0, "args": {"name": p}} for p in processes]
        meta += [{"name": "process_sort_index", "ph": "M", "pid": pid[p], "tid": 0, "args": {"sort_index": pid[p]}}
                 for p in processes]
        meta += [{"name": "thread_name", "ph": "M", "pid": pid[p], "tid": t, "args": {"name": name}}
                 for p, name, t in threads.select("process", "thread", "tid").iter_rows()]  # hundreds at most
        parts = [json.dumps(meta)[1:-1]] + [f.write_json()[1:-1] for f in (*complete, flows, instants, counters)
                                                          if f.height]
        body = ",".join(p for p in parts if p)
        other = json.dumps({"generator": "rltrace", **self.metadata})
        return f'{{"traceEvents":[{body}],"displayTimeUnit":"ms","otherData":{other}}}'


def _complete(spans: pl.DataFrame, no_job: bool, no_request: bool) -> pl.DataFrame:
    """X events of spans that all have (or all lack) a job and a request: args hold the fields they have."""
    fields = ["step"] + ([] if no_job else ["job"]) + ([] if no_request else REQUEST_ARGS)
    return spans.select(
        "name", pl.lit("rltrace").alias("cat"), pl.lit("X").alias("ph"), pl.col("start_us").alias("ts"),
        (pl.col("end_us") - pl.col("start_us")).alias("dur"), "pid", "tid", pl.struct(fields).alias("args"))


def _flow_events(flows: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """The flows' "s" / "t" / "f" events on the threads of the spans they bind to, just inside each span."""
    bound = flows.join(spans.select(pl.col("_row").alias("row"), "pid", "tid", "start_us", "end_us"), on="row")
    inside = pl.min_horizontal((pl.col("end_us") - pl.col("start_us")) / 2, pl.lit(INSIDE_US))
    bound = bound.filter(pl.col("end_us") > pl.col("start_us"))
    # A flow needs two events: drop the ones left with one (a zero-width slice took its partner away).
    bound = bound.filter(pl.len().over("id") >= 2).with_columns(
        pl.col("order").rank("ordinal").over("id").alias("k"), pl.len().over("id").alias("n"))
    return bound.sort("id", "k").select(
        "name", pl.lit("flow").alias("cat"),
        pl.when(pl.col("k") == 1).then(pl.lit("s")).when(pl.col("k") == pl.col("n")).then(pl.lit("f"))
        .otherwise(pl.lit("t")).alias("ph"), "id",
        pl.when(pl.col("at") == "start").then(pl.col("start_us") + inside).otherwise(pl.col("end_us") - inside)
        .alias("ts"), "pid", "tid", pl.lit("e").alias("bp"))


def _trace(spans: pl.DataFrame, counters: pl.DataFrame, metadata: dict[str, str],
           flows: pl.DataFrame | None = None, instants: pl.DataFrame | None = None) -> Trace:
    """``spans`` carry ``_row`` (their row numbers before any filtering), which ``flows.row`` refers to."""
    spans = spans.cast(SPANS | {"_row": pl.UInt32}).filter(pl.col("end_us") >= pl.col("start_us"))  # type: ignore[arg-type]
    # One lane key per (process, role): lanes() partitions each key's intervals.
    spans = spans.with_columns(pl.concat_str("process", pl.lit("\x00"), "role").alias("_key"))
    flows = pl.DataFrame(schema=FLOWS) if flows is None else flows.cast(FLOWS)  # type: ignore[arg-type]
    instants = (pl.DataFrame(schema=INSTANTS) if instants is None
                else instants.cast(INSTANTS).sort("process", "ts_us"))  # type: ignore[arg-type]
    return Trace(spans, counters.cast(COUNTERS).sort("process", "name", "ts_us"), metadata, flows,  # type: ignore[arg-type]
                 instants)


def _numbered(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Concatenate span frames (missing optional columns as nulls) and number the rows (``_row``)."""
    full = [f.with_columns(pl.lit(None, d).alias(c) for c, d in SPANS.items() if c not in f.columns).select(list(SPANS))
            .cast(SPANS) for f in frames]  # type: ignore[arg-type]
    return pl.concat(full).with_row_index("_row")


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


ATTEMPTS = GENERATION_KINDS
"""timeline kinds that are one attempt of a request (``id`` = the request)"""


def from_run(run: Run) -> Trace:
    """A replay run: its timeline (requests in batch-slot lanes, phases), links' busy intervals, running
    requests per instance and link utilisation as counters, flows for weight syncs and request attempts."""
    t = run.timeline.filter(pl.col("kind") != "busy")  # instance busy spans only repeat their requests
    name = pl.when(pl.col("kind") == "request").then(pl.format("request {}", "id")).otherwise(pl.col("kind"))
    if several_jobs(t):  # several jobs share the pools: say whose each span is
        name = pl.when(pl.col("job") >= 0).then(pl.format("{} (job {})", name, "job")).otherwise(name)
    # A request's tokens, by id (request ids are requests.parquet's row numbers), on its attempts' spans.
    ids = t["id"].to_numpy()
    is_attempt = t["kind"].is_in(ATTEMPTS).to_numpy() & (ids >= 0) & (ids < run.requests.height)
    rid = np.where(is_attempt, ids, 0)
    tokens = {c: pl.Series(c, np.where(is_attempt, run.requests[c].to_numpy()[rid], 0) if c in run.requests.columns
                           else np.zeros(len(ids), np.int64)) for c in ("prompt_tokens", "output_tokens")}
    spans = t.with_columns(is_attempt=pl.Series(is_attempt), **tokens).select(
        pl.col("resource").alias("process"), pl.when(pl.col("kind") == "request").then(pl.lit("requests"))
        .otherwise(pl.col("kind")).alias("role"), name.alias("name"),
        (pl.col("start_s") * 1e6).alias("start_us"), (pl.col("end_s") * 1e6).alias("end_us"),
        pl.col("step").cast(pl.Int64), pl.col("job").cast(pl.Int64),
        *(pl.when("is_attempt").then(pl.col(c)).alias(c) for c in ("prompt_tokens", "output_tokens")),
        pl.when("is_attempt").then(pl.col("id").cast(pl.String)).alias("request"))
    frames = [spans]
    reqs = t.filter(pl.col("kind").is_in(ATTEMPTS))  # the batch: every attempt, finished or not, while it runs
    counters = [
        _occupancy(pl.col("resource"), pl.col("start_s") * 1e6, pl.col("end_s") * 1e6, "running requests", reqs)
    ]
    if run.links is not None and run.links.height:
        link = "link/" + pl.col("link")
        what = (pl.when(pl.col("job") >= 0).then(pl.format("{} (job {})", "what", "job")).otherwise(pl.col("what"))
                if several_jobs(t) else pl.col("what"))  # whose transfer, as the timeline's spans say
        frames.append(run.links.select(link.alias("process"), pl.col("what").alias("role"),
                                       what.alias("name"), (pl.col("start_s") * 1e6).alias("start_us"),
                                       (pl.col("end_s") * 1e6).alias("end_us"), pl.col("step").cast(pl.Int64),
                                       pl.col("job").cast(pl.Int64)))
        # Utilisation: +u at a transfer's start, -u at its end, summed per link (overlaps add).
        edges = pl.concat([run.links.select(link.alias("process"), (pl.col("start_s") * 1e6).alias("ts_us"),
                                            pl.col("utilization").alias("delta")),
                           run.links.select(link.alias("process"), (pl.col("end_s") * 1e6).alias("ts_us"),
                                            (-pl.col("utilization")).alias("delta"))]).sort("process", "ts_us", "delta")
        util = (edges.with_columns(pl.col("delta").cum_sum().over("process").clip(0.0, None).alias("value"))
                .group_by("process", "ts_us", maintain_order=True).agg(pl.col("value").last())
                .select("process", pl.lit("utilization").alias("name"), "ts_us", "value"))
        counters.append(util)
    flows = _flows(pl.concat([_attempt_flows(t).cast(RAW_FLOWS), _sync_flows(t)]))  # type: ignore[arg-type]
    return _trace(_numbered(frames), pl.concat(counters), {"run": run.name, "scheduler": run.scheduler}, flows)


RAW_FLOWS = {"key": pl.String, "order": pl.Float64, "row": pl.UInt32, "at": pl.String, "name": pl.String}


def _flows(frame: pl.DataFrame) -> pl.DataFrame:
    """Flow rows (``FLOWS``) from (key, order, row, at, name): one flow per key, numbered from 1."""
    return frame.select(pl.col("key").rank("dense").cast(pl.Int64).alias("id"), pl.col("order").cast(pl.Float64),
                        pl.col("row").cast(pl.UInt32), "at", "name")


def _attempt_flows(t: pl.DataFrame) -> pl.DataFrame:
    """A request's attempts, in the order they ended (each bound near its end): only requests with several."""
    rows = t.with_row_index("row").filter(pl.col("kind").is_in(ATTEMPTS), pl.col("id") >= 0)
    rows = rows.filter(pl.len().over("id") >= 2)
    # Attempts ending at the same time: the one that finished ("request") still comes last.
    rows = rows.sort("id", "end_s", pl.col("kind") == "request", "row")
    return rows.select(pl.format("a{}", "id").alias("key"), pl.int_range(pl.len()).over("id").cast(pl.Float64)
                       .alias("order"), "row", pl.lit("end").alias("at"),
                       pl.format("request {} attempts", "id").alias("name"))


def _sync_flows(t: pl.DataFrame) -> pl.DataFrame:
    """Weight syncs: the step's (last) training slice to the sync, and the sync to every generation instance's
    first request (of the same job) that starts after the sync ends."""
    t = t.with_row_index("row")
    syncs = t.filter(pl.col("kind") == "weight_sync").select("row", "job", "step", "start_s", "end_s")
    if not syncs.height:
        return pl.DataFrame(schema=RAW_FLOWS)
    syncs = syncs.with_columns(pl.format("s{}", "row").alias("key"),
                               pl.format("weight sync, step {}", "step").alias("name"))
    train = (t.filter(pl.col("kind") == "train").sort("end_s").group_by("job", "step").agg(pl.col("row").last()))
    to_sync = syncs.join(train.rename({"row": "train_row"}), on=["job", "step"], how="inner")
    trainer = pl.concat([to_sync.select("key", pl.lit(0.0).alias("order"), pl.col("train_row").alias("row"),
                                        pl.lit("end").alias("at"), "name"),
                         to_sync.select("key", pl.lit(1.0).alias("order"), "row", pl.lit("start").alias("at"), "name")])
    requests = t.filter(pl.col("kind") == "request").select("resource", "job", "row", "start_s").sort("start_s")
    instances = requests.select("resource").unique()
    # A sync without a job of its own (-1) feeds every job's requests; one with a job only that job's.
    wanted = syncs.join(instances, how="cross").join(requests.select("job").unique().rename({"job": "rjob"}),
                                                     how="cross")
    wanted = wanted.filter((pl.col("job") < 0) | (pl.col("job") == pl.col("rjob"))).sort("end_s")
    first = wanted.join_asof(requests.rename({"row": "first_row", "job": "rjob", "start_s": "first_s"}),
                             left_on="end_s", right_on="first_s", by=["resource", "rjob"], strategy="forward",
                             check_sortedness=False)
    first = first.drop_nulls("first_row")
    first = first.sort("first_s", "first_row").unique(["key", "resource"], keep="first")  # the earliest of any job
    fan = pl.concat([
        first.select(pl.format("{}>{}", "key", "resource").alias("key"), pl.lit(0.0).alias("order"), "row",
                     pl.lit("end").alias("at"), "name"),
        first.select(pl.format("{}>{}", "key", "resource").alias("key"), pl.lit(1.0).alias("order"),
                     pl.col("first_row").alias("row"), pl.lit("start").alias("at"), "name")])
    return pl.concat([trainer, fan]).cast(RAW_FLOWS)  # type: ignore[arg-type]


def from_bundle(bundle: Bundle) -> Trace:
    """A recorded bundle: phase spans per actor, requests per engine (lanes), collectives per rank and
    process group, weight-sync flows on their source; waiting and running requests per engine as counters.
    A request without a finish time (an imported request log) has no slice: its arrival is an instant event on
    its engine's "arrivals" thread, and it counts as waiting from arrival to scheduled where that is known."""
    origin = time_origin_ns(bundle)

    def us(column: str) -> pl.Expr:
        return (pl.col(column) - origin) / 1e3

    spans = bundle.spans.select(pl.col("actor").alias("process"), pl.col("phase").alias("role"),
                                pl.when(pl.col("name") == "").then(pl.col("phase"))
                                .otherwise(pl.col("name")).alias("name"),
                                us("start_ns").alias("start_us"), us("end_ns").alias("end_us"), "step")
    requests = bundle.requests.filter(pl.col("finish_ns").is_not_null())
    arrivals = bundle.requests.filter(pl.col("finish_ns").is_null()).select(
        pl.col("engine").alias("process"), pl.lit("arrivals").alias("role"),
        pl.format("{} arrives ({} tokens)", "request_id", "output_tokens").alias("name"),
        us("arrival_ns").alias("ts_us"), "step", pl.col("request_id").alias("request"), "prompt_tokens",
        "output_tokens")
    start = pl.coalesce("scheduled_ns", "arrival_ns")
    served = requests.select(pl.col("engine").alias("process"), pl.lit("requests").alias("role"),
                             pl.format("{} ({} tokens)", "request_id", "output_tokens").alias("name"),
                             ((start - origin) / 1e3).alias("start_us"), us("finish_ns").alias("end_us"), "step",
                             pl.col("request_id").alias("request"), "prompt_tokens", "output_tokens")
    actors = set(bundle.spans.select(pl.col("actor").unique()).collect()["actor"].to_list())
    ranks = bundle.collectives.select(pl.col("rank").unique()).collect()["rank"].to_list()
    process_of = {r: f"trainer/rank{r}" if f"trainer/rank{r}" in actors else f"rank{r}" for r in ranks}
    collectives = bundle.collectives.select(
        pl.col("rank").replace_strict(process_of, return_dtype=pl.String).alias("process"),
        pl.format("collectives ({})", "pg").alias("role"),
        # the bytes it moved, in or out (a recv's are all out), as inspect counts them
        pl.format("{} {} B", "op", pl.max_horizontal("bytes_in", "bytes_out")).alias("name"),
        us("start_ns").alias("start_us"), us("end_ns").alias("end_us"), "step")
    sync = bundle.weight_syncs
    sent = sync.select(pl.col("src").alias("process"), pl.lit("weight_sync").alias("role"),
                       pl.format("v{} → {} ({} B)", "version", "dst", "bytes").alias("name"),
                       us("start_ns").alias("start_us"), us("end_ns").alias("end_us"), "step")
    received = sync.select(pl.col("dst").alias("process"), pl.lit("weight_sync in").alias("role"),
                           pl.format("v{} ← {} ({} B)", "version", "src", "bytes").alias("name"),
                           us("start_ns").alias("start_us"), us("end_ns").alias("end_us"), "step")
    frames = pl.collect_all([spans, served, collectives, sent, received, arrivals])
    instants = frames.pop()
    table = _numbered(frames)
    # Each transfer: from its sender's slice (near the start) to its receiver's (near the end).
    first_sent = sum(f.height for f in frames[:3])
    n = frames[3].height
    index = pl.int_range(0, n, dtype=pl.UInt32)
    ends = [pl.select(pl.format("v{}", index).alias("key"), pl.lit(float(k)).alias("order"),
                      (index + first_sent + k * n).alias("row"), pl.lit(at).alias("at"),
                      pl.lit("weight sync").alias("name")) for k, at in ((0, "start"), (1, "end"))]
    flows = _flows(pl.concat(ends).cast(RAW_FLOWS)) if n else None  # type: ignore[arg-type]
    # Waiting: every request whose end of waiting is known (scheduled, or finished: then it never waited).
    known = pl.col("scheduled_ns").is_not_null() | pl.col("finish_ns").is_not_null()
    r = bundle.requests.filter(known).select("engine", us("arrival_ns").alias("a"), ((start - origin) / 1e3).alias("s"),
                                             us("finish_ns").alias("f")).collect()
    counters = pl.concat([_occupancy(pl.col("engine"), pl.col("a"), pl.col("s"), "waiting requests", r),
                          _occupancy(pl.col("engine"), pl.col("s"), pl.col("f"), "running requests",
                                     r.filter(pl.col("f").is_not_null()))])
    return _trace(table, counters, {"bundle": str(bundle.path), "run_id": bundle.manifest.run_id}, flows, instants)
