"""The bundle manifest (``manifest.json``): provenance, cluster, model and RL configuration.

Unknown keys are kept in ``extra`` so a newer writer's fields survive a round trip through an older reader.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from rltrace.errors import ValidationError
from rltrace.schema import FORMAT_VERSION
from rltrace.version import __version__

MANIFEST_FILE = "manifest.json"


@dataclass(kw_only=True, slots=True)
class ModelInfo:
    """Architecture of the policy model (numbers as in its Hugging Face config)."""

    name: str
    params: int
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    vocab: int
    dtype_bytes: int = 2
    intermediate: int | None = None
    head_dim: int | None = None


@dataclass(kw_only=True, slots=True)
class Pool:
    """A group of identical devices that play one role (e.g. the rollout pool)."""

    device: str
    count: int
    tp: int = 1


@dataclass(kw_only=True, slots=True)
class RLConfig:
    """The RL algorithm's batch shape."""

    algorithm: str
    prompts_per_step: int
    samples_per_prompt: int
    max_new_tokens: int


@dataclass(kw_only=True, slots=True)
class Manifest:
    """Everything about a bundle that is not a table row."""

    run_id: str
    created_ns: int = field(default_factory=time.time_ns)
    format_version: str = FORMAT_VERSION
    rltrace_version: str = __version__
    source: str = "unknown"
    command: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    cluster: dict[str, Pool] = field(default_factory=dict)
    model: ModelInfo | None = None
    rl: RLConfig | None = None
    notes: list[str] = field(default_factory=list)
    tables: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """Serialise, sorted and indented so identical manifests give identical bytes."""
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, *, file: str = MANIFEST_FILE) -> Manifest:
        """Parse and type-check a manifest; errors name the file and the offending field."""
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValidationError(f"not valid JSON ({e.msg} at line {e.lineno})", file=file) from None
        if not isinstance(raw, dict):
            raise ValidationError("must be a JSON object", file=file)
        return _build(cls, raw, file, "")


def _build(cls: type, raw: dict[str, Any], file: str, prefix: str) -> Any:
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    extra = dict(raw.get("extra") or {}) if "extra" in known else {}
    for key, value in raw.items():
        if key not in known:
            extra[key] = value  # a newer writer's field: keep it
            continue
        if key == "extra":
            continue
        kwargs[key] = _coerce(known[key].type, value, file, f"{prefix}{key}")
    missing = [
        n
        for n, f in known.items()
        if n not in kwargs
        and n != "extra"
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValidationError(f"missing field '{prefix}{missing[0]}'", file=file)
    if "extra" in known:
        kwargs["extra"] = extra
    return cls(**kwargs)


_NESTED = {"ModelInfo": ModelInfo, "Pool": Pool, "RLConfig": RLConfig}


def _coerce(type_text: Any, value: Any, file: str, key: str) -> Any:
    t = str(type_text)
    optional = "None" in t
    if value is None:
        if optional:
            return None
        raise ValidationError(f"field '{key}' must not be null", file=file)
    for name, nested in _NESTED.items():
        if t.startswith(f"dict[str, {name}]"):
            if not isinstance(value, dict):
                raise ValidationError(f"field '{key}' must be an object", file=file)
            return {k: _build(nested, _obj(v, file, f"{key}.{k}"), file, f"{key}.{k}.") for k, v in value.items()}
        if t.startswith(name):
            return _build(nested, _obj(value, file, key), file, f"{key}.")
    if t.startswith("int"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError(f"field '{key}' must be an integer, got {value!r}", file=file)
        if value < 0:
            raise ValidationError(f"field '{key}' must be >= 0, got {value}", file=file)
        return value
    if t.startswith("str"):
        if not isinstance(value, str):
            raise ValidationError(f"field '{key}' must be a string, got {value!r}", file=file)
        return value
    if t.startswith("list[str]"):
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise ValidationError(f"field '{key}' must be a list of strings", file=file)
        return value
    if t.startswith("dict[str, int]"):
        if not isinstance(value, dict) or not all(isinstance(x, int) for x in value.values()):
            raise ValidationError(f"field '{key}' must map names to integers", file=file)
        return value
    return value


def _obj(value: Any, file: str, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationError(f"field '{key}' must be an object, got {value!r}", file=file)
    return value
