"""Phase and job switch costs: what it takes a pool to go from one role or job to another.

A switch moves model state between GPU memory and host memory over each GPU's host link, and pays a fixed
engine floor:

    seconds = floor + max(bytes onto each GPU, bytes off each GPU) / (host link per GPU)

(PCIe is full duplex: what goes off and what comes on overlap.) The state is the model's parameter bytes:

- rollout: the serving weights, ``weight_bytes / tp`` per GPU of an instance;
- training: weights plus mixed-precision Adam state (fp32 master weight, two moments, the gradient:
  ``adam_bytes_per_param`` per parameter), sharded over the training GPUs (FSDP / ZeRO-3).

The host link is the GPU kind's datasheet PCIe figure per direction (``host_link_gbps`` in the GPU catalog),
times ``host_link_share``: every GPU of a pool switches at once, and on HGX/DGX baseboards two GPUs sit
behind each PCIe switch's x16 uplink to the CPU (DGX H100 and DGX A100 user guides), so each gets half.

The floor, ``switch_floor_s``, is vLLM's measured wake-up of a small model from sleep mode level 1 (weights
offloaded to host memory): about 0.1 s (blog.vllm.ai, "Zero-Reload Model Switching with vLLM Sleep Mode", 2025:
"wake a model in ~0.1-0.4 s"). A cold switch (state not in host memory: the engine starts again) adds
``cold_start_s``, the low end of the same source's 30-100+ s "reload models on-demand".

RollMux (arXiv 2512.11306) measured warm/cold switches on H800: 7B rollout 0.9 / 38.8 s, training 4.1 /
32.7 s; 32B rollout 1.7 / 81.7 s, training 5.9 / 81.2 s. They are a validation check of this model (tests
and docs/schedulers.md), not its inputs: no figure here is fitted to them.

A TP change within rollout (OrchestrRL's regrouping, RollPacker's TP planner) reloads each GPU's new weight
shard from pinned host memory: :func:`reload_seconds`.

Every figure named here is a calibration entry (rltrace/calibration/training.toml), read from the
:class:`~rltrace.calibration.CostCalibration` each function is given.
"""

from __future__ import annotations

from dataclasses import dataclass

from rltrace.calibration import CALIBRATION, CostCalibration
from rltrace.catalog import get_gpu
from rltrace.errors import ConfigError

ROLES = ("rollout", "training")


@dataclass(frozen=True, slots=True)
class ModelState:
    """What a switch moves: a model's parameter count and its serving weights' bytes."""

    params: float = 0.0
    weight_bytes: float = 0.0

    def rollout_bytes(self, tp: int = 1) -> float:
        """Serving weights on each GPU of a ``tp``-way instance."""
        return self.weight_bytes / max(tp, 1)

    def training_bytes(self, gpus: int = 1, calibration: CostCalibration = CALIBRATION) -> float:
        """Weights and optimizer state on each of ``gpus`` training GPUs (fully sharded)."""
        return (self.weight_bytes + calibration["adam_bytes_per_param"] * self.params) / max(gpus, 1)


def job_state(job: object) -> ModelState:
    """A job's model state: its generation cost's catalog model, else what ``prepare`` put in ``job.extra``
    (``params``, ``weight_bytes`` from the bundle's model), else nothing known (a switch is its floor)."""
    model = getattr(getattr(job, "generation", None), "model", None)
    if model is not None and hasattr(model, "weight_bytes") and hasattr(model, "params"):
        return ModelState(float(model.params), float(model.weight_bytes))
    extra = getattr(job, "extra", None) or {}
    return ModelState(float(extra.get("params", 0.0)), float(extra.get("weight_bytes", 0.0)))


def host_link_bytes_per_s(gpu: str, calibration: CostCalibration = CALIBRATION) -> float:
    """Bytes/s one GPU of a switching pool gets over its host link. A device the catalog lacks ("cpu" recordings)
    takes ``unknown_host_link_gbps``, the slowest catalogued host link (A100's PCIe Gen4, 32 GB/s a direction), so
    an unknown device is never priced faster than a known one."""
    try:
        gbps = get_gpu(gpu).host_link_gbps or calibration["unknown_host_link_gbps"]
    except ConfigError:
        gbps = calibration["unknown_host_link_gbps"]
    return gbps * 1e9 * calibration["host_link_share"]


def move_seconds(onload_bytes: float, offload_bytes: float, gpu: str, *, warm: bool = True,
                 calibration: CostCalibration = CALIBRATION) -> float:
    """Seconds for each GPU to take ``onload_bytes`` in and put ``offload_bytes`` out (full duplex)."""
    floor = calibration["switch_floor_s" if warm else "cold_start_s"]
    return floor + max(onload_bytes, offload_bytes, 0.0) / host_link_bytes_per_s(gpu, calibration)


def switch_seconds(state: ModelState, role: str, gpu: str, *, tp: int = 1, gpus: int = 1, warm: bool = True,
                   calibration: CostCalibration = CALIBRATION) -> float:
    """Seconds to bring a pool of ``gpu`` up in ``role`` ("rollout": instances of ``tp``; "training": ``gpus``
    sharding the state) for a model of ``state``, its state in host memory (``warm``) or not."""
    if role not in ROLES:
        raise ConfigError(f"switch role must be one of {', '.join(ROLES)}, got {role!r}")
    onload = state.rollout_bytes(tp) if role == "rollout" else state.training_bytes(gpus, calibration)
    return move_seconds(onload, 0.0, gpu, warm=warm, calibration=calibration)


def reload_seconds(cost: object, tp: int) -> float:
    """Seconds for an instance to load its weight shard at ``tp`` from host memory (0 without a catalog model:
    a trace fit does not know its weight bytes), with the generation cost's own calibration."""
    calibration = getattr(cost, "calibration", CALIBRATION)
    weight_bytes = float(getattr(getattr(cost, "model", None), "weight_bytes", 0.0))
    gpu = getattr(getattr(cost, "gpu", None), "name", "")
    return weight_bytes / max(tp, 1) / host_link_bytes_per_s(gpu, calibration) if weight_bytes else 0.0
