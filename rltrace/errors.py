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


class HardwareUnknown(ConfigError):
    """A replay needs a GPU kind or a model that neither the bundle records nor the caller gave (``--gpu``,
    ``--model``): a command without those options words it in its own terms."""


MAX_ERROR_CHARS = 400
"""An error line is at most this many characters (plus the ``rltrace: error: `` prefix): a 10^6-character
value in a trace must not become a megabyte on stderr."""


def clean(text: object, limit: int | None = None) -> str:
    """``text`` as a string safe for a terminal, optionally cut to ``limit`` characters.

    Control characters (ESC, OSC's BEL, C1 codes, DEL, ...) and lone surrogates are written as Python escapes
    (``\\x1b``), so a trace string can neither move the cursor, retitle the window nor crash an encoder; rich
    markup is a separate concern (print data with ``markup=False`` or as :class:`rich.text.Text`).
    """
    s = str(text)
    if limit is not None and len(s) > limit:
        s = f"{s[:limit]}... ({len(s) - limit:,} more characters)"
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() or c == " " else _escape(c) for c in s)


def _escape(c: str) -> str:
    code = ord(c)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
