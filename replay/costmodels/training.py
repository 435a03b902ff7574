"""Training-side durations of a step: train (forward and backward), forward-only passes, optimizer, sync.

Measured spans win when the bundle has them: they are scaled to the replay's training GPUs by count
(perfect data-parallel scaling) and kind (peak BF16 FLOP/s ratio). Without spans the step is FLOPs over
``MFU x peak``: ``6 x params x tokens`` to train and ``2 x params x tokens`` per forward-only pass
(reference and old-logprob). Weight sync without a measurement is one model copy over the sync link.
"""

from __future__ import annotations

from dataclasses import dataclass

from rltrace.catalog import GPUSpec, ModelSpec

ADAM_BYTES_PER_PARAM = 16  # fp32 master weight, two moments and the gradient, read once per optimizer step


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainingCost:
    """Per-step training-side seconds for ``model`` on ``gpus`` GPUs of kind ``gpu``."""

    model: ModelSpec | None
    gpu: GPUSpec | None
    gpus: int
    recorded_gpus: int
    recorded_gpu: GPUSpec | None
    train_mfu: float = 0.35
    forward_passes: int = 2
    """forward-only passes per sample without a measurement (GRPO: reference and old log-probabilities)"""
    sync_gbps: float = 50.0
    """weight-sync link bandwidth (GB/s) when the bundle has no measured sync time"""

    @property
    def _scale(self) -> float:
        """Measured seconds on the recorded GPUs -> seconds on the replay's training GPUs."""
        scale = self.recorded_gpus / self.gpus
        if self.gpu is not None and self.recorded_gpu is not None:
            scale *= self.recorded_gpu.flops / self.gpu.flops
        return scale

    def _flops_seconds(self, flops: float) -> float:
        if self.model is None or self.gpu is None:
            return 0.0
        return flops / (self.gpus * self.gpu.flops * self.train_mfu)

    def train_seconds(self, measured: float | None, tokens: float) -> float:
        if measured is not None:
            return measured * self._scale
        return self._flops_seconds(6.0 * self.model.params * tokens) if self.model else 0.0

    def forward_seconds(self, measured: float | None, tokens: float) -> float:
        if measured is not None:
            return measured * self._scale
        return self._flops_seconds(2.0 * self.forward_passes * self.model.params * tokens) if self.model else 0.0

    def optimizer_seconds(self, measured: float | None) -> float:
        if measured is not None:
            return measured * self._scale
        if self.model is None or self.gpu is None:
            return 0.0
        return ADAM_BYTES_PER_PARAM * self.model.params / self.gpus / self.gpu.hbm_bytes_per_s

    def sync_seconds(self, measured: float | None) -> float:
        if measured is not None:
            return measured
        return self.model.weight_bytes / (self.sync_gbps * 1e9) if self.model else 0.0
