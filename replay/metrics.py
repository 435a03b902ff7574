"""Run metrics and the timeline, computed from the run's record (:class:`~.record.RunRecord`; DataFrames and
numpy, no loops over requests).

Bubbles, per pool, as fractions of the pool's GPU-time over the run:

- generation: an instance's useful share at time t is its running batch over the largest batch it ever ran
  (a half-empty batch in the long tail wastes half the instance). Waste inside a *tail window* is the
  skewness bubble; waste outside is the dependency bubble (waiting for training or weight sync).
- training: idle time of the trainers inside a tail window is the skewness bubble (waiting for the last
  samples), idle time outside is the dependency bubble.

A step's tail window runs from the time ``tail_quantile`` (default 0.8) of its samples have finished to its
last finish: RollMux's long-tail migration fires at about 80% done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from rltrace.replay.phases import GENERATION_KINDS, phase_breakdown
from rltrace.replay.record import PoolUse, RunRecord
from rltrace.replay.workload import WARMUP_STEPS

from rltrace.errors import ConfigError
from rltrace.scalars import number

# The `type: ignore[arg-type]` on each .cast(TIMELINE_SCHEMA): polars types cast()'s mapping keys as str | Selector |
# DataType, which a dict[str, ...] constant cannot match (a mapping's key type is invariant).
TIMELINE_SCHEMA = {"resource": pl.String, "pool": pl.String, "kind": pl.String, "step": pl.Int32, "job": pl.Int32,
                   "id": pl.Int64, "start_s": pl.Float64, "end_s": pl.Float64}
"""timeline.parquet: one row per busy interval. ``job``: the job (in job-list order; 0 in a one-job run) whose
work it is, -1 for none in particular (an instance's busy span while it serves several jobs)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MetricsConfig:
    tail_quantile: float = 0.8
    """a step's long tail starts when this share of its samples has finished"""

    def __post_init__(self) -> None:
        if not 0 < self.tail_quantile < 1:
            raise ConfigError(f"metrics.tail_quantile must be in (0, 1), got {self.tail_quantile}")


def timeline_frame(run: RunRecord, requests: pl.DataFrame) -> pl.DataFrame:
    """One row per busy interval: requests on instances, instance busy spans, work on resources, switches."""
    names = {i.id: (i.name, i.pool) for i in run.instances}
    ids = np.array(list(names), dtype=np.int32)
    lookup = pl.DataFrame({"instance": ids, "resource": [names[i][0] for i in ids],
                           "pool": [names[i][1] for i in ids]}, schema_overrides={"instance": pl.Int32})
    req = (
        requests.filter(pl.col("finished"))
        .join(lookup, on="instance", how="left")
        .select("resource", "pool", pl.lit("request").alias("kind"), "step", "job", pl.col("request").alias("id"),
                pl.col("admitted_s").alias("start_s"), pl.col("finish_s").alias("end_s"))
    )
    pools = {name: pool for name, pool in names.values()} | {r.name: r.pool for r in run.resources.values()}
    seg = run.segments
    # One job: every span is its work, busy spans and switches included.
    job = np.array([s[6] for s in seg], dtype=np.int32) if len(run.jobs) > 1 else np.zeros(len(seg), np.int32)
    other = pl.DataFrame(
        {
            "resource": [s[0] for s in seg],
            "pool": [pools.get(s[0], "") for s in seg],
            "kind": [s[1] for s in seg],
            "step": np.array([s[2] for s in seg], dtype=np.int32),
            "job": job,
            "id": np.array([s[3] for s in seg], dtype=np.int64),
            "start_s": np.array([s[4] for s in seg], dtype=np.float64),
            "end_s": np.array([s[5] for s in seg], dtype=np.float64),
        },
        schema=TIMELINE_SCHEMA,
    )
    work = pl.concat([req.cast(TIMELINE_SCHEMA), other.filter(pl.col("kind") != "busy")])  # type: ignore[arg-type]
    return pl.concat([work, _busy_rows(work, job=-1 if len(run.jobs) > 1 else 0)]).sort("start_s", "resource", "id")


def _busy_rows(timeline: pl.DataFrame, job: int) -> pl.DataFrame:
    """``busy`` rows: each instance's non-empty batch, the union of its requests' attempts, run to the end (an instance
    that never empties its batch, or is still generating when the run ends, is busy throughout); ``job``: whose."""
    work = timeline.filter(pl.col("kind").is_in(GENERATION_KINDS))
    return (union_spans(work, ["resource", "pool"])
            .select("resource", "pool", pl.lit("busy").alias("kind"), pl.lit(-1).alias("step"),
                    pl.lit(job).alias("job"), pl.lit(-1).alias("id"), "start_s", "end_s")
            .cast(TIMELINE_SCHEMA))  # type: ignore[arg-type]


def union_spans(spans: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The union of the ``start_s``..``end_s`` intervals of each group of ``keys``: disjoint rows of ``keys``,
    ``start_s``, ``end_s``, in order of the keys' first appearance and then of time (touching intervals merge)."""
    f = (spans.select(*keys, "start_s", "end_s").with_row_index("_row")
         .with_columns(pl.col("_row").min().over(keys).alias("_first")).sort("_first", "start_s"))
    f = f.with_columns(pl.col("end_s").cum_max().over(keys).alias("_reach"))
    run = (pl.col("start_s") > pl.col("_reach").shift(1).over(keys)).fill_null(True).cum_sum()
    return (f.with_columns(run.alias("_run")).group_by("_first", "_run", maintain_order=True)
            .agg(*(pl.col(k).first() for k in keys), pl.col("start_s").min(), pl.col("end_s").max())
            .select(*keys, "start_s", "end_s"))


def _merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted disjoint (starts, ends)."""
    if not len(starts):
        return starts, ends
    order = np.argsort(starts)
    s, e = starts[order], np.maximum.accumulate(ends[order])
    new = np.concatenate([[True], s[1:] > e[:-1]])
    group_end = np.concatenate([np.flatnonzero(new)[1:] - 1, [len(s) - 1]])
    return s[new], e[group_end]


def _covered(ws: np.ndarray, we: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Length of the disjoint windows (ws, we) that lies before each time t."""
    if not len(ws):
        return np.zeros_like(t)
    before = np.concatenate([[0.0], np.cumsum(we - ws)])
    i = np.searchsorted(ws, t, side="right")  # windows starting at or before t
    last = np.clip(i - 1, 0, len(ws) - 1)
    partial = np.where(i > 0, np.clip(t - ws[last], 0, (we - ws)[last]), 0.0)
    return before[np.maximum(i - 1, 0)] * (i > 0) + partial


def _peak_concurrency(instance: np.ndarray, start: np.ndarray, end: np.ndarray) -> dict[int, int]:
    """Largest number of intervals open at once, per instance."""
    peaks: dict[int, int] = {}
    for inst in np.unique(instance):
        mine = instance == inst
        times = np.concatenate([start[mine], end[mine]])
        delta = np.concatenate([np.ones(mine.sum(), np.int64), -np.ones(mine.sum(), np.int64)])
        order = np.lexsort((delta, times))  # ends before starts at the same time
        peaks[int(inst)] = int(np.cumsum(delta[order]).max())
    return peaks


def _held(run: RunRecord, makespan: float) -> list[tuple[PoolUse, float, float]]:
    """Each allocation with the span it held its GPUs: until the pool's next allocation (a resize or a
    release), else until the end of the run."""
    spans = []
    for i, use in enumerate(run.pools):
        until = next((p.start_s for p in run.pools[i + 1:] if p.pool == use.pool), makespan)
        spans.append((use, min(use.start_s, makespan), min(until, makespan)))
    return spans


def _capacity(
    held: list[tuple[PoolUse, float, float]], prefix: str, ws: np.ndarray, we: np.ndarray
) -> tuple[float, float]:
    """GPU-seconds the pools named ``prefix...`` held, in all and within the tail windows (ws, we)."""
    uses = [(u.gpus, a, b) for u, a, b in held if u.pool.startswith(prefix) and u.gpus and b > a]
    if not uses:
        return 0.0, 0.0
    gpus, a, b = (np.array(c, dtype=float) for c in zip(*uses))
    return float((gpus * (b - a)).sum()), float((gpus * (_covered(ws, we, b) - _covered(ws, we, a))).sum())


def _quantiles(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    if not len(a):
        return {"mean": 0.0, "p50": 0.0, "p95": 0.0}
    return {"mean": float(a.mean()), "p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95))}


LATENCY_COLUMNS = ("queue_s", "ttft_s", "tpot_s", "e2e_s")
"""per-request latency columns of requests.parquet (Requests.to_frame) summarised under ``latency``"""


def latency(requests: pl.DataFrame) -> dict[str, Any]:
    """Percentiles of each finished request's queueing, TTFT, TPOT and end-to-end time (seconds), and how
    many requests they cover; a column with no value (TPOT when every output is one token) has zeros."""
    done = requests.filter(pl.col("finished"))
    out: dict[str, Any] = {"requests": done.height}
    for c in LATENCY_COLUMNS:
        a = done[c].drop_nulls().drop_nans().to_numpy()
        if not len(a):
            out[c] = {k: 0.0 for k in ("mean", "p50", "p90", "p99", "max")}
            continue
        p50, p90, p99 = np.percentile(a, [50, 90, 99])
        out[c] = {"mean": float(a.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99),
                  "max": float(a.max())}
    return out


def compute_metrics(
    run: RunRecord, requests: pl.DataFrame, timeline: pl.DataFrame, config: MetricsConfig
) -> dict[str, Any]:
    """The documented metrics (docs/replay.md) of one run."""
    ends = sorted(run.step_end_s.items())
    makespan = max((t for _, t in ends), default=number(timeline["end_s"].max() or 0.0))
    step_times: list[float] = []
    steady: list[float] = []  # after each job's warm-up step: what fidelity checks compare (replay/fidelity.py)
    previous: dict[int, float] = {job.id: job.arrival_s for job in run.jobs}
    for (job, step), end in ends:
        step_times.append(end - previous[job])
        if step >= WARMUP_STEPS:
            steady.append(step_times[-1])
        previous[job] = end
    used = np.concatenate([c[2] for c in run.consumed]) if run.consumed else np.zeros(0, np.int64)
    staleness = np.concatenate([c[3] for c in run.consumed]) if run.consumed else np.zeros(1, np.int64)
    samples = len(used)
    tokens = int(requests["output_tokens"].to_numpy()[used].sum())

    # Tail windows, per (job, step), merged.
    done = requests.filter(pl.col("finished"))
    tails = done.group_by("job", "step").agg(
        pl.col("finish_s").quantile(config.tail_quantile, "lower").alias("a"), pl.col("finish_s").max().alias("b"))
    ws, we = _merge(tails["a"].to_numpy(), tails["b"].to_numpy())
    ws, we = np.minimum(ws, makespan), np.minimum(we, makespan)

    pools = {p.pool: p for p in run.pools if p.gpus}  # the last allocation of each pool (before any release)
    metrics: dict[str, Any] = {}
    # Generation: useful share = batch / peak batch per instance.
    # Every generation pool counts ("generation", and e.g. an affinity pool of another GPU kind "generation/...").
    gen = timeline.filter(pl.col("pool").str.starts_with("generation"),
                          pl.col("kind").is_in(GENERATION_KINDS))
    inst_of = {i.name: i for i in run.instances}
    busy = busy_tail = 0.0
    if gen.height:
        names = gen["resource"].unique().sort().to_list()
        codes = gen["resource"].replace_strict({n: i for i, n in enumerate(names)}, return_dtype=pl.Int64).to_numpy()
        start, end = gen["start_s"].to_numpy(), np.minimum(gen["end_s"].to_numpy(), makespan)
        peaks = _peak_concurrency(codes, start, end)
        # a peak of 0: only empty intervals (requests that generated nothing), which weigh nothing anyway
        per_code = np.array([inst_of[n].tp / max(peaks[i], 1) for i, n in enumerate(names)])
        weight = per_code[codes]
        busy = float(((end - start) * weight).sum())
        busy_tail = float(((_covered(ws, we, end) - _covered(ws, we, start)) * weight).sum())
    held = _held(run, makespan)  # pools can grow (scaling) or be released (a finished group) mid-run
    capacity, capacity_tail = _capacity(held, "generation", ws, we)
    metrics["generation"] = _bubbles(capacity, busy, capacity_tail - busy_tail)
    # Busy in time: an instance with a non-empty batch, whatever its size (the union of its requests' intervals,
    # times its GPUs)
    busy_time = 0.0
    if gen.height:
        starts, ends_ = gen["start_s"].to_numpy(), np.minimum(gen["end_s"].to_numpy(), makespan)
        for i, name in enumerate(names):
            mine = codes == i
            first, last = _merge(starts[mine], ends_[mine])
            busy_time += float((last - first).sum()) * inst_of[name].tp
    nonempty = {"generation": busy_time / capacity if capacity else 0.0}
    train = timeline.filter(pl.col("kind") == "train")
    t_gpus = pools["training"].gpus if "training" in pools else 0
    ts, te = train["start_s"].to_numpy(), np.minimum(train["end_s"].to_numpy(), makespan)
    t_busy = float((te - ts).sum()) * t_gpus
    t_busy_tail = float((_covered(ws, we, te) - _covered(ws, we, ts)).sum()) * t_gpus
    t_capacity, t_capacity_tail = _capacity(held, "training", ws, we)
    metrics["training"] = _bubbles(t_capacity, t_busy, t_capacity_tail - t_busy_tail)
    nonempty["training"] = metrics["training"]["busy"]  # a trainer is busy or idle: no batch to under-fill

    cost = sum(u.gpus * (b - a) / 3600 * run.cluster.usd_per_gpu_hour(u.gpu) for u, a, b in held if u.billed)
    by_pool: dict[str, dict[str, Any]] = {}  # what each pool's GPUs are and cost (billed ones: colocated roles share)
    for u, a, b in held:
        if not u.billed or b <= a:
            continue
        entry = by_pool.setdefault(u.pool, {"gpu": u.gpu, "gpus": 0, "gpu_hours": 0.0, "cost_usd": 0.0})
        entry["gpus"] = max(entry["gpus"], u.gpus)  # the most it held (a pool can be resized)
        entry["gpu_hours"] += u.gpus * (b - a) / 3600
        entry["cost_usd"] += u.gpus * (b - a) / 3600 * run.cluster.usd_per_gpu_hour(u.gpu)
        kinds = entry["gpu"].split("+")
        entry["gpu"] = "+".join(kinds if u.gpu in kinds else [*kinds, u.gpu])
    for r in run.resources.values():  # serverless work, billed per second of use
        if r.usd_per_s and r.busy_s:
            by_pool[r.name] = {"gpu": "serverless", "gpus": 0, "gpu_hours": 0.0, "cost_usd": r.busy_s * r.usd_per_s}
    cost += sum(r.busy_s * r.usd_per_s for r in run.resources.values())  # serverless: per second of use
    sync = (timeline.filter(pl.col("kind") == "weight_sync").group_by("job", "step")
            .agg((pl.col("end_s") - pl.col("start_s")).sum()))
    return {
        "throughput_samples_per_s": samples / makespan if makespan else 0.0,
        "throughput_tokens_per_s": tokens / makespan if makespan else 0.0,
        "step_time_s": {**_quantiles(step_times), "steady_mean": float(np.mean(steady or step_times or [0.0]))},
        "makespan_s": makespan,
        "bubble_fraction": {pool: {"dependency": m["dependency"], "skewness": m["skewness"]}
                            for pool, m in metrics.items()},
        "gpu_utilization": {pool: m["busy"] for pool, m in metrics.items()},
        "gpu_busy": nonempty,
        "staleness": {"mean": float(staleness.mean()), "max": int(staleness.max())},
        "weight_sync_s": number(sync["end_s"].mean()) if sync.height else 0.0,
        "volume_bytes_per_step": _volumes(run, [key for key, _ in ends]),
        "cost_usd": cost,
        "cost_by_pool": by_pool,
        "usd_per_1k_samples": cost / samples * 1000 if samples else 0.0,
        "samples": samples,
        "output_tokens": tokens,
        "steps": len(ends),
        "gpus": {p.pool: p.gpus for p in pools.values()},
        "colocated": run.colocated,
        "preemptions": int(requests["preemptions"].sum()),
        "aborted_attempts": int(requests["aborts"].sum()),
        "events": run.events,
        "latency": latency(requests),
        "phases_s_per_step": phase_breakdown(timeline, run.jobs, colocated=run.colocated),
        **({"extra": {**run.extra, **run.declared}} if run.extra or run.declared else {}),
    }


def step_volumes(run: RunRecord, steps: list[tuple[int, int]]) -> tuple[list[float | None], list[float | None]]:
    """Each finished (job, step)'s bytes: one model copy, what its weight sync delivers to each generation instance
    (None: no model and no recorded sync to size it), and what each training GPU sends in its modelled expert
    all-to-alls (``cost.train_ep`` > 1, or a described job's EP; None where none is modelled: EP 1, or a measured
    trainer span)."""
    jobs = {job.id: job for job in run.jobs}
    syncs: list[float | None] = []
    alltoalls: list[float | None] = []
    for job_id, step in steps:
        job = jobs[job_id]
        syncs.append((job.sync_bytes[step] or None) if job.sync_bytes is not None else None)  # 0: nothing sized it
        whole = job.colocated.alltoall_bytes if run.colocated and job.colocated else None  # a described job's
        parts = job.alltoalls[step] if job.alltoalls is not None and whole is None else None
        own = whole if whole is not None else job.alltoall_bytes
        held = own[step] if own is not None else None
        alltoalls.append(float(sum(p.sent_bytes for p in parts)) if parts is not None else (held or None))
    return syncs, alltoalls


def _volumes(run: RunRecord, steps: list[tuple[int, int]]) -> dict[str, float | None]:
    """Mean bytes per finished step, over every job's (:func:`step_volumes`; steps.parquet holds each job's steps):
    one model copy a weight sync delivers to each generation instance (None: nothing sized it), and what each
    training GPU sends in the modelled expert all-to-alls (0 without them). Generation has none: an engine's EP
    inside its TP group all-reduces (docs/costmodels-roofline.md)."""
    syncs, alltoalls = step_volumes(run, steps)
    sized = [b for b in syncs if b is not None]
    modelled = [b for b in alltoalls if b is not None]
    return {"weight_sync": float(np.mean(sized)) if sized else None,
            "expert_alltoall_per_train_rank": float(np.mean(modelled)) if modelled else 0.0}


def _bubbles(capacity: float, busy: float, idle_in_tail: float) -> dict[str, float]:
    if capacity <= 0:
        return {"busy": 0.0, "dependency": 0.0, "skewness": 0.0}
    skew = min(max(idle_in_tail, 0.0), capacity - busy)
    return {"busy": busy / capacity, "skewness": skew / capacity,
            "dependency": max(capacity - busy - skew, 0.0) / capacity}
