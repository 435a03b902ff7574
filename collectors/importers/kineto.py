"""PyTorch profiler (Kineto) traces, one file per rank (.json or .json.gz), streamed with ijson.

Read: NCCL kernels with their collective args (Collective name, In/Out msg nelems, dtype, Process Group
Name/Ranks; durations from the GPU kernel); for kernels without args, the CPU op with the same External id
(record_param_comms, c10d::*, nccl:*); Gloo collectives from gloo:* annotations (Input Dims, Input type);
ProfilerStep#N ranges as steps; every other kernel and CPU op summarised per step into compute /
communication / cpu spans. Events are read one at a time: memory holds the collectives, the step ranges and
three numbers per kernel or CPU op, never the JSON.
"""

from __future__ import annotations

import functools
import gzip
import math
import zlib
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import ijson
import numpy as np
import polars as pl
from rltrace.collectors.importers.base import Imported, ImportOptions, register
from rltrace.collectors.importers.comms import op_of, parse_ranks

from rltrace.errors import ConfigError
from rltrace.limits import check_input
from rltrace.manifest import Pool
from rltrace.units import dtype_bytes

COMPUTE, COMMUNICATION, CPU = 0, 1, 2
CATEGORY = {COMPUTE: "compute", COMMUNICATION: "communication", CPU: "cpu"}
COMM_CPU_PREFIXES = ("c10d::", "nccl:", "record_param_comms")
PROGRESS_EVERY = 50_000


def _open(path: Path) -> tuple[BinaryIO, BinaryIO]:
    """(stream to parse, raw file for progress); gzip by its magic bytes, not its name."""
    raw = path.open("rb")
    gz = raw.read(2) == b"\x1f\x8b"
    raw.seek(0)
    return (gzip.GzipFile(fileobj=raw) if gz else raw), raw  # type: ignore[return-value]  # both read bytes


def _fail(path: Path, e: BaseException) -> ConfigError:
    if isinstance(e, (EOFError, zlib.error, gzip.BadGzipFile)):
        return ConfigError(f"{path}: truncated or corrupt gzip ({e})")
    return ConfigError(f"{path}: not a Kineto trace (invalid JSON: {str(e).splitlines()[0][:120]})")


def _metadata(path: Path) -> tuple[dict[str, Any], int | None]:
    """distributedInfo (Kineto writes it before traceEvents) and baseTimeNanoseconds (usually after)."""
    info: dict[str, Any] = {}
    base = None
    stream, raw = _open(path)
    with raw:
        try:
            for prefix, event, value in ijson.parse(stream, use_float=True):
                if prefix == "traceEvents" and event == "start_array":
                    break
                if prefix == "baseTimeNanoseconds":
                    base = int(value)
        except (ijson.JSONError, EOFError, zlib.error, OSError) as e:
            raise _fail(path, e) from None
    stream, raw = _open(path)
    with raw:
        try:
            found: dict[str, Any] | None = next(ijson.items(stream, "distributedInfo", use_float=True), None)
            info = found or {}
        except (ijson.JSONError, EOFError, zlib.error, OSError) as e:
            raise _fail(path, e) from None
    if base is None:
        stream, raw = _open(path)
        with raw:
            try:
                found = next(ijson.items(stream, "baseTimeNanoseconds", use_float=True), None)
            except (ijson.JSONError, EOFError, zlib.error, OSError) as e:
                raise _fail(path, e) from None
            base = int(found) if found is not None else None
    return info, base


def _report(progress: Callable[[int, int], None] | None, before: int, total: int, read: int) -> None:
    """Bytes read of one file, as progress over all of them (``before``: the files read before it)."""
    if progress is not None:
        progress(before + read, total)


def _events(path: Path, progress: Callable[[int], None]) -> Iterator[dict[str, Any]]:
    stream, raw = _open(path)
    seen = False
    with raw:
        try:
            for i, event in enumerate(ijson.items(stream, "traceEvents.item", use_float=True)):
                seen = True
                if i % PROGRESS_EVERY == 0:
                    progress(raw.tell())
                yield event
        except (ijson.JSONError, EOFError, zlib.error, OSError) as e:
            raise _fail(path, e) from None
    if not seen:
        raise ConfigError(f"{path}: not a Kineto trace (no traceEvents)")


class _Rank:
    """What one file contributes, accumulated event by event."""

    def __init__(self) -> None:
        self.collectives: list[dict[str, Any]] = []
        self.cpu_comm: dict[int, dict[str, Any]] = {}  # External id -> args of a communication CPU op
        self.comm_ops: list[tuple[int, float, float, dict[str, Any]]] = []  # (tid, ts, dur, args) of those ops
        self.launch_corr, self.launch_tid, self.launch_ts = array("q"), array("q"), array("d")
        self.steps: list[tuple[int, float, float]] = []  # (step, ts_us, dur_us)
        self.ts, self.dur, self.cat = array("d"), array("d"), array("b")

    def add(self, e: dict[str, Any], skipped: dict[str, int]) -> None:
        if e.get("ph") != "X":
            return
        name, cat = str(e.get("name", "")), e.get("cat")
        ts, dur = e.get("ts"), e.get("dur")
        if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or dur < 0:
            skipped["complete event without a valid ts or dur"] += 1
            return
        args = e.get("args") or {}
        if cat == "kernel":
            op = op_of(name) if name.startswith("nccl") else None
            if op is None and name.startswith("nccl"):
                skipped[f"unknown NCCL kernel {name.split('(')[0]!r}"] += 1
            if op is not None:
                self.collectives.append({"source": "kernel", "op": op, "ts": ts, "dur": dur, "args": args})
            self._span(ts, dur, COMMUNICATION if op else COMPUTE)
        elif cat == "user_annotation" and name.startswith("ProfilerStep#"):
            try:
                self.steps.append((int(name.split("#", 1)[1]), ts, dur))
            except ValueError:
                skipped["ProfilerStep without a step number"] += 1
        elif cat == "user_annotation" and name.startswith("gloo:"):
            op = op_of(name)
            if op is None:
                skipped[f"unknown collective {name!r}"] += 1
            else:
                self.collectives.append({"source": "gloo", "op": op, "ts": ts, "dur": dur, "args": args})
        elif cat == "cpu_op":
            if name.startswith(COMM_CPU_PREFIXES):
                if "External id" in args:
                    self.cpu_comm.setdefault(int(args["External id"]), {"name": name, **args})
                self.comm_ops.append((int(e.get("tid", 0)), ts, dur, args))
            self._span(ts, dur, CPU)
        elif cat == "cuda_runtime" and "correlation" in args and "Launch" in name:
            # Where each kernel was launched from: a kernel without collective args inherits the sizes of
            # the communication CPU op around its launch.
            self.launch_corr.append(int(args["correlation"]))
            self.launch_tid.append(int(e.get("tid", 0)))
            self.launch_ts.append(ts)

    def _span(self, ts: float, dur: float, category: int) -> None:
        self.ts.append(ts)
        self.dur.append(dur)
        self.cat.append(category)


def _launcher(r: _Rank, correlation: int) -> dict[str, Any]:
    """Args of the innermost communication CPU op with sizes around the launch of kernel ``correlation``."""
    corr = np.frombuffer(r.launch_corr, dtype=np.int64)
    hit = np.flatnonzero(corr == correlation)
    if not len(hit):
        return {}
    tid, t = r.launch_tid[hit[0]], r.launch_ts[hit[0]]
    around = [(dur, args) for op_tid, ts, dur, args in r.comm_ops
              if op_tid == tid and ts <= t <= ts + dur and _has_dims(args)]
    return min(around, key=lambda x: x[0])[1] if around else {}


def _has_dims(args: dict[str, Any]) -> bool:
    dims = args.get("Input Dims")
    return "In msg nelems" in args or (isinstance(dims, list) and bool(dims) and isinstance(dims[0], list)
                                       and bool(dims[0]) and all(isinstance(d, int) for d in dims[0]))


def _size(c: dict[str, Any], r: _Rank) -> tuple[str, int, int, int, dict[str, Any]]:
    """(dtype, count, bytes_in, bytes_out, args used) of a collective; zeros when no source says."""
    args = c["args"]
    if "In msg nelems" not in args and c["source"] == "kernel":
        args = {**r.cpu_comm.get(int(args.get("External id", -1)), {}), **args}
        if not _has_dims(args) and "correlation" in args:
            args = {**_launcher(r, int(args["correlation"])), **args}
    if "In msg nelems" in args:
        dtype = str(args.get("dtype", "unknown"))
        width = dtype_bytes(dtype) or 0
        n_in, n_out = int(args["In msg nelems"]), int(args.get("Out msg nelems", args["In msg nelems"]))
        return dtype, n_in, n_in * width, n_out * width, args
    dims, types = args.get("Input Dims"), args.get("Input type")
    if isinstance(dims, list) and dims and isinstance(dims[0], list) and all(isinstance(d, int) for d in dims[0]):
        count = int(np.prod(dims[0])) if dims[0] else 0
        dtype = str(types[0]) if isinstance(types, list) and types else "unknown"
        width = dtype_bytes(dtype.removeprefix("Tensor(").rstrip(")")) or 0
        return dtype, count, count * width, count * width, args
    return "unknown", 0, 0, 0, args


def _step_of(starts: np.ndarray, steps: list[tuple[int, float, float]]) -> np.ndarray:
    """The ProfilerStep each start falls in (the last one started before it; the first before any)."""
    if not steps:
        return np.zeros(len(starts), dtype=np.int32)
    order = sorted(steps, key=lambda s: s[1])
    begins = np.array([s[1] for s in order])
    ids = np.array([s[0] for s in order], dtype=np.int32)
    return ids[np.clip(np.searchsorted(begins, starts, side="right") - 1, 0, len(ids) - 1)]


@register("kineto")
def kineto(files: list[Path], options: ImportOptions, progress: Callable[[int, int], None] | None = None) -> Imported:
    """One Kineto trace per rank."""
    total = sum(f.stat().st_size for f in files if f.is_file())
    done = 0
    collectives: list[dict[str, Any]] = []
    spans: list[dict[str, Any]] = []
    notes: list[str] = []
    imported = Imported({}, notes)
    ranks_seen: list[int] = []
    for index, path in enumerate(files):
        check_input(path)
        info, base = _metadata(path)
        rank = int(info["rank"]) if "rank" in info else index
        if "rank" not in info:
            notes.append(f"{path.name}: no distributedInfo.rank; rank {index} taken from the file's position")
        world = int(info.get("world_size", len(files)))
        pg_ranks = {str(pg.get("pg_name")): [int(r) for r in pg.get("ranks", [])] for pg in info.get("pg_config", [])}
        r = _Rank()
        for event in _events(path, functools.partial(_report, progress, done, total)):
            r.add(event, imported.skipped)
        done += path.stat().st_size
        offset = base or 0  # Kineto's ts are microseconds from baseTimeNanoseconds
        if base is None:
            notes.append(f"{path.name}: no baseTimeNanoseconds; times are the trace's own microseconds")
        ranks_seen.append(rank)
        starts = np.array([c["ts"] for c in r.collectives])
        step_ids = _step_of(starts, r.steps)
        for c, step in zip(r.collectives, step_ids.tolist()):
            dtype, count, b_in, b_out, args = _size(c, r)
            if c["source"] == "kernel" and "In msg nelems" not in args and count == 0:
                imported.skipped["collective without a message size (kept, 0 bytes)"] += 1
            pg = str(args.get("Process Group Name", "0"))
            members = parse_ranks(args.get("Process Group Ranks")) or pg_ranks.get(pg) or list(range(world))
            if rank not in members:
                members = sorted({*members, rank})
            start = offset + round(c["ts"] * 1e3)
            collectives.append({"step": step, "rank": rank, "pg": pg, "pg_ranks": members, "op": c["op"],
                                "dtype": dtype, "count": count, "bytes_in": b_in, "bytes_out": b_out, "peer": None,
                                "start_ns": start, "end_ns": start + round(c["dur"] * 1e3), "async_op": False})
        actor = f"trainer/rank{rank}"
        for step, ts, dur in r.steps:
            spans.append({"step": step, "actor": actor, "phase": "train", "name": f"ProfilerStep#{step}",
                          "start_ns": offset + round(ts * 1e3), "end_ns": offset + round((ts + dur) * 1e3)})
        spans += _summaries(r, actor, offset)
    if not collectives and not spans:
        raise ConfigError(f"{files[0]}: not a Kineto trace (no complete events, collectives or ProfilerStep ranges)")
    frame = pl.DataFrame(collectives, schema_overrides={"peer": pl.Int32, "pg_ranks": pl.List(pl.Int32)},
                         infer_schema_length=None) if collectives else pl.DataFrame()
    if frame.height:
        frame = frame.sort("rank", "pg", "start_ns").with_columns(
            pl.int_range(pl.len()).over("rank", "pg").cast(pl.Int64).alias("seq"))
    imported.tables = {"collectives": frame, "spans": pl.DataFrame(spans) if spans else pl.DataFrame()}
    imported.pools = {"trainer": Pool(device=options.gpu or "unknown", count=len(set(ranks_seen)))}
    notes.append("steps are ProfilerStep#N ranges (a kernel belongs to the last step that started before it); "
                 "async_op is not in the trace (false)")
    notes.append("kernels and CPU ops are summarised per step and rank: one span per kind (compute, communication, "
                 "cpu) from its first start to its last end, named with its count and busy time")
    return imported


def _summaries(r: _Rank, actor: str, offset: int) -> list[dict[str, Any]]:
    """One span per (step, category): first start to last end; the name says how many and how busy."""
    if not len(r.ts):
        return []
    ts, dur, cat = np.frombuffer(r.ts), np.frombuffer(r.dur), np.frombuffer(r.cat, dtype=np.int8)
    frame = pl.DataFrame({"step": _step_of(ts, r.steps), "cat": cat, "ts": ts, "end": ts + dur, "dur": dur})
    agg = frame.group_by("step", "cat").agg(pl.col("ts").min(), pl.col("end").max(), pl.col("dur").sum(), pl.len())
    return [{"step": s, "actor": actor, "phase": CATEGORY[c],
             "name": f"{n} {CATEGORY[c]} events, busy {d / 1e3:.3f} ms",
             "start_ns": offset + round(a * 1e3), "end_ns": offset + math.ceil(b * 1e3)}
            for s, c, a, b, d, n in agg.sort("step", "cat").iter_rows()]
