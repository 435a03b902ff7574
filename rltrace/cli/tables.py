"""Tables that never cut a number: printed whole when they fit the console, else split by columns.

Rich shrinks a table wider than the console by cutting cells ("7,4…" for 7,412). Here a table that does not
fit is printed as several narrower tables, one after another, each repeating the first column(s) (the row's
name), so every cell keeps every character at any width the repeated columns and one more fit in.
"""

from __future__ import annotations

import copy

from rich.console import Console
from rich.table import Table
from rich.text import Text


def _subtable(table: Table, columns: list[int], title: str | Text | None) -> Table:
    """A copy of ``table`` with only ``columns`` (indices), titled ``title``."""
    part = copy.copy(table)
    part.columns = [copy.copy(table.columns[i]) for i in columns]
    part.title = title
    part.rows = list(table.rows)
    for column in part.columns:  # columns keep their own cell lists; copy them so nothing is shared
        column._cells = list(column._cells)
    return part


def _width(console: Console, table: Table) -> int:
    return console.measure(table, options=console.options.update(max_width=10**6)).maximum


def print_table(console: Console, table: Table, *, keep: int = 1) -> None:
    """Print ``table`` whole if its widest rendering fits the console, else in column groups that fit, each
    repeating the first ``keep`` columns (what names a row), so no cell is wrapped or cut."""
    width = console.width
    n = len(table.columns)
    head = list(range(min(keep, n)))
    if n <= len(head) + 1 or _width(console, table) <= width:
        console.print(table)
        return
    groups: list[list[int]] = []
    current = list(head)
    for i in range(len(head), n):
        trial = current + [i]
        if len(current) > len(head) and _width(console, _subtable(table, trial, None)) > width:
            groups.append(current)
            current = [*head, i]
        else:
            current = trial
    groups.append(current)
    for k, cols in enumerate(groups):
        console.print(_subtable(table, cols, table.title if k == 0 else None))


def stdout_console() -> Console:
    """Where tables go: the terminal at its width, or a pipe or file at 140 columns (a log gets whole rows)."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = 140
    return console


MAX_NOTES = 6
"""distinct notes the terminal prints (the report lists every one)"""


def print_notes(console: Console, counts: list[tuple[str, int]], total: int, what: str, *,
                report: bool = True) -> None:
    """The replays' notes, as `rltrace replay` prints them, each once with the share of ``what`` that gave it: the
    first :data:`MAX_NOTES` when a report lists them all (``report``), else every one."""
    shown = counts[:MAX_NOTES] if report else counts
    for note, count in shown:
        console.print(f"note: {note}" + (f" ({count} of {total} {what})" if count < total else ""), markup=False)
    if len(counts) > len(shown):
        console.print(f"note: {len(counts) - len(shown)} more notes in the report", markup=False)
