"""Communication of model parallelism, priced by the network model (replay/network): NCCL's algorithms and
protocols on the GPUs' NVSwitch node, or a leaf-spine of such nodes when a group spans several.

- tensor parallelism: two all-reduces per layer of ``tokens x hidden`` BF16 activations (attention out and MLP
  out; Megatron's and vLLM's row-parallel layers); serving's EP inside the TP group keeps both (every rank holds
  every token: :mod:`.roofline`'s module text);
- training's expert parallelism: a dispatch and a combine all-to-all per MoE layer, each rank sending its tokens'
  hidden states to the ranks holding their top-k experts (forward, and the same two in backward);
- data parallelism / ZeRO / FSDP: gradients reduce-scattered (or all-reduced) and weights all-gathered once per
  step, 2 or 4 bytes per parameter.

A collective's time is affine in its size to a good approximation (a latency plus size over bandwidth, the
network model's own form), so the replay engine's closed form takes two evaluations and draws the line.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from rltrace.replay.network.collectives import collective
from rltrace.replay.topologies.base import parse

from rltrace.calibration import CALIBRATION, CostCalibration
from rltrace.catalog import GPUSpec, get_gpu
from rltrace.errors import ConfigError
from rltrace.units import DTYPE_BYTES, bus_factor

ACTIVATION_BYTES = DTYPE_BYTES["bf16"]  # activations travel in BF16 whatever the weights' dtype (FP8 GEMMs output BF16)


@lru_cache(maxsize=4096)
def _collective_s(gpu: str, op: str, ranks: int, size: float, gpus_per_node: int) -> float:
    nodes = -(-ranks // gpus_per_node)
    # nodes larger than the kind's NVLink domain: a described cluster's own (its cluster.gpus_per_node) says so
    domain = f",nvlink_domain={gpus_per_node}" if gpus_per_node > get_gpu(gpu).nvlink_domain else ""
    spec = (f"nvswitch:gpus={max(ranks, 1)}{domain},gpu={gpu}" if nodes == 1 else
            f"leaf-spine:nodes={nodes},gpus_per_node={gpus_per_node},leaf_down={nodes * gpus_per_node}{domain},"
            f"gpu={gpu}")
    return collective(parse(spec), op, ranks, size).seconds


def collective_seconds(gpu: GPUSpec, op: str, ranks: int, size: float, gpus_per_node: int | None = None, *,
                       calibration: CostCalibration = CALIBRATION) -> float:
    """Seconds of one NCCL ``op`` of ``size`` bytes (nccl-tests' message size) over ``ranks`` GPUs of kind ``gpu``,
    ``gpus_per_node`` of them on one NVLink fabric (None: the kind's NVLink domain, 72 in a GB200 NVL72 rack), from
    the network model; 0 for a single rank. A GPU kind the topologies cannot name takes a ring at half its
    NVLink figure after ``calibration``'s ``nccl_small_latency_s`` (aiconfigurator's measured 8 x H100 NCCL
    all_reduce of <= 8 KiB)."""
    if ranks <= 1 or size <= 0:
        return 0.0
    per_node = gpus_per_node or gpu.nvlink_domain
    try:
        return _collective_s(gpu.name, op, int(ranks), float(size), min(per_node, int(ranks)))
    except ConfigError:  # a user GPU the topologies cannot look up: a ring at half the bidirectional NVLink figure
        return calibration["nccl_small_latency_s"] + bus_factor(op, ranks) * size / (gpu.nvlink_gbps / 2 * 1e9)


def tp_allreduce_seconds(gpu: GPUSpec, tp: int, tokens: float, hidden: int,
                         calibration: CostCalibration = CALIBRATION) -> float:
    """One tensor-parallel all-reduce of ``tokens`` tokens' hidden states."""
    return collective_seconds(gpu, "all_reduce", tp, tokens * hidden * ACTIVATION_BYTES, calibration=calibration)


def ep_alltoall_seconds(gpu: GPUSpec, ep: int, tokens: float, hidden: int, top_k: int,
                        calibration: CostCalibration = CALIBRATION, gpus_per_node: int | None = None) -> float:
    """One expert-parallel all-to-all (dispatch or combine) of ``tokens`` tokens held on each rank, each sent to
    its ``top_k`` experts: every rank's send buffer is ``tokens x top_k x hidden`` BF16 values, (ep-1)/ep of them
    leaving the rank (the all-to-all's own bus factor); ``gpus_per_node`` ranks share a node's NVLink (None: the
    kind's NVLink domain)."""
    return collective_seconds(gpu, "all_to_all", ep, tokens * top_k * hidden * ACTIVATION_BYTES, gpus_per_node,
                              calibration=calibration)


def affine(fn: Callable[[float], float], lo: float = 1.0, hi: float = 256.0) -> tuple[float, float]:
    """``fn(tokens)`` as ``base + slope x tokens`` through two points (collectives are affine in size)."""
    a, b = fn(lo), fn(hi)
    slope = max((b - a) / (hi - lo), 0.0)
    return max(a - slope * lo, 0.0), slope
