"""Seeded synthetic RL workloads (``rltrace synth``): length distributions, a simple timing model, presets."""

from rltrace.synth.config import LengthConfig, PoolConfig, SynthConfig, TimingConfig, load_config, presets, unused
from rltrace.synth.workload import SynthResult, length_dist, memory_notes, synthesize

__all__ = [
    "LengthConfig",
    "PoolConfig",
    "SynthConfig",
    "SynthResult",
    "TimingConfig",
    "length_dist",
    "load_config",
    "memory_notes",
    "presets",
    "synthesize",
    "unused",
]
