"""``fat-tree``: a three-tier k-ary fat-tree (Al-Fares et al., SIGCOMM 2008) of NICs, nodes of NVSwitch GPUs.

    fat-tree:k=16,gpus_per_node=8,nic_gbps=400,oversub=1,gpus=1024,routing=ecmp,gpu=H100

k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 core switches; each edge switch takes k/2 NICs, so
the tree holds k^3/4 (``gpus`` may populate fewer). Edge uplinks carry ``1/oversub`` of the NIC bandwidth.
Paths go up only as far as needed. ``routing=ecmp`` (the default) hashes each flow onto the aggregation and core
switch, as an Ethernet (RoCE) fabric's ECMP does; ``routing=dmodk`` routes by destination, as InfiniBand's subnet
manager does on a fat-tree (OpenSM's ftree engine, D-mod-k: Zahavi et al., "Optimized InfiniBand fat-tree routing
for shift all-to-all communication patterns"): the destination NIC's number mod k/2 picks the aggregation
switch, its quotient mod k/2 the core switch, so a shift pattern such as a ring's never shares an uplink.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from rltrace.replay.topologies.base import NETWORK_HOP_S, NodeFabric, check_routing, csr, ecmp, register

from rltrace.errors import ConfigError


def k_ary_gpus(name: str, k: int, gpus: int) -> int:
    """The GPUs a k-ary tree of NICs holds: ``gpus``, or all k^3/4 when 0; k must be even."""
    if k < 2 or k % 2:
        raise ConfigError(f"{name}: k must be an even number >= 2, got {k}")
    if gpus > k ** 3 // 4:
        raise ConfigError(f"{name} k={k} holds {k ** 3 // 4} NICs, not {gpus}")
    return gpus or k ** 3 // 4


@register("fat-tree")
@dataclass(kw_only=True, slots=True)
class FatTree(NodeFabric):
    SHARP_FABRIC: ClassVar[bool] = True
    k: int = 16
    oversub: float = 1.0
    gpus: int = 0
    """GPUs populated (0: all k^3/4)"""
    routing: str = "ecmp"
    """how a flow picks its way up: ecmp (a hash of the flow) or dmodk (its destination)"""

    def __post_init__(self) -> None:
        self.gpus = k_ary_gpus("fat-tree", self.k, self.gpus)
        check_routing("fat-tree", self.routing)

    def _network(self) -> list[tuple[str, str, float, float]]:
        if self.oversub < 1:
            raise ConfigError("fat-tree: oversub must be >= 1")
        h = self.k // 2
        nic = self.nic_bytes_per_s
        edges, aggs, cores = self.k * h, self.k * h, h * h
        extra = []
        for label, count, width, cap in (("edge{}->agg{}", edges, h, nic / self.oversub),
                                         ("agg{1}->edge{0}", edges, h, nic / self.oversub),
                                         ("agg{}->core-slot{}", aggs, h, nic), ("core{}->pod{}", cores, self.k, nic)):
            extra += [(label.format(a, b), "fabric", cap, NETWORK_HOP_S) for a in range(count) for b in range(width)]
        return extra

    def paths(self, src: np.ndarray, dst: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g, h, n = self.gpus, self.k // 2, len(src)
        e2a = 4 * g                      # edge e -> its pod's agg j: e2a + e * h + j
        a2e = e2a + self.k * h * h       # agg (pod p, j) -> edge e: a2e + e * h + j
        a2c = a2e + self.k * h * h       # agg (p, j) -> core j * h + c: a2c + (p * h + j) * h + c
        c2p = a2c + self.k * h * h       # core -> pod p's agg: c2p + core * k + p
        es, ed = self.nic_of(src) // h, self.nic_of(dst) // h  # the edge switch of each flow's NICs
        ps, pd = es // h, ed // h
        if self.routing == "dmodk":  # by the destination NIC: its number mod h, then its quotient mod h
            j, c = self.nic_of(dst) % h, self.nic_of(dst) // h % h
        else:
            j, c = ecmp(src, dst, key, h), ecmp(src, dst, key, h, salt=1)
        hops = np.full((n, 6), -1, dtype=np.int64)
        hops[:, 0], hops[:, 5] = 2 * g + self.nic_of(src), 3 * g + self.nic_of(dst)
        up = es != ed
        hops[up, 1] = e2a + es[up] * h + j[up]
        hops[up, 4] = a2e + ed[up] * h + j[up]
        core = ps != pd
        hops[core, 2] = a2c + (ps[core] * h + j[core]) * h + c[core]
        hops[core, 3] = c2p + (j[core] * h + c[core]) * self.k + pd[core]
        local = src // self.gpus_per_node == dst // self.gpus_per_node
        hops[local] = -1
        hops[local, :2] = self._local(src[local], dst[local], g)
        return csr(hops)
