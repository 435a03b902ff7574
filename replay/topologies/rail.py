"""``rail``: rail-optimized network: NIC i of every node joins rail switch i (one non-blocking switch per rail).

    rail:nodes=4,gpus_per_node=8,nic_gbps=400,gpu=H100

A flow between GPUs of different local rank first crosses NVLink to the source node's GPU on the
destination's rail (NCCL's PXN), then that rail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from rltrace.replay.topologies.base import NodeFabric, csr, register


@register("rail")
@dataclass(kw_only=True, slots=True)
class Rail(NodeFabric):
    SHARP_FABRIC: ClassVar[bool] = True
    nodes: int = 2

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def paths(self, src: np.ndarray, dst: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g, m = self.gpus, self.gpus_per_node
        hops = np.full((len(src), 4), -1, dtype=np.int64)
        local = src // m == dst // m
        hops[local, :2] = self._local(src[local], dst[local], g)
        far = ~local
        # the source node's NIC on the destination's rail (the slot of its first GPU)
        proxy = src[far] // m * m + self.nic_of(dst[far]) % m
        moved = proxy != self.nic_of(src[far])
        row = np.full((far.sum(), 4), -1, dtype=np.int64)
        row[moved, 0] = src[far][moved]
        row[moved, 1] = g + proxy[moved]
        row[:, 2] = 2 * g + proxy
        row[:, 3] = 3 * g + self.nic_of(dst[far])
        hops[far] = row
        return csr(hops)
