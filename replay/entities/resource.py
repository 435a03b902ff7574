"""Busy resources other than generation instances: trainer pools, reward workers, weight-sync links,
environment (CPU) workers, phase switches. Each is a FIFO server with ``slots`` parallel lanes."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field


@dataclass(slots=True)
class Resource:
    """Work queues FIFO onto the lane that frees first; every busy interval is kept for the timeline."""

    name: str
    pool: str
    """the pool whose GPUs (or workers) this occupies, for utilisation and bubbles"""
    gpus: int = 0
    slots: int = 1
    """parallel lanes; 0: unbounded (every booking starts at once: serverless functions, one environment
    worker per trajectory)"""
    usd_per_s: float = 0.0
    """billed per second of use (serverless); pools bill GPU-hours instead"""
    busy_s: float = 0.0
    last_end_s: float = 0.0
    """when the latest work booked so far ends"""
    _free_at: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._free_at = [0.0] * self.slots

    def book(self, now_s: float, seconds: float) -> tuple[float, float]:
        """Start ``seconds`` of work as soon as a lane is free at or after ``now_s``; return (start, end)."""
        self.busy_s += seconds
        if not self.slots:
            start = now_s
        else:
            start = max(now_s, heapq.heappop(self._free_at))
            heapq.heappush(self._free_at, start + seconds)
        end = start + seconds
        self.last_end_s = max(self.last_end_s, end)
        return start, end
