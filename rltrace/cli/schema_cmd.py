"""``rltrace schema``: print the trace bundle format reference (the tables in docs/format.md)."""

from __future__ import annotations

from rltrace.schema import markdown_reference


def schema() -> None:
    """Print the trace bundle format (every table, column, type, unit and rule) as markdown.

    Example: rltrace schema > format.md
    """
    print(markdown_reference(), end="")
