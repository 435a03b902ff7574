"""PyTorch / Chakra host execution traces (JSON, one file per rank, or a .tar.gz of them).

Read: the c10d collective nodes (collective name; input and output tensors, which argument is which from the
node's op_schema, else from :func:`~rltrace.collectors.importers.comms.io_positions`), the process-group table
of a ``process_group:init`` node when the trace has one. An execution trace of schema 1.0.x records no
durations: collectives keep their recorded order, one microsecond apart from the trace's start_ts (milliseconds:
PyTorch's execution_trace_observer writes steady-clock milliseconds), and that is said in the manifest.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import polars as pl
from rltrace.collectors.importers.base import Imported, ImportOptions, register
from rltrace.collectors.importers.comms import io_positions, op_of

from rltrace.errors import ConfigError
from rltrace.limits import check_input
from rltrace.manifest import Pool

_RANK = re.compile(r"(\d+)(?=\D*$)")  # the last number in a file name: dlrm_eg_3.json -> 3
NS_PER_MS = 1_000_000
"""start_ts is steady-clock milliseconds (execution_trace_observer.cpp, every schema version)"""
SPACING_NS = 1_000
"""collectives of a trace without durations are laid out this far apart (1 us), in their recorded order"""


def _documents(path: Path) -> Iterator[tuple[str, bytes]]:
    check_input(path)
    if path.name.endswith((".tar.gz", ".tgz", ".tar")):
        try:
            with tarfile.open(path) as tar:
                members = sorted((m for m in tar.getmembers() if m.isfile() and m.name.endswith(".json")),
                                 key=lambda m: m.name)
                if not members:
                    raise ConfigError(f"{path}: no .json execution trace inside")
                for m in members:
                    yield m.name, tar.extractfile(m).read()  # type: ignore[union-attr]  # regular files only (isfile above)
        except (tarfile.TarError, EOFError, OSError) as e:
            raise ConfigError(f"{path}: truncated or corrupt archive ({e})") from None
    else:
        yield str(path), path.read_bytes()


def _pg_table(nodes: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Process groups from a ``process_group:init`` node (newer ET schemas record the table as a JSON
    string among its inputs): pg name -> ranks. Empty when the trace has none."""
    for node in nodes:
        if "process_group:init" not in str(node.get("name")):
            continue
        inputs = node.get("inputs")
        values = inputs.get("values", []) if isinstance(inputs, dict) else inputs or []
        for value in values:
            if not (isinstance(value, str) and value.startswith("[")):
                continue
            try:
                table = json.loads(value)
            except ValueError:
                continue
            return {str(pg.get("pg_name")): [int(r) for r in pg.get("ranks", [])]
                    for pg in table if isinstance(pg, dict)}
    return {}


def _int(value: Any) -> int:
    """A whole number of the trace's header (start_ts, ms), 0 when absent, not a number or past 2**40 (35 years)."""
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < 2**40 else 0


def _tensor_bytes(value: Any) -> tuple[int, int]:
    """(numel, element bytes) of an ET tensor reference [id, storage, offset, numel, elem_bytes, device], or
    of a list of them (summed)."""
    if isinstance(value, list) and len(value) == 6 and all(isinstance(v, int) for v in value[:5]):
        return value[3], value[4]
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        parts = [_tensor_bytes(v) for v in value]
        return sum(n for n, _ in parts), max((w for _, w in parts), default=0)
    return 0, 0


@register("et")
def execution_trace(files: list[Path], options: ImportOptions,
                    progress: Callable[[int, int], None] | None = None) -> Imported:
    """Execution traces: one per rank (a file, or every .json in a tarball)."""
    imported = Imported({}, [])
    rows: list[dict[str, Any]] = []
    docs = [(name, data) for path in files for name, data in _documents(path)]
    world = len(docs)
    seen: dict[int, str] = {}
    for index, (name, data) in enumerate(docs):
        try:
            trace = json.load(io.BytesIO(data))
        except ValueError as e:
            raise ConfigError(f"{name}: not an execution trace (invalid JSON: {e})") from None
        if not isinstance(trace, dict) or not isinstance(trace.get("nodes"), list):
            raise ConfigError(f"{name}: not an execution trace (no nodes list)")
        match = _RANK.search(Path(name).stem)
        rank = int(match.group(1)) if match else index
        if rank in seen:  # the same file twice (a glob), or two of one rank: its collectives would count twice
            raise ConfigError(f"{name}: rank {rank} again ({seen[rank]} is rank {rank} too); give each rank's trace "
                              "once")
        seen[rank] = name
        nodes = trace["nodes"]
        pgs = _pg_table(nodes)
        start_ns = _int(trace.get("start_ts")) * NS_PER_MS
        seq = 0
        for node in nodes:
            nname = str(node.get("name", ""))
            if not nname.startswith("c10d::"):
                continue
            raw = node.get("inputs")  # a list; newer schemas: {"values": [...], "shapes": ..., "types": ...}
            if isinstance(raw, dict):
                raw = raw.get("values")
            inputs = raw if isinstance(raw, list) else []
            op = op_of(nname)
            # c10d ops record [tensor(s), seq, pg ptr, ..., collective name, in splits, out splits]
            named = next((v for v in inputs if isinstance(v, str) and op_of(v)), None)
            op = op_of(named) if named else op
            if op is None:
                imported.skipped[f"unknown collective {nname!r}"] += 1
                continue
            schema = node.get("op_schema")
            given, taken = io_positions(nname, schema if isinstance(schema, str) else None)
            numel, width = _tensor_bytes(inputs[given]) if given < len(inputs) else (0, 0)
            out_numel, out_width = (_tensor_bytes(inputs[taken]) if taken is not None and taken < len(inputs)
                                    else (0, 0))
            if out_width == 0:  # no output recorded: it is the input's size
                out_numel, out_width = numel, width
            if width == 0:
                imported.skipped["collective without a tensor size (kept, 0 bytes)"] += 1
            pg = "0"
            members = pgs.get(pg) or list(range(world))
            rows.append({"step": 0, "rank": rank, "pg": pg, "pg_ranks": sorted({*members, rank}), "op": op,
                         "dtype": f"{width}-byte", "count": numel, "bytes_in": numel * width,
                         "bytes_out": out_numel * out_width, "peer": None, "seq": seq,
                         "start_ns": start_ns + seq * SPACING_NS, "end_ns": start_ns + seq * SPACING_NS,
                         "async_op": False})
            seq += 1
        if progress:
            progress(index + 1, len(docs))
    if not rows:
        raise ConfigError(f"{files[0]}: no collectives in the execution trace(s)")
    imported.tables = {"collectives": pl.DataFrame(rows, schema_overrides={"peer": pl.Int32,
                                                                           "pg_ranks": pl.List(pl.Int32)})}
    imported.pools = {"trainer": Pool(device=options.gpu or "unknown", count=world)}
    imported.notes += [
        ("the execution traces record no durations: collectives keep their recorded order, 1 us apart from each "
         "trace's start_ts (milliseconds), with zero duration; all in step 0"),
        ("ranks from the last number in each file name; the process group is the default one over all "
         f"{world} files unless a process_group:init node lists the groups"),
        "dtype is the element size the trace records (e.g. '4-byte'), not its name"]
    return imported
