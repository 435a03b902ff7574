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
from typing import Any, Protocol

from rltrace.replay.registry import Registry
from rltrace.replay.schedulers.view import View
from rltrace.replay.simulator import Notice

from rltrace.config import build


class Scheduler(Protocol):
    """A scheduling policy driven by the simulator's events."""

    def start(self, sim: View) -> None:
        """Set up pools, instances and resources from ``sim.cluster`` and submit the first work."""
        ...

    def on_event(self, sim: View, notice: Notice) -> None:
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
