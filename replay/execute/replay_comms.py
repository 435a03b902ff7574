"""Comms replay (PARAM-style): every recorded collective re-issued with its group, dtype and size.

The collectives table has one row per rank per operation; an operation is one (step, group, sequence number)
(a send is its sender's row, its receive is implied). Its recorded latency is the shortest of its ranks'
durations: the last rank to arrive waits least, so its time is closest to the communication itself.
"""

from __future__ import annotations

import polars as pl
from rltrace.replay.execute.comms import OPS, Op, fold

from rltrace.bundle import Bundle


def logical_ops(bundle: Bundle, world: int) -> pl.DataFrame:
    """One row per recorded operation, in recorded order: step, op, dtype, count, bytes, recorded_s, ranks
    (as recorded), folded (onto ``world`` ranks), supported, and ``op_spec`` (the :class:`Op` to issue)."""
    rows = bundle.collectives.filter(pl.col("op") != "recv").collect()
    if rows.height == 0:
        return pl.DataFrame(schema={"step": pl.Int32, "op": pl.String, "dtype": pl.String, "count": pl.Int64,
                                    "bytes": pl.Int64, "recorded_s": pl.Float64, "ranks": pl.List(pl.Int32),
                                    "folded": pl.Boolean, "supported": pl.Boolean, "op_spec": pl.Object})
    ops = rows.group_by("step", "pg", "seq", "op").agg(
        pl.col("start_ns").min(), ((pl.col("end_ns") - pl.col("start_ns")).min() / 1e9).alias("recorded_s"),
        pl.col("dtype").first(), pl.col("count").min(), pl.col("bytes_in").min().alias("bytes"),
        pl.col("pg_ranks").first().alias("ranks"), pl.col("rank").min().alias("sender"),
        pl.col("peer").drop_nulls().first().alias("peer"),
    ).sort("start_ns", "step", "pg", "seq")
    specs, folded, supported = [], [], []
    for r in ops.iter_rows(named=True):
        members = [int(x) for x in r["ranks"]]
        if r["op"] == "send":
            members = [r["sender"], r["peer"]]
        group = fold(members, world)
        root = (r["peer"] if r["op"] in ("broadcast", "reduce") and r["peer"] is not None else
                r["sender"] if r["op"] == "send" else members[0]) % world
        specs.append(Op(r["op"], int(r["count"]), r["dtype"], group, root=root,
                        peer=(r["peer"] % world) if r["op"] == "send" and r["peer"] is not None else -1))
        folded.append(len(set(members)) != len(group) or max(members) >= world)
        supported.append(r["op"] in OPS)
    return ops.select("step", "op", "dtype", "count", "bytes", "recorded_s", "ranks").with_columns(
        pl.Series("folded", folded), pl.Series("supported", supported), pl.Series("op_spec", specs, dtype=pl.Object))
