"""The bundle manifest (``manifest.json``): provenance, cluster, model and RL configuration.

Unknown keys are kept in ``extra`` so a newer writer's fields survive a round trip through an older reader.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from rltrace.errors import ValidationError, clean
from rltrace.schema import FORMAT_MAJOR, FORMAT_MINOR, FORMAT_VERSION, parse_version
from rltrace.version import __version__

MANIFEST_FILE = "manifest.json"
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
"""A manifest is a few kilobytes; anything this large is not one (and would be parsed into memory whole)."""
MAX_DEPTH = 64
"""Deepest nesting of objects and lists a manifest may hold (JSON nested 100,000 deep is refused, not a
RecursionError)."""
MAX_INT = 2**63 - 1
MAX_GPUS = 1_000_000
"""Most devices in one pool: more than any cluster built; a larger count is a corrupt manifest, not a cluster
to lay out (replay would allocate per device)."""
# (class, field) -> inclusive bounds, checked before anything is built from the manifest. Model dimensions are
# divided by (heads, hidden) and allocated (execute), so they must be positive and plausible.
_BOUNDS: dict[tuple[str, str], tuple[int, int]] = {
    ("Pool", "count"): (0, MAX_GPUS),
    ("Pool", "tp"): (1, MAX_GPUS),
    **{("ModelInfo", f): (1, 1 << 20) for f in ("hidden", "heads", "kv_heads", "head_dim", "intermediate")},
    ("ModelInfo", "layers"): (1, 100_000),
    ("ModelInfo", "vocab"): (1, 1 << 24),
    ("ModelInfo", "dtype_bytes"): (1, 16),
    ("ModelInfo", "kv_dtype_bytes"): (1, 16),
    **{("ModelInfo", f): (0, 1 << 20) for f in ("experts", "experts_per_token", "shared_experts", "expert_intermediate",
                                                "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                                                "v_head_dim", "sliding_window")},
    ("ModelInfo", "dense_layers"): (0, 100_000),
    ("ModelInfo", "tp_norm_allreduces"): (0, 16),
    ("ModelInfo", "params"): (1, 10**15),
    ("RLConfig", "prompts_per_step"): (1, 10**7),
    ("RLConfig", "samples_per_prompt"): (1, 10**7),
    ("RLConfig", "max_new_tokens"): (0, 1 << 31),
}


@dataclass(kw_only=True, slots=True)
class ModelInfo:
    """Architecture of the policy model (numbers as in its Hugging Face config).

    The fields after ``head_dim`` (format 1.4) record what a dense GQA model lacks: mixture-of-experts, MLA, a
    sliding window, biases, tied embeddings, the KV cache's type, as the catalog's ``ModelSpec`` names them (0 or
    False: absent). A writer sets all of them or none (``kv_dtype_bytes`` may be null either way: the weights'
    type): ``experts`` null marks a manifest from before 1.4, whose model replay takes from the catalog by name."""

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
    experts: int | None = None
    experts_per_token: int | None = None
    shared_experts: int | None = None
    expert_intermediate: int | None = None
    dense_layers: int | None = None
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    sliding_window: int | None = None
    tp_norm_allreduces: int | None = None
    qkv_bias: bool | None = None
    tied_embeddings: bool | None = None
    kv_dtype_bytes: int | None = None
    """bytes per KV-cache element; null: the weights' type (BF16 for FP8 weights), as in the catalog"""


@dataclass(kw_only=True, slots=True)
class Pool:
    """A group of identical devices that play one role (e.g. the rollout pool)."""

    device: str
    count: int
    tp: int = 1

    @property
    def instances(self) -> int:
        """Engines (or model replicas) the pool holds: its devices in groups of ``tp``, at least one."""
        return max(self.count // max(self.tp, 1), 1)


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
    def from_json(cls, text: str | bytes, *, file: str = MANIFEST_FILE) -> Manifest:
        """Parse and type-check a manifest; errors name the file and the offending field.

        Bytes must be UTF-8. Refused with a :class:`ValidationError`: invalid JSON or UTF-8, NaN/Infinity,
        nesting deeper than ``MAX_DEPTH``, lone surrogates (``"\\ud800"``, not Unicode), a field of the wrong
        type, and numbers outside their field's bounds.
        """
        if len(text) > MAX_MANIFEST_BYTES:
            raise ValidationError(f"{len(text):,} bytes: too large for a manifest (at most {MAX_MANIFEST_BYTES:,})",
                                  file=file)
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValidationError(
                    f"not UTF-8 (byte 0x{text[e.start]:02x} at offset {e.start})", file=file
                ) from None
        try:
            raw = json.loads(text, parse_constant=_no_constant)
        except json.JSONDecodeError as e:
            raise ValidationError(f"not valid JSON ({e.msg} at line {e.lineno})", file=file) from None
        except RecursionError:
            raise ValidationError(f"nested too deeply (at most {MAX_DEPTH} levels)", file=file) from None
        except ValueError as e:  # parse_constant's refusal
            raise ValidationError(str(e), file=file) from None
        if not isinstance(raw, dict):
            raise ValidationError("must be a JSON object", file=file)
        _check_tree(raw, file)
        # format_version has a default for writers, but a reader must not guess it: without it, a manifest of
        # any version (or a JSON object that is no manifest) would read as the current one.
        manifest: Manifest = _build(cls, raw, file, "", strict=_known_version(raw.get("format_version")),
                                    required=("format_version",))
        return manifest


def _known_version(text: Any) -> bool:
    """Whether the manifest is of a version this reader knows: then a field it does not know is damage (a
    flipped byte renamed it), not a newer writer's addition, and is refused rather than dropped."""
    try:
        return parse_version(text) <= (FORMAT_MAJOR, FORMAT_MINOR)
    except (TypeError, ValueError):
        return False  # the version check names it


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _check_tree(raw: Any, file: str) -> None:
    """Depth and Unicode of every value, iteratively (no recursion to exhaust)."""
    stack: list[tuple[Any, str, int]] = [(raw, "", 1)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValidationError(f"nested too deeply at '{where}' (at most {MAX_DEPTH} levels)", file=file)
        if isinstance(value, dict):
            for k, v in value.items():
                key = f"{where}.{k}" if where else k
                _unicode(k, key, file)
                stack.append((v, key, depth + 1))
        elif isinstance(value, list):
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value))
        elif isinstance(value, str):
            _unicode(value, where, file)


def _unicode(text: str, key: str, file: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValidationError(f"field '{key}' holds a lone surrogate (\\u{ord(text[e.start]):04x}), which is not "
                              "Unicode", file=file) from None


def _build(cls: type, raw: dict[str, Any], file: str, prefix: str, *, strict: bool = False,
           required: tuple[str, ...] = ()) -> Any:
    """An instance of the dataclass ``cls`` from ``raw``; a field with a default may be left out unless it is
    in ``required``."""
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    if "extra" in known and raw.get("extra") is not None:
        extra = dict(_obj(raw["extra"], file, f"{prefix}extra"))
    for key, value in raw.items():
        if key not in known:
            if strict:
                raise ValidationError(f"unknown field '{prefix}{clean(key, 60)}' in a format "
                                      f"{FORMAT_MAJOR}.{FORMAT_MINOR} or older manifest", file=file)
            extra[key] = value  # a newer writer's field: keep it
            continue
        if key == "extra":
            continue
        kwargs[key] = _coerce(known[key].type, value, file, f"{prefix}{key}", strict)
        bounds = _BOUNDS.get((cls.__name__, key))
        if bounds is not None and kwargs[key] is not None and not bounds[0] <= kwargs[key] <= bounds[1]:
            raise ValidationError(f"field '{prefix}{key}' must be in {bounds[0]:,}..{bounds[1]:,}, got "
                                  f"{kwargs[key]:,}", file=file)
    missing = [
        n
        for n, f in known.items()
        if n not in kwargs
        and n != "extra"
        and (n in required or (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING))
    ]
    if missing:
        raise ValidationError(f"missing field '{prefix}{missing[0]}'", file=file)
    if "extra" in known:
        kwargs["extra"] = extra
    return cls(**kwargs)


_NESTED = {"ModelInfo": ModelInfo, "Pool": Pool, "RLConfig": RLConfig}


def _coerce(type_text: Any, value: Any, file: str, key: str, strict: bool = False) -> Any:
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
            return {k: _build(nested, _obj(v, file, f"{key}.{k}"), file, f"{key}.{k}.", strict=strict)
                    for k, v in value.items()}
        if t.startswith(name):
            return _build(nested, _obj(value, file, key), file, f"{key}.", strict=strict)
    if t.startswith("bool"):
        if not isinstance(value, bool):
            raise ValidationError(f"field '{key}' must be true or false, got {_short(value)}", file=file)
        return value
    if t.startswith("int"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError(f"field '{key}' must be an integer, got {_short(value)}", file=file)
        if value < 0:
            raise ValidationError(f"field '{key}' must be >= 0, got {_short(value)}", file=file)
        if value > MAX_INT:
            raise ValidationError(f"field '{key}' must be <= 2^63-1, got {_short(value)}", file=file)
        return value
    if t.startswith("str"):
        if not isinstance(value, str):
            raise ValidationError(f"field '{key}' must be a string, got {_short(value)}", file=file)
        return value
    if t.startswith("list[str]"):
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise ValidationError(f"field '{key}' must be a list of strings", file=file)
        return value
    if t.startswith("dict[str, int]"):
        if not isinstance(value, dict) or not all(
            isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_INT for x in value.values()
        ):
            raise ValidationError(f"field '{key}' must map names to integers in 0..2^63-1", file=file)
        return value
    return value


def _obj(value: Any, file: str, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationError(f"field '{key}' must be an object, got {_short(value)}", file=file)
    return value


def _short(value: Any) -> str:
    """A value for an error line: repr, cut (a 10^6-element list must not become the message)."""
    if isinstance(value, (list, dict)):
        return f"a {'list' if isinstance(value, list) else 'object'} of {len(value):,} items"
    huge = isinstance(value, int) and abs(value) >= 10**30
    text = f"an integer of {value.bit_length()} bits" if huge else repr(value)
    return text if len(text) <= 80 else text[:80] + "..."
