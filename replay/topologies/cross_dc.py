"""``cross-dc``: two clusters (each non-blocking between its NICs) joined by one datacenter interconnect.

    cross-dc:nodes=4,split=2,gpus_per_node=8,nic_gbps=400,dci_gbps=100,dci_latency_ms=5,gpu=H100

Nodes ``[0, split)`` are in datacenter A, the rest in B; flows between them share the interconnect
(``dci_gbps`` each way, ``dci_latency_ms`` one way), as StreamRL's and RollMux's cross-cluster setups have.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rltrace.replay.topologies.base import NodeFabric, csr, register

from rltrace.errors import ConfigError


@register("cross-dc")
@dataclass(kw_only=True, slots=True)
class CrossDC(NodeFabric):
    nodes: int = 2
    split: int = 1
    dci_gbps: float = 100.0
    dci_latency_ms: float = 5.0

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def _network(self) -> list[tuple[str, str, float, float]]:
        if not 0 < self.split < self.nodes or self.dci_gbps <= 0 or self.dci_latency_ms < 0:
            raise ConfigError("cross-dc: 0 < split < nodes, dci_gbps > 0, dci_latency_ms >= 0")
        cap, lat = self.dci_gbps / 8 * 1e9, self.dci_latency_ms / 1e3
        return [("dc-a->dc-b", "dci", cap, lat), ("dc-b->dc-a", "dci", cap, lat)]

    def paths(self, src: np.ndarray, dst: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g, m = self.gpus, self.gpus_per_node
        hops = np.full((len(src), 3), -1, dtype=np.int64)
        local = src // m == dst // m
        hops[local, :2] = self._local(src[local], dst[local], g)
        far = ~local
        in_b = src[far] // m >= self.split
        cross = in_b != (dst[far] // m >= self.split)
        row = np.full((far.sum(), 3), -1, dtype=np.int64)
        row[:, 0] = 2 * g + self.nic_of(src[far])
        row[cross, 1] = 4 * g + in_b[cross].astype(np.int64)
        row[:, 2] = 3 * g + self.nic_of(dst[far])
        hops[far] = row
        return csr(hops)
