"""``leaf-spine``: nodes of NVSwitch GPUs, one NIC per GPU into a two-tier Clos network.

    leaf-spine:nodes=4,gpus_per_node=8,nic_gbps=400,leaf_down=32,spines=8,oversub=1,routing=ecmp,gpu=H100

A leaf takes ``leaf_down`` NICs; every leaf has one uplink to each of ``spines`` spines, together carrying
``leaf_down x nic / oversub``. Traffic between leaves spreads over the spines by ECMP (``routing=ecmp``, a hash of
each flow), or by destination (``routing=dmodk``: the destination NIC's number mod ``spines``, as InfiniBand's subnet
manager routes a fat-tree; .fat_tree).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from rltrace.replay.topologies.base import NETWORK_HOP_S, NodeFabric, check_routing, csr, ecmp, register

from rltrace.errors import ConfigError


@register("leaf-spine")
@dataclass(kw_only=True, slots=True)
class LeafSpine(NodeFabric):
    SHARP_FABRIC: ClassVar[bool] = True
    nodes: int = 2
    leaf_down: int = 32
    spines: int = 8
    oversub: float = 1.0
    routing: str = "ecmp"
    """how a flow picks its spine: ecmp (a hash of the flow) or dmodk (its destination)"""

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def leaves(self) -> int:
        return -(-self.gpus // self.leaf_down)

    def switch_links(self) -> float:
        """The leaf-to-spine links a buyer needs, in NIC-speed links (replay/network/cost.py): each leaf's populated
        NICs over ``oversub``, and none for a single leaf (its traffic never reaches a spine). The model gives a
        partly populated leaf a full leaf's uplinks, which its fewer NICs cannot fill unless oversubscribed."""
        if self.leaves <= 1:
            return 0.0
        per_slot = max(1, self.nics // self.gpus_per_node)
        populated = sum(min(self.leaf_down, self.gpus - leaf * self.leaf_down) for leaf in range(self.leaves))
        return populated * per_slot / self.oversub

    def _network(self) -> list[tuple[str, str, float, float]]:
        if self.leaf_down < 1 or self.spines < 1 or self.oversub < 1:
            raise ConfigError("leaf-spine: leaf_down and spines >= 1, oversub >= 1")
        check_routing("leaf-spine", self.routing)
        up = self.leaf_down * self.nic_bytes_per_s / self.oversub / self.spines
        pairs = [(leaf, s) for leaf in range(self.leaves) for s in range(self.spines)]
        extra = [(f"leaf{leaf}->spine{s}", "fabric", up, NETWORK_HOP_S) for leaf, s in pairs]
        return extra + [(f"spine{s}->leaf{leaf}", "fabric", up, NETWORK_HOP_S) for leaf, s in pairs]

    def paths(self, src: np.ndarray, dst: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g, n = self.gpus, len(src)
        base, pairs = 4 * g, self.leaves * self.spines
        hops = np.full((n, 4), -1, dtype=np.int64)
        local = src // self.gpus_per_node == dst // self.gpus_per_node
        hops[local, :2] = self._local(src[local], dst[local], g)
        far = ~local
        ls, ld = self.nic_of(src[far]) // self.leaf_down, self.nic_of(dst[far]) // self.leaf_down
        spine = (self.nic_of(dst[far]) % self.spines if self.routing == "dmodk"
                 else ecmp(src[far], dst[far], key[far], self.spines))
        cross = ls != ld
        row = np.full((far.sum(), 4), -1, dtype=np.int64)
        row[:, 0] = 2 * g + self.nic_of(src[far])
        row[cross, 1] = base + ls[cross] * self.spines + spine[cross]
        row[cross, 2] = base + pairs + ld[cross] * self.spines + spine[cross]
        row[:, 3] = 3 * g + self.nic_of(dst[far])
        hops[far] = row
        return csr(hops)
