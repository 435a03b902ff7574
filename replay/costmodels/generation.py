"""What a generation instance asks of a cost model, and the roofline's answer.

The engine needs three things per tensor-parallel degree: the per-iteration decode model (closed form), the
time to prefill a wave of admitted prompts, and how many tokens of KV cache fit beside the weights. The
roofline's iteration is per kernel (:mod:`.roofline`): MoE experts touched by the batch, MLA's compressed
cache, CUDA-graph padding and kernel floors, TP/EP collectives from the network model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import polars as pl
from rltrace.replay.costmodels import aiconfigurator, serving
from rltrace.replay.costmodels.iteration import IterationModel, PrefillModel
from rltrace.replay.costmodels.per_tp import PerTPGeneration
from rltrace.replay.costmodels.profile import factors
from rltrace.replay.costmodels.roofline import TABLE_BATCHES, Roofline

from rltrace.calibration import CALIBRATION, CostCalibration
from rltrace.calibration.defaults import COMPUTE_EFFICIENCY, GPU_MEMORY_UTILIZATION, MEMORY_EFFICIENCY
from rltrace.catalog import GPUSpec, ModelSpec
from rltrace.errors import ConfigError


class GenerationCost(Protocol):
    """Per-TP decode, prefill and KV-capacity figures of one model on one GPU kind."""

    def iteration_model(self, tp: int) -> IterationModel:
        """Decode iteration time as lines in batch and context (see :mod:`.iteration`)."""
        ...

    def prefill_seconds(self, tokens: int, prompts: int, tp: int) -> float:
        """Time to prefill ``tokens`` prompt tokens of ``prompts`` newly admitted requests."""
        ...

    def kv_capacity_tokens(self, tp: int) -> int:
        """Tokens of KV cache an instance of ``tp`` GPUs holds (what vLLM's share of GPU memory leaves after the
        weights, the activation peak and buffers: :mod:`.memory`)."""
        ...

    def prefill_seconds_array(self, tokens: np.ndarray, prompts: np.ndarray, tp: int) -> np.ndarray:
        """:meth:`prefill_seconds` elementwise, for many admission waves at once (0 where no tokens)."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class RooflineGeneration(PerTPGeneration):
    """:class:`GenerationCost` from the roofline of ``model`` on ``gpu``."""

    memory_efficiency: float = MEMORY_EFFICIENCY
    compute_efficiency: float = COMPUTE_EFFICIENCY
    profile: pl.DataFrame | None = field(default=None, compare=False)
    """fitted efficiencies per TP (see :mod:`.profile`); they replace the two factors above"""

    def build(self, tp: int) -> tuple[IterationModel, PrefillModel]:
        roof = Roofline(model=self.model, gpu=self.gpu, tp=tp, memory_efficiency=self.memory_efficiency,
                        compute_efficiency=self.compute_efficiency, batched_tokens=self.max_num_batched_tokens,
                        calibration=self.calibration)
        if self.profile is not None:
            f = factors(self.profile, self.gpu.name, tp)
            roof = Roofline(model=self.model, gpu=self.gpu, tp=tp, memory_efficiency=f.memory_efficiency,
                            compute_efficiency=f.compute_efficiency, attention_efficiency=f.attention_efficiency,
                            engine_overhead=f.engine_overhead, gemm_ramp=False,  # the profile's own GEMM form
                            batched_tokens=self.max_num_batched_tokens, calibration=self.calibration)
        # a table to the largest batch an instance can run: the engine's cap, or as many sequences as its KV cache holds
        batches = max(TABLE_BATCHES, min(self.max_num_seqs, self.kv_capacity_tokens(tp)))
        return roof.iteration_model(batches), roof.prefill_model()


@dataclass(frozen=True, kw_only=True, slots=True)
class FittedGeneration:
    """:class:`GenerationCost` from a per-iteration model fitted to a trace (the same at every TP it saw).

    ``tp_speedup`` scales the iteration time for other TP degrees: ``time(tp) = time(recorded_tp) x
    (recorded_tp / tp) ** tp_speedup`` (1.0 = perfect scaling; the roofline's own scaling is close to that for
    memory-bound decode).
    """

    model: IterationModel
    recorded_tp: int = 1
    prefill_base_s: float = 0.0
    prefill_per_token_s: float = 0.0
    kv_tokens: int = 1 << 40
    tp_speedup: float = CALIBRATION["fitted_tp_speedup"]

    def iteration_model(self, tp: int) -> IterationModel:
        if tp == self.recorded_tp:
            return self.model
        return self.model.scaled((self.recorded_tp / tp) ** self.tp_speedup)

    def prefill_seconds(self, tokens: int, prompts: int, tp: int) -> float:
        if tokens <= 0:
            return 0.0
        at_recorded_tp = self.prefill_base_s + self.prefill_per_token_s * tokens
        return at_recorded_tp * math.pow(self.recorded_tp / tp, self.tp_speedup)

    def prefill_seconds_array(self, tokens: np.ndarray, prompts: np.ndarray, tp: int) -> np.ndarray:
        scale = (self.recorded_tp / tp) ** self.tp_speedup
        return np.where(tokens > 0, (self.prefill_base_s + self.prefill_per_token_s * tokens) * scale, 0.0)

    def kv_capacity_tokens(self, tp: int) -> int:
        return self.kv_tokens * tp // self.recorded_tp


def catalog_generation(backend: str, *, model: ModelSpec, gpu: GPUSpec, engine: str = "vllm",
                       gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION, max_num_seqs: int = serving.MAX_NUM_SEQS,
                       max_num_batched_tokens: int = serving.MAX_BATCHED_TOKENS,
                       memory_efficiency: float = MEMORY_EFFICIENCY, compute_efficiency: float = COMPUTE_EFFICIENCY,
                       profile: pl.DataFrame | None = None,
                       calibration: CostCalibration = CALIBRATION) -> tuple[GenerationCost, str]:
    """Generation costs of ``model`` on ``gpu`` from the catalogs, and a note naming what priced them: ``backend``
    "kernels" is aiconfigurator-core's measured-kernel database (refusing a GPU or model it lacks), "roofline" the
    roofline (with ``profile``'s fitted efficiencies when given); either with ``calibration``'s constants."""
    if backend == "kernels":
        why = aiconfigurator.coverage(model, gpu, engine)
        if why:
            raise ConfigError(f"cost.generation=kernels: {why}")
        kernels = aiconfigurator.KernelGeneration(model=model, gpu=gpu, engine=engine,
                                                  gpu_memory_utilization=gpu_memory_utilization,
                                                  max_num_seqs=max_num_seqs,
                                                  max_num_batched_tokens=max_num_batched_tokens,
                                                  calibration=calibration)
        return kernels, (f"generation cost: {aiconfigurator.PACKAGE} {aiconfigurator.version()} kernels of "
                         f"{model.name} on {gpu.name} ({engine})")
    roofline = RooflineGeneration(model=model, gpu=gpu, memory_efficiency=memory_efficiency,
                                  compute_efficiency=compute_efficiency, gpu_memory_utilization=gpu_memory_utilization,
                                  max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                                  profile=profile, calibration=calibration)
    return roofline, f"generation cost: roofline of {model.name} on {gpu.name}"


def backend_name(cost: GenerationCost) -> str:
    """What prices ``cost``'s iterations, for a run's config.json: "roofline", "trace" (fitted to a recording) or
    the kernel database with its package version, system and engine."""
    if isinstance(cost, aiconfigurator.KernelGeneration):
        system = aiconfigurator.SYSTEMS[cost.gpu.name]
        return f"{aiconfigurator.PACKAGE} {aiconfigurator.version()} ({system}, {cost.engine})"
    if isinstance(cost, FittedGeneration):
        return "trace"
    return "roofline" if isinstance(cost, RooflineGeneration) else type(cost).__name__
