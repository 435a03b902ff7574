"""TOML loading shared by the catalogs (tomllib on 3.11+, tomli on 3.10)."""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar

from rltrace.errors import ConfigError
from rltrace.limits import check_input

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


def load_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file; a missing or malformed file is a ConfigError naming it."""
    p = check_input(path)
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not a TOML file (not UTF-8 text)") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: invalid TOML ({e})") from None


def paths_from_folder(data: dict[str, Any], folder: Path, model: bool = True,
                      tables: tuple[str, ...] = ()) -> dict[str, Any]:
    """``data`` (a file's TOML) with its relative paths taken from the file's ``folder``, not from wherever the
    command runs: the ``model`` key where it names a config.json, and the ``path`` key of each of ``tables``."""
    named = data.get("model")
    if model and isinstance(named, str) and named.endswith(".json") and not Path(named).is_absolute():
        data["model"] = str(folder / named)
    for table in tables:
        inner = data.get(table)
        if isinstance(inner, dict) and isinstance(inner.get("path"), str) and inner["path"] \
                and not Path(inner["path"]).is_absolute():
            inner["path"] = str(folder / inner["path"])
    return data


E = TypeVar("E")


def lookup(table: dict[str, E], name: str, what: str) -> E:
    """Case-insensitive catalog lookup with a helpful error."""
    for key, value in table.items():
        if key.lower() == name.lower():
            return value
    known = "known: " + ", ".join(sorted(table))
    if len(known) > 240:  # a list past an error line's length (the model catalog): the nearest names, and a count
        lowered = {k.lower(): k for k in table}
        near = [lowered[k] for k in difflib.get_close_matches(name.lower(), lowered, n=5, cutoff=0.3)]
        known = (f"nearest: {', '.join(near)}; " if near else "") + f"{len(table)} known"
    raise ConfigError(f"unknown {what} {name!r} ({known})")


def build_entry(cls: type[E], name: str, raw: dict[str, Any], where: str, what: str) -> E:
    """Construct one catalog entry (a frozen dataclass with a ``name``), rejecting unknown keys."""
    allowed = {f.name for f in fields(cls)} - {"name"}  # type: ignore[arg-type]  # every catalog entry is a dataclass
    unknown = set(raw) - allowed
    if unknown:
        raise ConfigError(f"{where}: {what} {name!r} has unknown key {min(unknown)!r}")
    make: Callable[..., E] = cls  # a dataclass: its fields are keywords
    try:
        return make(name=name, **raw)
    except TypeError as e:
        raise ConfigError(f"{where}: {what} {name!r}: {e}") from None


CATALOG_SECTIONS = {"gpus", "models"}  # one user file may extend both catalogs


def load_catalog(
    builtin: Path, section: str, extra: str | Path | None, entry: Callable[[str, dict[str, Any], str], E]
) -> dict[str, E]:
    """Entries of ``[section.NAME]`` tables: the built-in file, then (overriding by name) a user file."""
    entries = {}
    for path in (builtin, extra):
        if path is None:
            continue
        data = load_toml(path)
        stray = sorted(set(data) - CATALOG_SECTIONS)
        if stray:  # a key outside [gpus.NAME] / [models.NAME] tables would be silently ignored
            raise ConfigError(f"{path}: unexpected top-level key {stray[0]!r} (entries go in [gpus.NAME] or "
                              "[models.NAME] tables)")
        for name, raw in (data.get(section) or {}).items():
            entries[name] = entry(name, raw, str(path))
    return entries
