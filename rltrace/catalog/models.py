"""Model architecture catalog: the numbers the cost models and the synthesizer need.

Built-in entries live in ``models.toml`` (copied from each model's Hugging Face config.json); users add their
own with a TOML file in the same shape, or point at a Hugging Face ``config.json``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from rltrace.catalog._toml import build_entry, load_catalog, lookup
from rltrace.errors import ConfigError
from rltrace.limits import check_input
from rltrace.manifest import ModelInfo
from rltrace.units import dtype_bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """A decoder-only transformer: dense (Llama/Qwen: GQA attention, SwiGLU MLP), mixture-of-experts (Mixtral,
    Qwen3-MoE, DeepSeek-V3, GLM-4.5) and multi-head latent attention (DeepSeek's MLA).

    MoE: ``experts`` routed experts of ``expert_intermediate`` width per MoE layer, ``experts_per_token`` of them
    (top-k) per token, plus ``shared_experts`` every token uses; the first ``dense_layers`` layers keep a dense
    MLP of ``intermediate`` width (DeepSeek's ``first_k_dense_replace``). MLA (``kv_lora_rank`` > 0): the KV
    cache holds one latent of ``kv_lora_rank + qk_rope_head_dim`` values per token and layer, not K and V per head.
    """

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
    """bytes per weight element (2: BF16, 1: FP8)"""
    kv_dtype_bytes: int | None = None
    """bytes per KV-cache element (None: the weights' dtype, BF16 for FP8 weights: vLLM's kv_cache_dtype="auto"
    follows the activations, and FP8 checkpoints compute in BF16)"""
    published_params: float | None = None
    source: str = ""
    experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    expert_intermediate: int = 0
    dense_layers: int = 0
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int = 0
    """attention window in tokens on every layer (0: full attention)"""
    tp_norm_allreduces: int = 0
    """all-reduces per layer that tensor parallelism adds for a norm over the whole width: MiniMax-M2's QK norm
    (config ``qk_norm_type`` "per_layer") spans every head, so vLLM's MiniMaxText01RMSNormTP all-reduces each token's
    q and k variance across the TP group (vllm/model_executor/layers/minimax_rms_norm/rms_norm_tp.py)"""

    @property
    def dim_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def attention_params(self) -> int:
        """Parameters of one layer's attention projections (and MLA's two latent norms)."""
        h = self.hidden
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * self.heads * qk if self.q_lora_rank
                 else h * self.heads * qk)
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            kv += self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + self.heads * self.v_head_dim * h
        q = self.heads * self.dim_head
        kv = self.kv_heads * self.dim_head
        bias = (q + 2 * kv) if self.qkv_bias else 0
        return h * q + 2 * h * kv + q * h + bias

    @property
    def expert_params(self) -> int:
        """Parameters of one routed expert (a SwiGLU MLP of ``expert_intermediate`` width)."""
        return 3 * self.hidden * self.expert_intermediate

    @property
    def moe_mlp_params(self) -> int:
        """One MoE layer's MLP: routed experts, shared experts and the router."""
        return (self.experts + self.shared_experts) * self.expert_params + self.hidden * self.experts

    @property
    def layer_params(self) -> int:
        """Parameters of one dense transformer block: attention projections, SwiGLU MLP and two norms."""
        return self.attention_params + 3 * self.hidden * self.intermediate + 2 * self.hidden

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def params(self) -> int:
        """Total parameters, computed from the architecture (MTP heads, which serving skips, not counted)."""
        if not self.is_moe:
            return self.layers * self.layer_params + self.embedding_params + self.hidden
        moe = self.attention_params + self.moe_mlp_params + 2 * self.hidden
        return self.dense_layers * self.layer_params + self.moe_layers * moe + self.embedding_params + self.hidden

    @property
    def active_params(self) -> int:
        """Parameters one token runs through: all but the routed experts it is not sent to."""
        return self.params - self.moe_layers * (self.experts - self.experts_per_token) * self.expert_params

    @property
    def routed_expert_params(self) -> int:
        """All routed experts of all MoE layers (the weights a decode batch reads only in part)."""
        return self.moe_layers * self.experts * self.expert_params

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights as served. FP8 quantizes the linear layers only: the token embedding and the LM head
        stay BF16 (DeepSeek-V3's and RedHatAI's FP8 checkpoints, vLLM's online ``quantization=fp8``; vLLM 0.19 loads
        Llama-3.1-8B in FP8 as 8.49 GiB, which is this, not 7.48)."""
        embeddings = self.embedding_params
        return (self.params - embeddings) * self.dtype_bytes + embeddings * max(self.dtype_bytes, 2)

    @property
    def tensors(self) -> int:
        """Named weight tensors in a checkpoint (projections, norms, biases, experts, router, embeddings)."""
        attn = (7 if self.q_lora_rank else 5) if self.is_mla else 4 + (3 if self.qkv_bias else 0)
        dense = attn + 3 + 2
        moe = attn + 1 + 3 * (self.experts + self.shared_experts) + 2
        return self.dense_layers * dense + self.moe_layers * moe + (0 if self.is_moe else self.layers * dense) + (
            2 if self.tied_embeddings else 3)

    @property
    def kv_bytes(self) -> int:
        """Bytes per KV-cache element."""
        return self.kv_dtype_bytes or max(self.dtype_bytes, 2)  # FP8 weights keep a BF16 cache unless told

    @property
    def kv_values_per_token_layer(self) -> int:
        """KV-cache values one token stores in one layer: MLA's latent and rope key, else K and V of every KV head."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_heads * self.dim_head

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies across all layers (one copy; see :meth:`kv_bytes_per_token_rank`)."""
        return self.layers * self.kv_values_per_token_layer * self.kv_bytes

    def kv_bytes_per_token_rank(self, tp: int) -> float:
        """KV-cache bytes one token occupies on each of ``tp`` tensor-parallel ranks. vLLM splits KV heads over
        the ranks and replicates them when ``tp`` exceeds them; MLA's single latent is replicated on every rank."""
        if self.is_mla:
            return float(self.kv_bytes_per_token)
        heads = max(self.kv_heads / tp, 1.0)
        return self.layers * 2 * heads * self.dim_head * self.kv_bytes

    def attended(self, context: float) -> float:
        """Context tokens one query attends to: all of them, or the sliding window's."""
        return min(context, self.sliding_window) if self.sliding_window else context

    @property
    def attention_flops_per_token(self) -> float:
        """FLOPs one query token spends per context token across all layers (QK^T and AV; MLA in vLLM's
        absorbed decode form: every head scores and mixes the ``kv_lora_rank + rope`` latent)."""
        if self.is_mla:
            return 2.0 * self.layers * self.heads * (2 * self.kv_lora_rank + self.qk_rope_head_dim)
        return 4.0 * self.layers * self.heads * self.dim_head

    @property
    def prefill_attention_flops_per_token(self) -> float:
        """FLOPs per query-key pair across all layers in prefill (MLA unabsorbed: QK^T over ``nope + rope``
        dims, AV over ``v_head_dim``)."""
        if self.is_mla:
            return 2.0 * self.layers * self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)
        return 4.0 * self.layers * self.heads * self.dim_head

    def expected_experts(self, tokens: float) -> float:
        """Expected distinct routed experts ``tokens`` tokens touch in one MoE layer, each picking top-k of E
        uniformly: E x (1 - (1 - k/E)^tokens)."""
        if not self.is_moe or tokens <= 0:
            return 0.0
        e, k = self.experts, self.experts_per_token
        return e * (1.0 - math.pow(1.0 - k / e, tokens))

    def info(self) -> ModelInfo:
        """The manifest's view of this model: every architecture field, so :func:`from_info` rebuilds it."""
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
            **{f: getattr(self, f) for f in ARCHITECTURE},
        )


def _spec(name: str, raw: dict[str, Any], where: str) -> ModelSpec:
    spec = build_entry(ModelSpec, name, raw, where, "model")
    for key in ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab"):
        if not isinstance(getattr(spec, key), int) or getattr(spec, key) <= 0:
            raise ConfigError(f"{where}: model {name!r}: {key} must be a positive integer")
    if spec.is_moe and not (0 < spec.experts_per_token <= spec.experts and spec.expert_intermediate > 0
                            and 0 <= spec.dense_layers < spec.layers):
        raise ConfigError(f"{where}: model {name!r}: an MoE needs 0 < experts_per_token <= experts, "
                          "expert_intermediate > 0 and dense_layers < layers")
    if spec.is_mla and not (spec.qk_nope_head_dim > 0 and spec.v_head_dim > 0 and spec.qk_rope_head_dim >= 0):
        raise ConfigError(f"{where}: model {name!r}: MLA needs qk_nope_head_dim and v_head_dim > 0")
    if spec.dtype_bytes not in (1, 2, 4) or (spec.kv_dtype_bytes or 2) not in (1, 2, 4):
        raise ConfigError(f"{where}: model {name!r}: dtype_bytes and kv_dtype_bytes must be 1, 2 or 4")
    return spec


ARCHITECTURE = ("experts", "experts_per_token", "shared_experts", "expert_intermediate", "dense_layers",
                "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "sliding_window",
                "tp_norm_allreduces", "qkv_bias", "tied_embeddings", "kv_dtype_bytes")
"""The fields a manifest's ``model`` records beyond a dense model's (format 1.4), named as in :class:`ModelSpec`."""
_SHAPE = ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab", "dim_head", "dtype_bytes", "kv_bytes",
          *(f for f in ARCHITECTURE if f != "kv_dtype_bytes"))  # the KV cache's effective type, not how it is spelt


def differences(a: ModelSpec, b: ModelSpec) -> list[str]:
    """The architecture fields where two specs differ, as ``field a -> b`` (empty: the same model to the cost
    models, whatever their names, sources or published totals)."""
    return [f"{f} {getattr(a, f)} -> {getattr(b, f)}" for f in _SHAPE if getattr(a, f) != getattr(b, f)]


def catalog_entry(name: str) -> ModelSpec | None:
    """The built-in catalog's model of this name (case-insensitive), or None; never a file, whatever the name."""
    try:
        return lookup(_builtin(), name, "model")
    except ConfigError:
        return None


def from_info(info: ModelInfo) -> ModelSpec:
    """The model a bundle's manifest records. A manifest that records its architecture (format 1.4 writers:
    ``experts`` not null) is rebuilt as recorded, and is the catalog's entry of its name when that entry has the
    same architecture (keeping its published totals and source); an older one is the catalog's entry of its
    name, else a dense model of its fields. A manifest with some architecture fields set and others null, or a
    recorded architecture the catalog would refuse (top-k above the experts, a dtype of 3 bytes), is a
    :class:`ConfigError` naming the manifest."""
    where = "the bundle's manifest"
    # head_dim as written is the computed one: keep it only where it is not hidden / heads, as a config.json does
    head_dim = info.head_dim if info.head_dim != info.hidden // info.heads else None
    raw: dict[str, Any] = {"hidden": info.hidden, "layers": info.layers, "heads": info.heads,
                           "kv_heads": info.kv_heads, "intermediate": info.intermediate or 4 * info.hidden,
                           "vocab": info.vocab, "head_dim": head_dim, "dtype_bytes": info.dtype_bytes}
    listed = catalog_entry(info.name)
    recorded = {f: getattr(info, f) for f in ARCHITECTURE}
    nulls = [f for f, v in recorded.items() if v is None and f != "kv_dtype_bytes"]
    if 0 < len(nulls) < len(ARCHITECTURE) - 1 or (nulls and recorded["kv_dtype_bytes"] is not None):
        raise ConfigError(f"{where}: model {info.name!r}: field {nulls[0]!r} is null while other architecture fields "
                          "are set (a format 1.4 writer sets all of them)")
    if nulls:  # written before the architecture was recorded: the name is all there is
        return listed or _spec(info.name, raw, where)
    raw.update({f: v for f, v in recorded.items() if v is not None})
    spec = _spec(info.name, raw, where)
    return listed if listed is not None and not differences(listed, spec) else spec


_BUILTIN = Path(__file__).with_name("models.toml")


def load_models(extra: str | Path | None = None) -> dict[str, ModelSpec]:
    """The built-in models, plus (overriding by name) those of a user TOML file with a [models.NAME] table."""
    if extra is None:
        return dict(_builtin())
    return load_catalog(_BUILTIN, "models", extra, _spec)


@cache
def _builtin() -> dict[str, ModelSpec]:
    return load_catalog(_BUILTIN, "models", None, _spec)


PATH_SUFFIXES = (".csv", ".toml", ".yaml", ".yml", ".txt", ".parquet", ".safetensors", ".bin", ".py")
"""file kinds a model name never ends with: such a value was meant as a file"""


def get_model(name: str, extra: str | Path | None = None) -> ModelSpec:
    """Look a model up by name (case-insensitive), or read a Hugging Face ``config.json`` if ``name`` is one."""
    if name.endswith(".json"):
        return from_hf_config(name)
    if Path(name).suffix.lower() in PATH_SUFFIXES or Path(name).is_file():
        raise ConfigError(f"model {name!r} is a file, but a model is a catalog name or a Hugging Face config.json "
                          "(a file ending in .json)")
    models = load_models(extra)  # its own errors are the extra file's, without the hint below
    try:
        return lookup(models, name, "model")
    except ConfigError as e:
        raise ConfigError(f"{e}; a Hugging Face config.json path works too") from None


def _first(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return default


def _int(cfg: dict[str, Any], key: str, minimum: int, default: int | None = None) -> int:
    """``cfg[key]`` as an integer of at least ``minimum`` (``default`` when absent or null; no default: required, a
    KeyError naming it); a ConfigError naming the key otherwise."""
    value = cfg.get(key)
    if value is None:
        if default is None:
            raise KeyError(key)
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


_FP8_METHODS = ("fp8", "fbgemm_fp8")


def _is_fp8(quant: Any) -> bool:
    """Whether a config.json's ``quantization_config`` stores FP8 weights (False when it is empty). Any other scheme
    (AWQ, GPTQ, bitsandbytes, MXFP4, INT4/INT8 groups) is refused by name: the cost model prices BF16 and FP8 weights
    only, and reading a 4-bit model as BF16 would double its weight traffic without a word."""
    if not isinstance(quant, dict):
        raise ConfigError(f"quantization_config must be an object, got {quant!r}")
    if not quant:
        return False
    method = str(quant.get("quant_method", "")).lower()
    if method in _FP8_METHODS or str(quant.get("fmt", "")).startswith("e4m3"):
        return True
    if method == "modelopt" and str(quant.get("quant_algo", "")).upper() == "FP8":
        return True
    if method == "compressed-tensors":
        groups = quant.get("config_groups")
        weights = [g.get("weights") for g in groups.values()] if isinstance(groups, dict) and groups else []
        if weights and all(isinstance(w, dict) and w.get("num_bits") == 8 and w.get("type") == "float"
                           for w in weights):
            return True
    scheme = f"quant_method {quant['quant_method']!r}" if "quant_method" in quant else "without a quant_method"
    raise ConfigError(f"quantization_config {scheme} is not priced: the cost model knows BF16 and FP8 weights only "
                      "(remove quantization_config to price the model as BF16)")


def hf_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """Catalog fields from a Hugging Face config.json's keys (Llama, Qwen2/3, Qwen3-MoE, Mixtral, DeepSeek-V2/V3,
    GLM-4.5 spellings); a KeyError names a missing required key, a ConfigError a value no such model can have (by
    the config's own key names)."""
    fp8 = _is_fp8(cfg.get("quantization_config") or {})
    experts_key = next((k for k in ("num_experts", "n_routed_experts", "num_local_experts") if cfg.get(k) is not None),
                       "num_experts")
    experts = _int(cfg, experts_key, 0, default=0)
    hidden, layers = _int(cfg, "hidden_size", 1), _int(cfg, "num_hidden_layers", 1)  # the keys in their usual order
    heads = _int(cfg, "num_attention_heads", 1)
    kv_heads = _int(cfg, "num_key_value_heads", 1, default=heads)
    if kv_heads > heads or heads % kv_heads:
        raise ConfigError(f"num_key_value_heads ({kv_heads}) must divide num_attention_heads ({heads})")
    raw: dict[str, Any] = {
        "hidden": hidden,
        "layers": layers,
        "heads": heads,
        "kv_heads": kv_heads,
        "intermediate": _int(cfg, "intermediate_size", 1),
        "vocab": _int(cfg, "vocab_size", 1),
        "head_dim": _int(cfg, "head_dim", 1) if cfg.get("head_dim") is not None else None,
        "qkv_bias": bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2")),
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        "dtype_bytes": 1 if fp8 else dtype_bytes(str(_first(cfg, "torch_dtype", "dtype", default="bfloat16"))) or 2,
        "sliding_window": _int(cfg, "sliding_window", 0, default=0) if cfg.get("use_sliding_window", True) else 0,
        "tp_norm_allreduces": int(bool(cfg.get("use_qk_norm")) and cfg.get("qk_norm_type") == "per_layer"),
    }
    if experts:
        sparse_step = _int(cfg, "decoder_sparse_step", 1, default=1)
        mlp_only = cfg.get("mlp_only_layers") or []
        if not isinstance(mlp_only, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers
                                                 for i in mlp_only):
            raise ConfigError(f"mlp_only_layers must list layer indices 0..{layers - 1}, got {mlp_only!r}")
        first_dense = _int(cfg, "first_k_dense_replace", 0, default=0)
        moe = [i for i in range(layers)
               if i >= first_dense and i not in set(mlp_only) and (i + 1) % sparse_step == 0]
        if not moe:
            raise ConfigError(f"{experts_key} {experts}, but first_k_dense_replace, mlp_only_layers and "
                              "decoder_sparse_step leave no MoE layer")
        shared_key = next((k for k in ("n_shared_experts", "num_shared_experts") if cfg.get(k) is not None),
                          "n_shared_experts")
        shared = _int(cfg, shared_key, 0, default=0)
        width = _int(cfg, "moe_intermediate_size", 1, default=raw["intermediate"])  # Mixtral: the expert's
        if not shared and cfg.get("shared_expert_intermediate_size"):  # Qwen2-MoE: one wide shared expert
            shared = max(round(_int(cfg, "shared_expert_intermediate_size", 1) / width), 1)
        top_k = _int(cfg, "num_experts_per_tok", 1)
        if top_k > experts:
            raise ConfigError(f"num_experts_per_tok ({top_k}) must be at most {experts_key} ({experts})")
        raw.update(experts=experts, experts_per_token=top_k, shared_experts=shared, expert_intermediate=width,
                   dense_layers=layers - len(moe))
    if _int(cfg, "kv_lora_rank", 0, default=0):
        raw.update(kv_lora_rank=_int(cfg, "kv_lora_rank", 1), q_lora_rank=_int(cfg, "q_lora_rank", 0, default=0),
                   qk_rope_head_dim=_int(cfg, "qk_rope_head_dim", 0), qk_nope_head_dim=_int(cfg, "qk_nope_head_dim", 1),
                   v_head_dim=_int(cfg, "v_head_dim", 1), head_dim=None)
    return raw


def from_hf_config(path: str | Path) -> ModelSpec:
    """Build a spec from a Hugging Face ``config.json``: dense, MoE (experts, top-k, shared experts, expert
    width, leading dense layers) and MLA (latent rank, rope dims) keys; FP8 from its quantization_config."""
    p = check_input(path)
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not a config.json (not UTF-8 text)") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{p}: invalid JSON ({e.msg})") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{p}: expected a JSON object")
    try:
        raw = hf_fields(cfg)
    except KeyError as e:
        raise ConfigError(f"{p}: missing key {e.args[0]!r} for a decoder-only transformer") from None
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{p}: unexpected value ({e})") from None
    raw["source"] = str(p)
    return _spec(cfg.get("_name_or_path") or p.parent.name or "custom", raw, str(p))
