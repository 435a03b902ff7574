"""Timing a kernel with the right clock: CUDA events on a GPU, the wall clock on CPU; warm-up first, median."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def measure(fn: Callable[[], Any], device: str, *, warmup: int = 2, repeat: int = 5, inner: int = 10) -> float:
    """Median seconds of ``fn()`` after ``warmup`` untimed calls. On CUDA, events on the current stream bracket
    ``inner`` back-to-back calls (the GPU's own clock; back to back, the queue stays full, so the host's launch
    latency between calls is not counted as GPU time)."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / inner)
    else:
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)
