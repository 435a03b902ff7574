"""Cost of one serving-engine iteration (and one training step) of a transformer on a GPU kind, per kernel.

One iteration runs ``tokens`` tokens (decode: one per running sequence; prefill: a chunk of prompt) through
every layer. On each tensor-parallel rank every kernel takes the longest of its floor, its bytes over achieved
HBM bandwidth and its FLOPs over achieved peak (``memory_efficiency``, ``compute_efficiency``), and kernels run
one after another:

- GEMMs: attention in and out projections, the dense MLP's gate/up and down, the LM head; MoE layers read the
  router, the shared experts and only the routed experts the batch touches (``E (1 - (1 - k/E)^tokens)``
  expected of E, top-k each), priced where the GPU catalog has the fused-MoE kernel's table figures as one fused
  op: ``moe_fixed_us`` plus the touched experts' weights at ``moe_stream_efficiency`` of HBM, or its FLOPs at
  ``moe_compute_efficiency x w / (w + moe_half_width)`` of the FP8 peak (w = ``expert_intermediate x ep / tp``,
  each rank's width of an expert) where larger (without the table's figures: two GEMMs and three elementwise
  floors); the LM head on one row per request (a prefill chunk's logits are its
  requests' last tokens: vLLM's ``logits_indices``, SGLang's ``last_index`` in its logits processor); FP8 weights
  read one byte and run at the FP8 peak where the part has one; on a GPU a GEMM's memory time is a ramp plus its
  bytes at a streaming fraction of HBM (:data:`.serving.GEMM_STREAM`, fitted to the public H100 GEMM table), not
  one efficiency for every size;
- attention: a floor plus the KV cache read (decode: ``batch x context`` tokens at the model's bytes per token
  and rank, MLA's compressed latent, a sliding window's cap) at the attention kernels' efficiency, or its
  FLOPs (``2 x heads x (2 kv_lora_rank + rope)`` per context token for MLA's absorbed decode) where larger;
- elementwise kernels (residual-add norms, rotary, activation): each token's activations in and out at
  :data:`.serving.ELEMENTWISE_STREAM` of HBM (Vidur's H100 profile), or their floor where longer; routing, where no
  fused-MoE op holds it, at its floor; the sampler's passes over the logits;
- tensor parallelism: two all-reduces per layer, priced by the network model (:mod:`.parallel`); expert
  parallelism inside the TP group (``ep`` = ``tp``) keeps the same two: every rank holds every token, runs its own
  whole experts on them, and the MoE output is all-reduced as a TP-sharded MoE's is (vLLM takes its all-to-all
  kernels only with data parallelism, ``use_all2all_kernels = dp_size > 1 and use_ep`` in
  vllm/model_executor/layers/fused_moe/config.py; SGLang's default ``moe_a2a_backend`` is none);
- CUDA graphs (vLLM's captured sizes, :mod:`.serving`): GEMMs run on the padded batch; beyond the largest
  captured size every kernel is launched from the host and the iteration takes at least the launches' time.

Prefill of T tokens in P prompts runs in chunks of the engine's token budget (chunked prefill), each chunk an
iteration as above plus causal attention (``P x (T/P)^2 / 2`` query-key pairs). Training: ``6 x active
parameters x tokens`` over ``gpus x peak x MFU`` plus expert-parallel all-to-alls (:mod:`.training`).

Peak FLOP/s, HBM and NVLink come from the GPU catalog (datasheets); floors and defaults from vLLM's source and
the public H100 kernel tables (see :mod:`.serving` and docs/costmodels.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from rltrace.replay.costmodels import serving
from rltrace.replay.costmodels.defaults import COMPUTE_EFFICIENCY, GPU_MEMORY_UTILIZATION, MEMORY_EFFICIENCY
from rltrace.replay.costmodels.iteration import IterationModel, Linear, PrefillModel
from rltrace.replay.costmodels.memory import RankMemory, rank_memory
from rltrace.replay.costmodels.parallel import collective_seconds, tp_allreduce_seconds
from rltrace.replay.costmodels.training import step_seconds

from rltrace.catalog import GPUSpec, ModelSpec
from rltrace.errors import ConfigError
from rltrace.units import DTYPE_BYTES

TABLE_BATCHES = serving.MAX_NUM_SEQS  # the replay engine's per-batch table covers vLLM's default max_num_seqs
LOGIT_BYTES = DTYPE_BYTES["fp32"]  # vLLM samples from FP32 logits
PREFILL_ANCHOR_TOKENS = 256  # 128 experts at top-8: 1 - (15/16)^256 of them touched, i.e. all


@dataclass(frozen=True, slots=True)
class Estimate:
    """One predicted duration, with what bounds it."""

    seconds: float
    bound: str
    """"compute" or "memory" (the kind of kernel that holds the larger share of the work: the two terms summed, the
    elementwise kernels memory-bound work in series with the rest) or "launch" (floors and host launches beyond it)"""
    compute_s: float
    memory_s: float
    comm_s: float
    flops: float
    bytes: float
    floor_s: float = 0.0
    """kernel floors and host launches beyond what the kernels' work explains"""
    experts: float = 0.0
    """expected distinct routed experts read per MoE layer"""

    def to_json(self) -> dict[str, float | str]:
        return {"seconds": self.seconds, "bound": self.bound, "compute_s": self.compute_s, "memory_s": self.memory_s,
                "comm_s": self.comm_s, "flops": self.flops, "bytes": self.bytes, "floor_s": self.floor_s,
                "experts": self.experts}


class _Layers(NamedTuple):
    """What :meth:`Roofline._layers` prices, each an array over the rows asked for."""

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


def _work(compute_s: float, memory_s: float, elementwise_s: float) -> float:
    """Seconds the kernels' work explains: the larger of the two terms, with the elementwise kernels (inside
    ``memory_s``) in series with a compute-bound rest rather than hidden under it."""
    return max(compute_s, memory_s - elementwise_s) + elementwise_s


def _bound(compute_s: float, memory_s: float, elementwise_s: float) -> str:
    """"compute" or "memory": the kind of kernel that holds the larger share of :func:`_work`."""
    rest = memory_s - elementwise_s
    memory = (rest if rest > compute_s else 0.0) + elementwise_s
    return "compute" if compute_s >= rest and compute_s >= memory else "memory"


@dataclass(frozen=True, kw_only=True, slots=True)
class Roofline:
    """Per-iteration times for ``model`` on ``gpu`` with tensor parallelism ``tp`` (experts split over ``ep``
    ranks of the same group when ``ep`` > 1, else sharded by TP)."""

    model: ModelSpec
    gpu: GPUSpec
    tp: int = 1
    ep: int = 1
    memory_efficiency: float = MEMORY_EFFICIENCY
    """achieved fraction of HBM bandwidth (measured median, memory-bound GEMMs: 0.59) of the KV-cache reads and
    writes and the sampler; of the GEMMs too where kernel floors are off (a CPU device): a GPU GEMM is a ramp
    plus its bytes at the streaming fraction of :data:`.serving.GEMM_STREAM`"""
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
    """with floors on, a GEMM's memory time is a ramp plus its bytes at the streaming fraction fitted to the public
    H100 table (:data:`.serving.GEMM_STREAM`); False: its bytes at ``memory_efficiency`` and the GEMM floor, which
    is what a fitted profile's memory factor means (``rltrace calibrate`` fits that form)"""
    batched_tokens: int = serving.MAX_BATCHED_TOKENS
    """chunked prefill's token budget per iteration (vLLM's max_num_batched_tokens)"""

    def __post_init__(self) -> None:
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

    # ---- memory ---------------------------------------------------------------------------------------------

    @property
    def _floors(self) -> bool:
        return self.kernel_floors if self.kernel_floors is not None else self.gpu.name.lower() != "cpu"

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes of one token on one rank."""
        return self.model.kv_bytes_per_token_rank(self.tp)

    def rank_memory(self, gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
                    max_num_seqs: int = serving.MAX_NUM_SEQS) -> RankMemory:
        """How vLLM splits one rank's share of memory: weights, profiling's activation peak (of
        :attr:`batched_tokens` tokens and ``max_num_seqs`` sampled rows), buffers outside torch, KV cache."""
        return rank_memory(self.model, self.gpu, self.tp, gpu_memory_utilization=gpu_memory_utilization,
                           batched_tokens=self.batched_tokens, max_num_seqs=max_num_seqs)

    def kv_capacity_tokens(self, gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
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

    # ---- kernels --------------------------------------------------------------------------------------------

    def _kernel(self, nbytes: np.ndarray | float, flops: np.ndarray | float, width: int,
                rate: float | None = None) -> np.ndarray:
        """A GEMM's time on weights of ``width`` bytes per element, its FLOPs at ``rate`` FLOP/s (None: the dense GEMM
        rate for that width, :meth:`_gemm_flops`)."""
        compute = np.asarray(flops) / (rate or self._gemm_flops(width))
        if not (self._floors and self.gemm_ramp):
            t = np.maximum(np.asarray(nbytes) / (self.gpu.hbm_bytes_per_s * self.memory_efficiency), compute)
            return np.maximum(t, serving.GEMM_FLOOR_S) if self._floors else t
        # a GPU GEMM streams its weights after a ramp (launch, tile set-up, pipeline fill), so small kernels run
        # far below the bandwidth large ones reach: ramp + bytes / (fraction x HBM), fitted to the H100 table
        stream = serving.stream_seconds(nbytes, width, self.gpu.hbm_bytes_per_s)
        seconds: np.ndarray = np.maximum(np.maximum(stream, compute), serving.GEMM_FLOOR_S)
        return seconds

    def _gemm_flops(self, width: int) -> float:
        """FLOP/s of a compute-bound GEMM on weights of ``width`` bytes per element: the part's peak for that width at
        :attr:`compute_efficiency`, and on the FP8 peak at :data:`.serving.FP8_GEMM_SHARE` of it as well (the public
        H100 table's FP8 GEMMs reach 0.64x the share of their peak that its BF16 GEMMs reach of theirs)."""
        fp8 = width == 1 and self.gpu.fp8_tflops > 0
        return self.gpu.flops_for(width) * self.compute_efficiency * (serving.FP8_GEMM_SHARE if fp8 else 1.0)

    @property
    def _fused_moe(self) -> bool:
        """Whether the routed experts are priced as the fused-MoE op of the GPU's kernel table (a GPU path with
        floors and GEMM ramps, i.e. not a fitted profile, and both table figures for the part), not as two GEMMs."""
        return bool(self._floors and self.gemm_ramp and self.gpu.moe_stream_efficiency and self.gpu.moe_fixed_us)

    @property
    def _gemm_bandwidth(self) -> float:
        """Bytes per second a GEMM streams its weights at, ramps aside (for the memory-bound share of a report)."""
        if self._floors and self.gemm_ramp:
            return self.gpu.hbm_bytes_per_s * serving.GEMM_STREAM.get(self.model.dtype_bytes, serving.GEMM_STREAM[2])[1]
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
        seconds = np.zeros_like(t)
        flops = np.zeros_like(t)
        nbytes = np.zeros_like(t)
        stream = np.zeros_like(t)
        compute = np.zeros_like(t)

        def add(
            params: float, count: float, rows: np.ndarray | float = t, read: float | np.ndarray | None = None,
            width: int = wb, rate: float | None = None,
        ) -> None:
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
        takes its floor or its activations' bytes at :data:`.serving.ELEMENTWISE_STREAM` of HBM, whichever is longer.
        Per layer, as vLLM and SGLang run them: two fused residual-add RMSNorms (read the hidden state and the
        residual, write both: 4 x hidden BF16 values a token, not sharded by TP); rotary embedding in place on each
        rank's q and k heads (KV heads replicated where TP exceeds them, as the KV cache is; MLA: its rope dimensions,
        and its two latent RMSNorms as kernels of their own); the MLP's SiLU-and-mul (read 2 x intermediate / tp,
        write half): dense layers' and shared experts', and the routed experts' where no fused-MoE op holds them
        (each token's top-k); the KV-cache write at its floor (a prefill's KV bytes are attention's, a decode step's
        are a token a sequence). Decode batches sit on the floors; a prefill chunk of thousands of tokens streams,
        and as TP shards the GEMMs but not the norms, the more so at high TP."""
        m, tp = self.model, self.tp
        floor = serving.ELEMENTWISE_FLOOR_S
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
        bw = self.gpu.hbm_bytes_per_s * serving.ELEMENTWISE_STREAM
        seconds = np.full_like(tokens, floors * floor)
        nbytes = np.zeros_like(tokens)
        for values, count in kernels:
            if values and count:
                moved = tokens * values * 2
                seconds = seconds + count * np.maximum(floor, moved / bw)
                nbytes = nbytes + count * moved
        return seconds, nbytes, nbytes / bw

    def _serving_ep(self) -> None:
        if self.ep not in (1, self.tp):
            raise ConfigError(f"ep {self.ep}: a serving instance runs its experts over its own TP group "
                              f"(ep 1 or {self.tp})")

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
            s = 2 * m.layers * tp_allreduce_seconds(self.gpu, tp, float(n), m.hidden)
            if m.tp_norm_allreduces:  # a norm over every head: each token's q and k variance, two fp32 values
                s += m.tp_norm_allreduces * m.layers * collective_seconds(self.gpu, "all_reduce", tp, 8.0 * n)
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
        host = kernels * serving.EAGER_LAUNCH_S
        return np.where(np.asarray(tokens) > serving.MAX_CAPTURE_SIZE, np.maximum(gpu_s, host), gpu_s)

    def decode_table(self, batches: ArrayLike) -> np.ndarray:
        """Seconds of a decode iteration's batch-dependent part at each batch size: GEMMs on the padded batch,
        experts touched, floors, sampler, TP/EP communication (everything but the KV reads)."""
        b = np.asarray(batches, dtype=np.int64)
        rows = serving.padded_tokens(b) if self._floors else b
        gemm = self._layers(rows).seconds
        attention_floor = self.model.layers * serving.ATTENTION_FLOOR_S if self._floors else 0.0
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

    # ---- public ---------------------------------------------------------------------------------------------

    def decode(self, batch: int, context: float) -> Estimate:
        """One decode iteration of ``batch`` sequences whose mean context is ``context`` tokens."""
        if batch < 1 or context < 0:
            raise ConfigError(f"decode needs batch >= 1 and context >= 0, got batch={batch}, context={context}")
        self._serving_ep()
        m = self.model
        b = np.array([batch])
        rows = serving.padded_tokens(b) if self._floors else b
        _, gflops, gbytes, gstream, experts, gcompute, ew = (float(x[0]) for x in self._layers(rows))
        table = float(self.decode_table(b)[0])
        attended = batch * m.attended(context)
        per_c, per_m = self._attention_per_ctx
        kv_read = attended * self.kv_bytes_per_token
        comm = float(self._comm_table(b)[0])
        overhead = self.engine_overhead
        engine = overhead.base + overhead.per_seq * batch + overhead.per_ctx * batch * context
        seconds = max(per_c * attended, table + per_m * attended) + engine
        flops = gflops + m.attention_flops_per_token / self.tp * attended
        nbytes = gbytes + kv_read
        compute_s = gcompute + per_c * attended  # every kernel at its own rate (attention at BF16's)
        memory_s = gstream + per_m * attended
        work = _work(compute_s, memory_s, ew)
        floor = max(seconds - engine - comm - work, 0.0)
        bound = "launch" if floor > work else _bound(compute_s, memory_s, ew)
        return Estimate(seconds, bound, compute_s, memory_s, comm + engine, flops, nbytes, floor, experts)

    def decode_seconds(self, batch: int, context: float) -> float:
        """:meth:`decode`'s seconds (the surface :class:`.benchmark.ServingCosts` shares with the kernel database)."""
        return self.decode(batch, context).seconds

    def prefill_seconds(self, tokens: int, prompts: int = 1) -> float:
        """:meth:`prefill`'s seconds (:class:`.benchmark.ServingCosts`)."""
        return self.prefill(tokens, prompts).seconds

    def prefill(self, tokens: int, prompts: int = 1, samples: int = 1) -> Estimate:
        """Prefill of ``tokens`` prompt tokens split evenly over ``prompts`` prompts (causal attention), in
        chunks of :attr:`batched_tokens`; with ``samples`` > 1 each prompt is one of ``samples`` samples sharing
        it, and the later samples prefill only what the prefix cache misses (:func:`.serving.shared_prefill_tokens`)."""
        if tokens < 1 or prompts < 1 or prompts > tokens or samples < 1:
            raise ConfigError(f"prefill needs 1 <= prompts <= tokens and samples >= 1, got tokens={tokens}, "
                              f"prompts={prompts}, samples={samples}")
        m = self.model
        per_prompt = tokens / prompts
        extra = samples - 1
        recomputed = per_prompt - serving.prefix_cached_tokens(int(per_prompt)) if extra else 0.0
        total = tokens + prompts * extra * recomputed
        n = serving.chunks(int(np.ceil(total)), self.batched_tokens)
        chunk = total / n
        # logits at each request's last scheduled token: a chunk holds its share of the requests, at least one
        requests = max(prompts * samples / n, 1.0)
        layers = self._layers(np.array([chunk]), requests)
        gemm, gflops, gbytes, gstream, experts, gcompute, ew = (float(x[0]) for x in layers)
        # causal attention: each prompt's own pairs, and the later samples' recomputed tail against the prompt
        pairs = prompts * per_prompt * per_prompt / 2 + prompts * extra * recomputed * per_prompt
        attn_flops = m.prefill_attention_flops_per_token / self.tp * pairs
        flop_s = self.gpu.flops * self.compute_efficiency
        kv_write = total * self.kv_bytes_per_token
        floor = n * m.layers * serving.ATTENTION_FLOOR_S if self._floors else 0.0
        attention = max(attn_flops / flop_s, kv_write / (self.gpu.hbm_bytes_per_s * self.memory_efficiency))
        comm = n * float(self._comm(chunk)[0])
        sampler = float(self._sampler(prompts * samples))
        seconds = n * gemm + attention + floor + sampler + comm
        flops = n * gflops + attn_flops
        compute_s = n * gcompute + attn_flops / flop_s  # every kernel at its own rate (attention at BF16's)
        memory_s = n * gstream + kv_write / (self.gpu.hbm_bytes_per_s * self.memory_efficiency)
        bound = _bound(compute_s, memory_s, n * ew)
        return Estimate(seconds, bound, compute_s, memory_s, comm, flops, n * gbytes + kv_write,
                        max(seconds - comm - _work(compute_s, memory_s, n * ew), 0.0), experts)

    def mixed_prefill(self, prompt: int, batch: int, sharing: float = 1.0) -> float:
        """Seconds a prompt of ``prompt`` tokens adds to the iterations it rides in beside ``batch`` running decodes
        (vLLM's chunked prefill: each iteration schedules the running requests' decodes first and fills the rest
        of the token budget with prompt chunks, one forward over both). Each chunk costs what its rows add to its
        iteration: the GEMMs and collectives over ``batch`` + chunk rows less those over the decodes' rows alone (a
        memory-bound decode iteration has compute to spare, which the chunk takes first), one more row of logits,
        and the prompt's causal attention and KV-cache writes. With no decodes running the chunks are iterations of
        their own and pay their fixed parts (weights, kernel floors) as :meth:`prefill` does. ``sharing`` chunks
        (of as many prompts) ride in each such iteration when there are more chunks than iterations to carry them:
        the iteration's added rows are theirs together, and each pays its share (the spare compute of a
        memory-bound decode, and the step from CUDA graphs to eager launches past their sizes, count once, not once
        per chunk)."""
        if prompt < 1 or batch < 0 or not sharing >= 1:
            raise ConfigError(f"mixed_prefill needs prompt >= 1, batch >= 0 and sharing >= 1, got prompt={prompt}, "
                              f"batch={batch}, sharing={sharing}")
        self._serving_ep()
        m = self.model
        n = serving.chunks(prompt, max(self.batched_tokens - batch, 1))  # the decodes take part of the budget
        chunk = prompt / n

        def iteration(rows: float, logit_rows: float) -> float:  # GEMMs, collectives, host launches beyond graphs
            t = np.array([rows], dtype=np.float64)
            padded = serving.padded_tokens(t.astype(np.int64)).astype(np.float64) if self._floors else t
            gpu = self._layers(padded, logit_rows).seconds + self._comm(padded)
            return float(self._launch_bound(t, gpu)[0])

        added = (iteration(batch + sharing * chunk, batch + sharing)
                 - (iteration(batch, batch) if batch else 0.0)) / sharing
        if not batch and self._floors:
            added += m.layers * serving.ATTENTION_FLOOR_S  # the chunk's own attention kernels
        flops = m.prefill_attention_flops_per_token / self.tp * prompt * prompt / 2
        kv_write = prompt * self.kv_bytes_per_token
        attention = max(flops / (self.gpu.flops * self.compute_efficiency),
                        kv_write / (self.gpu.hbm_bytes_per_s * self.memory_efficiency))
        return n * (added + float(self._sampler(1))) + attention

    def train(self, tokens: int, gpus: int, *, seq_len: int | None = None, precision: str = "bf16") -> Estimate:
        """One optimizer step over ``tokens`` tokens (forward and backward) on ``gpus`` GPUs, as validated
        (:func:`.training.step_seconds`): ``6 x active parameters x tokens`` plus causal attention over
        ``seq_len``-token sequences, at :attr:`train_mfu`, the linear layers at the FP8 peak for ``precision``
        "fp8", plus expert-parallel all-to-alls when ``ep`` > 1."""
        if tokens < 1 or gpus < 1 or (seq_len is not None and seq_len < 1):
            raise ConfigError(f"train needs tokens, gpus and a sequence length >= 1, got tokens={tokens}, "
                              f"gpus={gpus}, seq_len={seq_len}")
        step = step_seconds(self.model, self.gpu, tokens=tokens, gpus=gpus, mfu=self.train_mfu, ep=self.ep,
                            seq_len=seq_len, precision=precision)
        return Estimate(step.seconds, "compute", step.compute_s, 0.0, step.comm_s, step.flops, 0.0)

    # ---- the replay engine's closed forms ------------------------------------------------------------------

    def iteration_model(self) -> IterationModel:
        """:meth:`decode` for the engine: attention as lines in total context tokens, everything else a table
        by batch size (``memory_by_batch``); ``iteration(b, b x c)`` equals ``decode(b, c).seconds``."""
        per_c, per_m = self._attention_per_ctx
        self._serving_ep()
        table = self.decode_table(np.arange(TABLE_BATCHES + 1))
        e = self.engine_overhead
        return IterationModel(compute=Linear(per_ctx=per_c), memory=Linear(per_ctx=per_m), extra=e,
                              memory_by_batch=tuple(float(x) for x in table))

    def prefill_model(self) -> PrefillModel:
        """:meth:`prefill` as the engine's closed form: a line in the wave's tokens through two anchors (one token,
        or for an MoE 256, by which its experts are all touched; and one full chunk), plus one more fixed part per
        extra chunk, and causal attention quadratic in each prompt's length."""
        m = self.model
        chunk = self.batched_tokens
        # a dense model's prefill is affine in its tokens (exact from one token); an MoE's is not until every
        # expert is touched
        lo_t = min(PREFILL_ANCHOR_TOKENS, max(chunk // 2, 1)) if m.is_moe else 1
        lo = self.prefill(lo_t).seconds - self._attention_pairs_seconds(lo_t * lo_t / 2)
        hi = self.prefill(chunk).seconds - self._attention_pairs_seconds(chunk * chunk / 2)
        slope = max((hi - lo) / max(chunk - lo_t, 1), 0.0)
        base = max(lo - slope * lo_t, 0.0)
        # a wave of several chunks pays the fixed part once per chunk: the line runs from the first anchor to a
        # four-chunk wave (4 x base + slope x 4 chunks), between the two errors
        far = 4 * chunk
        line = max((4 * base + slope * far - lo) / (far - lo_t), 0.0)
        flop_s = self.gpu.flops * self.compute_efficiency
        return PrefillModel(per_token=0.0,
                            per_token_sq_per_prompt=m.prefill_attention_flops_per_token / self.tp / 2 / flop_s,
                            extra_base=max(lo - line * lo_t, 0.0), extra_per_token=line)

    def _attention_pairs_seconds(self, pairs: float) -> float:
        flops = self.model.prefill_attention_flops_per_token / self.tp * pairs
        return flops / (self.gpu.flops * self.compute_efficiency)
