"""Configuration plumbing: nested ``kw_only`` dataclasses built from TOML tables and ``--set key=value``.

Every component owns its own small config dataclass. ``build`` makes one from a table (a TOML file's);
``override`` sets dotted keys on one to typed values (``parse_set`` reads a ``--set`` item into such a value)
and returns a new dataclass: values go from the parser to the component as typed objects, never back
through text. Unknown keys and wrongly typed values are one precise message. A field may hold a *config
scalar*: a class with ``from_config(value, where)`` (read from its text form, e.g. a topology spec) and
``to_config()`` (its text form again, for config.json).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import sys
import types
import typing
from collections.abc import Iterable
from typing import Any, TypeVar

from rltrace.errors import ConfigError
from rltrace.limits import MAX_SECONDS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

T = TypeVar("T")


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """``cls``'s resolved field types, once per class (resolving them parses every annotation string: a sweep builds
    a config thousands of times)."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def build(cls: type[T], data: dict[str, Any], where: str = "config") -> T:
    """Build dataclass ``cls`` from ``data``, recursing into nested dataclass fields (an instance of ``cls`` is
    returned as it is)."""
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table, got {as_written(data)}")
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]  # a config class: a dataclass
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(names))})")
    required = [f.name for f in dataclasses.fields(cls)  # type: ignore[arg-type]  # a config class: a dataclass
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.init]
    missing = [name for name in required if name not in data]
    if missing:  # in the file's terms, not the dataclass constructor's
        raise ConfigError(f"{where}: missing key {missing[0]!r}")
    kwargs = {k: _field(k, hints[k], v, f"{where}.{k}") for k, v in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ConfigError(f"{where}: {e}") from None


def _field(name: str, hint: Any, value: Any, where: str) -> Any:
    """Field ``name``'s value checked against its type, and a number in seconds (``*_s``) against the limit."""
    typed = _value(hint, value, where)
    if name.endswith("_s") and isinstance(typed, float) and abs(typed) > MAX_SECONDS:
        raise ConfigError(f"{where}={typed:g} is past the limit of {MAX_SECONDS:g} (either sign) "
                          "for a value in seconds or per second")
    return typed


def _value(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _value(args[0], value, where)
    if isinstance(hint, type) and hasattr(hint, "from_config"):  # a config scalar, typed from its text form
        return value if isinstance(value, hint) else hint.from_config(value, where)
    if dataclasses.is_dataclass(hint):
        if dataclasses.is_dataclass(value):
            return value
        return build(hint, value, where)  # type: ignore[arg-type]  # is_dataclass(hint) above
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {as_written(value)}")
        if not math.isfinite(value):  # TOML reads nan and inf: no setting means either
            raise ConfigError(f"{where}: expected a finite number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {as_written(value)}")
        return value
    if hint is bool and not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false, got {as_written(value)}")
    if hint is str and not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string, got {as_written(value)}")
    return value


def as_written(value: Any) -> str:
    """A value for a message, as the TOML file or ``--set`` spelled it: ``true``, not Python's ``True``."""
    return str(value).lower() if isinstance(value, bool) else repr(value)


def to_dict(obj: Any) -> dict[str, Any]:
    """The plain-dict form of a config dataclass (what ``build`` reads back; config scalars as their text)."""
    return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


def _plain(value: Any) -> Any:
    if hasattr(value, "to_config"):
        return value.to_config()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_dict(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return copy.deepcopy(value)


def parse_set(item: str, flag: str = "--set") -> tuple[str, Any]:
    """One ``--set key=value`` item (or another flag's): the dotted key and the value read as a TOML scalar
    (else a bare string)."""
    key, eq, text = item.partition("=")
    if not eq or not key.strip():
        raise ConfigError(f"{flag} {item!r}: expected key=value")
    return key.strip(), parse_scalar(text.strip())


Assignment = tuple[str, Any, str]
"""(dotted key, typed value, where it came from for messages: ``--set 'cost.train_mfu=0.4'``, a grid file)"""


def _known(names: set[str], prefix: str, above: list[str], part: str) -> str:
    """What an unknown key's message adds: the keys known at its level, and the nearest one (a typo, trian_ep; or a
    part of the name, cost.ep for cost.train_ep)."""
    level = ".".join(filter(None, (prefix.rstrip("."), *above)))
    if not names:
        return f" ({level} takes no settings)" if level else ""
    near = difflib.get_close_matches(part, sorted(names), n=1) or [n for n in sorted(names) if len(part) > 1
                                                                   and part in n]
    hint = f"; did you mean {level + '.' if level else ''}{near[0]}?" if near else ""
    return f" (known{' under ' + level if level else ''}: {', '.join(sorted(names))}{hint})"


def override(obj: T, assignments: Iterable[Assignment], where: str = "config", prefix: str = "") -> T:
    """A copy of config dataclass ``obj`` with each dotted key set to its value, checked against the field's
    type as ``build`` checks a table. Each nested dataclass is replaced once, with all its new values, so its
    checks across fields see the final ones. An unknown key is a ConfigError naming the assignment and the key
    (after ``prefix``, the part of the user's key that chose ``obj``: ``rollpacker.``)."""
    tree: dict[str, Any] = {}
    for key, value, origin in assignments:
        parts = key.split(".")
        node, target = tree, obj
        for depth, part in enumerate(parts):
            names = {f.name for f in dataclasses.fields(target) if f.init} if _is_config(target) else set()  # type: ignore[arg-type]  # _is_config: a dataclass
            if part not in names:
                raise ConfigError(f"{origin}: unknown key {prefix + key!r}{_known(names, prefix, parts[:depth], part)}")
            if depth == len(parts) - 1:
                node[part] = (value, origin)
            else:
                target = getattr(target, part)
                child = node.setdefault(part, {})
                if not isinstance(child, dict):  # "cost" set whole, then "cost.x": the later one wins alone
                    child = node[part] = {}
                node = child
    replaced: T = _replace(obj, tree, where)
    return replaced


def _is_config(obj: Any) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


def _replace(obj: Any, tree: dict[str, Any], where: str) -> Any:
    hints = _hints(type(obj))
    changes: dict[str, Any] = {}
    origins: list[str] = []
    for name, sub in tree.items():
        if isinstance(sub, dict):
            changes[name] = _replace(getattr(obj, name), sub, f"{where}.{name}")
        else:
            value, origin = sub
            origins.append(origin)
            changes[name] = _field(name, hints[name], value, f"{origin}: {where}.{name}")
    try:
        return dataclasses.replace(obj, **changes)
    except TypeError as e:
        raise ConfigError(f"{where}: {e}") from None
    except ConfigError as e:  # a check in __post_init__: say which assignments it judged (a grid file, --set)
        came_from = ", ".join(dict.fromkeys(origins))
        raise ConfigError(f"{came_from}: {e}" if came_from and not str(e).startswith(came_from) else str(e)) from None


def parse_scalar(text: str) -> Any:
    """Read ``text`` as a TOML value (``3``, ``0.5``, ``true``, ``"x"``); anything else is a bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
