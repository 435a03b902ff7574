"""Trace bundle format v1: every table's schema, defined once.

This module depends on pyarrow and :mod:`rltrace.table_names` (the names a recording process needs before it
loads pyarrow). Each column is declared here with its Arrow type, unit (in its name: ``*_ns`` are int64
nanoseconds since the Unix epoch, ``bytes*`` are bytes, ``*_tokens`` are token counts), nullability, the format
minor version that introduced it and its value rules. Everything else derives from these declarations: the Arrow
schema the writer casts to, the polars dtypes the reader casts to, the validation checks, and the markdown table
in docs/format.md (``rltrace schema``).

Versioning: ``FORMAT_VERSION`` is ``major.minor``. A minor version only adds columns, tables or manifest fields, so
a reader accepts every older minor version and fills the columns it lacks with their declared default (a table newer
than the bundle reads as empty). A newer minor version is read too (unknown columns are dropped). A different major
version is refused.

Changelog:
    1.0  requests, collectives, weight_syncs, spans.
    1.1  requests gains ``cached_tokens``, ``turn`` and ``num_preemptions`` (prefix caching, multi-turn
         agentic trajectories, vLLM preemptions); weight_syncs gains ``step``.
    1.2  requests gains ``trajectory_id`` (the turns of one multi-turn trajectory share it).
    1.3  iterations: one row per generation-engine iteration (its duration and the requests in the engine),
         which resolves decode time against batch where per-request timings cannot.
    1.4  the manifest's ``model`` gains the architecture beyond a dense GQA model (experts, MLA, sliding window,
         biases, tied embeddings, KV-cache type), so a bundle of a model the catalog lacks replays as recorded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from rltrace.table_names import SYNC_METHODS, TABLE_NAMES

FORMAT_MAJOR = 1
FORMAT_MINOR = 4
FORMAT_VERSION = f"{FORMAT_MAJOR}.{FORMAT_MINOR}"

FINISH_REASONS = ("stop", "length", "abort")
COLLECTIVE_OPS = (
    "all_reduce",
    "reduce",
    "all_gather",
    "gather",
    "reduce_scatter",
    "scatter",
    "broadcast",
    "all_to_all",
    "send",
    "recv",
    "barrier",
)
# Phases are an open vocabulary (a job may name its own); these are the ones rltrace knows how to replay.
KNOWN_PHASES = (
    "generate",
    "reward",
    "reference",
    "old_logprob",
    "critic",
    "train",
    "optimizer",
    "weight_sync",
    "environment",
)


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a bundle table.

    ``required`` columns must be present in every file written at or after ``since``; files of an older
    minor version, and optional columns, read as ``default`` when absent (writers fill it in too). ``nullable``
    says whether a present column may hold nulls.
    """

    name: str
    type: pa.DataType
    doc: str
    nullable: bool = False
    required: bool = True
    since: tuple[int, int] = (1, 0)
    default: Any = None
    min_value: int | None = None
    choices: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Order:
    """A row-wise rule ``earlier <= later`` (both columns; rows where either is null are not checked)."""

    earlier: str
    later: str


@dataclass(frozen=True, slots=True)
class TableSchema:
    """One table of the bundle: its file, columns and cross-column rules."""

    name: str
    doc: str
    columns: tuple[Column, ...]
    orders: tuple[Order, ...] = ()
    member_of: tuple[tuple[str, str], ...] = field(default=())
    """(scalar column, list column): the scalar must be an element of the list where both are set."""
    since: tuple[int, int] = (1, 0)
    """the format version that introduced the table (older bundles have no file for it: read as empty)"""

    @property
    def file(self) -> str:
        return f"{self.name}.parquet"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.type, nullable=c.nullable) for c in self.columns])



_I32, _I64 = pa.int32(), pa.int64()
_STR = pa.string()


def _ns(name: str, doc: str, *, nullable: bool = False) -> Column:
    return Column(name, _I64, doc, nullable=nullable, min_value=0)


REQUESTS = TableSchema(
    name="requests",
    doc="One row per generated sample (a rollout response, or one turn of a multi-turn trajectory).",
    columns=(
        Column("step", _I32, "RL step (iteration) that consumed the sample", min_value=0),
        Column("request_id", _STR, "unique id of the request within the bundle"),
        Column("group_id", _STR, "prompt id; GRPO samples of one prompt share it"),
        Column("engine", _STR, "generation instance that served it, e.g. 'rollout/engine0'"),
        Column("prompt_tokens", _I32, "prompt length in tokens", min_value=0),
        Column("output_tokens", _I32, "generated tokens", min_value=0),
        Column(
            "cached_tokens",
            _I32,
            "prompt tokens served from the prefix cache",
            nullable=True,
            required=False,
            since=(1, 1),
            min_value=0,
        ),
        _ns("arrival_ns", "time the request reached the engine"),
        _ns("scheduled_ns", "time it was first scheduled (left the waiting queue)", nullable=True),
        _ns("first_token_ns", "time its first output token was produced", nullable=True),
        _ns("finish_ns", "time its last token was produced (or it was aborted)", nullable=True),
        Column("finish_reason", _STR, "why generation ended", choices=FINISH_REASONS),
        Column("policy_version", _I32, "policy (weights) version that generated it", nullable=True, min_value=0),
        Column(
            "turn",
            _I32,
            "turn index within a multi-turn trajectory (0 for single-turn)",
            since=(1, 1),
            default=0,
            min_value=0,
        ),
        Column(
            "trajectory_id",
            _STR,
            "multi-turn trajectory the request is one turn of (its turns share it; null: single-turn, the "
            "request is its own trajectory)",
            nullable=True,
            required=False,
            since=(1, 2),
        ),
        Column(
            "num_preemptions",
            _I32,
            "times the engine preempted it",
            since=(1, 1),
            default=0,
            min_value=0,
        ),
    ),
    orders=(
        # Every pair, not only neighbours: a null between two set times must not hide their order.
        Order("arrival_ns", "scheduled_ns"),
        Order("scheduled_ns", "first_token_ns"),
        Order("first_token_ns", "finish_ns"),
        Order("arrival_ns", "first_token_ns"),
        Order("scheduled_ns", "finish_ns"),
        Order("arrival_ns", "finish_ns"),
        Order("cached_tokens", "prompt_tokens"),
    ),
)

COLLECTIVES = TableSchema(
    name="collectives",
    doc="One row per collective or point-to-point operation, per participating rank.",
    columns=(
        Column("step", _I32, "training step during which it was issued", min_value=0),
        Column("rank", _I32, "global rank that issued it", min_value=0),
        Column("pg", _STR, "process-group name"),
        Column("pg_ranks", pa.list_(_I32), "global ranks of the process group"),
        Column("op", _STR, "operation", choices=COLLECTIVE_OPS),
        Column("dtype", _STR, "element type, e.g. 'bfloat16'"),
        Column("count", _I64, "elements in the input", min_value=0),
        Column("bytes_in", _I64, "bytes this rank sends in", min_value=0),
        Column("bytes_out", _I64, "bytes this rank receives out", min_value=0),
        Column("peer", _I32, "root, source or destination global rank; null where none", nullable=True, min_value=0),
        Column("seq", _I64, "per-group sequence number", min_value=0),
        _ns("start_ns", "issue time"),
        _ns("end_ns", "completion time (observed, not assumed)"),
        Column("async_op", pa.bool_(), "issued with async_op=True (completed by wait)"),
    ),
    orders=(Order("start_ns", "end_ns"),),
    member_of=(("rank", "pg_ranks"),),
)

WEIGHT_SYNCS = TableSchema(
    name="weight_syncs",
    doc="One row per weight-sync flow from a trainer endpoint to a generator endpoint.",
    columns=(
        Column("version", _I64, "policy version the flow delivers", min_value=0),
        Column("src", _STR, "source endpoint, e.g. 'trainer/rank0'"),
        Column("dst", _STR, "destination endpoint, e.g. 'rollout/engine1'"),
        Column("bytes", _I64, "bytes moved", min_value=0),
        Column("tensors", _I64, "tensors moved", min_value=0),
        Column("method", _STR, "transport", choices=SYNC_METHODS),
        _ns("start_ns", "start of the transfer"),
        _ns("end_ns", "end of the transfer"),
        Column(
            "step",
            _I32,
            "RL step during which the transfer ran (the sync after step k's update is in step k)",
            nullable=True,
            required=False,
            since=(1, 1),
            min_value=0,
        ),
    ),
    orders=(Order("start_ns", "end_ns"),),
)

SPANS = TableSchema(
    name="spans",
    doc="One row per phase span of one actor (process or role).",
    columns=(
        Column("step", _I32, "RL step", min_value=0),
        Column("actor", _STR, "who ran it, e.g. 'trainer/rank1' or 'rollout/engine0'"),
        Column("phase", _STR, f"phase; known to replay: {', '.join(KNOWN_PHASES)}"),
        Column("name", _STR, "free-form label (function, call site)"),
        _ns("start_ns", "start"),
        _ns("end_ns", "end"),
    ),
    orders=(Order("start_ns", "end_ns"),),
)

ITERATIONS = TableSchema(
    name="iterations",
    doc="One row per iteration of a generation engine (a scheduler step: one token for every running request).",
    columns=(
        Column("step", _I32, "RL step the engine was generating for", min_value=0),
        Column("engine", _STR, "generation instance, as in requests.engine"),
        _ns("start_ns", "start of the iteration (the engine step call)"),
        _ns("end_ns", "end of the iteration (its outputs returned)"),
        Column("requests", _I32, "requests in the engine (running or waiting) when the iteration started",
               min_value=1),
    ),
    orders=(Order("start_ns", "end_ns"),),
    since=(1, 3),
)

TABLES: dict[str, TableSchema] = {t.name: t for t in (REQUESTS, COLLECTIVES, WEIGHT_SYNCS, SPANS, ITERATIONS)}
if tuple(TABLES) != TABLE_NAMES:
    raise ImportError(f"rltrace.table_names lists {TABLE_NAMES}, the schema defines {tuple(TABLES)}")


_VERSION = re.compile(r"([0-9]{1,9})\.([0-9]{1,9})")


def parse_version(text: str) -> tuple[int, int]:
    """Parse ``"major.minor"`` (two runs of ASCII digits and a dot, nothing around them); raises ValueError on
    anything else ("1", "1.-1", " 1.2", "1.2.3")."""
    match = _VERSION.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"format version {text!r} is not 'major.minor'")
    return int(match[1]), int(match[2])


def markdown_table(table: TableSchema) -> str:
    """The documentation table of one bundle table, generated from its declaration."""
    lines = [
        f"### `{table.file}`",
        "",
        table.doc + (f" (Since {table.since[0]}.{table.since[1]}; older bundles read as empty.)"
                     if table.since > (1, 0) else ""),
        "",
        "| column | type | nulls | since | rule | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for c in table.columns:
        rules = []
        if c.min_value is not None:
            rules.append(f">= {c.min_value}")
        if c.choices:
            rules.append("one of " + ", ".join(f"`{x}`" for x in c.choices))
        for o in table.orders:
            if o.later == c.name:
                rules.append(f">= `{o.earlier}`")
        for scalar, lst in table.member_of:
            if scalar == c.name:
                rules.append(f"in `{lst}`")
        since = "{}.{}".format(*max(c.since, table.since))
        nulls = "yes" if c.nullable else "no"
        fill = "null" if c.default is None else f"`{c.default}`"
        note = ""
        if not c.required:
            since += " optional"
            note = f" (absent: {fill})"
        elif c.since > (1, 0):
            note = f" (older bundles read as {fill})"
        lines.append(f"| `{c.name}` | {c.type} | {nulls} | {since} | {'; '.join(rules)} | {c.doc}{note} |")
    return "\n".join(lines)


def markdown_reference() -> str:
    """All tables' documentation, as included in docs/format.md."""
    head = f"Format version {FORMAT_VERSION}. Row numbers in error messages are 0-based.\n"
    return head + "\n\n".join(markdown_table(t) for t in TABLES.values()) + "\n"
