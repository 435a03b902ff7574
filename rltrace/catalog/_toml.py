"""TOML loading shared by the catalogs (tomllib on 3.11+, tomli on 3.10)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rltrace.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


def load_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file; a missing or malformed file is a ConfigError naming it."""
    p = Path(path)
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: invalid TOML ({e})") from None


def lookup(table: dict[str, Any], name: str, what: str) -> Any:
    """Case-insensitive catalog lookup with a helpful error."""
    for key, value in table.items():
        if key.lower() == name.lower():
            return value
    raise ConfigError(f"unknown {what} {name!r} (known: {', '.join(sorted(table))})")
