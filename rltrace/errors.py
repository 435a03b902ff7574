"""Error types that the CLI turns into one line on stderr and exit code 2.

Everything a user can get wrong (a path, a file, a value, an option) raises a subclass of
:class:`RltraceError`; anything else escaping the CLI is a bug in rltrace and keeps its traceback.
"""

from __future__ import annotations


class RltraceError(Exception):
    """Base class for errors caused by the user's input, not by a bug in rltrace."""


class BundleError(RltraceError):
    """A trace bundle cannot be read: missing, not a bundle, corrupt, or from a newer major format."""


class ValidationError(BundleError):
    """A value in a bundle breaks the format: names the file, column and row (0-based) where known."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        column: str | None = None,
        row: int | None = None,
    ) -> None:
        self.file = file
        self.column = column
        self.row = row
        self.detail = message
        where = []
        if file is not None:
            where.append(file)
        if column is not None:
            where.append(f"column '{column}'")
        if row is not None:
            where.append(f"row {row}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class ConfigError(RltraceError):
    """A configuration value, option or parameter is unknown or impossible."""
