"""The collectives of a merge, streamed: aligned labels in bounded memory, written row group by row group.

A long job records tens of millions of collective rows; holding them all (as the first merge did) took
947 MiB for 2M rows. Here the shards are read three times, one row group at a time, and only small
per-operation arrays stay in memory:

1. **Index.** Each rank's point-to-point sequence numbers per group (usually few: weight-sync sends), the
   largest ``seq`` per (group, rank), and the sending-side rows that may be weight syncs.
2. **Operations.** A row's operation is found without sorting: a rank's i-th collective of a group is its row
   whose ``seq`` minus the point-to-point rows before it is i; its i-th send to rank b is found by a binary
   search in that channel's sequence numbers (c10d's order contract, see :mod:`rltrace.labels`).
   Per group and stream (its collectives, each (source, destination) channel, each any-source receiver) an
   array indexed by i keeps the largest step, the earliest issue time and the op kind (a kind that differs
   between ranks marks the group as issued out of order: it keeps its recorded labels, as labels.py does).
3. **Write.** Each row gets its operation's step, and the operation's rank in the group's issue order as
   its ``seq``; every row group is validated and appended to the bundle's Parquet file.

Memory: 13 bytes per operation (int64 issue time, int32 step, int8 kind) plus one row group; 10M rows in
8-rank groups is 1.25M operations, about 16 MB (benchmarks/merge_memory.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from rltrace.bundle import TableWriter, polars_schema
from rltrace.schema import COLLECTIVE_OPS, TABLES
from rltrace.validate import check_frame

NONE = np.iinfo(np.int64).max  # an operation no row was seen for
CODES = {op: i for i, op in enumerate(COLLECTIVE_OPS)}
SYNC_OPS = ("broadcast", "send", "scatter")
KEY = ["step", "rank", "pg", "op", "peer", "seq", "start_ns"]


@dataclass(slots=True)
class Stream:
    """Per-operation arrays of one stream of a group, grown as operations appear."""

    first: np.ndarray = field(default_factory=lambda: np.full(0, NONE, dtype=np.int64))
    step: np.ndarray = field(default_factory=lambda: np.full(0, -1, dtype=np.int32))
    kind: np.ndarray = field(default_factory=lambda: np.full(0, -1, dtype=np.int8))
    seq: np.ndarray | None = None  # the aligned seq of each operation, once every row was seen

    def grow(self, n: int) -> None:
        if n > len(self.first):
            n = max(n, 2 * len(self.first))
            self.first = np.concatenate([self.first, np.full(n - len(self.first), NONE, dtype=np.int64)])
            self.step = np.concatenate([self.step, np.full(n - len(self.step), -1, dtype=np.int32)])
            self.kind = np.concatenate([self.kind, np.full(n - len(self.kind), -1, dtype=np.int8)])


@dataclass(slots=True)
class Index:
    """What pass 1 learned: point-to-point sequence numbers per rank and per channel, and the streams."""

    p2p: dict[tuple[str, int], np.ndarray]  # (pg, rank) -> sorted seqs of its sends and receives
    sends: dict[tuple[str, int, int], np.ndarray]  # (pg, src, dst) -> sorted seqs at src
    recvs: dict[tuple[str, int | None, int], np.ndarray]  # (pg, src or None, dst) -> sorted seqs at dst
    streams: dict[tuple[Any, ...], Stream] = field(default_factory=dict)  # (pg, "c") or (pg, src, dst) -> arrays
    broken: set[str] = field(default_factory=set)


Files = list[tuple[Path, int]]  # (flush file, shard index)


BATCH_ROWS = 16384


def row_groups(files: Files, columns: list[str] | None = None) -> Iterator[tuple[pa.RecordBatch, int]]:
    """Every row of every file in batches of BATCH_ROWS (one in memory at a time), with its shard index."""
    for path, shard in files:
        pf = pq.ParquetFile(path, pre_buffer=False)
        # one decoding thread: parallel column decoders each hold a row group's buffers (measured: 40 MiB more)
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=columns, use_threads=False):
            yield batch, shard


def build_index(files: Files, sync_rows: pl.Expr) -> tuple[Index, pl.DataFrame, list[Path]]:
    """Pass 1: the index, the sending-side rows that may be weight syncs (``sync_rows`` of them, with their
    ``_shard``), and the files that cannot be read (left out of the later passes, counted by the caller)."""
    seqs: dict[tuple[Any, ...], list[np.ndarray]] = defaultdict(list)  # (pg, rank, op, peer) -> its p2p seqs, as numpy
    candidates: list[pl.DataFrame] = []
    bad: list[Path] = []
    for path, shard in files:
        mine: list[tuple[tuple[Any, ...], np.ndarray]] = []
        cands: list[pl.DataFrame] = []
        try:
            for batch, _ in row_groups([(path, shard)]):
                frame = pl.from_arrow(batch)
                assert isinstance(frame, pl.DataFrame)
                p2p = frame.select("pg", "rank", "op", "peer", "seq").filter(pl.col("op").is_in(["send", "recv"]))
                for key, part in p2p.partition_by("pg", "rank", "op", "peer", as_dict=True).items():
                    mine.append((key, part["seq"].to_numpy().copy()))
                cand = frame.filter(
                    pl.col("op").is_in(SYNC_OPS) & pl.col("peer").is_not_null()
                    & ((pl.col("op") == "send") | (pl.col("rank") == pl.col("peer"))) & sync_rows)
                if cand.height:
                    cands.append(cand.with_columns(pl.lit(shard, dtype=pl.Int64).alias("_shard")))
        except (pa.ArrowException, OSError, pl.exceptions.PolarsError):
            bad.append(path)  # damaged (a full disk cannot leave one: flushes are renamed complete)
            continue
        for key, seq in mine:
            seqs[key].append(seq)
        candidates += cands
    schema = {**polars_schema(TABLES["collectives"]), "_shard": pl.Int64()}
    cand = pl.concat(candidates) if candidates else pl.DataFrame(schema=schema)
    index = Index({}, {}, {})
    per_rank: dict[tuple[str, int], list[np.ndarray]] = defaultdict(list)
    for (pg, rank, op, peer), arrays in seqs.items():
        seq = np.sort(np.concatenate(arrays))
        per_rank[(pg, rank)].append(seq)
        if op == "send":
            index.sends[(pg, rank, peer)] = seq
        else:
            index.recvs[(pg, peer, rank)] = seq
    seqs.clear()
    for key, arrays in per_rank.items():
        index.p2p[key] = np.sort(np.concatenate(arrays))
    return index, cand.sort("start_ns", "rank"), bad


def _locate(index: Index, frame: pl.DataFrame) -> Iterator[tuple[str, Stream, np.ndarray, np.ndarray, bool]]:
    """(pg, stream, row positions in ``frame``, operation numbers, whether a collective) for every row."""
    frame = frame.with_row_index("_pos")
    for (pg, rank, op, peer), part in frame.partition_by("pg", "rank", "op", "peer", as_dict=True).items():
        seq = part["seq"].to_numpy()
        key: tuple[Any, ...]
        before: np.ndarray | None
        if op == "send":
            key, before = (pg, rank, peer), index.sends.get((pg, rank, peer))
        elif op == "recv":
            key, before = (pg, peer, rank), index.recvs.get((pg, peer, rank))
        else:
            key, before = (pg, "c"), None
        nth: np.ndarray
        if op in ("send", "recv"):
            if before is None:
                before = np.empty(0, dtype=np.int64)
            nth = np.searchsorted(before, seq)  # its place among its channel's rows on this rank
        else:
            mine = index.p2p.get((pg, rank))
            nth = seq - (np.searchsorted(mine, seq) if mine is not None else 0)  # collectives before it
        stream = index.streams.get(key)
        if stream is None:
            stream = index.streams[key] = Stream()
        yield pg, stream, part["_pos"].to_numpy(), nth.astype(np.int64), key[1] == "c"


def gather_operations(index: Index, files: Files) -> None:
    """Pass 2: each operation's largest step, earliest issue and kind, over its rows on every rank."""
    for table, _ in row_groups(files, KEY):
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        steps, starts = frame["step"].to_numpy(), frame["start_ns"].to_numpy()
        codes = frame["op"].replace_strict(CODES, default=len(CODES), return_dtype=pl.Int8).to_numpy()
        for pg, stream, pos, nth, collective in _locate(index, frame):
            if len(nth) == 0:
                continue
            stream.grow(int(nth.max()) + 1)
            np.minimum.at(stream.first, nth, starts[pos])
            np.maximum.at(stream.step, nth, steps[pos])
            if collective:  # a channel's send and receive are one operation of two kinds
                seen, code = stream.kind[nth], codes[pos]
                if ((seen >= 0) & (seen != code)).any():
                    index.broken.add(pg)  # its ranks disagree on the kind of one collective
                stream.kind[nth] = code


CHUNK = 1 << 18


def _ties(ordered: np.ndarray, first: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For operations ``at`` of one stream: how many of the same stream share their issue time and come earlier
    by operation number (0 almost always: two operations of one stream issued in the same nanosecond)."""
    f = first[at]
    same = np.searchsorted(ordered, f, side="right") - np.searchsorted(ordered, f, side="left")
    out = np.zeros(len(at), dtype=np.int64)
    for k in np.flatnonzero(same > 1):  # rare: count earlier-numbered operations with the same time
        out[k] = int(np.count_nonzero(first[: at[k]] == f[k]))
    return out


def number_operations(index: Index) -> None:
    """Each operation's ``seq``: its rank in its group's order of first issue (ties: stream, then number).
    The issue times are freed afterwards: pass 3 needs only steps and seqs."""
    by_group: dict[str, list[Stream]] = defaultdict(list)
    for key, stream in sorted(index.streams.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        by_group[key[0]].append(stream)
    for streams in by_group.values():
        if len(streams) == 1:  # a group with collectives only: number the operations seen, in order
            s = streams[0]
            s.seq = np.cumsum(s.first != NONE) - 1
            s.first = s.first[:0]
            continue
        ordered: list[np.ndarray] = []  # each stream's issue times, sorted (operation numbers break ties)
        for s in streams:
            f = s.first[s.first != NONE]
            if len(f) > 1 and not (f[1:] >= f[:-1]).all():  # usually in order already: c10d issues them so
                f = f[np.argsort(f, kind="stable")]
            ordered.append(f)
        for i, s in enumerate(streams):
            valid = np.flatnonzero(s.first != NONE)
            seq = np.full(len(s.first), -1, dtype=np.int64)
            for lo in range(0, len(valid), CHUNK):  # in chunks: a few MB of temporaries, whatever the length
                at = valid[lo:lo + CHUNK]
                f = s.first[at]
                total = np.searchsorted(ordered[i], f, side="left") + _ties(ordered[i], s.first, at)
                for j, other in enumerate(ordered):
                    if j != i:
                        total += np.searchsorted(other, f, side="right" if j < i else "left")
                seq[at] = total
            s.seq = seq
        for s in streams:
            s.first = s.first[:0]


def write_aligned(index: Index, files: Files, writer: TableWriter, file: str,
                  keep: Callable[[pl.DataFrame], pl.DataFrame] | None = None) -> int:
    """Pass 3: every row with its operation's step and seq, validated and appended; returns the rows."""
    rows = 0
    schema = polars_schema(TABLES["collectives"])
    for table, _ in row_groups(files):
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        step = frame["step"].to_numpy().copy()
        seq = frame["seq"].to_numpy().copy()
        for pg, stream, pos, nth, _ in _locate(index, frame.select(KEY)):
            if pg in index.broken or stream.seq is None:
                continue
            step[pos] = np.maximum(stream.step[nth], step[pos])
            seq[pos] = stream.seq[nth]
        frame = frame.with_columns(pl.Series("step", step, dtype=schema["step"]),
                                   pl.Series("seq", seq, dtype=schema["seq"])).sort("start_ns", "rank")
        if keep is not None:
            frame = keep(frame)
        check_frame(frame.lazy(), TABLES["collectives"], file)
        writer.write(frame)
        rows += frame.height
    return rows


def broken_notes(index: Index) -> list[str]:
    """The notes labels.py gives groups whose ranks disagree on the order of their collectives."""
    return [f"collectives of group {pg} keep each rank's own step and seq: its ranks disagree on the order "
            "of its collectives" for pg in sorted(index.broken)]
