"""The shipped calibration's settings, for the configs that default to them: the roofline's dataclasses and the
synthetic-trace timing (a replay's ``cost.*`` keys left unset take its own calibration's instead, which is these
unless ``cost.calibration`` names a file). Training's model FLOPs utilisation is not a constant:
:func:`.training.default_mfu` gives the published figure for the model's kind and the GPU's (``cost.train_mfu``
unset means that figure)."""

from __future__ import annotations

from rltrace.calibration import CALIBRATION

# Median efficiencies of Vidur's measured Llama-2-7B projection GEMMs on H100 at TP 1 (data/calibration/serving.toml)
MEMORY_EFFICIENCY = CALIBRATION["memory_efficiency"]
"""achieved fraction of HBM bandwidth (KV-cache reads and writes, the sampler; GEMMs where kernel floors are off)"""
COMPUTE_EFFICIENCY = CALIBRATION["compute_efficiency"]
"""achieved fraction of peak FLOP/s in inference kernels"""
GPU_MEMORY_UTILIZATION = CALIBRATION["gpu_memory_utilization"]
"""vLLM's default ``gpu_memory_utilization``: its share of GPU memory for weights plus KV cache"""
SYNC_GBPS = CALIBRATION["sync_gbps"]
"""weight-sync bandwidth (GB/s) without a measured sync time or a network model: one 400 Gb/s NIC"""
SYNTH_TRAIN_MFU = CALIBRATION["synth_train_mfu"]
"""the synthetic-trace generator's training MFU (``rltrace synth``'s ``timing.train_mfu``): fixed, not
:func:`.training.default_mfu`, because the shipped samples are checked to regenerate bit for bit from their
documented commands (tests/test_samples.py); replay and estimate use the published figures"""
ADAM_BYTES_PER_PARAM = CALIBRATION["adam_bytes_per_param"]
"""bytes of Adam state per parameter (fp32 master weight, two moments and the gradient): what the synthetic trace's
and a diagnosis's optimizer step moves (the replay's costs read their own calibration's ``adam_bytes_per_param``)"""
