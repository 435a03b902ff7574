"""NCCL's algorithms across nodes, as flows: channels, each leaving the node through its own NIC.

NCCL (NVIDIA/nccl, src/graph/search.cc and rings.cc, 2.2x-2.30 releases) searches one ring or tree per channel
and places the channels so that each crosses between nodes through a different NIC (``NET/0`` .. ``NET/k-1``);
with PXN the GPU that closes a node's part of a ring hands its data over NVLink to the GPU beside the NIC. A
multi-node collective therefore reaches about the node's whole NIC bandwidth, not one NIC's. Here a node with
``k`` NICs gets ``k`` channels, channel ``c`` entering each node at the GPU that owns NIC ``c`` and carrying
``1/k`` of the bytes; NCCL's extra channels per NIC (two or more) only split the same bytes further, so they
change no link's load.

- ring: each channel a ring over all ranks, node after node; inside a node it starts at NIC ``c``'s GPU;
- tree (NCCL_ALGO=Tree): per channel, a chain through each node's GPUs to NIC ``c``'s GPU, and the double
  binary tree (src/graph/trees.cc) over those heads; reduce up and broadcast down at once, each binary tree on
  half of the channel's bytes;
- nvls_tree (NCCL_ALGO=NVLSTree, Hopper and later): NVLS inside each node (every GPU sends and receives
  ``(1 + 1/g) x size`` through the switch at NCCL's NVLS efficiency) and the double binary tree between the
  nodes' heads, one per NIC; the two stages run pipelined in NCCL's units (chunk x 16 channels x heads), so the
  slower one sets the time and each unit's passes (the switch in and out, each tree level up and down) the fill;
- broadcast: per channel a chain, node after node, from the root (the chain's fill, like the tree's, is added where
  the time is set, in .collectives).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from rltrace.replay.network.schedules import (
    COPY_TRAFFIC,
    OPS,
    REDUCE_TRAFFIC,
    Phase,
    all_to_all,
    dtree,
    tree_allreduce,
    tree_edges,
)

from rltrace.errors import ConfigError
from rltrace.units import bus_factor


def node_major(ranks: np.ndarray, gpus_per_node: int) -> list[np.ndarray]:
    """The ranks of each node, nodes in order of their first rank, each node's ranks in rank order."""
    nodes = ranks // gpus_per_node
    _, first, inverse = np.unique(nodes, return_index=True, return_inverse=True)
    rank_of_node = np.argsort(np.argsort(first))  # nodes numbered by their first rank
    order = np.lexsort((ranks, rank_of_node[inverse]))
    counts = np.bincount(rank_of_node[inverse])
    return np.split(ranks[order], np.cumsum(counts)[:-1])


def channel_orders(ranks: np.ndarray, gpus_per_node: int, nics: int) -> list[np.ndarray]:
    """One rank order per channel: node after node, each node's ranks rotated so that channel ``c`` enters it at
    its ``c / nics``-th rank. On whole nodes that is the GPU of NIC ``c`` (of ``nics`` NICs); on nodes the job holds
    only part of, the channels spread over the NICs beside the node's own ranks (how many: .nic_channels). Until
    2026-11-25 channel ``c`` looked for the GPU of slot ``c x gpus_per_node / nics`` even when the node's ranks
    stopped short of it, and fell back to the first rank: 2 nodes of GPUs 0-3 of 8 ran 4 channels through 2 NICs."""
    local = node_major(ranks, gpus_per_node)
    if all(len(x) == len(local[0]) for x in local):  # every node alike: one array operation per channel
        grid = np.stack(local)
        width = grid.shape[1]
        return [grid[:, (c * width // nics + np.arange(width)) % width].ravel() for c in range(nics)]
    return [np.concatenate([np.roll(x, -(c * len(x) // nics)) for x in local]) for c in range(nics)]


def nic_channels(local: list[np.ndarray], gpus_per_node: int, nics: int) -> int:
    """Channels that cross nodes each through their own NIC: per node, the NICs its ranks sit beside (a NIC serves
    ``gpus_per_node / nics`` GPUs), the fewest over the nodes, since NCCL keeps the channel count every rank's search
    found (NVIDIA/nccl 2.30.7 src/init.cc: after the AllGather3 of every rank's graph info each graph keeps the
    minimum nChannels). A node whose job holds 4 of 8 GPUs, one NIC each, leaves 4 channels, not 8 (nor 1)."""
    per_nic = max(gpus_per_node // max(nics, 1), 1)
    return max(1, min(len(np.unique(x % gpus_per_node // per_nic)) for x in local))


def channel_ring(orders: list[np.ndarray], nbytes: float, steps: int, local_bytes: float) -> Phase:
    """Rings over ``orders`` (one per channel), each carrying ``nbytes / channels``; hop j of every channel is
    level j (a chunk passes the hops in turn)."""
    k = len(orders)
    src = np.concatenate(orders)
    dst = np.concatenate([np.roll(o, -1) for o in orders])
    levels = np.tile(np.arange(len(orders[0])), k)
    return Phase(src, dst, np.full(len(src), nbytes / k), steps, levels=levels, local_bytes=local_bytes)


def channel_chain(orders: list[np.ndarray], size: float) -> Phase:
    """Broadcast: per channel a pipelined chain along its order, ``size / channels`` over every hop."""
    k = len(orders)
    src = np.concatenate([o[:-1] for o in orders])
    dst = np.concatenate([o[1:] for o in orders])
    levels = np.tile(np.arange(len(orders[0]) - 1), k)
    return Phase(src, dst, np.full(len(src), size / k), len(orders[0]) - 1, levels=levels)


def _heads_tree(heads: np.ndarray, nbytes: float, first_level: int) -> tuple[np.ndarray, ...]:
    """NCCL's double binary tree over ``heads``, reduce up and broadcast down: each binary tree carries half of
    ``nbytes`` each way; a child's level is its heap depth."""
    parent, child = tree_edges(heads)
    level = dtree(len(heads))[2] + first_level
    src = np.concatenate([child, parent])
    dst = np.concatenate([parent, child])
    return src, dst, np.full(len(src), nbytes / 2), np.concatenate([level, level])


def channel_tree(orders: list[np.ndarray], size: float, per_node: int) -> Phase:
    """NCCL's all-reduce tree per channel: a chain through each node's ranks to the channel's head (the rank on
    its NIC), the double binary tree over the heads; ``size / channels`` per channel. 2 x levels steps."""
    k = len(orders)
    parts: list[tuple[np.ndarray, ...]] = []
    for order in orders:
        nodes = order.reshape(-1, per_node)
        heads = nodes[:, 0]
        child, parent = nodes[:, 1:].ravel(), nodes[:, :-1].ravel()  # chain: each rank to the one before it
        chain_level = np.tile(np.arange(per_node - 1), len(nodes))
        tsrc, tdst, tbytes, tlevel = _heads_tree(heads, size / k, per_node - 1)
        chain_bytes = np.full(2 * len(child), size / k)  # a chain hop carries the channel's bytes both ways
        parts.append((np.concatenate([child, parent, tsrc]), np.concatenate([parent, child, tdst]),
                      np.concatenate([chain_bytes, tbytes]), np.concatenate([chain_level, chain_level, tlevel])))
    src, dst, nbytes, levels = (np.concatenate([p[i] for p in parts]) for i in range(4))
    return Phase(src, dst, nbytes, 2 * len(np.unique(levels)), levels=levels)


def nvls_tree(orders: list[np.ndarray], size: float, per_node: int, nvls_efficiency: float) -> list[Phase]:
    """NVLSTree's two pipelined stages: NVLS inside every node, the double binary tree between the heads."""
    ranks = orders[0]
    g = per_node
    intra = Phase(ranks, ranks.reshape(-1, g)[:, np.r_[1:g, 0]].ravel(), np.full(len(ranks), (1 + 1 / g) * size),
                  1, levels=np.zeros(len(ranks), dtype=np.int64), efficiency=nvls_efficiency)
    k = len(orders)
    parts = [_heads_tree(o.reshape(-1, g)[:, 0], size / k, 0) for o in orders]
    src, dst, nbytes, levels = (np.concatenate([p[i] for p in parts]) for i in range(4))
    inter = Phase(src, dst, nbytes, 2 * len(np.unique(levels)), levels=levels)
    return [dataclasses.replace(intra), inter]


def across_nodes(op: str, ranks: np.ndarray, size: float, algorithm: str, gpus_per_node: int,
                  nvls_efficiency: float, nics: int) -> list[Phase]:
    """Ring, tree, NVLSTree, broadcast and all-to-all over several nodes, with one channel per NIC."""
    n = len(ranks)
    local = node_major(ranks, gpus_per_node)
    per = len(local[0])
    uniform = all(len(x) == per for x in local)
    # whole or alike nodes: one channel per NIC up to the ranks a node holds (as before); nodes of different sizes:
    # the NICs beside the smallest node's ranks
    channels = min(nics, per) if uniform else nic_channels(local, gpus_per_node, nics)
    orders = channel_orders(ranks, gpus_per_node, channels)
    if op == "all_to_all":
        return [all_to_all(ranks, size)]
    if op == "broadcast":  # NCCL pipelines a broadcast along each channel's ring from the root (the first rank)
        # (src/device/broadcast.h: runRing), so each channel's chain is its ring cut open at the root: it leaves the
        # root's node through that channel's NIC, and the root's node-mates before it in the ring come last. The
        # channels are the rings' (a root alone on its node, as a trainer's rank 0 sending to the generators: one)
        return [channel_chain([np.roll(o, -int(np.flatnonzero(o == ranks[0])[0])) for o in orders], size)]
    if op == "all_reduce" and algorithm in ("tree", "nvls_tree") and uniform and per > 1:
        if algorithm == "tree":
            return [channel_tree(orders, size, per)]
        if not nvls_efficiency > 0:
            raise ConfigError("nvls_tree needs the GPU's nvls_efficiency > 0")
        return nvls_tree(orders, size, per, nvls_efficiency)
    if op == "all_reduce" and algorithm == "tree":  # one GPU per node (or uneven nodes): the tree over all ranks
        return [tree_allreduce(ranks, size, gpus_per_node)]
    if op == "all_reduce":
        return [channel_ring(orders, bus_factor(op, n) * size, 2 * (n - 1), REDUCE_TRAFFIC * size / n)]
    if op in ("all_gather", "reduce_scatter"):
        traffic = COPY_TRAFFIC if op == "all_gather" else REDUCE_TRAFFIC
        return [channel_ring(orders, bus_factor(op, n) * size, n - 1, traffic * size / n)]
    raise ConfigError(f"unknown collective {op!r} (known: {', '.join(OPS)})")
