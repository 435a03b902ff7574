"""Merge the per-process shards of a recording into one trace bundle.

Shards hold process-local names; the merge turns them into the bundle's actors (``trainer/rank<r>``,
``rollout/engine<i>``), makes request ids unique, derives weight-sync flows from broadcasts and sends that
cross from trainer ranks to generator processes, adds ``weight_sync`` spans for every flow, and writes the
bundle through the validating writer. Shards of a killed process merge like any other: each flush is a
complete Parquet file, and half-written ones are hidden temporaries the merge never reads.

The collectives, the table that grows with a job's length, are streamed (:mod:`rltrace.collectors.stream_merge`):
peak memory does not grow with their number. What could not be kept is counted in the manifest's ``extra``:
``lost`` (rows dropped by a full buffer, rows a failed flush could not write, shard files that cannot be
read) and ``left_out`` (collectives of one-rank groups and of other process-group worlds, by design);
``dropped_events`` is the number of events known lost.
"""

from __future__ import annotations

import json
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from rltrace.collectors import SHARDS, stream_merge
from rltrace.collectors.recorder import COUNTS_FILE, REQUEST_GROUP
from rltrace.collectors.weight_files import READS, WRITES, writer_of

from rltrace.bundle import TableWriter, check_target, polars_schema, to_arrow, write_atomically
from rltrace.errors import BundleError
from rltrace.labels import fill_policy_versions
from rltrace.manifest import Manifest, ModelInfo, Pool
from rltrace.schema import TABLES
from rltrace.table_names import SYNC_METHODS
from rltrace.validate import check_frame


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
    shards: list[Shard] = []
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
    """Bundle actors: a trainer is ``trainer/rank<r>`` (its torch.distributed rank; a trainer without one, a
    single-process job, takes the next free rank), a process that only generates is its engine."""
    engine = 0
    for s in shards:
        for key in sorted(s.meta.get("engines", {}), key=lambda k: int(k.split(":")[1])):
            s.names[key] = f"rollout/engine{engine}"
            engine += 1
    ranked = {s.meta["rank"] for s in shards if s.meta.get("rank") is not None}
    free = (r for r in range(len(shards) + len(ranked)) if r not in ranked)
    for s in shards:
        roles, rank = s.meta.get("roles", []), s.meta.get("rank")
        engines = [v for k, v in s.names.items() if k.startswith("engine:")]
        if "trainer" in roles and rank is not None:
            s.actor = f"trainer/rank{rank}"
        elif "trainer" in roles:
            s.actor = f"trainer/rank{next(free)}"
        elif "rollout" in roles and len(engines) == 1:
            s.actor = engines[0]
        elif rank is not None:
            s.actor = f"rank{rank}"
        else:
            s.actor = f"proc/{s.meta.get('host', 'host')}-{s.meta.get('pid', s.index)}"
        s.names["self"] = s.actor


def _files(shards: list[Shard], table: str) -> list[tuple[Path, int]]:
    return [(f, s.index) for s in shards for f in sorted(s.path.glob(f"{table}-*.parquet"))]


def _read(shards: list[Shard], table: str, unreadable: list[Path]) -> pl.DataFrame:
    """A small table, whole, with each row's ``_shard``; files that cannot be read are listed, not fatal."""
    schema = polars_schema(TABLES[table])
    frames = []
    for path, index in _files(shards, table):
        try:
            frame = pl.from_arrow(pq.read_table(path))  # a path, never a pattern: 'r[1]' is a folder name
        except (pa.ArrowException, OSError):
            unreadable.append(path)
            continue
        assert isinstance(frame, pl.DataFrame)
        frames.append(frame.with_columns(pl.lit(index, dtype=pl.Int64).alias("_shard")))
    if not frames:
        return pl.DataFrame(schema=schema).with_columns(pl.lit(0, dtype=pl.Int64).alias("_shard"))
    return pl.concat(frames, how="vertical_relaxed")


def _counts(s: Shard) -> dict[str, Any]:
    """A shard's loss counts: counts.json (kept current on a full disk) or meta.json, whichever is larger."""
    counts: dict[str, Any] = {}
    try:
        counts = json.loads((s.path / COUNTS_FILE).read_bytes().decode().strip() or "{}")
    except (OSError, ValueError):
        pass
    out: dict[str, Any] = {"dropped": max(int(counts.get("dropped") or 0), int(s.meta.get("dropped") or 0))}
    for key in ("lost", "skipped", "errors"):
        merged: dict[str, int] = {}
        for source in (counts.get(key) or {}, s.meta.get(key) or {}):
            for k, n in source.items():
                merged[k] = max(merged.get(k, 0), int(n))
        out[key] = merged
    out["not_recorded"] = {**(s.meta.get("not_recorded") or {}), **(counts.get("not_recorded") or {})}
    return out


def _rows_in(paths: list[Path]) -> int | None:
    """Rows the footers of ``paths`` declare (None when a footer cannot be read either)."""
    total = 0
    for p in paths:
        try:
            total += pq.ParquetFile(p).metadata.num_rows
        except (pa.ArrowException, OSError):
            return None
    return total


def _rename(frame: pl.DataFrame, column: str, shards: list[Shard]) -> pl.DataFrame:
    """Replace process-local keys in ``column`` by bundle actors (other values are kept as written)."""
    mapping = {f"{s.index}|{k}": v for s in shards for k, v in s.names.items()}
    key = pl.format("{}|{}", "_shard", column)
    return frame.with_columns(key.replace_strict(mapping, default=pl.col(column)).alias(column))


def _main_world(shards: list[Shard]) -> str | None:
    worlds: list[str] = [s.meta["world"] for s in shards if s.meta.get("world")]
    if not worlds:
        return None
    return max(set(worlds), key=lambda w: (int(w.rsplit("/", 1)[1]), worlds.count(w)))


def _sync_rows(shards: list[Shard], sync_groups: set[str]) -> pl.Expr:
    """The collective rows that may be weight syncs (see :func:`_flows_from_collectives`): on a declared group,
    or from a trainer rank on a group with a generator rank. Only these are held in memory by the merge."""
    trainer = [s.meta["rank"] for s in shards if s.meta.get("rank") is not None and s.actor.startswith("trainer/")]
    rollout = [s.meta["rank"] for s in shards if s.meta.get("rank") is not None and s.actor.startswith("rollout/")]
    to_rollout = pl.col("pg_ranks").list.eval(pl.element().is_in(rollout)).list.any()
    return pl.col("pg").is_in(list(sync_groups)) | (pl.col("rank").is_in(trainer) & to_rollout)


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


def _file_writers(syncs: pl.DataFrame, shards: list[Shard]) -> pl.DataFrame:
    """A reload from files a trainer process wrote (recorded in another process) is that trainer's sync."""
    writes = {s.actor: s.meta[WRITES] for s in shards if s.actor.startswith("trainer/") and s.meta.get(WRITES)}
    if not writes or syncs.height == 0:
        return syncs
    reads = {s.index: s.meta.get(READS) or {} for s in shards}
    disk = syncs.with_row_index("_i").filter(pl.col("src").str.starts_with("disk:"))
    fixed = {}
    for i, shard, version, start in disk.select("_i", "_shard", "version", "start_ns").iter_rows():  # one per sync
        writer = writer_of(reads.get(shard, {}).get(str(version), []), start, writes)
        if writer is not None:
            fixed[i] = writer
    if not fixed:
        return syncs
    src = pl.int_range(pl.len()).replace_strict(fixed, default=None, return_dtype=pl.String)
    return syncs.with_columns(pl.coalesce(src, pl.col("src")).alias("src"))


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
    check_target(out, overwrite)
    shards = load_shards(record_dir)
    _name_actors(shards)
    unreadable: list[Path] = []
    tables = {name: _read(shards, name, unreadable) for name in TABLES if name != "collectives"}

    req = engine_scoped_ids(_rename(tables["requests"], "engine", shards)).sort("arrival_ns", "request_id")
    spans = _rename(tables["spans"], "actor", shards)
    iterations = _rename(tables["iterations"], "engine", shards).drop("_shard").sort("start_ns", "engine")
    syncs = _rename(_rename(tables["weight_syncs"], "src", shards), "dst", shards)
    # a reload a trainer process made itself (its own engine, from its own file or tensors) is that trainer's
    # sync; a generator reloading a file it wrote from weights it received keeps its transport as source
    trainer_shards = [s.index for s in shards if s.actor.startswith("trainer/")]
    local = pl.col("src").str.contains(r"^(disk|rpc):") & pl.col("_shard").is_in(trainer_shards)
    syncs = syncs.with_columns(pl.when(local).then(
        pl.col("_shard").replace_strict({s.index: s.actor for s in shards}, default=pl.col("src"))
    ).otherwise(pl.col("src")).alias("src"))
    syncs = _file_writers(syncs, shards)

    world = _main_world(shards)
    in_world = {s.index for s in shards if s.meta.get("world") == world}
    coll_files = _files(shards, "collectives")
    other = _rows_in([f for f, i in coll_files if i not in in_world]) or 0
    coll_files = [(f, i) for f, i in coll_files if i in in_world]
    index, candidates, bad = stream_merge.build_index(coll_files, _sync_rows(shards, sync_groups or set()))
    unreadable += bad
    coll_files = [(f, i) for f, i in coll_files if f not in set(bad)]
    flows = _flows_from_collectives(candidates, spans, shards, sync_groups or set())
    syncs = pl.concat([syncs.drop("_shard"), flows], how="vertical_relaxed").sort("start_ns")
    # after the flows, which version a sync by its sender's own step; then one step and seq per operation
    stream_merge.gather_operations(index, coll_files)
    stream_merge.number_operations(index)
    label_notes = stream_merge.broken_notes(index)
    engines_of = {s.actor: [v for k, v in s.names.items() if k.startswith("engine:")] for s in shards}
    engines_of.update({e: [e] for names in engines_of.values() for e in names})
    req = fill_policy_versions(req, syncs, engines_of)
    step = pl.coalesce("step", "version").cast(pl.Int32).alias("step")
    # one span per sync and endpoint: a step with two syncs (a colocated job's initial load, then the update)
    # has two spans, not one around everything between them
    sync_spans = pl.concat(
        [syncs.select(step, "version", pl.col(end).alias("actor"), "start_ns", "end_ns") for end in ("src", "dst")]
    ).group_by("step", "version", "actor").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
    sync_spans = sync_spans.with_columns(pl.lit("weight_sync").alias("phase"), pl.lit("weight sync").alias("name"))
    spans = pl.concat([spans.drop("_shard"), sync_spans.select(TABLES["spans"].names)], how="vertical_relaxed")

    errors: dict[str, int] = {}
    lost: dict[str, int] = {}
    left_out: dict[str, int] = {}
    not_recorded: dict[str, str] = {}
    for s in shards:
        c = _counts(s)
        not_recorded.update(c["not_recorded"])
        for where, n in c["errors"].items():
            errors[where] = errors.get(where, 0) + n
        if c["dropped"]:
            lost["dropped: buffer full"] = lost.get("dropped: buffer full", 0) + c["dropped"]
        for table, n in c["lost"].items():
            lost[f"flush failed: {table}"] = lost.get(f"flush failed: {table}", 0) + n
        for why, n in c["skipped"].items():
            left_out[why] = left_out.get(why, 0) + n
    if unreadable:
        lost["unreadable shard files"] = len(unreadable)
        rows = _rows_in(unreadable)
        if rows:
            lost["rows in unreadable shard files"] = rows
    if other:
        left_out["collectives of other process-group worlds"] = other
    dropped = sum(n for k, n in lost.items() if k != "unreadable shard files")
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
        others = ", ".join(sorted(str(w) for w in other_worlds))
        notes.append(f"collectives of other process-group worlds left out: {others}")
    if lost:
        notes.append("the recording lost events: " + ", ".join(f"{k} {n:,}" for k, n in lost.items()))
    notes += [f"not recorded: {what} ({why})" for what, why in sorted(not_recorded.items())]
    manifest = Manifest(
        run_id=run_id or f"record-{uuid.uuid4().hex[:10]}",
        source="record",
        command=command or [],
        hosts=sorted({s.meta.get("host", socket.gethostname()) for s in shards}),
        cluster=cluster,
        model=model,
        notes=notes,
        extra={"collector_errors": errors, "dropped_events": dropped, "shards": len(shards), "lost": lost,
               "left_out": left_out, "not_recorded": not_recorded},
    )
    small = {"requests": req.drop("_shard"), "weight_syncs": syncs, "spans": spans.sort("start_ns"),
             "iterations": iterations}
    return _write(out, manifest, small, index, coll_files, overwrite)


def _write(final: Path, manifest: Manifest, small: dict[str, pl.DataFrame], index: stream_merge.Index,
           coll_files: list[tuple[Path, int]], overwrite: bool) -> Manifest:
    """Write the bundle as write_bundle does (validated, atomic rename into place), the collectives streamed;
    returns the manifest written."""
    check_target(final, overwrite)
    arrow = {name: to_arrow(TABLES[name], frame) for name, frame in small.items()}
    for name, data in arrow.items():
        check_frame(pl.from_arrow(data).lazy(), TABLES[name], TABLES[name].file)  # type: ignore[union-attr]  # of a Table: a DataFrame

    def fill(name: str, w: TableWriter) -> None:
        if name == "collectives":
            stream_merge.write_aligned(index, coll_files, w, TABLES[name].file)
        else:
            w.write(arrow[name])

    return write_atomically(final, manifest, fill)
