"""Weight-sync strategies as flows, from the trainer GPUs to the generation GPUs.

- ``per_tensor`` (OpenRLHF): trainer rank 0 broadcasts every tensor on its own to all generation GPUs; each is
  one NCCL broadcast as the collective model times it (.collectives.collective: a chain per channel, its fill,
  its latency), one after another.
- ``bucketed``: the same, with tensors packed into ``bucket_bytes`` buckets (fewer, larger broadcasts).
- ``tree`` (StreamRL): one pipelined binary-tree broadcast from trainer rank 0 over the generation GPUs.
- ``two_stage`` (RollMux): trainer rank i sends its 1/n shard to one generation GPU (so exactly one model copy
  crosses the link between the pools, spread over n senders), then the generation GPUs all-gather it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from rltrace.replay.network.algorithms import phases
from rltrace.replay.network.collectives import collective
from rltrace.replay.network.protocols import run_phases
from rltrace.replay.network.schedules import Phase, tree_edges
from rltrace.replay.topologies import parse
from rltrace.replay.topologies.base import Topology

from rltrace.catalog import get_gpu
from rltrace.errors import ConfigError

STRATEGIES = ("per_tensor", "bucketed", "tree", "two_stage")
BUCKET_BYTES = 1 << 30


def _broadcasts(strategy: str, nbytes: float, tensors: int, bucket_bytes: int) -> dict[float, int]:
    """The broadcasts a ``per_tensor`` or ``bucketed`` sync runs: bytes of each -> how many of that size (equal
    tensors; full buckets and the rest). A sync of no bytes still runs one empty broadcast (its latency)."""
    if strategy == "per_tensor":
        return {nbytes / max(tensors, 1): max(tensors, 1)}
    full, rest = divmod(float(nbytes), float(bucket_bytes))
    counts = {float(bucket_bytes): int(full)} if full else {}
    if rest > 0 or not full:
        counts[rest] = counts.get(rest, 0) + 1
    return counts


@dataclass(frozen=True, slots=True)
class SyncTime:
    seconds: float
    strategy: str
    link_bytes: np.ndarray
    reconfig_s: float


def weight_sync(topo: Topology, strategy: str, trainers: np.ndarray, generators: np.ndarray, nbytes: float,
                tensors: int = 1, bucket_bytes: int = BUCKET_BYTES) -> SyncTime:
    """Seconds to move ``nbytes`` of weights (``tensors`` tensors) from ``trainers`` to every generator GPU."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown weight-sync strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    if not len(trainers) or not len(generators) or nbytes < 0:
        raise ConfigError("a weight sync needs trainer and generator GPUs and bytes >= 0")
    root = trainers[:1]
    path = np.concatenate([root, generators])
    if strategy in ("per_tensor", "bucketed"):
        # Each tensor or bucket is one NCCL broadcast, timed by the collective model itself (collective(): its
        # channels' chains, its protocol pick, LL's cap and the chain's fill: only the root holds data at first),
        # so a sync and `fabric bench --op broadcast` price the same broadcast alike. NCCL runs a stream's
        # broadcasts one after another, so every one pays its latency and its chain's fill again.
        counts = _broadcasts(strategy, nbytes, tensors, bucket_bytes)
        seconds, reconfig = 0.0, 0.0
        carried = np.zeros(len(topo.links()))
        for size, count in counts.items():
            c = collective(topo, "broadcast", path, size)
            reconfig += c.reconfig_s  # a circuit set for the first broadcast serves the rest (same flows)
            seconds += count * (c.seconds - c.reconfig_s) + c.reconfig_s
            carried += count * c.link_bytes
        return SyncTime(seconds, strategy, carried, reconfig)
    if strategy == "tree":
        parent, child = tree_edges(path)
        half = len(parent) // 2  # one binary tree (the first of the double tree) rooted at trainer rank 0
        depth = max(1, math.ceil(math.log2(len(path))))
        parts = [Phase(parent[:half], child[:half], np.full(half, float(nbytes)), depth)]
        t = run_phases(topo, parts)  # a broadcast tree of point-to-point sends, not NCCL's all-reduce tree
        return SyncTime(t.seconds, strategy, t.link_bytes, t.reconfig_s)
    n = len(trainers)
    senders, receivers = trainers, generators[np.arange(n) % len(generators)]
    scatter = Phase(senders, receivers, np.full(n, nbytes / n), 1)
    g = len(generators)
    # NCCL's all-gather of the shards among the generators: across nodes, one ring per NIC (channels)
    gather = phases("all_gather", generators, nbytes, "ring", topo.gpus_per_node, 0.0,
                    min(int(getattr(topo, "nics", 1)), topo.gpus_per_node))[0] if g > 1 else scatter
    t = run_phases(topo, [scatter, gather] if g > 1 else [scatter])
    return SyncTime(t.seconds + t.protocol.base_s, strategy, t.link_bytes, t.reconfig_s)  # two collectives


def local_fabric(gen_gpus: int, train_gpus: int, gpu: str) -> str:
    """The fabric a replay assumes when it moves a recording to another GPU kind without ``--topology``: one
    NVSwitch domain of ``gpu`` for as many GPUs as it joins (8 on HGX, 72 in a GB200 NVL72 rack), else
    rail-optimised nodes of that many (docs/fabrics.md)."""
    gpus, domain = gen_gpus + train_gpus, get_gpu(gpu).nvlink_domain
    if gpus <= domain:
        return f"nvswitch:gpus={gpus},gpu={gpu}"
    per_node = f",gpus_per_node={domain}" if domain != 8 else ""  # 8: the topologies' default, left unsaid
    return f"rail:nodes={math.ceil(gpus / domain)}{per_node},gpu={gpu}"


def reprice_syncs(sync_bytes: list[float], gen_gpus: int, train_gpus: int, gpu: str, *, tensors: int = 1,
                  strategy: str = "bucketed") -> list[float]:
    """Seconds of each step's weight sync (``sync_bytes``: one model copy to every generator) on
    :func:`local_fabric`: what a sync measured on other hardware takes on the replay's GPUs."""
    topo = parse(local_fabric(gen_gpus, train_gpus, gpu))
    generators, trainers = np.arange(gen_gpus), gen_gpus + np.arange(train_gpus)
    priced: dict[float, float] = {}  # a sync's time depends only on its bytes: one routing per distinct size
    for nbytes in sync_bytes:
        if nbytes not in priced:
            sync = weight_sync(topo, strategy, trainers, generators, nbytes, tensors) if nbytes > 0 else None
            priced[nbytes] = float(sync.seconds) if sync is not None else 0.0
    return [priced[b] for b in sync_bytes]
