"""Per-kernel times of one serving-engine iteration on one tensor-parallel rank: GEMMs, the fused MoE op and the
elementwise kernels between them. Each kernel takes the longest of its floor, its bytes over achieved HBM
bandwidth and its FLOPs over achieved peak, and kernels run one after another:

- GEMMs: attention projections, the dense MLP, the LM head (one row per request in a prefill chunk); on a GPU a
  GEMM's memory time is a ramp plus its bytes at a streaming fraction of HBM (``gemm_stream`` of
  :class:`.serving.KernelFigures`, fitted to the public H100 GEMM table); FP8 weights read one byte and run at the
  FP8 peak where the part has one;
- MoE: the router, the shared experts and only the routed experts the batch touches (``E (1 - (1 - k/E)^tokens)``
  of E), as one fused op where the GPU catalog has its table figures (``moe_fixed_us`` plus the touched experts at
  ``moe_stream_efficiency`` of HBM, or its FLOPs at ``moe_compute_efficiency x w / (w + moe_half_width)`` of the
  FP8 peak, w each rank's width of an expert), else two GEMMs;
- elementwise kernels (norms, rotary, activation): activations in and out at ``elementwise_stream`` of HBM, or
  their floor.

The rest of an iteration (sampler, TP collectives, host launches, KV cache) is :mod:`.iteration_costs`; the public
estimates and the replay's closed forms are :mod:`.roofline`. Every calibrated figure is the given calibration's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from rltrace.replay.costmodels import serving
from rltrace.replay.costmodels.iteration import Linear

from rltrace.calibration import CALIBRATION, CostCalibration
from rltrace.calibration.defaults import COMPUTE_EFFICIENCY, MEMORY_EFFICIENCY
from rltrace.catalog import GPUSpec, ModelSpec
from rltrace.errors import ConfigError


class _Layers(NamedTuple):
    """What :meth:`Kernels._layers` prices, each an array over the rows asked for."""

    seconds: np.ndarray
    flops: np.ndarray
    nbytes: np.ndarray
    stream_s: np.ndarray
    """each kernel's bytes (weights; the elementwise kernels' activations) over the bandwidth it streams them at
    (ramps and fixed parts aside): the memory-bound share a report shows"""
    experts: np.ndarray
    compute_s: np.ndarray
    """each kernel's FLOPs at the rate it computes at (the fused-MoE curve for routed experts, the FP8 share for FP8
    GEMMs): the compute-bound share a report shows"""
    elementwise_s: np.ndarray
    """the norms', rotary's and activations' bytes at the rate they stream at (floors aside), also in ``stream_s``:
    memory-bound kernels in series with the GEMMs, so a report adds them to a compute-bound iteration's work"""


@dataclass(frozen=True, kw_only=True, slots=True)
class Kernels:
    """The kernels of ``model`` on ``gpu`` at tensor parallelism ``tp`` (experts over ``ep`` ranks of the group when
    ``ep`` > 1, else sharded by TP), with the settings every part of the roofline shares."""

    model: ModelSpec
    gpu: GPUSpec
    tp: int = 1
    ep: int = 1
    memory_efficiency: float = MEMORY_EFFICIENCY
    """achieved fraction of HBM bandwidth (measured median, memory-bound GEMMs: 0.59) of the KV-cache reads and writes
    and the sampler; of the GEMMs too where kernel floors are off (a CPU device; a GPU GEMM streams, ``gemm_ramp``)"""
    compute_efficiency: float = COMPUTE_EFFICIENCY
    """achieved fraction of peak FLOP/s in inference kernels (measured median, compute-bound: 0.69)"""
    train_mfu: float | None = None
    """model FLOPs utilisation of training (None: the published figure for the model's kind on the GPU,
    :func:`.training.default_mfu`, with its sources)"""
    attention_efficiency: float | None = None
    """achieved fraction of HBM bandwidth reading the KV cache in decode attention (None: memory_efficiency)"""
    engine_overhead: Linear = field(default_factory=Linear)
    """per-iteration serving-engine time beyond the kernels (scheduling, sampling, Python), measured by
    ``rltrace calibrate --device cpu --engine vllm``; none by default (GPU engines overlap most of it)"""
    kernel_floors: bool | None = None
    """kernel floors, GEMM ramps, CUDA graphs and host launches (None: on for GPUs, off for a CPU device)"""
    gemm_ramp: bool = True
    """with floors on, a GEMM's memory time is a ramp plus its bytes at the fitted streaming fraction (``gemm_stream``);
    False: its bytes at ``memory_efficiency`` and the GEMM floor, the form a fitted profile's memory factor has"""
    batched_tokens: int = serving.MAX_BATCHED_TOKENS
    """chunked prefill's token budget per iteration (vLLM's max_num_batched_tokens)"""
    calibration: CostCalibration = CALIBRATION
    """the constants every figure here is priced with (the shipped files unless a run gives its own)"""
    figures: serving.KernelFigures = field(init=False, repr=False, compare=False)  # the calibration's kernel figures

    def __post_init__(self) -> None:
        object.__setattr__(self, "figures", serving.KernelFigures.of(self.calibration))
        m = self.model
        if self.tp < 1 or self.ep < 1:
            raise ConfigError(f"tp and ep must be >= 1, got tp {self.tp}, ep {self.ep}")
        heads_split = m.heads % self.tp == 0
        kv_split = m.is_mla or m.kv_heads % self.tp == 0 or self.tp % m.kv_heads == 0
        if not (heads_split and kv_split):
            raise ConfigError(f"tp {self.tp} does not split {m.name}'s {m.heads} attention heads "
                              f"({m.kv_heads} KV heads) evenly")
        if self.ep > 1 and not m.is_moe:
            raise ConfigError(f"ep {self.ep}: expert parallelism needs an MoE; {m.name} is dense")
        if self.ep > 1 and m.experts % self.ep:
            raise ConfigError(f"ep {self.ep} does not split {m.name}'s {m.experts} experts evenly")
        for name in ("memory_efficiency", "compute_efficiency", "train_mfu", "attention_efficiency"):
            value = getattr(self, name)
            if value is not None and not 0 < value <= 1:
                raise ConfigError(f"{name} must be in (0, 1], got {value}")
        if self.batched_tokens < 1:
            raise ConfigError(f"batched_tokens must be >= 1, got {self.batched_tokens}")

    @property
    def _floors(self) -> bool:
        return self.kernel_floors if self.kernel_floors is not None else self.gpu.name.lower() != "cpu"
    def _kernel(self, nbytes: np.ndarray | float, flops: np.ndarray | float, width: int,
                rate: float | None = None) -> np.ndarray:
        """A GEMM's time on weights of ``width`` bytes per element, its FLOPs at ``rate`` FLOP/s (None: the dense GEMM
        rate for that width, :meth:`_gemm_flops`)."""
        compute = np.asarray(flops) / (rate or self._gemm_flops(width))
        if not (self._floors and self.gemm_ramp):
            t = np.maximum(np.asarray(nbytes) / (self.gpu.hbm_bytes_per_s * self.memory_efficiency), compute)
            return np.maximum(t, self.figures.gemm_floor_s) if self._floors else t
        # a GPU GEMM streams its weights after a ramp (launch, tile set-up, pipeline fill), so small kernels run
        # far below the bandwidth large ones reach: ramp + bytes / (fraction x HBM), fitted to the H100 table
        stream = serving.stream_seconds(nbytes, width, self.gpu.hbm_bytes_per_s, self.figures)
        seconds: np.ndarray = np.maximum(np.maximum(stream, compute), self.figures.gemm_floor_s)
        return seconds

    def _gemm_flops(self, width: int) -> float:
        """FLOP/s of a compute-bound GEMM on weights of ``width`` bytes per element: the part's peak for that width at
        :attr:`compute_efficiency`, and on the FP8 peak at ``fp8_gemm_share`` of it as well (the public
        H100 table's FP8 GEMMs reach 0.64x the share of their peak that its BF16 GEMMs reach of theirs)."""
        fp8 = width == 1 and self.gpu.fp8_tflops > 0
        return self.gpu.flops_for(width) * self.compute_efficiency * (self.figures.fp8_gemm_share if fp8 else 1.0)

    @property
    def _fused_moe(self) -> bool:
        """Whether the routed experts are priced as the fused-MoE op of the GPU's kernel table (a GPU path with
        floors and GEMM ramps, i.e. not a fitted profile, and both table figures for the part), not as two GEMMs."""
        return bool(self._floors and self.gemm_ramp and self.gpu.moe_stream_efficiency and self.gpu.moe_fixed_us)

    @property
    def _gemm_bandwidth(self) -> float:
        """Bytes per second a GEMM streams its weights at, ramps aside (for the memory-bound share of a report)."""
        if self._floors and self.gemm_ramp:
            return self.gpu.hbm_bytes_per_s * self.figures.stream(self.model.dtype_bytes)[1]
        return self.gpu.hbm_bytes_per_s * self.memory_efficiency

    def _layers(self, tokens: np.ndarray, logit_rows: np.ndarray | float | None = None) -> _Layers:
        """Seconds of every kernel but attention and communication for ``tokens`` rows per rank, with the
        FLOPs, bytes, streaming seconds and expected experts behind them (arrays over ``tokens``). The LM head runs on
        ``logit_rows`` rows (None: every token, as in decode): vLLM computes logits only at each scheduled
        request's last token (``logits_indices = query_start_loc[1:] - 1``, vllm/v1/worker/gpu_model_runner.py),
        so a prefill chunk's LM head has one row per request in it, not one per token."""
        m, tp, wb = self.model, self.tp, self.model.dtype_bytes
        t = np.asarray(tokens, dtype=np.float64)
        o_params = m.heads * (m.v_head_dim if m.is_mla else m.dim_head) * m.hidden
        gemms = [m.attention_params - o_params, o_params]  # per layer, every layer
        dense = [2 * m.hidden * m.intermediate, m.hidden * m.intermediate]
        shared = [2 * m.shared_experts * m.hidden * m.expert_intermediate,
                  m.shared_experts * m.hidden * m.expert_intermediate]
        seconds, flops, nbytes, stream, compute = (np.zeros_like(t) for _ in range(5))

        def add(params: float, count: float, rows: np.ndarray | float = t, read: float | np.ndarray | None = None,
                width: int = wb, rate: float | None = None) -> None:
            nonlocal seconds, flops, nbytes, stream, compute
            b = (params if read is None else read) * width / tp
            f = 2.0 * rows * params / tp
            flop_s = rate or self._gemm_flops(width)
            seconds = seconds + count * self._kernel(b, f, width, flop_s)
            flops = flops + count * f
            compute = compute + count * f / flop_s
            nbytes = nbytes + count * b
            stream = stream + count * b / self._gemm_bandwidth

        for p in gemms:
            add(p, m.layers)
        for p in dense:
            add(p, m.dense_layers if m.is_moe else m.layers)
        experts = serving.expected_experts(m.experts, m.experts_per_token, t)
        if m.is_moe:
            add(m.hidden * m.experts, m.moe_layers)  # router
            for p in shared:
                if p:
                    add(p, m.moe_layers)
            # grouped gate/up and down over the experts the tokens touch, compute-bound at the engine's fused-MoE
            # kernel's own rate where the public tables give one: routing, permutation and a grouped GEMM of uneven
            # groups reach about 0.3 of the FP8 peak on Hopper on whole experts, 0.09 on 128-column slices, as TP
            # narrows each rank's slice (expert parallelism keeps experts whole; the tables' EP rows run slower
            # still, which is not priced): benchmarks/moe_kernel_efficiency.py
            width = m.expert_intermediate * self.ep / self.tp
            moe = self.gpu.moe_flops(width)
            if self._fused_moe:
                # one fused op as the table times it: its fixed part, then the touched experts' weights streamed, or
                # its FLOPs at the kernel's rate where larger
                b = m.expert_params * experts * wb / tp
                f = 2.0 * t * m.expert_params * m.experts_per_token / tp
                streamed = b / (self.gpu.hbm_bytes_per_s * self.gpu.moe_stream_efficiency)
                rate = moe or self._gemm_flops(wb)
                seconds = seconds + m.moe_layers * np.maximum(self.gpu.moe_fixed_us * 1e-6 + streamed, f / rate)
                flops = flops + m.moe_layers * f
                compute = compute + m.moe_layers * f / rate
                nbytes = nbytes + m.moe_layers * b
                stream = stream + m.moe_layers * streamed  # at the op's own fraction of HBM; its fixed part is a floor
            else:
                for share in (2 / 3, 1 / 3):
                    add(share * m.expert_params * m.experts_per_token, m.moe_layers, rows=t,
                        read=share * m.expert_params * experts, rate=moe)
        # LM head (vocab-parallel over TP; BF16 in FP8 checkpoints)
        add(m.vocab * m.hidden, 1, rows=t if logit_rows is None else logit_rows, width=max(wb, 2))
        elementwise = np.zeros_like(t)
        if self._floors:
            ew_seconds, ew_bytes, elementwise = self._elementwise(t)
            seconds, nbytes, stream = seconds + ew_seconds, nbytes + ew_bytes, stream + elementwise
        return _Layers(seconds, flops, nbytes, stream, experts, compute, elementwise)

    def _elementwise(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(seconds, bytes, streamed seconds) of the kernels between the GEMMs over ``tokens`` rows per rank: each
        takes its floor or its activations' bytes at ``elementwise_stream`` of HBM, whichever is longer.
        Per layer, as vLLM and SGLang run them: two fused residual-add RMSNorms (read the hidden state and the
        residual, write both: 4 x hidden BF16 values a token, not sharded by TP); rotary embedding in place on each
        rank's q and k heads (KV heads replicated where TP exceeds them, as the KV cache is; MLA: its rope dimensions,
        and its two latent RMSNorms as kernels of their own); the MLP's SiLU-and-mul (read 2 x intermediate / tp,
        write half): dense layers' and shared experts', and the routed experts' where no fused-MoE op holds them
        (each token's top-k); the KV-cache write at its floor (a prefill's KV bytes are attention's, a decode step's
        are a token a sequence). Decode batches sit on the floors; a prefill chunk of thousands of tokens streams,
        and as TP shards the GEMMs but not the norms, the more so at high TP."""
        m, tp = self.model, self.tp
        floor = self.figures.elementwise_floor_s
        fused = self._fused_moe
        routed = m.moe_layers if m.is_moe and not fused else 0
        # (BF16 values each token moves through the kernel, how many such kernels an iteration runs)
        kernels = [(4.0 * m.hidden, 2 * m.layers),
                   (3.0 * m.intermediate / tp, m.dense_layers if m.is_moe else m.layers),
                   (3.0 * m.shared_experts * m.expert_intermediate / tp, m.moe_layers if m.shared_experts else 0),
                   (3.0 * m.experts_per_token * m.expert_intermediate / tp, routed)]
        if m.is_mla:
            kernels += [(2.0 * (m.heads / tp + 1) * m.qk_rope_head_dim, m.layers),  # q's rope dims and the shared k's
                        (2.0 * m.q_lora_rank, m.layers if m.q_lora_rank else 0), (2.0 * m.kv_lora_rank, m.layers)]
        else:
            kernels.append((2.0 * (m.heads / tp + max(m.kv_heads / tp, 1.0)) * m.dim_head, m.layers))
        floors = m.layers + routed * serving.MOE_ELEMENTWISE  # the KV-cache write; routing, align, weighted sum
        bw = self.gpu.hbm_bytes_per_s * self.figures.elementwise_stream
        seconds = np.full_like(tokens, floors * floor)
        nbytes = np.zeros_like(tokens)
        for values, count in kernels:
            if values and count:
                moved = tokens * values * 2
                seconds = seconds + count * np.maximum(floor, moved / bw)
                nbytes = nbytes + count * moved
        return seconds, nbytes, nbytes / bw
