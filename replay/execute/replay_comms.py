"""Comms replay (PARAM-style): every recorded collective re-issued with its group, dtype and size.

The collectives table has one row per rank per operation. Rows are first given one step and one per-group
sequence number per operation (:func:`rltrace.labels.align_collectives`: bundles merged before
that rule existed carry each rank's own labels, and aligning an aligned bundle changes nothing); an
operation is then one (group, sequence number), a send and its receive included. Its recorded latency is
the shortest of its ranks' durations: the last rank to arrive waits least, so its time is closest to the
communication itself.

Each operation is run unless it must be skipped, for one stated reason: its kind is not one
:mod:`~rltrace.replay.execute.comms` can issue, its ranks recorded different operations or dtypes under one
(group, sequence number) (a trace whose ranks were sampled apart: no one operation to issue), or its group folds
onto a single local rank (recorded ranks fold onto ``rank % ranks``), leaving nothing to communicate. A dtype
name torch does not use (a profiler's ``Float``, ET's ``4-byte``) is issued in a dtype of its recorded width.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl
from rltrace.replay.execute.comms import OPS, Op, fold

from rltrace.bundle import Bundle
from rltrace.labels import align_collectives

if TYPE_CHECKING:
    from polars._typing import SchemaDict

UNSUPPORTED = "kind not replayable"
ONE_RANK = "folds onto one local rank"
DISAGREE = "its ranks recorded different ops or dtypes"
SCHEMA: SchemaDict = {
    "step": pl.Int32, "pg": pl.String, "seq": pl.Int64, "op": pl.String, "dtype": pl.String, "count": pl.Int64,
    "bytes": pl.Int64, "recorded_s": pl.Float64, "ranks": pl.List(pl.Int32), "folded": pl.Boolean,
    "supported": pl.Boolean, "skip": pl.String, "op_spec": pl.Object}


def logical_ops(bundle: Bundle, world: int) -> pl.DataFrame:
    """One row per recorded operation, in recorded order: step, pg, seq, op (a send with its receive is one
    ``send``), dtype, count, bytes, recorded_s, ranks (as recorded), folded (onto ``world`` ranks),
    supported, skip (why it is not run, null when it is) and ``op_spec`` (the :class:`Op` to issue)."""
    rows, _ = align_collectives(bundle.collectives.collect())
    if rows.height == 0:
        return pl.DataFrame(schema=SCHEMA)
    sent = pl.col("op") != "recv"
    ops = rows.group_by("pg", "seq").agg(
        pl.col("step").max(), pl.col("op").filter(sent).first().fill_null("recv"),
        pl.col("start_ns").min(), ((pl.col("end_ns") - pl.col("start_ns")).min() / 1e9).alias("recorded_s"),
        pl.col("dtype").first(), pl.col("count").min(),
        pl.col("bytes_in").filter(sent).min().fill_null(pl.col("bytes_out").max()).alias("bytes"),
        pl.col("pg_ranks").first().alias("ranks"), pl.col("rank").filter(sent).min().alias("sender"),
        pl.col("peer").filter(sent).drop_nulls().first().alias("peer"),
        ((pl.col("op").filter(sent).n_unique() > 1) | (pl.col("dtype").n_unique() > 1)).alias("disagree"),
    ).sort("start_ns", "pg", "seq")
    specs, folded, supported, skip = [], [], [], []
    for r in ops.iter_rows(named=True):  # one Op object per operation: the few thousand a job records
        members = [int(x) for x in r["ranks"]]
        if r["op"] == "send" and r["peer"] is not None:
            members = [r["sender"], r["peer"]]
        group = fold(members, world)
        root = (r["peer"] if r["op"] in ("broadcast", "reduce") and r["peer"] is not None else
                r["sender"] if r["op"] == "send" else members[0]) % world
        peer = (r["peer"] % world) if r["op"] == "send" and r["peer"] is not None else -1
        width = int(r["bytes"]) // int(r["count"]) if r["count"] and r["bytes"] else 0
        specs.append(Op(r["op"], int(r["count"]), r["dtype"], group, root=root, peer=peer, width=width))
        folded.append(len(set(members)) != len(group) or max(members) >= world)
        supported.append(r["op"] in OPS)
        one_rank = len(group) < 2 or (r["op"] == "send" and root == peer)
        skip.append(UNSUPPORTED if r["op"] not in OPS else DISAGREE if r["disagree"] else ONE_RANK if one_rank
                    else None)
    return ops.select("step", "pg", "seq", "op", "dtype", "count", "bytes", "recorded_s", "ranks").with_columns(
        pl.Series("folded", folded), pl.Series("supported", supported), pl.Series("skip", skip, dtype=pl.String),
        pl.Series("op_spec", specs, dtype=pl.Object))


def report(ops: pl.DataFrame, world: int) -> list[str]:
    """What was run, folded and skipped, and why: one line overall, then one per group."""
    lines = [(f"{ops.height} recorded operations in {ops['pg'].n_unique()} groups; "
              f"{int(ops['skip'].is_null().sum())} run on {world} local ranks; "
              f"{int(ops['folded'].sum())} on recorded ranks folded onto them (rank % {world}); "
              f"{int((ops['skip'] == ONE_RANK).sum())} skipped: {ONE_RANK}; "
              f"{int((ops['skip'] == UNSUPPORTED).sum())} skipped: {UNSUPPORTED}"
              + (f"; {int((ops['skip'] == DISAGREE).sum())} skipped: {DISAGREE}" if (ops["skip"] == DISAGREE).any()
                 else ""))]
    per = ops.group_by("pg").agg(
        pl.col("ranks").first(), pl.len().alias("n"), pl.col("skip").is_null().sum().alias("run"),
        pl.col("folded").sum(), (pl.col("skip") == ONE_RANK).sum().alias("one_rank"),
        pl.col("op").filter(pl.col("skip") == UNSUPPORTED).unique().sort().alias("unsupported"),
        (pl.col("skip") == UNSUPPORTED).sum().alias("n_unsupported"),
    ).sort("pg")
    for r in per.iter_rows(named=True):
        line = (f"group {r['pg']} (ranks {','.join(map(str, r['ranks']))}): {r['n']} operations, {r['run']} run, "
                f"{r['folded']} folded, {r['one_rank']} skipped ({ONE_RANK})")
        if r["n_unsupported"]:
            line += f", {r['n_unsupported']} skipped ({UNSUPPORTED}: {', '.join(r['unsupported'])})"
        lines.append(line)
    return lines
