"""The simple timing model behind synthetic timestamps (documented in docs/synth.md).

It is deliberately simpler than the replay engine: decode speed per engine is constant within a step
(a roofline at the step's mean batch and context), generation, reward, reference, training, optimizer and
weight sync run one after another (synchronous on-policy RL on disaggregated pools), and training
collectives are laid out inside the train span as FSDP would issue them. It exists so that every reader
has plausible, internally consistent times to work on.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from rltrace.calibration import CALIBRATION
from rltrace.calibration.defaults import ADAM_BYTES_PER_PARAM
from rltrace.catalog import GPUSpec, ModelSpec
from rltrace.errors import ConfigError
from rltrace.synth.config import MAX_RUN_S, SynthConfig
from rltrace.units import bus_factor

KV_BLOCK_TOKENS = 16  # vLLM's default KV block size: prefix-cache hits are whole blocks


@dataclass(frozen=True, slots=True)
class Costs:
    """Per-run constants of the timing model, in seconds."""

    engines: int
    weight_read_s: float
    """one decode iteration's weight read, per engine"""
    kv_read_s_per_token: float
    """one decode iteration's KV read, per context token in the batch"""
    prefill_s_per_token: float
    train_s_per_token: float
    forward_s_per_token: float
    optimizer_s: float
    sync_s: float
    all_gather_s: float
    reduce_scatter_s: float
    shard_elems: int


def costs(cfg: SynthConfig, model: ModelSpec, gen: GPUSpec, train: GPUSpec) -> Costs:
    """Derive the model's constants from the catalog figures and the config."""
    t = cfg.timing
    tp = cfg.generation.tp
    engine_bw = tp * gen.hbm_bytes_per_s * t.decode_efficiency
    ranks = cfg.training.gpus
    train_flops = ranks * train.flops * t.train_mfu
    # FSDP gathers one transformer block at a time: the mean block (an MoE block holds all its experts; a dense
    # model's is layer_params exactly), sharded over the ranks, the last shard padded
    block = (model.params - model.embedding_params - model.hidden) // model.layers
    shard = -(-block // ranks)
    full_bytes = shard * ranks * model.dtype_bytes
    # Within one NVLink domain (8 GPUs) a ring uses NVLink at half the bidirectional figure; beyond, the NIC.
    bus = train.nvlink_gbps / 2 * 1e9 if ranks <= 8 else t.network_gbps * 1e9
    # the replay cost model's own per-collective latency
    ring = bus_factor("all_gather", ranks) * full_bytes / bus + CALIBRATION["nccl_small_latency_s"]
    return Costs(
        engines=cfg.generation.gpus // tp,
        weight_read_s=model.weight_bytes / engine_bw,
        kv_read_s_per_token=model.kv_bytes_per_token / engine_bw,
        # a token runs through the active parameters only: an MoE's routed experts it is not sent to do no work
        prefill_s_per_token=2 * model.active_params / (tp * gen.flops * t.prefill_mfu),
        train_s_per_token=6 * model.active_params / train_flops,
        forward_s_per_token=2 * model.active_params / train_flops,
        optimizer_s=ADAM_BYTES_PER_PARAM * model.params / ranks / train.hbm_bytes_per_s,
        sync_s=model.weight_bytes / (t.sync_gbps * 1e9),
        all_gather_s=ring,
        reduce_scatter_s=ring,
        shard_elems=shard,
    )


def ns(seconds: ArrayLike) -> np.ndarray:
    """Seconds from the run start as int64 nanoseconds; a time past :data:`MAX_RUN_S` (a timing setting too large
    or a rate too small) is a ConfigError, not an int64 overflow."""
    s = np.asarray(seconds, dtype=np.float64)
    if s.size and not (np.isfinite(s).all() and float(np.abs(s).max()) <= MAX_RUN_S):
        worst = float(np.nanmax(np.abs(s))) if not np.isnan(s).all() else float("nan")
        raise ConfigError(f"synthetic times reach {worst:.3g} s from the run's start, past the limit of a century "
                          f"({MAX_RUN_S:,} s): a timing.* or agentic.* setting in seconds is too large, or a rate "
                          "(timing.sync_gbps, network_gbps, an MFU or efficiency) too small")
    return np.rint(s * 1e9).astype(np.int64)


def decode_costs(prompt: np.ndarray, output: np.ndarray, c: Costs,
                 max_num_seqs: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Service time (prefill + every token), prefill time and per-token time, in s, of one engine's wave of
    requests. Per-token time is the roofline of a decode iteration at the wave's mean batch (at most
    ``max_num_seqs``) and mean context."""
    batch = min(len(output), max_num_seqs)
    context = float(prompt.mean() + output.mean() / 2)
    tpot = c.weight_read_s + c.kv_read_s_per_token * batch * context
    prefill = prompt * c.prefill_s_per_token
    return prefill + output * tpot, prefill, tpot


def decode_engine(
    prompt: np.ndarray, output: np.ndarray, c: Costs, max_num_seqs: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scheduled, first-token and finish offsets (s) of one engine's requests, all arriving at 0.

    Per-token time is :func:`decode_costs`'. Requests beyond ``max_num_seqs`` wait FIFO for a free slot.
    """
    service, prefill, tpot = decode_costs(prompt, output, c, max_num_seqs)
    n = len(output)
    if n <= max_num_seqs:
        scheduled = np.zeros(n)
    else:  # FIFO slots: one heap operation per request, no per-token work
        free = [0.0] * max_num_seqs
        scheduled = np.empty(n)
        for i in range(n):
            start = heapq.heappop(free)
            scheduled[i] = start
            heapq.heappush(free, start + float(service[i]))
    first = scheduled + prefill + tpot
    finish = scheduled + service
    return scheduled, first, finish
