"""The scheduler contract and the registry that finds schedulers by name.

A scheduler is two methods on a class registered once with ``@register("name")``. The class has a
``Config`` attribute, its own kw_only/slots dataclass; it is built as ``cls(config)`` and never sees the
replay's root configuration. Everything it does goes through its :class:`~rltrace.replay.schedulers.view.View`
of the run (never the simulator itself): dispatch requests, abort and resubmit them, add, retire and regroup
instances (pool sizes, TP), book training, sync, reward and environment work, run several jobs on shared
pools. The view shows what a real system could know: a request's output length only once it has finished;
predictions come from :mod:`.predict`, and true lengths only from ``View.oracle`` in a run that asks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

from rltrace.replay.events import Notice
from rltrace.replay.schedulers.view import View

from rltrace.config import build
from rltrace.registry import Registry


@dataclass(frozen=True, kw_only=True, slots=True)
class Capabilities:
    """What a scheduler can do beyond one job's requests, declared on its class (``capabilities = ...``);
    the engine and the CLI read these, never a scheduler's name."""

    several_jobs: bool = False
    """it schedules every job of a run (``--jobs``); without, its view holds only the first job, which it
    replays alone"""
    places_turns: bool = False
    """it places each multi-turn trajectory's next turn itself (a "turn" notice); without, the engine queues
    a next turn on the instance that ran the turn before it"""
    replays_recording: bool = False
    """it repeats the recording's own decisions (a fidelity check, not a design to choose: advise leaves it out)"""
    colocates: bool = False
    """every GPU takes both roles, generation and training: it needs a cluster of one GPU kind (a replay on
    generation and training pools of two kinds leaves it out, or refuses it when it was named)"""


ONE_JOB = Capabilities()
"""what a scheduler that declares nothing can do"""


class Scheduler(Protocol):
    """A scheduling policy driven by the simulator's events. Its class may declare ``capabilities``
    (a :class:`Capabilities`; default :data:`ONE_JOB`)."""

    def start(self, sim: View) -> None:
        """Set up pools, instances and resources from ``sim.cluster`` and submit the first work."""
        ...

    def on_event(self, sim: View, notice: Notice) -> None:
        """React to finished requests, completed work or a timer."""
        ...


class SchedulerClass(Protocol):
    """What the registry holds: a scheduler class, with its ``Config`` dataclass, built from one."""

    Config: type[Any]

    def __call__(self, config: Any) -> Scheduler: ...


def capabilities(scheduler: object) -> Capabilities:
    """What a scheduler (a class or an instance) declares it can do."""
    can = getattr(scheduler, "capabilities", ONE_JOB)
    if not isinstance(can, Capabilities):
        raise TypeError(f"{scheduler!r}: capabilities must be a Capabilities, got {can!r}")
    return can


def _has_config(name: str, cls: type) -> None:
    config = getattr(cls, "Config", None)
    if config is None or not dataclasses.is_dataclass(config):
        raise ValueError(f"scheduler {name!r} needs a Config dataclass attribute")
    capabilities(cls)  # a wrong declaration fails when the scheduler registers, not mid-run


BASELINES = ("colocated-sync", "disagg-sync", "one-step-async", "fully-async")
"""the schedulers `rltrace replay` runs when none is named: the textbook synchronous and asynchronous designs"""

SCHEDULERS: Registry[SchedulerClass] = Registry("scheduler", _has_config)
register = SCHEDULERS.register
"""Class decorator: make a scheduler available as ``name``. A second class with the same name is an error."""
names = SCHEDULERS.names
shipped = SCHEDULERS.shipped
lookup = SCHEDULERS.lookup


def create(name: str, settings: Any = None) -> tuple[Scheduler, Any]:
    """The scheduler ``name`` built with its Config from ``settings`` (its Config already built, or a mapping of
    the Config's fields; None: the defaults); returns (scheduler, config)."""
    cls = lookup(name)
    config = build(cls.Config, settings or {}, where=f"scheduler {name}")
    return cls(config), config
