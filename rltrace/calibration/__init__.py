"""The cost models' measured, fitted and assumed constants, kept as data: ``rltrace/calibration/*.toml``.

Each constant is one entry with its value, unit, kind (measured, fitted, assumed or an engine's setting), source,
the script that fits or checks it, and the data it comes from. :func:`load` reads every file once into one frozen
:class:`CostCalibration`; the modules that price (``rltrace.replay.costmodels``: ``serving``, ``memory``,
``parallel``, ``training``, ``switching``, ``generation``) take their constants from one :class:`CostCalibration`
passed down to them (:data:`CALIBRATION`, the shipped files, unless a run names its own with ``cost.calibration``:
:meth:`CostCalibration.overridden`), and a replay's ``config.json`` names the files it used with their versions and
digests (:meth:`CostCalibration.describe`). ``rltrace calibrate`` writes a user's own measurements in the same
format (:func:`dumps`); an entry may carry keys beyond :data:`FIELDS` that scope it (``Constant.extra``: a profile's
GPU kind, TP and regime).
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from rltrace.catalog._toml import load_toml
from rltrace.errors import ConfigError
from rltrace.files import sha256_of

FOLDER = Path(__file__).parent
KINDS = ("measured", "fitted", "assumed", "setting")
FIELDS = ("value", "unit", "kind", "source", "fit", "data")


@dataclass(frozen=True, slots=True)
class Constant:
    """One calibrated constant."""

    name: str
    value: float
    unit: str
    kind: str
    """measured, fitted, assumed or setting"""
    source: str
    fit: str
    """the script that fits or checks it ('' where it is read off its source)"""
    data: str
    """the data it was read off or fitted on"""
    file: str
    extra: Mapping[str, str | int | float] = field(default_factory=lambda: MappingProxyType({}))
    """the entry's keys beyond :data:`FIELDS`, numbers and strings only (what the constant applies to)"""

    def __reduce__(self) -> tuple[Any, ...]:  # a mapping proxy does not pickle; its dict does
        return _constant, (self.name, self.value, self.unit, self.kind, self.source, self.fit, self.data, self.file,
                           dict(self.extra))


@dataclass(frozen=True, slots=True)
class CostCalibration:
    """Every constant of every calibration file, by name; the files with their versions and digests."""

    constants: Mapping[str, Constant]
    files: Mapping[str, tuple[int, str]]
    """file name -> (version, sha256 of its bytes, first 12 hex digits)"""

    def __hash__(self) -> int:  # the files' digests pin every constant
        return hash(frozenset(self.files.items()))

    def __reduce__(self) -> tuple[Any, ...]:  # a mapping proxy does not pickle; its dict does
        return _calibration, (dict(self.constants), dict(self.files))

    def __getitem__(self, name: str) -> float:
        """The value of constant ``name`` (KeyError names the files read)."""
        try:
            return self.constants[name].value
        except KeyError:
            raise KeyError(f"no calibrated constant {name!r} in {', '.join(self.files)}") from None

    def describe(self) -> dict[str, dict[str, int | str]]:
        """What a run records: each file's version and digest."""
        return {name: {"version": version, "sha256": digest} for name, (version, digest) in self.files.items()}

    def overridden(self, path: str | Path) -> CostCalibration:
        """This calibration with the constants of the user's file ``path`` (the shipped format) in place of the
        ones of the same names. Every entry must name one of this calibration's constants, in its unit; the file
        joins :attr:`files` under its absolute path. ``rltrace replay --set cost.calibration=FILE.toml`` reads one so;
        a value must be finite and not negative, above 0 for a rate, a ratio or a fraction (each divides a cost) and
        at most 1 for a fraction or an MFU."""
        given = load([Path(path)])
        unknown = sorted(set(given.constants) - set(self.constants))
        if unknown:
            near = [f"{name} (nearest: {hit[0]})" if (hit := difflib.get_close_matches(name, list(self.constants), n=1))
                    else name for name in unknown]
            raise ConfigError(f"{path}: no calibrated constant is named {', '.join(near)}; the shipped ones are in "
                              f"{', '.join(self.files)}, and an efficiency profile goes to cost.profile")
        for name, c in given.constants.items():
            if c.unit != self.constants[name].unit:
                raise ConfigError(f"{path}: constant {name} is in {self.constants[name].unit!r}, not {c.unit!r}")
            share = c.unit.startswith("fraction") or name.endswith("_mfu")
            rate = share or c.unit in ("ratio", "GB/s")
            if not (math.isfinite(c.value) and (c.value > 0 if rate else c.value >= 0) and (c.value <= 1 or not share)):
                need = "in (0, 1]" if share else "finite and > 0" if rate else "finite and >= 0"
                raise ConfigError(f"{path}: constant {name} must be {need}, got {c.value}")
        files = {**self.files, **{str(Path(path).resolve()): version for version in given.files.values()}}
        return CostCalibration(MappingProxyType({**self.constants, **given.constants}), MappingProxyType(files))


def _constant(name: str, value: float, unit: str, kind: str, source: str, fit: str, data: str, file: str,
              extra: dict[str, str | int | float]) -> Constant:
    return Constant(name, value, unit, kind, source, fit, data, file, MappingProxyType(extra))


def _calibration(constants: dict[str, Constant], files: dict[str, tuple[int, str]]) -> CostCalibration:
    return CostCalibration(MappingProxyType(constants), MappingProxyType(files))


def _entry(name: str, raw: object, file: str) -> Constant:
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: constant {name} must be a table ([constants.{name}]), got {raw!r}")
    missing = [key for key in FIELDS if key not in raw]
    if missing:
        raise ConfigError(f"{file}: constant {name} lacks {', '.join(missing)} (each entry needs {', '.join(FIELDS)})")
    value = raw["value"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{file}: constant {name}: value must be a number, got {value!r}")
    if raw["kind"] not in KINDS:
        raise ConfigError(f"{file}: constant {name}: kind must be one of {', '.join(KINDS)}, got {raw['kind']!r}")
    extra = {key: v for key, v in raw.items() if key not in FIELDS}
    odd = next((key for key, v in extra.items() if isinstance(v, bool) or not isinstance(v, (int, float, str))), None)
    if odd is not None:
        raise ConfigError(f"{file}: constant {name}: {odd} must be a number or a string, got {extra[odd]!r}")
    return Constant(name, float(value), str(raw["unit"]), str(raw["kind"]), str(raw["source"]), str(raw["fit"]),
                    str(raw["data"]), file, MappingProxyType(extra))


def file_digest(path: Path) -> str:
    """The first 12 hex digits of a file's sha256: how a run records the content of a file it read (a calibration,
    a profile, a described job), so an edited file shows as another."""
    return sha256_of(path)[:12]


def load(paths: list[Path] | None = None) -> CostCalibration:
    """Every constant of ``paths`` (default: the shipped files); a name defined twice is refused."""
    constants: dict[str, Constant] = {}
    files: dict[str, tuple[int, str]] = {}
    for path in paths if paths is not None else sorted(FOLDER.glob("*.toml")):
        table = load_toml(path)
        version = table.get("version")
        if not isinstance(version, int):
            raise ConfigError(f"{path.name}: needs an integer version")
        unknown = sorted(set(table) - {"version", "constants"})
        if unknown:
            raise ConfigError(f"{path.name}: unknown key {unknown[0]!r} (a calibration file has version and "
                              "[constants.NAME] tables)")
        given = table.get("constants", {})
        if not isinstance(given, dict):
            raise ConfigError(f"{path.name}: constants must be tables ([constants.NAME]), got {given!r}")
        for name, entry in given.items():
            if name in constants:
                raise ConfigError(f"{path.name}: constant {name} is also in {constants[name].file}")
            constants[name] = _entry(name, entry, path.name)
        files[path.name] = (version, file_digest(path))
    if not files:
        raise ConfigError(f"no calibration file under {FOLDER}: the install is incomplete")
    return CostCalibration(MappingProxyType(constants), MappingProxyType(files))


def _scalar(name: str, key: str, value: object) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"constant {name}: {key} must be a finite number or a string, got {value!r}")
    return repr(value)


def dumps(constants: Iterable[Constant], header: str, version: int = 1) -> str:
    """A calibration file holding ``constants`` in the shipped format, ``header`` as its opening comment."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()] + [f"version = {version}"]
    for c in constants:
        if c.kind not in KINDS:
            raise ConfigError(f"constant {c.name}: kind {c.kind!r} is not one of {', '.join(KINDS)}")
        lines += ["", f"[constants.{json.dumps(c.name)}]"]
        fields: dict[str, str | int | float] = {"value": c.value, "unit": c.unit, "kind": c.kind,
                                                 "source": c.source, "fit": c.fit, "data": c.data}
        lines += [f"{key} = {_scalar(c.name, key, v)}" for key, v in {**fields, **c.extra}.items()]
    return "\n".join(lines) + "\n"


CALIBRATION = load()
"""the shipped calibration, loaded once"""
