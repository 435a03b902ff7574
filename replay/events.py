"""The event queue: one explicit ordering key per event, owned by the engine.

Events order by ``(time_s, priority, seq)``. ``seq`` comes from a counter the queue owns, so two events at the
same time and priority fire in the order they were scheduled, and the same inputs give the same event log,
bit for bit. Priorities put instance progress (requests finishing) before resource completions before timers
at the same instant, so a scheduler reacting to a timer sees every request that finished at that time.
"""

from __future__ import annotations

import heapq
from enum import IntEnum
from typing import Any


class Priority(IntEnum):
    """Tie-break between events at the same time (lower fires first)."""

    INSTANCE = 0
    """a generation instance reached its next planned point (finishes, KV cache full)"""
    DONE = 1
    """a resource finished a piece of work (training, weight sync, reward, a switch)"""
    TIMER = 2
    """a scheduler's own timer"""


class EventQueue:
    """A min-heap of ``(time_s, priority, seq, target, data)``; ``log`` keeps what fired when asked to."""

    __slots__ = ("_heap", "_seq", "log")

    def __init__(self, keep_log: bool = False) -> None:
        self._heap: list[tuple[float, int, int, Any, Any]] = []
        self._seq = 0
        self.log: list[tuple[float, int, int, str, str]] | None = [] if keep_log else None
        """(time_s, priority, seq, target name, data) of every event popped, when kept"""

    def push(self, time_s: float, priority: Priority, target: Any, data: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time_s, priority, self._seq, target, data))

    def pop(self) -> tuple[float, int, int, Any, Any]:
        event = heapq.heappop(self._heap)
        if self.log is not None:
            self.log.append((event[0], event[1], event[2], getattr(event[3], "name", ""), repr(event[4])))
        return event

    def __len__(self) -> int:
        return len(self._heap)
