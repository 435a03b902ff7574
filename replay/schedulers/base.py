"""The scheduler contract and the registry that finds schedulers by name.

A scheduler is two methods on a class registered once with ``@register("name")``. The class has a
``Config`` attribute, its own kw_only/slots dataclass; it is built as ``cls(config)`` and never sees the
replay's root configuration. Everything it does goes through the :class:`~rltrace.replay.simulator.Simulator`
verbs: dispatch and reorder requests, abort and resubmit them, add, retire and regroup instances (pool sizes,
TP), book training, sync, reward and environment work, run several jobs on shared pools.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from rltrace.replay.registry import Registry
from rltrace.replay.simulator import Notice, Simulator

from rltrace.config import build


class Scheduler(Protocol):
    """A scheduling policy driven by the simulator's events."""

    def start(self, sim: Simulator) -> None:
        """Set up pools, instances and resources from ``sim.cluster`` and submit the first work."""
        ...

    def on_event(self, sim: Simulator, notice: Notice) -> None:
        """React to finished requests, completed work or a timer."""
        ...


def _has_config(name: str, cls: type) -> None:
    config = getattr(cls, "Config", None)
    if config is None or not dataclasses.is_dataclass(config):
        raise ValueError(f"scheduler {name!r} needs a Config dataclass attribute")


SCHEDULERS: Registry[Scheduler] = Registry("scheduler", _has_config)
register = SCHEDULERS.register
"""Class decorator: make a scheduler available as ``name``. A second class with the same name is an error."""
names = SCHEDULERS.names
lookup = SCHEDULERS.lookup


def create(name: str, settings: dict[str, Any] | None = None) -> tuple[Scheduler, Any]:
    """The scheduler ``name`` built with its Config from ``settings``; returns (scheduler, config)."""
    cls = lookup(name)
    config = build(cls.Config, settings or {}, where=f"scheduler {name}")
    return cls(config), config
