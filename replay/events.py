"""The engine's events, one small class per kind, and the queue that orders them by one key it owns.

Events order by ``(time_s, priority, seq)``. ``seq`` comes from a counter the queue owns, so two events at the
same time and priority fire in the order they were scheduled, and the same inputs give the same event log,
bit for bit. Each kind carries its priority: instance progress (requests finishing) before resource
completions before timers at the same instant, so a scheduler reacting to a timer sees every request that
finished at that time.

What a scheduler is told is a :class:`Notice`, built by the engine from these events.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import TYPE_CHECKING, ClassVar, NamedTuple

if TYPE_CHECKING:
    from rltrace.replay.entities.instance import GenerationInstance


class Priority(IntEnum):
    """Tie-break between events at the same time (lower fires first)."""

    INSTANCE = 0
    """a generation instance reached its next planned point (finishes, KV cache full)"""
    DONE = 1
    """a resource finished a piece of work (training, weight sync, reward, a switch)"""
    TIMER = 2
    """a scheduler's own timer"""


class NoticeKind(StrEnum):
    """What a :class:`Notice` says happened."""

    FINISHED = "finished"
    """requests finished on an instance (``requests``, ``instance``)"""
    GENERATED = "generated"
    """quiet mode: every submitted request of step ``tag.step`` of job ``tag.job`` finished"""
    DONE = "done"
    """work booked with ``work`` ended (``tag`` is the scheduler's)"""
    TIMER = "timer"
    """a scheduler's timer fired (``tag`` is the scheduler's)"""
    TURN = "turn"
    """a scheduler that places turns: a trajectory's next turn is ready (``requests`` holds it, ``tag.item`` the
    previous turn's request, ``instance`` the instance that ran it, None if retired)"""


class Tag(NamedTuple):
    """What a scheduler attaches to work or a timer and gets back in the notice: read by field, not position."""

    what: str
    """the scheduler's name for the work ("reward", "train", "sync", ...)"""
    job: int = 0
    step: int = -1
    item: int = -1
    """a request, trajectory or micro-batch the work is for (-1: none)"""


NO_TAG = Tag("")
"""the tag of a notice that carries none ("finished")"""


@dataclass(slots=True)
class Planned:
    """A generation instance reached the point it planned under ``epoch`` (stale if it has replanned since)."""

    priority: ClassVar[Priority] = Priority.INSTANCE
    instance: GenerationInstance = field(repr=False)
    epoch: int

    @property
    def target(self) -> str:
        """The instance's name (the event log's target column)."""
        return self.instance.name


@dataclass(slots=True)
class Generated:
    """Quiet mode: every submitted request of step ``key = (job, step)`` has finished. ``token`` is the step's
    count of withdrawn notices when this one was planned: a later cut drain withdraws it."""

    priority: ClassVar[Priority] = Priority.DONE
    target: ClassVar[str] = ""
    key: tuple[int, int]
    token: int


@dataclass(slots=True)
class Done:
    """Work booked on a resource finished; ``tag`` is the scheduler's."""

    priority: ClassVar[Priority] = Priority.DONE
    target: ClassVar[str] = ""
    kind: ClassVar[NoticeKind] = NoticeKind.DONE
    tag: Tag


@dataclass(slots=True)
class Timer:
    """A scheduler's timer fired; ``tag`` is the scheduler's."""

    priority: ClassVar[Priority] = Priority.TIMER
    target: ClassVar[str] = ""
    kind: ClassVar[NoticeKind] = NoticeKind.TIMER
    tag: Tag


@dataclass(slots=True)
class TurnReady:
    """A trajectory's next turn ``request`` is ready: the environment work after turn ``before`` ended, which
    ran on instance ``instance`` (an id: it may have been retired since)."""

    priority: ClassVar[Priority] = Priority.DONE
    target: ClassVar[str] = ""
    request: int
    before: int
    instance: int


Event = Planned | Generated | Done | Timer | TurnReady


@dataclass(frozen=True, slots=True)
class Notice:
    """What a scheduler is told: requests finished on an instance, work done, or a timer fired."""

    time_s: float
    kind: NoticeKind
    tag: Tag = NO_TAG
    """the tag the scheduler gave ``work`` or ``timer``; the engine's own for "generated" and "turn" notices"""
    instance: GenerationInstance | None = None
    requests: list[int] = field(default_factory=list)


class EventQueue:
    """A min-heap of ``(time_s, priority, seq, event)``; ``log`` keeps what fired when asked to."""

    __slots__ = ("_heap", "_seq", "log")

    def __init__(self, keep_log: bool = False) -> None:
        self._heap: list[tuple[float, int, int, Event]] = []
        self._seq = 0
        self.log: list[tuple[float, int, int, str, str]] | None = [] if keep_log else None
        """(time_s, priority, seq, target name, event) of every event popped, when kept"""

    def push(self, time_s: float, event: Event) -> None:
        """Schedule ``event`` at ``time_s`` (after every event already scheduled at the same time and priority)."""
        self._seq += 1
        heapq.heappush(self._heap, (time_s, event.priority, self._seq, event))

    def pop(self) -> tuple[float, int, int, Event]:
        """The next event: earliest time, then lowest priority, then first scheduled."""
        entry = heapq.heappop(self._heap)
        if self.log is not None:
            self.log.append((entry[0], entry[1], entry[2], entry[3].target, repr(entry[3])))
        return entry

    def __len__(self) -> int:
        return len(self._heap)
