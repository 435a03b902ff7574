"""NCCL's all-reduce with in-network reduction across nodes: CollNet over InfiniBand SHARP, and NVLS + SHARP.

With a SHARP-capable fabric (the topology's ``sharp=true``: Quantum switches and NCCL's SHARP plugin,
``NCCL_COLLNET_ENABLE=1``; NVIDIA/nccl 2.26.2, src/init.cc, src/include/coll_net.h) the switches reduce: each
node's *heads* (the GPUs that own a NIC, one CollNet channel per NIC, src/graph/search.cc) send their share of the
node's sum up once and receive the total back, so each NIC carries ``size / heads`` each way whatever the node
count, where a ring carries ``2 (n - 1) / n`` of ``size / heads``. Three schedules (src/device/all_reduce.h):

- ``collnet_direct``: every GPU scatters ``1 / heads`` of its buffer to each head over NVLink, the heads reduce it
  and exchange it with the switch, and every GPU gathers the heads' results back;
- ``collnet_chain``: per channel a chain through the node's GPUs to that channel's head, reducing up it and
  broadcasting down it (with a head per GPU every GPU sends and receives 2 (g - 1) / g of the buffer, as under
  Direct; with fewer heads the two differ), at its own latency (below);
- ``nvls`` across nodes (NVLS + SHARP): NVLink SHARP inside the node (every GPU ``(1 + 1/g) x size`` through the
  switch, as the one-node NVLS) and the heads' exchange with the network switch.

Each runs its stages pipelined (the slowest stage plus the others' fill), under Simple only (tuning.cc disables
LL and LL128 for CollNet; NVLS is Simple). Latencies are NCCL's (tuning.cc, 2.26.2: baseLat 0; hwLat NVLink and
NET): CollNetDirect ``2 (3.7 + 0.4 (g - 1)) + 31`` us (0.4 us of "arity serialization" per peer), CollNetChain
``2 (g - 1) 2.8 + 30`` us, NVLS across nodes ``25 + 18`` us. NCCL's tuner picks among them and the ring, tree and
NVLSTree with its own factors (CollNetDirect: bus bandwidth over ``ppn / channels`` halved towards 1, times 0.85 on
Hopper), which here shape the pick only.

Not validated: no public nccl-tests run with SHARP on and the cluster stated unambiguously turned up (one
CoreWeave H100 run with CollNetChain forced states 64 ranks in its manifest and prints busbw of 96:
docs/fabrics-collectives.md), so these are NCCL's own mechanism and constants, not a checked model.
"""

from __future__ import annotations

import numpy as np
from rltrace.replay.network.multinode import node_major, nvls_tree
from rltrace.replay.network.protocols import (
    PIPELINE_CHUNK_BYTES,
    PhasesTime,
    Protocol,
    plugin_latency_s,
    run_phases,
)
from rltrace.replay.network.schedules import Phase
from rltrace.replay.network.tuner import NVLS_CHANNELS, nvls_tree_unit_bytes
from rltrace.replay.topologies.base import Topology

from rltrace.catalog import get_gpu
from rltrace.errors import ConfigError

# CollNet channels: about 16 at large sizes (src/enqueue.cc collNetChannels), each moving one chunk at a time
# (calcCollChunking: 512 KiB for CollNetDirect from 8 GiB); the pipeline's unit is their chunks at once.
COLLNET_CHANNELS = 16


def whole_nodes(topo: Topology, ranks: np.ndarray) -> np.ndarray | None:
    """The ranks as a (nodes x GPUs) grid when they fill whole, equal nodes of several GPUs (what CollNet and
    multi-node NVLS need: every GPU of a node takes part, its heads among them); None otherwise."""
    local = node_major(ranks, topo.gpus_per_node)
    if len(local) < 2 or any(len(x) != topo.gpus_per_node for x in local) or topo.gpus_per_node < 2:
        return None
    return np.stack(local)


def latency_s(algo: str, gpus_per_node: int) -> float:
    """NCCL's latency for ``algo`` across nodes (tuning.cc, 2.26.2), seconds."""
    g = gpus_per_node
    us = {"collnet_direct": 2 * (3.7 + 0.4 * (g - 1)) + 31.0, "collnet_chain": 2 * (g - 1) * 2.8 + 30.0,
          "nvls": 25.0 + 18.0}[algo]
    return us * 1e-6


def _heads(topo: Topology, grid: np.ndarray) -> np.ndarray:
    """Each node's NIC-owning GPUs (nodes x heads): one CollNet channel's head per NIC."""
    owner = topo.nic_of(grid[0]) == grid[0]  # type: ignore[attr-defined]  # a NodeFabric: every multi-node topology
    return grid[:, owner]


def collnet_phases(topo: Topology, grid: np.ndarray, size: float, algo: str) -> list[Phase]:
    """The two pipelined stages of ``algo`` over the (nodes x GPUs) ``grid``: inside the nodes (NVLS, or CollNet's
    scatter to the heads and gather from them), and the heads' exchange with the switch (each head's NIC up and down
    ``size / heads``, drawn as a ring of each rail's heads across the nodes, which loads every NIC link as the
    switch's reduction does)."""
    heads = _heads(topo, grid)
    h = heads.shape[1]
    up = np.roll(heads, -1, axis=0)
    network = Phase(heads.ravel(), up.ravel(), np.full(heads.size, size / h), 0,
                    levels=np.zeros(heads.size, dtype=np.int64))
    g = grid.shape[1]
    if algo == "nvls":  # NVLS's NVLink stage, as NVLSTree's (.multinode.nvls_tree), at NCCL's NVLS efficiency
        eff = get_gpu(topo.gpu).nvls_efficiency * (NVLS_CHANNELS - 1) / NVLS_CHANNELS
        return [nvls_tree(list(grid.reshape(1, -1)), size, g, eff)[0], network]
    if algo == "collnet_chain":  # per channel a chain through the node's GPUs to its head: reduce up, broadcast down
        src, dst = [], []
        for node, node_heads in zip(grid, heads, strict=True):
            for head in node_heads:
                order = np.roll(node, -int(np.flatnonzero(node == head)[0]) - 1)  # ... -> head, the head last
                src += [order[:-1], order[1:]]  # up the chain and back down it, each hop the channel's share
                dst += [order[1:], order[:-1]]
        s_all, d_all = np.concatenate(src), np.concatenate(dst)
        chain = Phase(s_all, d_all, np.full(len(s_all), size / h), 0, levels=np.zeros(len(s_all), dtype=np.int64))
        return [chain, network]
    src, dst = [], []
    for node, node_heads in zip(grid, heads, strict=True):  # every GPU to each head of its node but itself
        s, d = np.repeat(node, h), np.tile(node_heads, len(node))
        keep = s != d
        src.append(s[keep])
        dst.append(d[keep])
    s_all, d_all = np.concatenate(src), np.concatenate(dst)
    # the scatter to the heads and the gather from them move different chunks at once over the same NVLinks: one
    # stage whose flows are both (each GPU sends and receives 2 (g - 1) / g of the buffer with g heads)
    both_src, both_dst = np.concatenate([s_all, d_all]), np.concatenate([d_all, s_all])
    intra = Phase(both_src, both_dst, np.full(len(both_src), size / h), 0,
                  levels=np.zeros(len(both_src), dtype=np.int64))
    return [intra, network]


def pick_factor(algo: str, topo: Topology, heads: int) -> float:
    """NCCL's factor on CollNetDirect's bus bandwidth in its estimate (tuning.cc: over ``ppn / channels`` halved
    towards 1, times 0.85 on Hopper and later); 1 for the others."""
    if algo != "collnet_direct":
        return 1.0
    factor = topo.gpus_per_node / max(heads, 1)
    factor -= (factor - 1) / 2
    hopper_or_later = get_gpu(topo.gpu).nccl_arch in ("hopper", "blackwell")
    return (0.85 if hopper_or_later else 1.0) / factor


def timed(topo: Topology, ranks: np.ndarray, size: float, algo: str) -> PhasesTime:
    """``algo`` (collnet_direct, collnet_chain, or nvls across nodes) all-reducing ``size`` bytes over ``ranks``."""
    grid = whole_nodes(topo, ranks)
    if grid is None:
        raise ConfigError(f"{algo} across nodes needs every GPU of equal, whole nodes")
    parts = collnet_phases(topo, grid, size, algo)
    heads = _heads(topo, grid).shape[1]
    protocol = Protocol("Simple", latency_s(algo, grid.shape[1]), 0.0, 0.0, 1.0)
    # a unit passes the node stage twice (in: reduce or scatter; out: multicast or gather) and the network's once
    # each way
    unit = (nvls_tree_unit_bytes(size, grid.shape[0], heads) if algo == "nvls"
            else float(PIPELINE_CHUNK_BYTES * COLLNET_CHANNELS))
    passes = (2, 2)
    plugin = plugin_latency_s(topo, "all_reduce", algo, grid.shape[0], "Simple")  # NCCL's one interLat
    return run_phases(topo, parts, protocols=(protocol,), pipelined=True, size=size, unit_bytes=unit,
                      passes=passes, estimate_bw_factor={"Simple": pick_factor(algo, topo, heads)},
                      added_latency_s={"Simple": plugin})
