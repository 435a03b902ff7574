"""``nvswitch``: one node's NVLink/NVSwitch domain (an HGX/DGX box): every GPU pair at full NVLink bandwidth.

    nvswitch:gpus=8,gpu=H100
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rltrace.replay.topologies.base import NodeFabric, csr, register

from rltrace.errors import ConfigError


@register("nvswitch")
@dataclass(kw_only=True, slots=True)
class NVSwitch(NodeFabric):
    gpus: int = 8

    def __post_init__(self) -> None:
        self.gpus_per_node = self.gpus

    def paths(self, src: np.ndarray, dst: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if np.any((src >= self.gpus) | (dst >= self.gpus)):
            raise ConfigError(f"nvswitch has {self.gpus} GPUs")
        return csr(self._local(src, dst, self.gpus))
