"""Slow transfers: weight syncs and collectives whose achieved bandwidth is far below the transport's rate.

**Weight syncs.** A flow's achieved rate is its bytes over its duration (first send's start to last send's
end). The rate it is held against, in order of preference:

- *measured by* ``rltrace calibrate --ranks N`` (a profile's broadcast bandwidth and time per operation), when a
  profile is given, for Gloo and NCCL flows;
- *measured in the bundle*: where the flow is made of the sender's own collectives (a broadcast or send per
  tensor), the same transport's rate while those were on the wire (all the bundle's flows of that transport:
  their bytes over the time their sends were running). The difference between the flow's duration and its
  time on the wire is time the sender spent between sends;
- *rated*: for NCCL flows on a catalogued GPU, its NVLink bandwidth, with a wider margin (``RATED_FAR``): a
  bundle does not say whether a flow crossed NVLink or the network.

A flow is slow when it achieves less than ``FAR`` of that rate (``RATED_FAR`` of a rated one) and the seconds
it loses a step (its duration less its bytes at that rate) pass the diagnosis's floor.

**Collectives.** With a profile, each operation's transfer time (from its last rank's issue to its end: the
time after everyone arrived, so waiting for a straggler does not count) gives a bus bandwidth (nccl-tests'
convention) held against the profile's.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from rltrace.analysis.findings import Context, Finding, WhatIf, covered, rank_of, rate, seconds, size
from rltrace.bundle import Bundle
from rltrace.catalog import get_gpu
from rltrace.errors import ConfigError
from rltrace.scalars import number

FAR = 0.5
"""a transfer achieving less than this share of a measured rate is slow"""
RATED_FAR = 0.1
"""... and less than this share of a rated one"""
SENDS = ("broadcast", "send", "scatter")
PROFILED = ("gloo", "nccl")
"""the transports a profile's broadcasts time (a reload from disk is not one of them)"""
BUS_FACTOR = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "broadcast": 1.0, "reduce": 1.0}
"""nccl-tests' bus bandwidth: algorithm bandwidth x factor x (n - 1) / n (broadcast and reduce: x 1)"""


def _flows(bundle: Bundle, ctx: Context) -> pl.DataFrame:
    """The judged steps' flows with their duration and, where the sender's collectives make them up, their
    time on the wire (wire_ns, null otherwise)."""
    flows = (bundle.weight_syncs.with_columns(pl.coalesce("step", pl.col("version") - 1).cast(pl.Int32).alias("step"))
             .filter(pl.col("step").is_in(ctx.steps)).collect().with_row_index("_flow"))
    coll = bundle.collectives.filter(pl.col("op").is_in(SENDS)).select("rank", "op", "peer", "start_ns",
                                                                       "end_ns").collect()
    wire: list[float | None] = []
    for src, start, end in flows.select("src", "start_ns", "end_ns").iter_rows():
        rank = rank_of(src)
        mine = coll.filter(pl.col("rank") == rank, pl.col("start_ns") >= start, pl.col("end_ns") <= end,
                           (pl.col("op") == "send") | (pl.col("peer") == rank)) if rank is not None else coll.clear()
        if not mine.height:
            wire.append(None)
            continue
        inside = covered(np.array([start]), np.array([end]), mine["start_ns"].to_numpy(), mine["end_ns"].to_numpy())
        wire.append(float(inside[0]))
    return flows.with_columns(pl.Series("wire_ns", wire, dtype=pl.Float64),
                              (pl.col("end_ns") - pl.col("start_ns")).cast(pl.Float64).alias("dur_ns"))


def _rated(bundle: Bundle, method: str) -> float | None:
    """The rated bytes/s of ``method`` on the bundle's training GPUs (NCCL over NVLink), if known."""
    pool = bundle.manifest.cluster.get("trainer")
    if method != "nccl" or pool is None:
        return None
    try:
        return get_gpu(pool.device).nvlink_gbps * 1e9
    except ConfigError:
        return None


def slow_syncs(bundle: Bundle, ctx: Context, profile: tuple[float, float] | None = None) -> list[Finding]:
    """Weight-sync flows far below their transport's rate (see the module text). ``profile``: the bytes/s and
    seconds per operation of the broadcasts `rltrace calibrate` timed, if a profile is given."""
    flows = _flows(bundle, ctx)
    if not flows.height:
        return []
    findings = []
    for (method,), same in flows.group_by("method", maintain_order=True):
        on_wire = same.filter(pl.col("wire_ns").is_not_null())
        per_op = 0.0
        if profile is not None and method in PROFILED:
            (ref, per_op), far = profile, FAR
            source = (f"measured by rltrace calibrate (the profile's broadcasts: {rate(ref)} plus "
                      f"{seconds(per_op * 1e9)} an operation)")
        elif on_wire.height and on_wire["wire_ns"].sum() > 0:
            ref, far = number(on_wire["bytes"].sum()) / (number(on_wire["wire_ns"].sum()) / 1e9), FAR
            source = f"the {method} transport's own rate while its sends were on the wire, in this bundle"
        elif (rated := _rated(bundle, str(method))) is not None:
            ref, far, source = rated, RATED_FAR, f"rated: the training GPU's NVLink (flagged below {RATED_FAR:.0%})"
        else:
            continue
        for (src, dst), rows in same.group_by("src", "dst", maintain_order=True):
            per_step = rows.group_by("step").agg(pl.col("bytes").sum(), pl.col("tensors").sum(), pl.col("dur_ns").sum(),
                                                 pl.col("wire_ns").sum()).sort("step")
            per_step = per_step.with_columns((pl.col("bytes") / ref + pl.col("tensors") * per_op).alias("expected_s"))
            lost = per_step.with_columns((pl.col("dur_ns") / 1e9 - pl.col("expected_s")).alias("lost_s"))
            nbytes, dur = number(per_step["bytes"].mean()), number(per_step["dur_ns"].mean())
            lost_s = number(lost["lost_s"].mean())
            expected_s = number(per_step["expected_s"].mean())
            if expected_s >= far * dur / 1e9 or lost_s < ctx.floor():
                continue
            achieved = nbytes / max(dur / 1e9, 1e-12)
            has_wire = rows["wire_ns"].null_count() == 0
            gaps = number((per_step["dur_ns"] - per_step["wire_ns"]).mean()) if has_wire else 0.0
            between = (f"; {seconds(gaps)} of each step's sync is time between its sends, "
                       f"{seconds(number(per_step['wire_ns'].mean()))} on the wire" if has_wire else "")
            evidence = (f"{src} -> {dst} ({method}) moved {size(nbytes)} a step in {seconds(dur)} ({rate(achieved)}, "
                        f"{number(per_step['tensors'].mean()):.3g} sends), where {seconds(expected_s * 1e9)} is "
                        f"expected at "
                        f"{source}{between}.")
            if has_wire and gaps > 0.5 * lost_s:
                fix = ("The sender idles between its sends: send the weights as a few large buckets (one flat buffer "
                       "per dtype) instead of one send per tensor, and move per-tensor host work (copies, "
                       "synchronisation, sleeps, logging) out of the send loop.")
            else:
                fix = (f"The {method} link itself runs slow: check that the sync takes the fast path (NVLink or "
                       "RDMA, not TCP or host memory), that nothing else shares the link during the sync, and the "
                       "transport's settings (NCCL_P2P/IB variables, socket buffers).")
            less = dict(zip(lost["step"].to_list(), lost["lost_s"].clip(lower_bound=0).to_list()))
            findings.append(Finding(kind="slow_transfer", phase="weight_sync", rank=rank_of(str(src)),
                                    instance=str(dst), lost_s_per_step=lost_s, evidence=evidence, fix=fix,
                                    whatif=WhatIf(label=f"{src} -> {dst} in the {seconds(expected_s * 1e9)} its bytes "
                                                  "need", sync_less_s=less)))
    return findings


def slow_collectives(bundle: Bundle, ctx: Context, profile_bytes_per_s: float | None) -> list[Finding]:
    """Collectives whose bus bandwidth after every rank arrived is far below the profile's (see the module
    text); nothing without a profile."""
    if not profile_bytes_per_s:
        return []
    ops = (bundle.collectives.filter(pl.col("step").is_in(ctx.steps), pl.col("op").is_in(list(BUS_FACTOR)))
           .group_by("pg", "seq", "op", "step").agg(pl.col("start_ns").max().alias("_last"), pl.col("end_ns").max(),
                                                     pl.col("bytes_in").max(), pl.col("pg_ranks").first().list.len()
                                                     .alias("_n"), pl.col("rank").min())
           .collect())
    if not ops.height:
        return []
    factor = pl.col("op").replace_strict(BUS_FACTOR, return_dtype=pl.Float64)
    ops = ops.with_columns(((pl.col("end_ns") - pl.col("_last")).clip(lower_bound=1) / 1e9).alias("t_s"))
    ops = ops.with_columns((pl.col("bytes_in") * factor * (pl.col("_n") - 1) / pl.col("_n") / pl.col("t_s"))
                           .alias("bus_bytes_per_s"))
    findings = []
    steps = len(ctx.steps)
    for (pg, op), rows in ops.group_by("pg", "op", maintain_order=True):
        expected = (rows["bytes_in"] * (rows["op"].replace_strict(BUS_FACTOR, return_dtype=pl.Float64))
                    * (rows["_n"] - 1) / rows["_n"] / profile_bytes_per_s)
        lost_s = number((rows["t_s"] - expected).sum()) / steps
        achieved = number(rows["bus_bytes_per_s"].median())
        if achieved >= FAR * profile_bytes_per_s or lost_s < ctx.floor():
            continue
        median = size(number(rows["bytes_in"].median()))
        evidence = (f"{rows.height / steps:.3g} {op}s a step on {pg} ({median} median) "
                    f"ran at a median bus bandwidth of {rate(achieved)} after all ranks arrived, against "
                    f"{rate(profile_bytes_per_s)} measured by rltrace calibrate.")
        fix = (f"Bucket small {op}s together (DDP bucket_cap_mb, FSDP's reduce dtype) and check that the group's "
               "transport takes the fast path.")
        findings.append(Finding(kind="slow_transfer", phase=f"collective:{op}", lost_s_per_step=lost_s,
                                evidence=evidence, fix=fix))
    return findings
