"""The part every catalog-priced generation cost shares: closed forms built once per TP degree, and the KV cache.

A backend (the roofline, the kernel database) says how to build the iteration and prefill models at one TP degree
(:meth:`PerTPGeneration.build`); this base caches them per degree, answers the engine's questions from them and
sizes the KV cache from :mod:`.memory`, so a model whose weights do not fit fails when the replay is prepared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
from rltrace.replay.costmodels import serving
from rltrace.replay.costmodels.iteration import IterationModel, PrefillModel
from rltrace.replay.costmodels.memory import rank_memory

from rltrace.calibration import CALIBRATION, CostCalibration
from rltrace.calibration.defaults import GPU_MEMORY_UTILIZATION
from rltrace.catalog import GPUSpec, ModelSpec
from rltrace.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True, slots=True)
class PerTPGeneration:
    """:class:`.generation.GenerationCost` from closed forms a subclass builds per TP degree."""

    model: ModelSpec
    gpu: GPUSpec
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION
    """vLLM's share of GPU memory (0.9 by default) for the weights, profiling's activation peak, buffers and KV cache"""
    max_num_seqs: int = serving.MAX_NUM_SEQS
    """the engine's cap on running requests: the rows vLLM's profiling run samples (its activation peak)"""
    max_num_batched_tokens: int = serving.MAX_BATCHED_TOKENS
    """the engine's token budget per iteration (chunked prefill, profiling's activation peak)"""
    calibration: CostCalibration = CALIBRATION
    """the constants every closed form and the memory split are priced with"""
    # per copy: replace() must not share them. A degree the model cannot run at keeps its error (schedulers ask
    # again and again whether a TP splits the model), the KV cache its size (asked at every admission).
    _cache: dict[int, tuple[IterationModel, PrefillModel]] = field(default_factory=dict, init=False, repr=False,
                                                                   compare=False)
    _kv: dict[int, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    _errors: dict[int, str] = field(default_factory=dict, init=False, repr=False, compare=False)
    _kv_errors: dict[int, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def build(self, tp: int) -> tuple[IterationModel, PrefillModel]:
        """The decode iteration and prefill closed forms at ``tp`` (a subclass's backend)."""
        raise NotImplementedError

    def _at(self, tp: int) -> tuple[IterationModel, PrefillModel]:
        if tp not in self._cache:
            self.kv_capacity_tokens(tp)  # weights that do not fit fail here, when the replay is prepared
        return _remembered(self._cache, self._errors, tp, self.build)

    def iteration_model(self, tp: int) -> IterationModel:
        return self._at(tp)[0]

    def prefill_seconds(self, tokens: int, prompts: int, tp: int) -> float:
        return self._at(tp)[1].seconds(tokens, prompts)

    def prefill_seconds_array(self, tokens: np.ndarray, prompts: np.ndarray, tp: int) -> np.ndarray:
        return self._at(tp)[1].seconds_array(tokens, prompts)

    def kv_capacity_tokens(self, tp: int) -> int:
        return _remembered(self._kv, self._kv_errors, tp, self._kv_capacity)

    def _kv_capacity(self, tp: int) -> int:
        # per rank: what vLLM's share leaves after the weights' share, profiling's activation peak and the buffers
        # outside torch, at the rank's bytes per token (MLA's latent and KV heads beyond tp are replicated, so the
        # cache does not grow with tp the way the weights' share shrinks)
        mem = rank_memory(self.model, self.gpu, tp, gpu_memory_utilization=self.gpu_memory_utilization,
                          max_num_seqs=self.max_num_seqs, batched_tokens=self.max_num_batched_tokens,
                          calibration=self.calibration)
        if mem.kv_cache <= 0:
            raise ConfigError(
                f"{self.model.name} leaves no KV cache on {tp} x {self.gpu.name}: vLLM's "
                f"{self.gpu_memory_utilization:g} share is {mem.share / 1e9:.1f} GB a GPU, the weights take "
                f"{mem.weights / 1e9:.1f} GB, activations and buffers {(mem.activation_peak + mem.non_torch) / 1e9:.1f}"
                " GB; raise tp"
            )
        return mem.kv_tokens(self.model.kv_bytes_per_token_rank(tp))


def _remembered(values: dict[int, T], errors: dict[int, str], tp: int, compute: Callable[[int], T]) -> T:
    """``compute(tp)`` once per degree: its value, or the ConfigError it raised, kept and given again."""
    if tp in values:
        return values[tp]
    if tp in errors:
        raise ConfigError(errors[tp])
    try:
        values[tp] = compute(tp)
    except ConfigError as e:
        errors[tp] = str(e)
        raise
    return values[tp]
