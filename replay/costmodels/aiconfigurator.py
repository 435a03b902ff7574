"""A generation cost backend on NVIDIA's aiconfigurator-core: measured per-operation GPU timings, not a roofline.

aiconfigurator-core (Apache-2.0, ``pip install rltrace[kernels]``) ships databases of GEMM, attention, MoE and
communication kernels timed on H100, H200, B200, GB200, A100 and more, per serving engine (vLLM, SGLang) and version,
with model definitions that turn one engine iteration (its decode batch and context, its prefill chunk) into the
sum of those kernels. :class:`KernelDatabase` asks it for the figures a replay and a serving benchmark need and
hands them on in the shapes the roofline uses:

- a decode iteration of ``b`` requests at a mean context of ``c`` tokens is what the database prices; the replay's
  closed form (:class:`.iteration.IterationModel`) gets it as a table by batch size plus one line in total
  context tokens (attention), the line fitted by least squares over a grid of batches and contexts;
- a prefill of ``T`` tokens in ``P`` prompts: ``base + a T + q T^2 / P`` (:class:`.iteration.PrefillModel`), fitted
  the same way by non-negative least squares on the database's prefill latencies;
- a prompt chunk riding beside running decodes: the database's mixed iteration less the decodes alone;
- the KV cache an instance holds: :mod:`.memory`, as for the roofline (the database has no start-up memory split).

It covers a catalog model whose Hugging Face config the package caches, and any other dense or MoE (no MLA, no
shared experts) catalog model through a config written from the catalog's figures; a GPU kind in :data:`SYSTEMS`.
Everything else, CPU included, stays on the roofline (:func:`coverage` says why).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from rltrace.replay.costmodels import serving
from rltrace.replay.costmodels.iteration import IterationModel, Linear, PrefillModel
from rltrace.replay.costmodels.memory import rank_memory
from rltrace.replay.costmodels.per_tp import PerTPGeneration

from rltrace.calibration import CALIBRATION, CostCalibration
from rltrace.catalog import GPUSpec, ModelSpec
from rltrace.errors import ConfigError

PACKAGE = "aiconfigurator-core"
SYSTEMS = {"H100": "h100_sxm", "H200": "h200_sxm", "B200": "b200_sxm", "GB200": "gb200", "A100": "a100_sxm",
           "B300": "b300_sxm", "GB300": "gb300", "L40S": "l40s", "L4": "l4"}
"""catalog GPU kind -> the package's system name (the SXM parts: the catalog's H100 and A100 are SXM)"""
ENGINES = ("vllm", "sglang")
MS = 1e-3
# the grids the closed forms are fitted on: contexts a decode request holds, prompt lengths and prompts per wave
_CONTEXTS = np.array([512, 2048, 8192, 16384])
_FIT_BATCHES = np.array([1, 8, 32, 128, 256])
_PROMPT_LENGTHS = (128, 512, 2048, 8192)
_WAVE_PROMPTS = (1, 4, 16)


def version() -> str | None:
    """The installed aiconfigurator-core's version, or None where it is not installed."""
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return None


def _hf_id(model: ModelSpec) -> str:
    """The Hugging Face id the catalog copied ``model``'s figures from (its source's first word), or ''."""
    head = model.source.split()[0] if model.source else ""
    return head.removeprefix("huggingface.co/") if head.startswith("huggingface.co/") else ""


def _cached_configs() -> set[str]:
    import aiconfigurator_core  # the optional package: imported only once it is known to be installed

    folder = Path(aiconfigurator_core.__file__).parent / "model_configs"
    return {p.name.removesuffix("_config.json").replace("--", "/", 1) for p in folder.glob("*_config.json")}


def coverage(model: ModelSpec, gpu: GPUSpec, engine: str = "vllm") -> str:
    """'' where the database prices ``model`` on ``gpu`` under ``engine``, else why not (one line)."""
    if version() is None:
        return f"{PACKAGE} is not installed (pip install 'rltrace[kernels]')"
    if engine not in ENGINES:
        return f"the database has no {engine!r} engine (it has {', '.join(ENGINES)})"
    if gpu.name not in SYSTEMS:
        return f"the database has no {gpu.name} (it has {', '.join(SYSTEMS)})"
    if _hf_id(model) in _cached_configs():
        return ""
    if model.is_mla or model.shared_experts or model.dense_layers or model.sliding_window:
        return f"{model.name}: no config the database defines (MLA, shared experts or windows need the model's own)"
    return ""


def _config(model: ModelSpec) -> dict[str, Any]:
    """A Hugging Face config.json for a dense (Llama) or MoE (Qwen3-MoE) model, from the catalog's figures."""
    head_dim = model.head_dim or model.hidden // model.heads
    config: dict[str, Any] = {
        "architectures": ["Qwen3MoeForCausalLM" if model.is_moe else "LlamaForCausalLM"],
        "hidden_size": model.hidden, "num_hidden_layers": model.layers, "num_attention_heads": model.heads,
        "num_key_value_heads": model.kv_heads, "head_dim": head_dim, "intermediate_size": model.intermediate,
        "vocab_size": model.vocab, "max_position_embeddings": 131072, "tie_word_embeddings": model.tied_embeddings,
        "torch_dtype": "bfloat16",
    }
    if model.is_moe:
        config.update(num_experts=model.experts, num_experts_per_tok=model.experts_per_token,
                      moe_intermediate_size=model.expert_intermediate)
    return config


@functools.cache
def _config_dir(model: ModelSpec) -> str:
    """A folder holding the model's written config.json, one per architecture, reused across runs."""
    text = json.dumps(_config(model), sort_keys=True)
    folder = Path(tempfile.gettempdir()) / "rltrace-aic-configs" / hashlib.sha256(text.encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "config.json").exists():
        partial = folder / f"config.json.{os.getpid()}"
        partial.write_text(text)
        partial.replace(folder / "config.json")  # atomic: a concurrent run reads a whole file or none
    return str(folder)


def _model_path(model: ModelSpec) -> str:
    hf = _hf_id(model)
    return hf if hf in _cached_configs() else _config_dir(model)


@functools.cache
def _engine(model_path: str, system: str, engine: str, tp: int, ep: int, fp8: bool, moe: bool) -> tuple[Any, str]:
    """The package's compiled engine and the layout it priced: FP8 experts as block-FP8 (the checkpoints' format,
    and what the database measured) where it has them, else per-tensor; the experts over ``ep`` ranks, else over
    the other layout the database has. Each candidate is probed with one decode and one prefill query."""
    from aiconfigurator_core.sdk import EngineHandle  # the optional package, imported only where it is installed

    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)  # its fallback-row notices are not ours
    gemm = "fp8" if fp8 else "bfloat16"
    quants = ("fp8_block", "fp8") if fp8 and moe else (gemm,)
    layouts = tuple(dict.fromkeys((ep, tp if ep == 1 else 1))) if moe else (1,)
    last = ""
    for quant in quants:
        for moe_ep in layouts:
            try:
                handle = EngineHandle.compile(model_path, system, engine, tp_size=tp, moe_tp_size=tp // moe_ep,
                                              moe_ep_size=moe_ep, gemm_quant_mode=gemm, moe_quant_mode=quant,
                                              kvcache_quant_mode="bfloat16", fmha_quant_mode="bfloat16")
                handle.decode_step_latency(8, 1024, 2)
                handle.predict_prefill_latency(1, 1024)
            except (ValueError, KeyError, RuntimeError) as e:  # the package's errors derive from these
                last = str(e).splitlines()[0] if str(e) else type(e).__name__
                continue
            layout = f"experts {quant} over ep {moe_ep}" if moe else gemm
            return handle, layout
    raise ConfigError(f"{PACKAGE} cannot price {model_path} on {system} ({engine}, tp {tp}): {last[:300]}")


def _ms(call: Any, *args: int) -> float:
    """One database query in seconds; the package's "no data for this shape" as one line naming the shape."""
    try:
        return float(call(*args)) * MS
    except (ValueError, RuntimeError) as e:  # the package's own errors derive from these two
        raise ConfigError(f"{PACKAGE}: {str(e).splitlines()[0][:300]}") from None


def _nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with non-negative coefficients, for a few columns: the best of every subset's fit whose
    coefficients are all >= 0 (the others held at 0)."""
    best, best_residual = np.zeros(a.shape[1]), float(b @ b)
    for subset in itertools.product((False, True), repeat=a.shape[1]):
        keep = np.flatnonzero(subset)
        if not len(keep):
            continue
        coef = np.linalg.lstsq(a[:, keep], b, rcond=None)[0]
        if (coef < 0).any():
            continue
        residual = float(np.sum((a[:, keep] @ coef - b) ** 2))
        if residual < best_residual:
            best, best_residual = np.zeros(a.shape[1]), residual
            best[keep] = coef
    return best


@dataclass(frozen=True, kw_only=True, slots=True)
class KernelDatabase:
    """Iteration costs of ``model`` on ``gpu`` (``tp`` ranks, experts over ``ep`` of them) from aiconfigurator-core's
    measured kernels for ``engine``: the surface :func:`.benchmark.serving_benchmark` and the replay use."""

    model: ModelSpec
    gpu: GPUSpec
    tp: int = 1
    ep: int = 1
    engine: str = "vllm"
    batched_tokens: int = serving.MAX_BATCHED_TOKENS
    calibration: CostCalibration = CALIBRATION
    """the constants of what the database lacks (the start-up memory split)"""
    _handle: Any = field(default=None, init=False, repr=False, compare=False)
    layout: str = field(default="", init=False, compare=False)
    """what the database priced: the weights' quantisation, and for an MoE the experts' and their layout"""

    def __post_init__(self) -> None:
        why = coverage(self.model, self.gpu, self.engine)
        if why:
            raise ConfigError(f"no kernel database for {self.model.name} on {self.gpu.name}: {why}")
        if self.model.heads % self.tp:
            raise ConfigError(f"tp {self.tp} does not split {self.model.name}'s {self.model.heads} attention heads")
        if self.ep > 1 and (not self.model.is_moe or self.tp % self.ep):
            raise ConfigError(f"ep {self.ep}: experts spread over part of a tp {self.tp} group of an MoE only")
        handle, layout = _engine(_model_path(self.model), SYSTEMS[self.gpu.name], self.engine, self.tp, self.ep,
                                 self.model.dtype_bytes == 1, self.model.is_moe)
        object.__setattr__(self, "_handle", handle)
        object.__setattr__(self, "layout", layout)

    @property
    def name(self) -> str:
        """What priced it, for a run's notes and config: package, version, system and engine."""
        return f"{PACKAGE} {version()} ({SYSTEMS[self.gpu.name]}, {self.engine}, {self.layout})"

    # ---- the figures -------------------------------------------------------------------------------------------

    def decode_seconds(self, batch: int, context: float) -> float:
        """One decode iteration of ``batch`` requests whose mean context is ``context`` tokens."""
        if batch < 1:
            return 0.0
        return _ms(self._handle.decode_step_latency, int(batch), max(int(context), 1), 2)

    def prefill_seconds(self, tokens: int, prompts: int = 1) -> float:
        """A prefill of ``tokens`` tokens in ``prompts`` equal prompts, in the chunks the database runs."""
        if tokens < 1:
            return 0.0
        prompts = max(1, min(prompts, tokens))
        return _ms(self._handle.predict_prefill_latency, prompts, max(tokens // prompts, 1))

    def mixed_prefill(self, prompt: int, batch: int, sharing: float = 1.0) -> float:
        """Seconds a prompt of ``prompt`` tokens adds to the iterations it rides in beside ``batch`` running decodes
        (vLLM's chunked prefill; ``sharing`` chunks of as many prompts an iteration, each paying its share)."""
        if prompt < 1 or batch < 0 or not sharing >= 1:
            raise ConfigError(f"mixed_prefill needs prompt >= 1, batch >= 0 and sharing >= 1, got prompt={prompt}, "
                              f"batch={batch}, sharing={sharing}")
        if batch == 0:
            return self.prefill_seconds(prompt, 1)
        n = serving.chunks(prompt, max(self.batched_tokens - batch, 1))
        rows = max(int(sharing * prompt / n), 1)
        mixed = _ms(self._handle.mixed_step_latency, rows, int(batch), int(prompt), 2)
        alone = self.decode_seconds(batch, prompt)
        return n * max(mixed - alone, 0.0) / sharing

    def kv_capacity_tokens(self, gpu_memory_utilization: float | None = None,
                           max_num_seqs: int = serving.MAX_NUM_SEQS) -> int:
        """Tokens of KV cache one rank holds (:mod:`.memory`: the database has no start-up memory split), in vLLM's
        share (None: the calibration's ``gpu_memory_utilization``)."""
        mem = rank_memory(self.model, self.gpu, self.tp, gpu_memory_utilization=gpu_memory_utilization,
                          batched_tokens=self.batched_tokens, max_num_seqs=max_num_seqs, calibration=self.calibration)
        return mem.kv_tokens(self.model.kv_bytes_per_token_rank(self.tp))

    # ---- the replay's closed forms ----------------------------------------------------------------------------

    def iteration_model(self, max_batch: int = serving.MAX_NUM_SEQS) -> IterationModel:
        """:meth:`decode_seconds` as the engine's closed form: a table by batch size at no context, plus attention
        as one line in total context tokens (least squares over the grid; it matches the table to within a few
        percent where the database's attention is not linear)."""
        grid = np.array([[self.decode_seconds(int(b), float(c)) for c in _CONTEXTS] for b in _FIT_BATCHES])
        rise = (grid - grid[:, :1]).ravel()  # over the smallest context, per batch
        tokens = (_FIT_BATCHES[:, None] * (_CONTEXTS - _CONTEXTS[0])[None, :]).ravel().astype(np.float64)
        per_ctx = max(float(tokens @ rise / (tokens @ tokens)), 0.0)
        batches = np.arange(max_batch + 1)
        at_least = int(_CONTEXTS[0])
        table = [0.0] + [max(self.decode_seconds(int(b), at_least) - per_ctx * b * at_least, 0.0)
                         for b in batches[1:]]
        return IterationModel(compute=Linear(), memory=Linear(per_ctx=per_ctx), memory_by_batch=tuple(table))

    def prefill_model(self) -> PrefillModel:
        """:meth:`prefill_seconds` as ``base + a T + q T^2 / P`` (non-negative least squares, relative error)."""
        rows, seconds = [], []
        for length in _PROMPT_LENGTHS:
            for prompts in _WAVE_PROMPTS:
                tokens = length * prompts
                rows.append((1.0, tokens, tokens * tokens / prompts))
                seconds.append(self.prefill_seconds(tokens, prompts))
        a, t = np.array(rows), np.array(seconds)
        base, per_token, quadratic = _nnls(a / t[:, None], np.ones_like(t))
        return PrefillModel(per_token=0.0, per_token_sq_per_prompt=float(quadratic), extra_base=float(base),
                            extra_per_token=float(per_token))


@dataclass(frozen=True, kw_only=True, slots=True)
class KernelGeneration(PerTPGeneration):
    """:class:`.generation.GenerationCost` from the kernel database: the replay's closed forms per TP degree
    (:meth:`KernelDatabase.iteration_model`, :meth:`KernelDatabase.prefill_model`), the KV cache from
    :mod:`.memory`."""

    engine: str = "vllm"

    def database(self, tp: int) -> KernelDatabase:
        """The database's costs at ``tp`` (a dense model's or an MoE's experts sharded over the TP group, as vLLM
        serves by default)."""
        return KernelDatabase(model=self.model, gpu=self.gpu, tp=tp, engine=self.engine,
                              batched_tokens=self.max_num_batched_tokens, calibration=self.calibration)

    def build(self, tp: int) -> tuple[IterationModel, PrefillModel]:
        db = self.database(tp)
        return db.iteration_model(self.max_num_seqs), db.prefill_model()
