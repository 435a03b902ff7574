"""What one serving-engine iteration adds beyond its kernels (:mod:`.kernels`), and the memory it needs:

- the sampler's passes over the logits;
- tensor parallelism: two all-reduces per layer, priced by the network model (:mod:`.parallel`); expert
  parallelism inside the TP group (``ep`` = ``tp``) keeps the same two: every rank holds every token, runs its own
  whole experts on them, and the MoE output is all-reduced as a TP-sharded MoE's is (vLLM takes its all-to-all
  kernels only with data parallelism, ``use_all2all_kernels = dp_size > 1 and use_ep`` in
  vllm/model_executor/layers/fused_moe/config.py; SGLang's default ``moe_a2a_backend`` is none);
- CUDA graphs (vLLM's captured sizes, :mod:`.serving`): GEMMs run on the padded batch; beyond the largest
  captured size every kernel is launched from the host and the iteration takes at least the launches' time;
- attention's per-context-token cost (decode: the KV cache read at the attention kernels' efficiency, or its FLOPs
  where larger) and the KV cache a rank holds (:mod:`.memory`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from rltrace.replay.costmodels import serving
from rltrace.replay.costmodels.kernels import Kernels
from rltrace.replay.costmodels.memory import RankMemory, rank_memory
from rltrace.replay.costmodels.parallel import collective_seconds, tp_allreduce_seconds

from rltrace.errors import ConfigError
from rltrace.units import DTYPE_BYTES

LOGIT_BYTES = DTYPE_BYTES["fp32"]  # vLLM samples from FP32 logits


@dataclass(frozen=True, kw_only=True, slots=True)
class IterationCosts(Kernels):
    """:class:`.kernels.Kernels` plus the sampler, host launches, TP collectives and memory."""

    # ---- memory ---------------------------------------------------------------------------------------------

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes of one token on one rank."""
        return self.model.kv_bytes_per_token_rank(self.tp)

    def rank_memory(self, gpu_memory_utilization: float | None = None,
                    max_num_seqs: int = serving.MAX_NUM_SEQS) -> RankMemory:
        """How vLLM splits one rank's share (None: the calibration's ``gpu_memory_utilization``) of memory: weights,
        profiling's activation peak (of :attr:`batched_tokens` tokens and ``max_num_seqs`` sampled rows), buffers
        outside torch, KV cache."""
        return rank_memory(self.model, self.gpu, self.tp, gpu_memory_utilization=gpu_memory_utilization,
                           batched_tokens=self.batched_tokens, max_num_seqs=max_num_seqs,
                           calibration=self.calibration)

    def kv_capacity_tokens(self, gpu_memory_utilization: float | None = None,
                           max_num_seqs: int = serving.MAX_NUM_SEQS) -> int:
        """Tokens of KV cache one rank holds, in whole blocks (0 where the weights and buffers leave none)."""
        return self.rank_memory(gpu_memory_utilization, max_num_seqs).kv_tokens(self.kv_bytes_per_token)

    def memory_needed_gb(self, kv_tokens: float) -> float:
        """GPU memory per TP rank for the weights, profiling's activation peak, the buffers outside torch and
        ``kv_tokens`` tokens of KV cache, in GB."""
        mem = self.rank_memory()
        return (mem.weights + mem.activation_peak + mem.non_torch + kv_tokens * self.kv_bytes_per_token) / 1e9

    def fits(self, kv_tokens: float) -> bool:
        """Whether that much KV cache fits in what vLLM's share of one GPU (``gpu_memory_utilization`` 0.9 of the
        device total) leaves for it (:mod:`.memory`)."""
        return kv_tokens * self.kv_bytes_per_token <= self.rank_memory().kv_cache

    # ---- beyond the GEMMs -----------------------------------------------------------------------------------

    def _serving_ep(self) -> None:
        if self.ep not in (1, self.tp):
            raise ConfigError(f"ep {self.ep}: a serving instance runs its experts over its own TP group (ep 1" +
                              (f" or {self.tp}, its tp)" if self.tp > 1 else ", at tp 1)"))

    def _comm(self, tokens: np.ndarray | float) -> np.ndarray:
        """TP all-reduces of one iteration over ``tokens`` tokens (network model); the same with ``ep`` = ``tp``: the
        engines take no all-to-all without data parallelism (module text)."""
        m, tp = self.model, self.tp
        self._serving_ep()
        t = np.atleast_1d(np.asarray(tokens, dtype=np.float64))
        out = np.empty_like(t)
        if tp == 1:
            return np.zeros_like(t)
        for i, n in enumerate(t):  # a handful of sizes: the network model caches each collective
            s = 2 * m.layers * tp_allreduce_seconds(self.gpu, tp, float(n), m.hidden, self.calibration)
            if m.tp_norm_allreduces:  # a norm over every head: each token's q and k variance, two fp32 values
                s += m.tp_norm_allreduces * m.layers * collective_seconds(self.gpu, "all_reduce", tp, 8.0 * n,
                                                                           calibration=self.calibration)
            out[i] = s
        return out

    def _sampler(self, rows: np.ndarray | float) -> np.ndarray:
        nbytes = serving.SAMPLER_PASSES * np.asarray(rows, dtype=np.float64) * self.model.vocab * LOGIT_BYTES
        return nbytes / (self.gpu.hbm_bytes_per_s * self.memory_efficiency)

    def _launch_bound(self, tokens: np.ndarray, gpu_s: np.ndarray) -> np.ndarray:
        """Iterations beyond the largest captured CUDA graph: the host launches every kernel itself."""
        if not self._floors:
            return gpu_s
        m = self.model
        kernels = m.layers * (4 + serving.DENSE_ELEMENTWISE + 1) + m.moe_layers * (3 + serving.MOE_ELEMENTWISE)
        host = kernels * self.figures.eager_launch_s
        return np.where(np.asarray(tokens) > serving.MAX_CAPTURE_SIZE, np.maximum(gpu_s, host), gpu_s)

    def decode_table(self, batches: ArrayLike) -> np.ndarray:
        """Seconds of a decode iteration's batch-dependent part at each batch size: GEMMs on the padded batch,
        experts touched, floors, sampler, TP/EP communication (everything but the KV reads)."""
        b = np.asarray(batches, dtype=np.int64)
        rows = serving.padded_tokens(b) if self._floors else b
        gemm = self._layers(rows).seconds
        attention_floor = self.model.layers * self.figures.attention_floor_s if self._floors else 0.0
        gpu_s = gemm + attention_floor + self._sampler(b) + self._comm_table(b)
        return np.where(b > 0, self._launch_bound(b, gpu_s), 0.0)

    def _comm_table(self, b: np.ndarray) -> np.ndarray:
        """:meth:`_comm` at each batch size: exact at the rows the iteration runs (CUDA graphs pad the batch to a
        captured size, so a few dozen sizes cover a whole table), a line beyond the largest captured size."""
        b = np.asarray(b, dtype=np.int64)
        if self.tp == 1:
            return np.zeros(len(b))
        top = serving.MAX_CAPTURE_SIZE
        rows = np.minimum(serving.padded_tokens(b) if self._floors else b, top)
        unique, inverse = np.unique(rows, return_inverse=True)
        out = self._comm(unique)[inverse.reshape(-1)]
        beyond = b > top
        if beyond.any():
            lo, hi = self._comm(np.array([top, 2 * top], dtype=np.float64))
            out = np.where(beyond, lo + (hi - lo) * (b - top) / top, out)
        return out

    @property
    def _attention_per_ctx(self) -> tuple[float, float]:
        """(compute seconds, memory seconds) per context token a decode query attends to, on one rank."""
        m = self.model
        flop_s = self.gpu.flops * self.compute_efficiency
        read = self.gpu.hbm_bytes_per_s * (self.attention_efficiency or self.memory_efficiency)
        return m.attention_flops_per_token / self.tp / flop_s, self.kv_bytes_per_token / read
