"""Merge the per-process shards of a recording into one trace bundle.

Shards hold process-local names; the merge turns them into the bundle's actors (``trainer/rank<r>``,
``rollout/engine<i>``), makes request ids unique, derives weight-sync flows from broadcasts and sends that
cross from trainer ranks to generator processes, adds ``weight_sync`` spans for every flow, and writes the
bundle through the validating writer. Shards of a killed process merge like any other: each flush is a
complete Parquet file, and half-written ones are hidden temporaries the merge never reads.
"""

from __future__ import annotations

import json
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from rltrace.bundle import polars_schema, write_bundle
from rltrace.collectors import SHARDS
from rltrace.collectors.labels import align_collectives, fill_policy_versions
from rltrace.collectors.recorder import REQUEST_GROUP
from rltrace.errors import BundleError
from rltrace.manifest import Manifest, ModelInfo, Pool
from rltrace.schema import SYNC_METHODS, TABLES


@dataclass(slots=True)
class Shard:
    """One process's shard: its directory and meta.json."""

    index: int
    path: Path
    meta: dict[str, Any]
    actor: str = ""
    names: dict[str, str] = field(default_factory=dict)  # process-local key -> bundle actor


def load_shards(record_dir: Path) -> list[Shard]:
    root = record_dir / SHARDS
    if not root.is_dir():
        raise BundleError(f"{record_dir}: no recording here (expected {SHARDS}/ written by `rltrace record`)")
    shards = []
    for path in sorted(p for p in root.iterdir() if p.is_dir()):
        meta_file = path / "meta.json"
        try:
            meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
        except json.JSONDecodeError:
            meta = {}  # torn by a kill mid-write: the tables still merge
        shards.append(Shard(len(shards), path, meta))
    shards.sort(key=lambda s: (s.meta.get("started_ns", 0), s.path.name))
    for i, s in enumerate(shards):
        s.index = i
    return shards


def _name_actors(shards: list[Shard]) -> None:
    engine = 0
    for s in shards:
        for key in sorted(s.meta.get("engines", {}), key=lambda k: int(k.split(":")[1])):
            s.names[key] = f"rollout/engine{engine}"
            engine += 1
    for s in shards:
        roles, rank = s.meta.get("roles", []), s.meta.get("rank")
        engines = [v for k, v in s.names.items() if k.startswith("engine:")]
        if "trainer" in roles and rank is not None:
            s.actor = f"trainer/rank{rank}"
        elif "rollout" in roles and len(engines) == 1:
            s.actor = engines[0]
        elif rank is not None:
            s.actor = f"rank{rank}"
        else:
            s.actor = f"proc/{s.meta.get('host', 'host')}-{s.meta.get('pid', s.index)}"
        s.names["self"] = s.actor


def _read(shards: list[Shard], table: str) -> pl.DataFrame:
    files = [f for s in shards for f in sorted(s.path.glob(f"{table}-*.parquet"))]
    schema = polars_schema(TABLES[table])
    if not files:
        return pl.DataFrame(schema=schema).with_columns(pl.lit(0, dtype=pl.Int64).alias("_shard"))
    index = {str(s.path): s.index for s in shards}
    frame = pl.scan_parquet(files, include_file_paths="_file").collect()
    shard_of = pl.col("_file").str.replace(r"/[^/]+$", "").replace_strict(index, return_dtype=pl.Int64)
    return frame.with_columns(shard_of.alias("_shard")).drop("_file")


def _rename(frame: pl.DataFrame, column: str, shards: list[Shard]) -> pl.DataFrame:
    """Replace process-local keys in ``column`` by bundle actors (other values are kept as written)."""
    mapping = {f"{s.index}|{k}": v for s in shards for k, v in s.names.items()}
    key = pl.format("{}|{}", "_shard", column)
    return frame.with_columns(key.replace_strict(mapping, default=pl.col(column)).alias(column))


def _main_world(shards: list[Shard]) -> str | None:
    worlds = [s.meta.get("world") for s in shards if s.meta.get("world")]
    if not worlds:
        return None
    return max(set(worlds), key=lambda w: (int(w.rsplit("/", 1)[1]), worlds.count(w)))


def _flows_from_collectives(
    coll: pl.DataFrame, spans: pl.DataFrame, shards: list[Shard], sync_groups: set[str]
) -> pl.DataFrame:
    """Broadcasts, scatters and sends from trainer ranks to generator processes (or on a declared group), as
    one flow per step and (src, dst). The version delivered counts the optimizer steps the source rank had
    finished when the transfer began."""
    rank_actor = {s.meta["rank"]: s.actor for s in shards if s.meta.get("rank") is not None}
    trainer = {r for r, a in rank_actor.items() if a.startswith("trainer/")}
    rollout = {r for r, a in rank_actor.items() if a.startswith("rollout/")}
    backends = {k: v for s in shards for k, v in s.meta.get("backends", {}).items()}
    sends = coll.filter(
        pl.col("op").is_in(["broadcast", "send", "scatter"]) & pl.col("peer").is_not_null()
        & ((pl.col("op") == "send") | (pl.col("rank") == pl.col("peer")))
    )
    rows = []
    for r in sends.iter_rows(named=True):  # only the few sending-side rows of sync candidates
        members = set(r["pg_ranks"])
        declared = r["pg"] in sync_groups
        if not (declared or (r["rank"] in trainer and members & rollout)):
            continue
        dsts = [r["peer"]] if r["op"] == "send" else sorted(members - {r["rank"]})
        dsts = [d for d in dsts if declared or d in rollout]
        method = backends.get(r["pg"], "other")
        for d in dsts:
            share = r["bytes_in"] // len(dsts) if r["op"] == "scatter" else r["bytes_in"]
            rows.append((r["step"], rank_actor.get(r["rank"], f"rank{r['rank']}"), rank_actor.get(d, f"rank{d}"),
                         share, method if method in SYNC_METHODS else "other", r["start_ns"], r["end_ns"]))
    if not rows:
        return pl.DataFrame(schema=polars_schema(TABLES["weight_syncs"]))
    flows = pl.DataFrame(
        rows, schema=["step", "src", "dst", "bytes", "method", "start_ns", "end_ns"], orient="row"
    ).group_by("step", "src", "dst", "method", maintain_order=True).agg(
        pl.col("bytes").sum(), pl.len().alias("tensors"), pl.col("start_ns").min(), pl.col("end_ns").max()
    )
    updated = spans.filter(pl.col("phase") == "optimizer").group_by("actor", "step").agg(
        pl.col("end_ns").max().alias("_opt_end")
    )
    flows = flows.join(updated, left_on=["src", "step"], right_on=["actor", "step"], how="left")
    version = pl.col("step") + (pl.col("_opt_end") <= pl.col("start_ns")).fill_null(False).cast(pl.Int64)
    return flows.with_columns(version.alias("version")).select(TABLES["weight_syncs"].names)


def engine_scoped_ids(requests: pl.DataFrame) -> pl.DataFrame:
    """Request ids made unique across engines (each engine numbers its own), and so are the groups that name
    their own request; a group named by its prompt (a digest, the same on every engine) spans engines, as a
    prompt's samples do when a framework spreads them over several."""
    own = pl.col("group_id").str.starts_with(REQUEST_GROUP)
    return requests.with_columns(
        pl.format("{}:{}", "engine", "request_id").alias("request_id"),
        pl.when(own).then(pl.format("{}:{}", "engine", pl.col("group_id").str.strip_prefix(REQUEST_GROUP)))
        .otherwise("group_id").alias("group_id"),
    )


def merge(
    record_dir: str | Path,
    out: str | Path,
    *,
    command: list[str] | None = None,
    model: ModelInfo | None = None,
    sync_groups: set[str] | None = None,
    run_id: str | None = None,
    overwrite: bool = False,
) -> Manifest:
    """Merge ``record_dir``'s shards into the bundle ``out``; returns the manifest written."""
    record_dir, out = Path(record_dir), Path(out)
    shards = load_shards(record_dir)
    _name_actors(shards)
    tables = {name: _read(shards, name) for name in TABLES}

    req = engine_scoped_ids(_rename(tables["requests"], "engine", shards)).sort("arrival_ns", "request_id")
    spans = _rename(tables["spans"], "actor", shards)
    iterations = _rename(tables["iterations"], "engine", shards).drop("_shard").sort("start_ns", "engine")
    syncs = _rename(_rename(tables["weight_syncs"], "src", shards), "dst", shards)

    world = _main_world(shards)
    in_world = {s.index for s in shards if s.meta.get("world") == world}
    coll = tables["collectives"].filter(pl.col("_shard").is_in(list(in_world))).sort("start_ns", "rank")
    flows = _flows_from_collectives(coll, spans, shards, sync_groups or set())
    syncs = pl.concat([syncs.drop("_shard"), flows], how="vertical_relaxed").sort("start_ns")
    # after the flows, which version a sync by its sender's own step; then one step and seq per operation
    coll, label_notes = align_collectives(coll)
    engines_of = {s.actor: [v for k, v in s.names.items() if k.startswith("engine:")] for s in shards}
    engines_of.update({e: [e] for names in engines_of.values() for e in names})
    req = fill_policy_versions(req, syncs, engines_of)
    step = pl.coalesce("step", "version").cast(pl.Int32).alias("step")
    sync_spans = pl.concat(
        [syncs.select(step, pl.col(end).alias("actor"), "start_ns", "end_ns") for end in ("src", "dst")]
    ).group_by("step", "actor").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
    sync_spans = sync_spans.with_columns(pl.lit("weight_sync").alias("phase"), pl.lit("weight sync").alias("name"))
    spans = pl.concat([spans.drop("_shard"), sync_spans.select(TABLES["spans"].names)], how="vertical_relaxed")

    errors: dict[str, int] = {}
    for s in shards:
        for where, n in s.meta.get("errors", {}).items():
            errors[where] = errors.get(where, 0) + n
    dropped = sum(s.meta.get("dropped", 0) for s in shards)
    trainers = sorted({s.actor for s in shards if s.actor.startswith("trainer/")})
    engines = sorted({v for s in shards for k, v in s.names.items() if k.startswith("engine:")})
    cluster = {}
    if trainers:
        cluster["trainer"] = Pool(device="cpu", count=len(trainers))
    if engines:
        cluster["rollout"] = Pool(device="cpu", count=len(engines))
    notes = [f"recorded by `rltrace record`: {len(shards)} process shards"]
    other_worlds = {s.meta.get("world") for s in shards} - {world, None}
    notes += label_notes
    if other_worlds:
        notes.append(f"collectives of other process-group worlds left out: {', '.join(sorted(other_worlds))}")
    manifest = Manifest(
        run_id=run_id or f"record-{uuid.uuid4().hex[:10]}",
        source="record",
        command=command or [],
        hosts=sorted({s.meta.get("host", socket.gethostname()) for s in shards}),
        cluster=cluster,
        model=model,
        notes=notes,
        extra={"collector_errors": errors, "dropped_events": dropped, "shards": len(shards)},
    )
    write_bundle(
        out,
        manifest,
        {"requests": req.drop("_shard"), "collectives": coll.drop("_shard"), "weight_syncs": syncs,
         "spans": spans.sort("start_ns"), "iterations": iterations},
        overwrite=overwrite,
    )
    return manifest
