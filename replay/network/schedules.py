"""The flow phases of NCCL's algorithms: which GPU sends how many bytes to which, in how many steps, and what each
rank passes through its own memory. :mod:`.multinode` builds the across-node schedules (channels through their own
NICs, trees, NVLSTree) from these pieces, :mod:`.algorithms` picks the schedule of one collective, and
:mod:`.collectives` times them on a topology and picks among algorithms as NCCL's tuner does.

A ring is each rank to the next, its hops a pipeline level each; NCCL's all-reduce tree is a chain inside each node and
the double binary tree over the nodes' first GPUs; a broadcast a chain from its root; an all-to-all every pair at
once. Sizes are nccl-tests' message sizes (:mod:`.collectives`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")


@dataclass(frozen=True, slots=True)
class Phase:
    """One step of a schedule: flows ``src[i] -> dst[i]`` of ``nbytes[i]`` that run at once (a pipelined ring, chain or
    tree in steady state, or independent flows), with what :func:`.protocols.run_phases` needs to time them."""

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    steps: int
    """algorithm steps (each pays one hop latency)"""
    levels: np.ndarray | None = None
    """each flow's place along the pipeline: a chunk passes the levels one after another, each at its slowest
    flow's hop, so a step costs the mean over levels (a ring's or chain's hops are a level each: about NCCL's
    (steps - inter-node steps) x intra + inter-node steps x inter); None: one level, the slowest flow's (an
    all-to-all)"""
    efficiency: float = 1.0
    """share of the links' modelled bandwidth the algorithm reaches (NVLS: NCCL's, with its channel factor)"""
    local_bytes: float = 0.0
    """local memory traffic of every rank outside the link pipeline, at the topology's ``memory_bytes_per_s``:
    a ring's one pass over a shard, a copy (all-gather: its own shard into the output; reads and writes each
    byte, 2 x shard) or a reduction (reduce-scatter, all-reduce: two operands in, one out, 3 x shard)"""
    all_to_all: bool = False
    """every rank sends the same bytes to every other at once: past ``EXACT_FLOWS`` flows such a phase is timed by
    its busiest link (:data:`.protocols.EXACT_FLOWS`)"""


COPY_TRAFFIC, REDUCE_TRAFFIC = 2, 3  # local memory bytes per shard byte: copy (read, write), reduce (2 reads, write)


def ring(ranks: np.ndarray, nbytes: float, steps: int, shard: float = 0.0, traffic: int = 0) -> Phase:
    """A pipelined ring: each rank sends ``nbytes`` to the next over ``steps`` steps, its hops a level each, and
    passes ``traffic`` x ``shard`` bytes through local memory."""
    return Phase(ranks, np.roll(ranks, -1), np.full(len(ranks), nbytes), steps, levels=np.arange(len(ranks)),
                 local_bytes=traffic * shard)


def btree_parents(n: int) -> np.ndarray:
    """NCCL's binary tree over ranks 0..n-1 (src/graph/trees.cc, ncclGetBtree): the parent of ranks 1..n-1. Rank
    r's parent clears r's lowest set bit and sets the next one up, or only clears it when that is past the end."""
    r = np.arange(1, n)
    bit = r & -r
    up = (r ^ bit) | (bit << 1)
    return np.where(up >= n, r ^ bit, up)


def dtree(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """NCCL's double binary tree (ncclGetDtree): the btree, and a second tree, its mirror (n even) or its shift
    by one (n odd), so that no rank is inside both. (parent, child, depth of the child from 0) index arrays, the
    first tree's n-1 edges then the second's."""
    parent = btree_parents(n)
    child = np.arange(1, n)
    depth = np.zeros(n, dtype=np.int64)
    for _ in range(max(1, int(np.ceil(np.log2(max(n, 2)))) + 1)):  # parents first: a few passes settle it
        depth[child] = depth[parent] + 1

    def second(x: np.ndarray) -> np.ndarray:  # the mirror (n even) or the shift by one (n odd)
        other: np.ndarray = n - 1 - x if n % 2 == 0 else (x + 1) % n
        return other

    parents = np.concatenate([parent, second(parent)])
    children = np.concatenate([child, second(child)])
    return parents, children, np.tile(depth[1:] - 1, 2)


def tree_edges(ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parent -> child edges of NCCL's double binary tree over ``ranks`` (:func:`dtree`): two binary trees, the
    first rooted at ranks[0], every rank a leaf in one of them."""
    parents, children, _ = dtree(len(ranks))
    return ranks[parents], ranks[children]


def chain(ranks: np.ndarray, size: float) -> Phase:
    """A pipelined chain from the first rank: every hop carries ``size``, one after another."""
    n = len(ranks)
    return Phase(ranks[:-1], ranks[1:], np.full(n - 1, float(size)), n - 1, levels=np.arange(n - 1))


def tree_allreduce(ranks: np.ndarray, size: float, gpus_per_node: int) -> Phase:
    """NCCL's all-reduce tree: a chain through each node's GPUs to its first, and the double binary tree over
    the nodes' first GPUs; reduce up and broadcast down at once. Each of the two trees takes half the buffer,
    so an inter-node edge (in one tree) carries half each way and a chain hop (in both) all of it. A chain hop
    is a level per position, a tree edge one per depth below the root: 2 x levels steps, which is NCCL's
    latency 2 x ((GPUs per node - 1) x intra + log2(nodes) x inter)."""
    order = np.argsort(ranks // gpus_per_node, kind="stable")  # each node's ranks together, in rank order
    r = ranks[order]
    node = r // gpus_per_node
    same = node[1:] == node[:-1]
    position = np.arange(len(r)) - np.searchsorted(node, node)  # index within its node
    child, parent = r[1:][same], r[:-1][same]
    chain_level = position[1:][same] - 1
    leaders = r[~np.r_[False, same]]
    t_parent, t_child = tree_edges(leaders)
    tree_level = dtree(len(leaders))[2] + (chain_level.max() + 1 if len(chain_level) else 0)
    src = np.concatenate([child, parent, t_child, t_parent])
    dst = np.concatenate([parent, child, t_parent, t_child])
    nbytes = np.concatenate([np.full(2 * len(child), float(size)), np.full(2 * len(t_child), size / 2)])
    levels = np.concatenate([chain_level, chain_level, tree_level, tree_level])
    return Phase(src, dst, nbytes, 2 * len(np.unique(levels)), levels=levels)


def all_to_all(ranks: np.ndarray, size: float) -> Phase:
    """NCCL's all-to-all: every rank sends ``size / n`` to every other at once (grouped sends and receives), and
    copies its own ``size / n`` in local memory (NCCL sends to itself in the p2p schedule's first round, src/init.cc
    ncclP2pSchedule delta 0, and its kernel copies it, src/device/sendrecv.h, on warps of its own beside the other
    sends). The copy is a local pass added to the transfers, as a ring's is: a modelling choice (SM work beside
    SM-driven transfers), where NCCL runs the two at once. Until 2026-11-26 the copy was left out: from 64 MB the model
    was 15-53% fast against aiconfigurator's one-node sweeps of four GPU kinds (H100: -18% -> -5%, median)."""
    n = len(ranks)
    src, dst = np.repeat(ranks, n), np.tile(ranks, n)
    keep = src != dst
    return Phase(src[keep], dst[keep], np.full(int(keep.sum()), size / n), 1, local_bytes=COPY_TRAFFIC * size / n,
                 all_to_all=True)


def merge(parts: list[Phase]) -> Phase:
    """Concurrent phases as one (their flows side by side, the most steps and local bytes of any)."""
    return Phase(np.concatenate([p.src for p in parts]), np.concatenate([p.dst for p in parts]),
                 np.concatenate([p.nbytes for p in parts]), max(p.steps for p in parts),
                 levels=_levels(parts), local_bytes=max(p.local_bytes for p in parts))


def _levels(parts: list[Phase]) -> np.ndarray | None:
    """Concurrent phases' levels side by side (level k of each is one level): None if any has none."""
    if any(p.levels is None for p in parts):
        return None
    return np.concatenate([p.levels for p in parts])
