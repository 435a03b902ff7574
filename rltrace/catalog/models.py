"""Model architecture catalog: the numbers the cost models and the synthesizer need.

Built-in entries live in ``models.toml`` (copied from each model's Hugging Face config.json); users add their
own with a TOML file in the same shape, or point at a Hugging Face ``config.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from rltrace.catalog._toml import build_entry, load_catalog, lookup
from rltrace.errors import ConfigError
from rltrace.manifest import ModelInfo

_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1}


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """A dense decoder-only transformer (Llama/Qwen family: GQA attention, SwiGLU MLP)."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    head_dim: int | None = None
    qkv_bias: bool = False
    tied_embeddings: bool = False
    dtype_bytes: int = 2
    published_params: float | None = None
    source: str = ""

    @property
    def dim_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def layer_params(self) -> int:
        """Parameters of one transformer block: attention projections, SwiGLU MLP and two norms."""
        q = self.heads * self.dim_head
        kv = self.kv_heads * self.dim_head
        attn = self.hidden * q + 2 * self.hidden * kv + q * self.hidden
        bias = (q + 2 * kv) if self.qkv_bias else 0
        mlp = 3 * self.hidden * self.intermediate
        return attn + bias + mlp + 2 * self.hidden

    @property
    def params(self) -> int:
        """Total parameters, computed from the architecture."""
        embed = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * self.layer_params + embed + self.hidden

    @property
    def weight_bytes(self) -> int:
        return self.params * self.dtype_bytes

    @property
    def tensors(self) -> int:
        """Named weight tensors in a checkpoint (q,k,v,o,gate,up,down and 2 norms per layer, biases, embeddings)."""
        per_layer = 9 + (3 if self.qkv_bias else 0)
        return self.layers * per_layer + (2 if self.tied_embeddings else 3)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies across all layers."""
        return 2 * self.layers * self.kv_heads * self.dim_head * self.dtype_bytes

    def info(self) -> ModelInfo:
        """The manifest's view of this model."""
        return ModelInfo(
            name=self.name,
            params=self.params,
            layers=self.layers,
            hidden=self.hidden,
            heads=self.heads,
            kv_heads=self.kv_heads,
            vocab=self.vocab,
            dtype_bytes=self.dtype_bytes,
            intermediate=self.intermediate,
            head_dim=self.dim_head,
        )


def _spec(name: str, raw: dict[str, Any], where: str) -> ModelSpec:
    spec = build_entry(ModelSpec, name, raw, where, "model")
    for key in ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab"):
        if not isinstance(getattr(spec, key), int) or getattr(spec, key) <= 0:
            raise ConfigError(f"{where}: model {name!r}: {key} must be a positive integer")
    return spec


_BUILTIN = Path(__file__).with_name("models.toml")


def load_models(extra: str | Path | None = None) -> dict[str, ModelSpec]:
    """The built-in models, plus (overriding by name) those of a user TOML file with a [models.NAME] table."""
    if extra is None:
        return dict(_builtin())
    return load_catalog(_BUILTIN, "models", extra, _spec)


@cache
def _builtin() -> dict[str, ModelSpec]:
    return load_catalog(_BUILTIN, "models", None, _spec)


def get_model(name: str, extra: str | Path | None = None) -> ModelSpec:
    """Look a model up by name (case-insensitive), or read a Hugging Face ``config.json`` if ``name`` is one."""
    if name.endswith(".json"):
        return from_hf_config(name)
    return lookup(load_models(extra), name, "model")


def from_hf_config(path: str | Path) -> ModelSpec:
    """Build a spec from a Hugging Face ``config.json`` (Llama/Qwen/Mistral-style keys)."""
    p = Path(path)
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{p}: invalid JSON ({e.msg})") from None
    try:
        raw = {
            "hidden": cfg["hidden_size"],
            "layers": cfg["num_hidden_layers"],
            "heads": cfg["num_attention_heads"],
            "kv_heads": cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
            "intermediate": cfg["intermediate_size"],
            "vocab": cfg["vocab_size"],
            "head_dim": cfg.get("head_dim"),
            "qkv_bias": bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2")),
            "tied_embeddings": bool(cfg.get("tie_word_embeddings", False)),
            "dtype_bytes": _DTYPE_BYTES.get(str(cfg.get("torch_dtype", cfg.get("dtype", "bfloat16"))), 2),
            "source": str(p),
        }
    except KeyError as e:
        raise ConfigError(f"{p}: missing key {e.args[0]!r} for a decoder-only transformer") from None
    return _spec(cfg.get("_name_or_path") or p.parent.name or "custom", raw, str(p))
