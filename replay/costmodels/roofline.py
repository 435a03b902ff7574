"""Cost of one serving-engine iteration (and one training step) of a transformer on a GPU kind, per kernel: the
public estimates (:meth:`Roofline.decode`, :meth:`Roofline.prefill`, :meth:`Roofline.mixed_prefill`,
:meth:`Roofline.train`) and the replay's closed forms (:meth:`Roofline.iteration_model`,
:meth:`Roofline.prefill_model`), over the kernels of :mod:`.kernels` and what :mod:`.iteration_costs` adds.

Prefill of T tokens in P prompts runs in chunks of the engine's token budget (chunked prefill), each chunk an
iteration as above plus causal attention (``P x (T/P)^2 / 2`` query-key pairs). Training: ``6 x active
parameters x tokens`` over ``gpus x peak x MFU`` plus expert-parallel all-to-alls (:mod:`.training`).

Peak FLOP/s, HBM and NVLink come from the GPU catalog (datasheets); floors and defaults from vLLM's source and
the public H100 kernel tables (see :mod:`.serving` and docs/costmodels-roofline.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rltrace.replay.costmodels import serving
from rltrace.replay.costmodels.iteration import IterationModel, Linear, PrefillModel
from rltrace.replay.costmodels.iteration_costs import IterationCosts
from rltrace.replay.costmodels.training import step_seconds

from rltrace.errors import ConfigError

TABLE_BATCHES = serving.MAX_NUM_SEQS  # the replay engine's per-batch table covers vLLM's default max_num_seqs
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
    engine_s: float = 0.0
    """the engine's own per-iteration time beside the kernels (a profile's, measured by calibrate --engine vllm)"""

    def to_json(self) -> dict[str, float | str]:
        return {"seconds": self.seconds, "bound": self.bound, "compute_s": self.compute_s, "memory_s": self.memory_s,
                "comm_s": self.comm_s, "flops": self.flops, "bytes": self.bytes, "floor_s": self.floor_s,
                "experts": self.experts, "engine_s": self.engine_s}


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
class Roofline(IterationCosts):
    """Per-iteration times for ``model`` on ``gpu`` with tensor parallelism ``tp`` (experts split over ``ep``
    ranks of the same group when ``ep`` > 1, else sharded by TP)."""

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
        return Estimate(seconds, bound, compute_s, memory_s, comm, flops, nbytes, floor, experts, engine)

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
        floor = n * m.layers * self.figures.attention_floor_s if self._floors else 0.0
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
            added += m.layers * self.figures.attention_floor_s  # the chunk's own attention kernels
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
                            seq_len=seq_len, precision=precision, calibration=self.calibration)
        return Estimate(step.seconds, "compute", step.compute_s, 0.0, step.comm_s, step.flops, 0.0)

    # ---- the replay engine's closed forms ------------------------------------------------------------------

    def iteration_model(self, batches: int = TABLE_BATCHES) -> IterationModel:
        """:meth:`decode` for the engine: attention as lines in total context tokens, everything else a table
        by batch size up to ``batches`` (``memory_by_batch``); ``iteration(b, b x c)`` equals ``decode(b, c).seconds``
        for every batch the table holds."""
        per_c, per_m = self._attention_per_ctx
        self._serving_ep()
        table = self.decode_table(np.arange(max(batches, 1) + 1))
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
