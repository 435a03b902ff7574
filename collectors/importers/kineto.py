"""PyTorch profiler (Kineto) traces, one file per rank (.json or .json.gz), streamed with ijson.

Read: NCCL kernels with their collective args (Collective name, In/Out msg nelems, dtype, Process Group
Name/Ranks; durations from the GPU kernel); for kernels without args, the communication ops around their launch
or with their External id (c10d::* and record_param_comms CPU ops, nccl:* annotations) name the collective and
give its sizes; Gloo collectives from gloo:* annotations (Input Dims, Input type); ProfilerStep#N ranges as steps;
every other kernel and CPU op summarised per step into compute / communication / cpu spans. Events are read one
at a time: memory holds the collectives, the step ranges, the communication ops and three numbers per kernel or
CPU op, never the JSON. Times are integer nanoseconds (exact for Kineto's integer microseconds).
"""

from __future__ import annotations

import bisect
import functools
import gzip
import math
import zlib
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import ijson
import numpy as np
import polars as pl
from rltrace.collectors.importers.base import Imported, ImportOptions, register
from rltrace.collectors.importers.comms import io_positions, op_of, parse_ranks

from rltrace.errors import ConfigError
from rltrace.limits import check_input
from rltrace.manifest import Pool
from rltrace.units import dtype_bytes

COMPUTE, COMMUNICATION, CPU = 0, 1, 2
CATEGORY = {COMPUTE: "compute", COMMUNICATION: "communication", CPU: "cpu"}
COMM_OP_PREFIXES = ("c10d::", "nccl:", "record_param_comms")
"""CPU ops (c10d::*, record_param_comms) and annotations (nccl:*, cat user_annotation) that describe a collective"""
PROGRESS_EVERY = 50_000
MAX_US = 2**52
"""a ts or dur beyond this many microseconds (143 years) is not a time: the event is skipped"""

Described = list[tuple[str, dict[str, Any]]]
"""communication ops describing one collective, innermost first: (name, args)"""


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


def _ns(us: Any) -> int | None:
    """Kineto microseconds as integer nanoseconds (exact for an integer, rounded for a fraction); None when not a
    finite number of plausible size."""
    kind = type(us)  # not isinstance: a bool is no time
    if kind is int:
        return us * 1000 if -MAX_US < us < MAX_US else None
    if kind is float:
        return round(us * 1e3) if -MAX_US < us < MAX_US else None  # NaN fails the comparison
    return None


def _int(value: Any) -> int | None:
    """An id (External id, correlation) as an int, None when it is not one."""
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if -(2**63) <= number < 2**63 else None


def _tid(e: dict[str, Any]) -> int:
    """The event's thread as a number to match on (some traces name threads with strings)."""
    tid = e.get("tid", 0)
    return tid if isinstance(tid, int) and -(2**63) <= tid < 2**63 else hash(str(tid))


class _Rank:
    """What one file contributes, accumulated event by event (times in ns from the trace's origin)."""

    def __init__(self) -> None:
        self.collectives: list[dict[str, Any]] = []
        self.linked: dict[int, tuple[str, dict[str, Any]]] = {}  # External id -> (name, args) of a communication op
        self.comm_ops: dict[int, list[tuple[int, int, str, dict[str, Any]]]] = {}  # tid -> (start, end, name, args)
        self.launch_corr, self.launch_tid, self.launch_ts = array("q"), array("q"), array("q")
        self.steps: list[tuple[int, int, int]] = []  # (step, start ns, dur ns)
        self.ts, self.dur, self.cat = array("q"), array("q"), array("b")

    def add(self, e: dict[str, Any], skipped: Counter[str]) -> None:
        """Keep what ``e`` contributes (a complete event; others are ignored)."""
        if e.get("ph") != "X":
            return
        name, cat = str(e.get("name", "")), e.get("cat")
        ts, dur = _ns(e.get("ts")), _ns(e.get("dur"))
        if ts is None or dur is None or dur < 0:
            skipped["complete event without a valid ts or dur"] += 1
            return
        found = e.get("args")
        args: dict[str, Any] = found if isinstance(found, dict) else {}
        if cat == "kernel":
            nccl = name.startswith("nccl")
            if nccl:  # its collective is resolved once the ops around its launch are read
                self.collectives.append({"source": "kernel", "name": name, "ts": ts, "dur": dur, "args": args})
            self._span(ts, dur, COMMUNICATION if nccl else COMPUTE)
        elif cat == "user_annotation" and name.startswith("ProfilerStep#"):
            try:
                self.steps.append((int(name.split("#", 1)[1]), ts, dur))
            except ValueError:
                skipped["ProfilerStep without a step number"] += 1
        elif cat == "user_annotation" and name.startswith("gloo:"):
            if op_of(name) is None:
                skipped[f"unknown collective {name!r}"] += 1
            else:
                self.collectives.append({"source": "gloo", "name": name, "ts": ts, "dur": dur, "args": args})
        elif cat in ("cpu_op", "user_annotation") and name.startswith(COMM_OP_PREFIXES):
            ext = _int(args.get("External id"))
            if ext is not None:
                self.linked.setdefault(ext, (name, args))
            self.comm_ops.setdefault(_tid(e), []).append((ts, ts + dur, name, args))
            if cat == "cpu_op":  # an nccl:* annotation describes a collective; it is not CPU work of its own
                self._span(ts, dur, CPU)
        elif cat == "cpu_op":
            self._span(ts, dur, CPU)
        elif cat == "cuda_runtime" and "Launch" in name and (corr := _int(args.get("correlation"))) is not None:
            # Where each kernel was launched from: a kernel without collective args is described by the
            # communication ops around its launch.
            self.launch_corr.append(corr)
            self.launch_tid.append(_tid(e))
            self.launch_ts.append(ts)

    def _span(self, ts: int, dur: int, category: int) -> None:
        self.ts.append(ts)
        self.dur.append(dur)
        self.cat.append(category)

    def described(self) -> list[tuple[dict[str, Any], Described]]:
        """Each collective with the communication ops that describe it, innermost first: for a kernel, those
        around its launch (same thread, launch time inside the op), then the one with its External id; for a
        gloo:* annotation, itself."""
        for ops in self.comm_ops.values():
            ops.sort(key=lambda op: op[0])
        starts = {tid: [op[0] for op in ops] for tid, ops in self.comm_ops.items()}
        longest = {tid: max(op[1] - op[0] for op in ops) for tid, ops in self.comm_ops.items()}
        launched = np.frombuffer(self.launch_corr, dtype=np.int64)
        wanted = [c for c in (_int(k["args"].get("correlation")) for k in self.collectives) if c is not None]
        launches: dict[int, int] = {}  # correlation -> index of its launch
        for i in np.flatnonzero(np.isin(launched, np.array(wanted, dtype=np.int64))).tolist():
            launches.setdefault(int(launched[i]), i)
        result = []
        for c in self.collectives:
            if c["source"] == "gloo":
                result.append((c, [(c["name"], c["args"])]))
                continue
            around: Described = []
            corr = _int(c["args"].get("correlation"))
            hit = launches.get(corr) if corr is not None else None
            if hit is not None and self.launch_tid[hit] in self.comm_ops:
                tid, t = self.launch_tid[hit], self.launch_ts[hit]
                ops = self.comm_ops[tid]
                first = bisect.bisect_left(starts[tid], t - longest[tid])
                last = bisect.bisect_right(starts[tid], t)
                inside = [op for op in ops[first:last] if op[0] <= t <= op[1]]
                around = [(name, args) for _, _, name, args in sorted(inside, key=lambda op: op[1] - op[0])]
            ext = _int(c["args"].get("External id"))
            linked = self.linked.get(ext) if ext is not None else None
            if linked is not None and not any(args is linked[1] for _, args in around):
                around.append(linked)
            result.append((c, around))
        return result


def _op(c: dict[str, Any], described: Described) -> str | None:
    """A collective's op: the kernel's own Collective name, else the innermost describing op that names a known
    collective (by its name or its Collective name), else the kernel's (or annotation's) name."""
    own = c["args"].get("Collective name")
    if isinstance(own, str) and op_of(own):
        return op_of(own)
    for name, args in described:
        op = op_of(name) or (op_of(args["Collective name"]) if isinstance(args.get("Collective name"), str) else None)
        if op is not None:
            return op
    return op_of(c["name"])


def _tensor(args: dict[str, Any], position: int | None) -> tuple[int, str] | None:
    """(elements, dtype) of the tensor at ``position`` of an op's Input Dims / Input type; None when it records
    no shape there (a scalar, a tensor list, nothing)."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if position is None or not isinstance(dims, list) or position >= len(dims):
        return None
    shape = dims[position]
    if not (isinstance(shape, list) and shape and all(isinstance(d, int) and not isinstance(d, bool) for d in shape)):
        return None
    dtype = str(types[position]) if isinstance(types, list) and position < len(types) else "unknown"
    return math.prod(shape), dtype


def _width(dtype: str) -> int:
    return dtype_bytes(dtype.removeprefix("Tensor(").rstrip(")")) or 0


def _size(c: dict[str, Any], described: Described) -> tuple[str, int, int, int, bool]:
    """(dtype, count, bytes_in, bytes_out, from message args) of a collective: In/Out msg nelems where the kernel
    or a describing op has them; else the input tensor of the innermost op that records one, and the output
    tensor of the innermost that records one (else bytes_out = bytes_in); zeros when nothing says."""
    sources = [c["args"], *(args for _, args in described)]
    msg = next((args for args in sources if "In msg nelems" in args), None)
    if msg is not None:
        dtype = str(msg.get("dtype", "unknown"))
        width = dtype_bytes(dtype) or 0
        n_in = _int(msg["In msg nelems"]) or 0
        n_out = _int(msg.get("Out msg nelems", n_in)) or 0
        return dtype, n_in, n_in * width, n_out * width, True
    given = next((t for name, args in described if (t := _tensor(args, io_positions(name)[0]))), None)
    if given is None:
        return "unknown", 0, 0, 0, False
    taken = next((t for name, args in described if (t := _tensor(args, io_positions(name)[1]))), given)
    return given[1], given[0], given[0] * _width(given[1]), taken[0] * _width(taken[1]), False


def _first(key: str, c: dict[str, Any], described: Described) -> Any:
    """``key`` from the kernel's args, else from the innermost describing op that has it."""
    return next((args[key] for args in (c["args"], *(a for _, a in described)) if key in args), None)


def _step_of(starts: np.ndarray, steps: list[tuple[int, int, int]]) -> np.ndarray:
    """The ProfilerStep each start falls in (the last one started before it; the first before any)."""
    if not steps:
        return np.zeros(len(starts), dtype=np.int32)
    order = sorted(steps, key=lambda s: s[1])
    begins = np.array([s[1] for s in order], dtype=np.int64)
    ids = np.array([s[0] for s in order], dtype=np.int32)
    return ids[np.clip(np.searchsorted(begins, starts, side="right") - 1, 0, len(ids) - 1)]


def _collectives(r: _Rank, rank: int, world: int, pg_ranks: dict[str, list[int]], offset: int,
                 skipped: Counter[str]) -> list[dict[str, Any]]:
    """The rank's collective rows (a kernel whose collective nothing names is skipped, counted)."""
    rows = []
    described = r.described()
    step_ids = _step_of(np.array([c["ts"] for c, _ in described], dtype=np.int64), r.steps)
    for (c, around), step in zip(described, step_ids.tolist()):
        op = _op(c, around)
        if op is None:
            skipped[f"unknown NCCL kernel {c['name'].split('(')[0]!r}"] += 1
            continue
        dtype, count, b_in, b_out, from_msg = _size(c, around)
        if c["source"] == "kernel" and not from_msg and count == 0:
            skipped["collective without a message size (kept, 0 bytes)"] += 1
        pg = str(_first("Process Group Name", c, around) or "0")
        members = parse_ranks(_first("Process Group Ranks", c, around)) or pg_ranks.get(pg) or list(range(world))
        if rank not in members:
            members = sorted({*members, rank})
        start = offset + c["ts"]
        rows.append({"step": step, "rank": rank, "pg": pg, "pg_ranks": members, "op": op, "dtype": dtype,
                     "count": count, "bytes_in": b_in, "bytes_out": b_out, "peer": None, "start_ns": start,
                     "end_ns": start + c["dur"], "async_op": False})
    return rows


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
        if rank in ranks_seen:  # the same file twice (a glob), or two of one rank: its collectives would count twice
            raise ConfigError(f"{path}: rank {rank} again ({files[ranks_seen.index(rank)]} is rank {rank} too); give "
                              "each rank's trace once")
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
        collectives += _collectives(r, rank, world, pg_ranks, offset, imported.skipped)
        actor = f"trainer/rank{rank}"
        for step, ts, dur in r.steps:
            spans.append({"step": step, "actor": actor, "phase": "train", "name": f"ProfilerStep#{step}",
                          "start_ns": offset + ts, "end_ns": offset + ts + dur})
        spans += _summaries(r, actor, offset)
    if not collectives and not spans:
        raise ConfigError(f"{files[0]}: not a Kineto trace (no complete events, collectives or ProfilerStep ranges)")
    frame = pl.DataFrame(collectives, schema_overrides={"peer": pl.Int32, "pg_ranks": pl.List(pl.Int32)},
                         infer_schema_length=None) if collectives else pl.DataFrame()
    if frame.height:
        frame = frame.sort("rank", "pg", "start_ns").with_columns(
            pl.int_range(pl.len()).over("rank", "pg").cast(pl.Int64).alias("seq"))
    # a table with no rows is left out (written empty, with its schema): a trace of one GPU has no collectives
    tables = {"collectives": frame, "spans": pl.DataFrame(spans) if spans else pl.DataFrame()}
    imported.tables = {name: table for name, table in tables.items() if table.height}
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
    ts, dur = np.frombuffer(r.ts, dtype=np.int64), np.frombuffer(r.dur, dtype=np.int64)
    cat = np.frombuffer(r.cat, dtype=np.int8)
    frame = pl.DataFrame({"step": _step_of(ts, r.steps), "cat": cat, "ts": ts, "end": ts + dur, "dur": dur})
    agg = frame.group_by("step", "cat").agg(pl.col("ts").min(), pl.col("end").max(), pl.col("dur").sum(), pl.len())
    return [{"step": s, "actor": actor, "phase": CATEGORY[c],
             "name": f"{n} {CATEGORY[c]} events, busy {d / 1e6:.3f} ms",
             "start_ns": offset + a, "end_ns": offset + b}
            for s, c, a, b, d, n in agg.sort("step", "cat").iter_rows()]
