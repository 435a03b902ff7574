"""Merge-time labels that need every process's shard: one step and sequence per collective, policy versions.

**Collectives.** Each process labels its own rows: ``step`` from its own counter (a trainer's advances at its
first forward after an optimizer step, a generator's at its next generate call) and ``seq`` from its own
per-group counter. Ranks therefore disagree: a trainer still on step k-1 labels step k's batch broadcast
k-1, and a generator that also receives point-to-point counts those receives in the group's ``seq`` while its
peers do not. The labels are made consistent here, at merge, rather than at record time, because a process
cannot learn another rank's labels without adding communication to the job (recording must not change it),
while the merge sees every rank and c10d's own contract gives the alignment: every rank of a group issues the
group's collectives in the same order, and Gloo/NCCL deliver the sends of one (source, destination) pair in
order. So:

- the i-th collective of a group on each rank is one operation; the i-th send from rank a to rank b in a
  group and the i-th receive at b from a are one operation;
- its ``step`` is the largest step any of its ranks gave it (counters advance lazily, at the next step's
  first work, so a rank only ever lags the step its peers already started);
- its ``seq`` numbers the group's operations 0, 1, ... by the time the first of its ranks issued it.

A group whose ranks disagree on the kind of their i-th collective (a job that issued collectives in
different orders, or a lost shard) keeps its recorded labels, and the merge notes it.

**Policy versions.** A request generated after the engine received weight version v carries v; before any
sync, the initial weights (0). vLLM's own ``weight_versions`` or a recorded version wins where present.
"""

from __future__ import annotations

import polars as pl

P2P = ("send", "recv")


def align_collectives(coll: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """``coll`` with ``step`` and ``seq`` the same on every rank of each operation; notes on groups left as
    recorded. ``coll`` holds one world's rows (one row per rank per operation)."""
    if coll.height == 0:
        return coll, []
    p2p = pl.col("op").is_in(P2P)
    is_send = pl.col("op") == "send"
    # The channel of a point-to-point row: (source, destination) global ranks; a receive from any source
    # (peer unknown) cannot be paired and stays its own operation.
    src = pl.when(is_send).then(pl.col("rank")).otherwise(pl.col("peer"))
    dst = pl.when(is_send).then(pl.col("peer")).otherwise(pl.col("rank"))
    frame = coll.with_row_index("_row").sort("rank", "pg", "seq").with_columns(
        p2p.alias("_p2p"), src.alias("_src"), dst.alias("_dst"))
    frame = frame.with_columns(
        pl.when(pl.col("_p2p")).then(pl.int_range(pl.len()).over("pg", "rank", "op", "_src", "_dst"))
        .otherwise(pl.int_range(pl.len()).over("pg", "rank", "_p2p")).alias("_nth")
    )
    key = pl.when(pl.col("_p2p") & pl.col("_src").is_not_null()).then(
        pl.format("p:{}:{}:{}", "_src", "_dst", "_nth")
    ).when(pl.col("_p2p")).then(pl.format("r:{}:{}", "rank", "_nth")).otherwise(pl.format("c:{}", "_nth"))
    frame = frame.with_columns(key.alias("_op"))
    # a collective's ranks must agree on its kind; a group where they do not keeps its recorded labels
    kinds = frame.filter(~pl.col("_p2p")).group_by("pg", "_op").agg(pl.col("op").n_unique().alias("_kinds"))
    broken = sorted(kinds.filter(pl.col("_kinds") > 1)["pg"].unique().to_list())
    ops = frame.filter(~pl.col("pg").is_in(broken)).group_by("pg", "_op").agg(
        pl.col("step").max().alias("_step"), pl.col("start_ns").min().alias("_first"))
    ops = ops.sort("pg", "_first", "_op").with_columns(pl.int_range(pl.len()).over("pg").alias("_seq"))
    out = frame.join(ops, on=["pg", "_op"], how="left").with_columns(
        pl.coalesce("_step", "step").cast(coll.schema["step"]).alias("step"),
        pl.coalesce("_seq", "seq").cast(coll.schema["seq"]).alias("seq"),
    ).sort("_row").select(coll.columns)
    notes = [f"collectives of group {pg} keep each rank's own step and seq: its ranks disagree on the order "
             "of its collectives" for pg in broken]
    return out, notes


def fill_policy_versions(requests: pl.DataFrame, syncs: pl.DataFrame, engines_of: dict[str, list[str]]) -> pl.DataFrame:
    """Requests with a null ``policy_version`` get the newest weight version their engine had received when
    they were scheduled (0 before the first sync). ``engines_of`` maps a sync destination (an engine, or a
    process actor) to the engines it feeds. A job that syncs no weights keeps its nulls."""
    if syncs.height == 0 or requests.height == 0:
        return requests
    mapping = pl.DataFrame({"dst": list(engines_of), "engine": list(engines_of.values())},
                           schema={"dst": pl.String, "engine": pl.List(pl.String)}).explode("engine")
    received = syncs.select("dst", "version", "end_ns").join(mapping, on="dst", how="inner").sort("end_ns")
    received = received.with_columns(pl.col("version").cum_max().over("engine").alias("_version"))
    started = pl.coalesce("scheduled_ns", "arrival_ns").alias("_started")
    versioned = requests.with_row_index("_row").with_columns(started).sort("_started").join_asof(
        received.select("engine", "end_ns", "_version").sort("end_ns"),
        left_on="_started", right_on="end_ns", by="engine", strategy="backward",
        check_sortedness=False,  # both sides are sorted on their keys above; polars cannot check it per group
    )
    version = pl.coalesce("policy_version", "_version", pl.lit(0)).cast(requests.schema["policy_version"])
    return versioned.with_columns(version.alias("policy_version")).sort("_row").select(requests.columns)
