"""Configuration plumbing: nested ``kw_only`` dataclasses built from TOML tables and ``--set key=value``.

Every component owns its own small config dataclass; this module only converts between those and plain
dicts, rejecting unknown keys and wrongly typed values with one precise message.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import types
import typing
from collections.abc import Iterable
from typing import Any, TypeVar

from rltrace.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

T = TypeVar("T")


def build(cls: type[T], data: dict[str, Any], where: str = "config") -> T:
    """Build dataclass ``cls`` from ``data``, recursing into nested dataclass fields."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(names))})")
    kwargs = {k: _value(hints[k], v, f"{where}.{k}") for k, v in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ConfigError(f"{where}: {e}") from None


def _value(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _value(args[0], value, where)
    if dataclasses.is_dataclass(hint):
        if dataclasses.is_dataclass(value):
            return value
        return build(hint, value, where)  # type: ignore[arg-type]
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        if not math.isfinite(value):  # TOML reads nan and inf: no setting means either
            raise ConfigError(f"{where}: expected a finite number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if hint is bool and not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if hint is str and not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    return value


def to_dict(obj: Any) -> dict[str, Any]:
    """The plain-dict form of a config dataclass (what ``build`` reads back)."""
    return dataclasses.asdict(obj)


def parse_scalar(text: str) -> Any:
    """Read ``text`` as a TOML value (``3``, ``0.5``, ``true``, ``"x"``); anything else is a bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_sets(data: dict[str, Any], assignments: Iterable[str]) -> dict[str, Any]:
    """Apply ``a.b=value`` assignments to a nested dict (in place) and return it."""
    for item in assignments:
        key, eq, text = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"--set {item!r}: expected key=value")
        parts = key.strip().split(".")
        node = data
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                raise ConfigError(f"--set {item!r}: unknown key {key.strip()!r}")
            node = child
        if parts[-1] not in node:
            raise ConfigError(f"--set {item!r}: unknown key {key.strip()!r}")
        node[parts[-1]] = parse_scalar(text.strip())
    return data
