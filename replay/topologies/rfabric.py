"""``rfabric``: OrchestrRL's RFabric idea: electrical edge and aggregation tiers, optical circuit switches above.

    rfabric:k=16,gpus_per_node=8,nic_gbps=400,reconfig_ms=10,gpu=H100

A k-ary fat-tree whose core is replaced by optical circuit switches: each pod has (k/2)^2 optical uplinks
(full bisection, no oversubscription), and the circuits join pods directly. Before each phase (a training
collective, a weight sync, generation traffic) the circuits are set for that phase's traffic: each pod's
uplinks split over the pods it sends to in proportion to the bytes (at least one circuit per used pair). A
phase that needs other circuits than the current ones waits ``reconfig_ms`` (sweepable, 10 us to 100 ms):
during it the circuits being changed carry nothing. Between pods a path is NIC, edge -> aggregation (ECMP),
the pod-to-pod circuit bundle, aggregation -> edge, NIC.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
from rltrace.replay.topologies.base import NETWORK_HOP_S, NodeFabric, csr, ecmp, register
from rltrace.replay.topologies.fat_tree import k_ary_gpus

from rltrace.errors import ConfigError


@register("rfabric")
@dataclass(kw_only=True, slots=True)
class RFabric(NodeFabric):
    k: int = 16
    gpus: int = 0
    """GPUs populated (0: all k^3/4)"""
    reconfig_ms: float = 10.0
    circuits: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64), repr=False, compare=False)
    """circuits[p, q]: optical circuits from pod p to pod q now"""
    reconfigurations: int = 0

    def __post_init__(self) -> None:
        self.gpus = k_ary_gpus("rfabric", self.k, self.gpus)
        if not 0.01 <= self.reconfig_ms <= 1000:
            raise ConfigError(f"rfabric: reconfig_ms must be in [0.01, 1000], got {self.reconfig_ms}")
        h = self.k // 2
        uniform = max(h * h // max(self.k - 1, 1), 1)  # until the first phase: an even spread over the pods
        self.circuits = np.full((self.k, self.k), uniform, dtype=np.int64)
        np.fill_diagonal(self.circuits, 0)

    def _network(self) -> list[tuple[str, str, float, float]]:
        h, nic = self.k // 2, self.nic_bytes_per_s
        extra = [(f"edge{e}->agg{j}", "fabric", nic, NETWORK_HOP_S) for e in range(self.k * h) for j in range(h)]
        extra += [(f"agg{j}->edge{e}", "fabric", nic, NETWORK_HOP_S) for e in range(self.k * h) for j in range(h)]
        return extra + [(f"pod{p}=>pod{q}", "ocs", float(self.circuits[p, q]) * nic, NETWORK_HOP_S)
                        for p in range(self.k) for q in range(self.k)]

    def _set_capacity(self) -> None:
        assert self._links is not None
        cap = self._links.capacity_Bps.copy()
        cap[-self.k * self.k:] = self.circuits.ravel() * self.nic_bytes_per_s
        self._links = dataclasses.replace(self._links, capacity_Bps=cap)

    def paths(self, src: np.ndarray, dst: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g, h, n = self.gpus, self.k // 2, len(src)
        e2a, a2e = 4 * g, 4 * g + self.k * h * h
        ocs = a2e + self.k * h * h
        es, ed = self.nic_of(src) // h, self.nic_of(dst) // h
        ps, pd = es // h, ed // h
        j = ecmp(src, dst, key, h)
        hops = np.full((n, 5), -1, dtype=np.int64)
        hops[:, 0], hops[:, 4] = 2 * g + self.nic_of(src), 3 * g + self.nic_of(dst)
        up = es != ed
        hops[up, 1] = e2a + es[up] * h + j[up]
        hops[up, 3] = a2e + ed[up] * h + j[up]
        far = ps != pd
        hops[far, 2] = ocs + ps[far] * self.k + pd[far]
        local = src // self.gpus_per_node == dst // self.gpus_per_node
        hops[local] = -1
        hops[local, :2] = self._local(src[local], dst[local], g)
        return csr(hops)

    def configure(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> float:
        """Set the circuits for a phase's flows; returns the reconfiguration delay (0 if nothing changes)."""
        h = self.k // 2
        ps, pd = src // (h * h), dst // (h * h)
        cross = ps != pd
        demand = np.zeros((self.k, self.k))
        np.add.at(demand, (ps[cross], pd[cross]), nbytes[cross])
        if not demand.any():
            return 0.0
        ports = h * h
        # Each pod's uplinks (and downlinks) in proportion to its bytes, at least one circuit per used pair.
        scale = np.maximum(demand.sum(axis=1, keepdims=True), demand.sum(axis=0, keepdims=True))
        share = np.where(demand > 0, np.maximum(np.floor(ports * demand / np.where(scale > 0, scale, 1)), 1), 0)
        new = share.astype(np.int64)
        if np.array_equal(new, self.circuits):
            return 0.0
        self.circuits = new
        self.reconfigurations += 1
        self.links()
        self._set_capacity()
        return self.reconfig_ms / 1e3
