"""What a recording attaches to: one file per collector, each registering an ``attach`` function by name.

``attach()`` runs once when a process starts recording (``rltrace.collectors.start`` or the injected
sitecustomize); it arranges, with :func:`rltrace.collectors.hooks.when_imported`, to patch its library once the
job imports it. The registry imports every module of this package on its first ``names()``, so a new collector
is one new file here. These modules are imported by every recorded process: they import no library they
attach to (the collector module itself is imported by the hook, once the library is in use).
"""

from __future__ import annotations

from collections.abc import Callable

from rltrace.replay.registry import Registry

Attach = Callable[[], None]
"""Arranges a collector's import hooks; imports nothing heavy itself."""

COLLECTORS: Registry[Attach] = Registry("collector")
register = COLLECTORS.register
"""Function decorator: make ``attach`` run as collector ``name`` in every recorded process; a duplicate name is
an error."""
names = COLLECTORS.names


def attach_all() -> None:
    """Run every registered collector's ``attach`` (in name order)."""
    for name in COLLECTORS.names():
        COLLECTORS.lookup(name)()


__all__ = ["COLLECTORS", "Attach", "attach_all", "names", "register"]
