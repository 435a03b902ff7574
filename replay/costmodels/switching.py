"""Phase and job switch costs: what it takes a pool to go from one role or job to another.

RollMux (arXiv 2512.11306) measured them on H800 for a 7B and a 32B model: bringing up rollout takes 0.9 s
warm (state resident in host memory) and 38.8 s cold; training 4.1 s warm and 32.7 s cold; for 32B 1.7 /
81.7 s and 5.9 / 81.2 s. Other model sizes interpolate linearly in parameter count, held flat outside.

A TP change within rollout (OrchestrRL's regrouping, RollPacker's TP planner) reloads each GPU's new weight
shard from pinned host memory: :func:`reload_seconds`.
"""

from __future__ import annotations

import numpy as np

# (params, rollout warm, rollout cold, training warm, training cold), seconds: RollMux, arXiv 2512.11306
SWITCH_COSTS = ((7e9, 0.9, 38.8, 4.1, 32.7), (32e9, 1.7, 81.7, 5.9, 81.2))
# Half of PCIe 5.0 x16's 63 GB/s per direction (PCI-SIG): weight shards reloaded from pinned host memory.
RELOAD_GBPS = 32.0
_COLUMN = {("rollout", True): 1, ("rollout", False): 2, ("training", True): 3, ("training", False): 4}


def switch_seconds(params: float, role: str, warm: bool) -> float:
    """Seconds to bring a pool up in ``role`` ("rollout" or "training") for a model of ``params``."""
    column = _COLUMN[(role, warm)]
    return float(np.interp(params, [row[0] for row in SWITCH_COSTS], [row[column] for row in SWITCH_COSTS]))


def model_params(cost: object, default: float = 7e9) -> float:
    """Parameter count of a generation cost model's model, when it has one (a trace fit has none)."""
    return float(getattr(getattr(cost, "model", None), "params", default))


def reload_seconds(cost: object, tp: int) -> float:
    """Seconds for an instance to load its weight shard at ``tp`` from host memory (0 without a catalog model:
    a trace fit does not know its weight bytes)."""
    weight_bytes = getattr(getattr(cost, "model", None), "weight_bytes", 0.0)
    return float(weight_bytes) / tp / (RELOAD_GBPS * 1e9)
