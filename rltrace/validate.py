"""Value validation of bundle tables, derived from the declarations in :mod:`rltrace.schema`.

All rules of a table are evaluated in one vectorised polars pass (one boolean "any violation" per rule);
only when a rule fails is the table scanned again to find its first offending row, so a valid table costs
one streaming read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import polars as pl

from rltrace.errors import ValidationError
from rltrace.schema import TableSchema

_ROW = "__rltrace_row"


@dataclass(frozen=True, slots=True)
class Rule:
    """One value rule: ``bad`` flags violating rows; ``explain`` words the first violating row."""

    column: str
    bad: pl.Expr
    explain: Callable[[dict[str, Any]], str]


MAX_VALUE_CHARS = 80
"""A value quoted in an error is cut to this many characters (a 10^6-character enum value is one short line)."""


def _fmt(v: object) -> str:
    text = repr(v) if isinstance(v, str) else str(v)
    return text if len(text) <= MAX_VALUE_CHARS else f"{text[:MAX_VALUE_CHARS]}... ({len(text):,} characters)"


# The words of each rule's first violating row; ``partial`` binds the column names (a lambda in the loop
# would need default arguments to do so, which a type checker cannot infer).
def _below(r: dict[str, Any], n: str, lo: object) -> str:
    return f"{n}={_fmt(r[n])} is below {lo}"


def _unknown(r: dict[str, Any], n: str, a: str) -> str:
    return f"unknown {n} {_fmt(r[n])} (expected one of: {a})"


def _not_ranks(r: dict[str, Any], n: str) -> str:
    return f"{n}={_fmt(r[n])} must be a non-empty list of ranks >= 0"


def _out_of_order(r: dict[str, Any], later: str, earlier: str, w: str) -> str:
    return f"{later}={_fmt(r[later])} {w} {earlier}={_fmt(r[earlier])}"


def _not_member(r: dict[str, Any], s: str, lst: str) -> str:
    return f"{s}={_fmt(r[s])} is not a member of {lst}={_fmt(r[lst])}"


def rules_for(table: TableSchema) -> list[Rule]:
    """Every value rule of a table, in column order."""
    rules: list[Rule] = []
    for c in table.columns:
        col = pl.col(c.name)
        if not c.nullable:
            rules.append(Rule(c.name, col.is_null(), lambda r: "null value in a column that allows none"))
        if c.min_value is not None:
            lo = c.min_value
            rules.append(Rule(c.name, col < lo, partial(_below, n=c.name, lo=lo)))
        if c.choices:
            allowed = ", ".join(c.choices)
            rules.append(
                Rule(
                    c.name,
                    col.is_not_null() & ~col.is_in(list(c.choices)),
                    partial(_unknown, n=c.name, a=allowed),
                )
            )
        if str(c.type).startswith("list"):
            rules.append(
                Rule(
                    c.name,
                    (col.list.len() == 0) | col.list.eval(pl.element().is_null() | (pl.element() < 0)).list.any(),
                    partial(_not_ranks, n=c.name),
                )
            )
    for o in table.orders:
        word = "is before" if o.later.endswith("_ns") else "is less than"
        rules.append(
            Rule(
                o.later,
                pl.col(o.later) < pl.col(o.earlier),
                partial(_out_of_order, later=o.later, earlier=o.earlier, w=word),
            )
        )
    for scalar, lst in table.member_of:
        rules.append(
            Rule(
                scalar,
                pl.col(scalar).is_not_null() & ~pl.col(lst).list.contains(pl.col(scalar)).fill_null(False),
                partial(_not_member, s=scalar, lst=lst),
            )
        )
    if table.name == "requests":
        rules.append(
            Rule(
                "request_id",
                pl.col("request_id").is_duplicated(),
                lambda r: f"duplicate request_id {_fmt(r['request_id'])} (ids must be unique in a bundle)",
            )
        )
    return rules


def check_frame(frame: pl.LazyFrame, table: TableSchema, file: str) -> None:
    """Raise :class:`ValidationError` naming file, column and row of the first broken rule, if any.

    ``frame`` must already carry the table's columns with its dtypes (as the reader and writer produce).
    """
    rules = rules_for(table)
    if not rules:
        return
    flags = frame.select([r.bad.any().alias(str(i)) for i, r in enumerate(rules)]).collect(engine="streaming")
    failed = [i for i, v in enumerate(flags.row(0)) if v]
    if not failed:
        return
    rule = rules[failed[0]]
    first = (
        frame.with_row_index(_ROW)
        .filter(rule.bad)
        .head(1)
        .collect()
        .row(0, named=True)
    )
    raise ValidationError(rule.explain(first), file=file, column=rule.column, row=int(first[_ROW]))
