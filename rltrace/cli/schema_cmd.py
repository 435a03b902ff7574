"""``rltrace schema``: print the trace bundle format reference (the tables in docs/format.md) and the described-job
format (docs/described.md)."""

from __future__ import annotations

from rltrace.replay.described import markdown_reference as described_reference
from rltrace.schema import markdown_reference


def schema() -> None:
    """Print the trace bundle's tables (every column, type, unit and rule) and the described-job keys as markdown.

    The manifest's fields and a replay run folder's files are in docs/format.md.

    Example: rltrace schema > bundle-tables.md
    """
    print(markdown_reference(), end="")
    print()
    print(described_reference(), end="")
