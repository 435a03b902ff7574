"""The flow phases of one collective under one algorithm: one node's schedules (:mod:`.schedules`) or, across
nodes, channels through their own NICs, trees and NVLSTree (:mod:`.multinode`)."""

from __future__ import annotations

import dataclasses

import numpy as np
from rltrace.replay.network.multinode import across_nodes
from rltrace.replay.network.schedules import (
    COPY_TRAFFIC,
    OPS,
    REDUCE_TRAFFIC,
    Phase,
    all_to_all,
    chain,
    merge,
    ring,
    tree_allreduce,
)

from rltrace.errors import ConfigError
from rltrace.units import bus_factor


def phases(op: str, ranks: np.ndarray, size: float, algorithm: str, gpus_per_node: int,
           nvls_efficiency: float = 0.0, nics: int = 0) -> list[Phase]:
    """The flow phases of one collective. Across nodes, ``nics`` (NICs per node, 0: one per GPU) channels each
    cross between nodes through their own NIC (:mod:`.multinode`)."""
    n = len(ranks)
    nodes = ranks // gpus_per_node
    if len(np.unique(nodes)) > 1 and algorithm != "hierarchical":
        return across_nodes(op, ranks, size, algorithm, gpus_per_node, nvls_efficiency, nics or gpus_per_node)
    if op == "all_reduce" and algorithm == "nvls":
        if not nvls_efficiency > 0:
            raise ConfigError("nvls needs the GPU's nvls_efficiency > 0")
        # every GPU sends and receives (1 + 1/n) x size through the switch; a ring of such flows loads each
        # GPU's NVLink up and down exactly so (the switch itself is non-blocking)
        return [dataclasses.replace(ring(ranks, (1 + 1 / n) * size, 2, 0.0, 0), efficiency=nvls_efficiency)]
    if op == "all_reduce" and algorithm == "tree":
        return [tree_allreduce(ranks, size, gpus_per_node)]
    if op == "all_reduce" and algorithm == "hierarchical":
        nodes = ranks // gpus_per_node
        local = [ranks[nodes == v] for v in np.unique(nodes)]
        g = min(len(x) for x in local)
        if g < 2 or len(local) < 2 or any(len(x) != g for x in local):
            return phases(op, ranks, size, "ring", gpus_per_node)
        m = len(local)
        # a reduce-scatter inside each node, g rings across nodes (one per local rank, on a 1/g shard), an all-gather
        # inside each node
        scatter = [ring(x, bus_factor("reduce_scatter", g) * size, g - 1, size / g, REDUCE_TRAFFIC) for x in local]
        inter = [ring(np.array([x[i] for x in local]), bus_factor("all_reduce", m) * size / g, 2 * (m - 1),
                      size / g / m, REDUCE_TRAFFIC) for i in range(g)]
        gather = [ring(x, bus_factor("all_gather", g) * size, g - 1, size / g, COPY_TRAFFIC) for x in local]
        return [merge(scatter), merge(inter), merge(gather)]
    if op == "all_reduce":
        return [ring(ranks, bus_factor(op, n) * size, 2 * (n - 1), size / n, REDUCE_TRAFFIC)]
    if op in ("all_gather", "reduce_scatter"):
        traffic = COPY_TRAFFIC if op == "all_gather" else REDUCE_TRAFFIC
        return [ring(ranks, bus_factor(op, n) * size, n - 1, size / n, traffic)]
    if op == "broadcast":  # pipelined along a chain from the first rank
        return [chain(ranks, size)]
    if op == "all_to_all":
        return [all_to_all(ranks, size)]
    raise ConfigError(f"unknown collective {op!r} (known: {', '.join(OPS)})")
