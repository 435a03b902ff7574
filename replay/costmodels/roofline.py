"""Roofline cost model of a dense transformer on one GPU kind, with tensor parallelism.

Per iteration, time is the larger of compute and memory time (they overlap), plus tensor-parallel
communication (it does not overlap in vLLM's eager decode):

- decode (batch B, mean context C): FLOPs ``2 x params x B + 4 x layers x heads x head_dim x B x C``
  (weights, then QK^T and AV against the context); bytes read ``weights + B x C x kv_bytes_per_token``;
- prefill (T tokens in P prompts): FLOPs ``2 x params x T + 4 x layers x heads x head_dim x P x (T/P)^2 / 2``
  (causal attention), bytes ``weights + T x kv_bytes_per_token`` (the KV cache is written);
- TP > 1: two all-reduces per layer of ``tokens x hidden x dtype_bytes`` over NVLink, each a ring
  (``2 (tp-1)/tp x bytes / bandwidth``) plus a latency term;
- train (T tokens over N GPUs): ``6 x params x T / (N x peak x MFU)``, compute-bound by construction.

Peak FLOP/s, HBM and NVLink bandwidth come from the GPU catalog (datasheets); the efficiency factors are
defaults until calibrated (the replay-engine and real-kernel issues fit them to traces and kernel tables).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rltrace.replay.costmodels.iteration import IterationModel, Linear, PrefillModel

from rltrace.catalog import GPUSpec, ModelSpec
from rltrace.errors import ConfigError

ALLREDUCE_LATENCY_S = 5e-6  # per NVLink all-reduce launch (order of NCCL's small-message latency on 8 GPUs)


@dataclass(frozen=True, slots=True)
class Estimate:
    """One predicted duration, with what bounds it."""

    seconds: float
    bound: str
    """"compute" or "memory" (which of the two overlapping terms is larger)"""
    compute_s: float
    memory_s: float
    comm_s: float
    flops: float
    bytes: float

    def to_json(self) -> dict[str, float | str]:
        return {
            "seconds": self.seconds,
            "bound": self.bound,
            "compute_s": self.compute_s,
            "memory_s": self.memory_s,
            "comm_s": self.comm_s,
            "flops": self.flops,
            "bytes": self.bytes,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Roofline:
    """Analytic per-iteration times for ``model`` on ``gpu`` with tensor parallelism ``tp``."""

    model: ModelSpec
    gpu: GPUSpec
    tp: int = 1
    # Defaults: median efficiency of Vidur's measured Llama-2-7B projection GEMMs on H100 at TP 1
    # (../shared/data/kernels/h100/vidur_llama-2-7b_mlp.csv; table in docs/costmodels.md).
    memory_efficiency: float = 0.6
    """achieved fraction of HBM bandwidth (measured median, memory-bound GEMMs: 0.59)"""
    compute_efficiency: float = 0.7
    """achieved fraction of peak BF16 FLOP/s in inference kernels (measured median, compute-bound: 0.69)"""
    train_mfu: float = 0.35
    """model FLOPs utilisation of training"""
    attention_efficiency: float | None = None
    engine_overhead: Linear = field(default_factory=Linear)
    """per-iteration serving-engine time beyond the kernels (scheduling, sampling, Python), measured by
    ``rltrace calibrate --device cpu --engine vllm``; none by default (GPU engines hide most of it)"""
    """achieved fraction of HBM bandwidth reading the KV cache in decode attention (None: memory_efficiency)"""

    def __post_init__(self) -> None:
        # vLLM splits attention heads over TP ranks; KV heads split too, or are replicated when tp exceeds them.
        heads_split = self.tp >= 1 and self.model.heads % self.tp == 0
        kv_split = self.model.kv_heads % self.tp == 0 or self.tp % self.model.kv_heads == 0
        if not (heads_split and kv_split):
            raise ConfigError(
                f"tp {self.tp} does not split {self.model.name}'s {self.model.heads} attention heads "
                f"({self.model.kv_heads} KV heads) evenly"
            )
        for name in ("memory_efficiency", "compute_efficiency", "train_mfu", "attention_efficiency"):
            if getattr(self, name) is not None and not 0 < getattr(self, name) <= 1:
                raise ConfigError(f"{name} must be in (0, 1], got {getattr(self, name)}")

    def memory_needed_gb(self, kv_tokens: float) -> float:
        """GPU memory per TP rank for the weights plus ``kv_tokens`` tokens of KV cache, in GB."""
        m = self.model
        return (m.weight_bytes + kv_tokens * m.kv_bytes_per_token) / self.tp / 1e9

    def fits(self, kv_tokens: float) -> bool:
        """Whether weights and that much KV cache fit in one GPU's memory (activations not counted)."""
        return self.memory_needed_gb(kv_tokens) <= self.gpu.memory_gb

    def _attention_flops(self, query_tokens: float, mean_context: float) -> float:
        m = self.model
        return 4.0 * m.layers * m.heads * m.dim_head * query_tokens * mean_context

    def _tp_comm(self, tokens: float) -> float:
        if self.tp == 1:
            return 0.0
        m = self.model
        size = tokens * m.hidden * m.dtype_bytes
        bandwidth = self.gpu.nvlink_gbps / 2 * 1e9  # one direction of the bidirectional figure
        ring = 2 * (self.tp - 1) / self.tp * size / bandwidth
        return 2 * m.layers * (ring + ALLREDUCE_LATENCY_S)

    @property
    def _kv_read_efficiency(self) -> float:
        return self.attention_efficiency or self.memory_efficiency

    def _combine(self, flops: float, nbytes: float, comm: float, kv_read: float = 0.0) -> Estimate:
        compute = flops / (self.tp * self.gpu.flops * self.compute_efficiency)
        bandwidth = self.tp * self.gpu.hbm_bytes_per_s
        memory = (nbytes - kv_read) / (bandwidth * self.memory_efficiency) + kv_read / (bandwidth * self._kv_read_efficiency)
        bound = "compute" if compute >= memory else "memory"
        return Estimate(max(compute, memory) + comm, bound, compute, memory, comm, flops, nbytes)

    def iteration_model(self) -> IterationModel:
        """:meth:`decode` as lines in (batch, total context tokens), for the engine's closed-form sums."""
        m, tp = self.model, self.tp
        flop_s = tp * self.gpu.flops * self.compute_efficiency
        byte_s = tp * self.gpu.hbm_bytes_per_s * self.memory_efficiency
        attention = 4.0 * m.layers * m.heads * m.dim_head  # FLOPs per context token per iteration
        comm = Linear()
        if tp > 1:
            ring = 2 * (tp - 1) / tp * m.hidden * m.dtype_bytes / (self.gpu.nvlink_gbps / 2 * 1e9)
            comm = Linear(base=2 * m.layers * ALLREDUCE_LATENCY_S, per_seq=2 * m.layers * ring)
        e = self.engine_overhead
        comm = Linear(comm.base + e.base, comm.per_seq + e.per_seq, comm.per_ctx + e.per_ctx)
        return IterationModel(
            compute=Linear(per_seq=2.0 * m.params / flop_s, per_ctx=attention / flop_s),
            memory=Linear(base=m.weight_bytes / byte_s,
                          per_ctx=m.kv_bytes_per_token / (tp * self.gpu.hbm_bytes_per_s * self._kv_read_efficiency)),
            extra=comm,
        )

    def prefill_model(self) -> PrefillModel:
        """:meth:`prefill` with its coefficients worked out once, for the engine."""
        m, tp = self.model, self.tp
        flop_s = tp * self.gpu.flops * self.compute_efficiency
        byte_s = tp * self.gpu.hbm_bytes_per_s * self.memory_efficiency
        comm = self._tp_comm(1) - self._tp_comm(0) if tp > 1 else 0.0
        return PrefillModel(
            per_token=2.0 * m.params / flop_s,
            per_token_sq_per_prompt=2.0 * m.layers * m.heads * m.dim_head / flop_s,
            memory_base=m.weight_bytes / byte_s,
            memory_per_token=m.kv_bytes_per_token / byte_s,
            extra_base=self._tp_comm(0),
            extra_per_token=comm,
        )

    def decode(self, batch: int, context: float) -> Estimate:
        """One decode iteration of ``batch`` sequences whose mean context is ``context`` tokens."""
        if batch < 1 or context < 0:
            raise ConfigError(f"decode needs batch >= 1 and context >= 0, got batch={batch}, context={context}")
        m = self.model
        flops = 2.0 * m.params * batch + self._attention_flops(batch, context)
        kv_read = batch * context * m.kv_bytes_per_token
        engine = self.engine_overhead.base + self.engine_overhead.per_seq * batch  # (listed under comm_s)
        return self._combine(flops, float(m.weight_bytes) + kv_read, self._tp_comm(batch) + engine, kv_read)

    def prefill(self, tokens: int, prompts: int = 1) -> Estimate:
        """Prefill of ``tokens`` prompt tokens split evenly over ``prompts`` prompts (causal attention)."""
        if tokens < 1 or prompts < 1 or prompts > tokens:
            raise ConfigError(f"prefill needs 1 <= prompts <= tokens, got tokens={tokens}, prompts={prompts}")
        m = self.model
        per_prompt = tokens / prompts
        flops = 2.0 * m.params * tokens + self._attention_flops(tokens, per_prompt / 2)
        nbytes = float(m.weight_bytes) + tokens * m.kv_bytes_per_token
        return self._combine(flops, nbytes, self._tp_comm(tokens))

    def train(self, tokens: int, gpus: int) -> Estimate:
        """One optimizer step over ``tokens`` tokens (forward and backward) on ``gpus`` GPUs."""
        if tokens < 1 or gpus < 1:
            raise ConfigError(f"train needs tokens >= 1 and gpus >= 1, got tokens={tokens}, gpus={gpus}")
        flops = 6.0 * self.model.params * tokens
        compute = flops / (gpus * self.gpu.flops * self.train_mfu)
        return Estimate(compute, "compute", compute, 0.0, 0.0, flops, 0.0)
