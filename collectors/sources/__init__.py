"""What a recording attaches to: one file per collector, each registering an ``attach`` function by name.

``attach()`` runs once when a process starts recording (``rltrace.collectors.start`` or the injected
sitecustomize); it arranges, with :func:`rltrace.collectors.hooks.when_imported`, to patch its library once the
job imports it. The registry imports every module of this package on its first ``names()``, so a new collector
is one new file here. These modules are imported by every recorded process: they import no library they
attach to (the collector module itself is imported by the hook, once the library is in use).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from rltrace.collectors import hooks, recorder

from rltrace.registry import Registry

Attach = Callable[[], None]
"""Arranges a collector's import hooks; imports nothing heavy itself."""

COLLECTORS: Registry[Attach] = Registry("collector")
register = COLLECTORS.register
"""Function decorator: make ``attach`` run as collector ``name`` in every recorded process; a duplicate name is
an error."""
names = COLLECTORS.names


def install_on_import(library: str, collector: str) -> None:
    """Once the job imports ``library``, import the collector module ``rltrace.collectors.<collector>`` and call
    its ``install(library_module)``, in a recording process only, a failure reported and the job untouched.
    (The collector module is imported only then: it may import the library and torch.)"""

    def install(module: Any) -> None:
        rec = recorder.current()
        if rec is None:
            return
        with rec.guard(f"{collector} install"):
            importlib.import_module(f"rltrace.collectors.{collector}").install(module)

    hooks.when_imported(library, install)


def attach_all() -> None:
    """Run every registered collector's ``attach``, in name order (each patches only its own library, so the
    order does not matter). Recording never breaks the job: a collector module that cannot be imported, or an
    ``attach`` that fails, is reported on stderr and the others still attach."""
    try:
        chosen = COLLECTORS.names()
    except Exception as e:  # noqa: BLE001 - a broken collector file: attach the ones that did import
        _report("discovery", e)
        chosen = COLLECTORS.loaded()
    for name in chosen:
        try:
            COLLECTORS.lookup(name)()
        except Exception as e:  # noqa: BLE001
            _report(name, e)


def _report(where: str, e: Exception) -> None:
    with suppress(Exception):  # stderr itself may be gone
        print(f"rltrace: collector error in {where} (recording continues): {type(e).__name__}: {e}", file=sys.stderr)


__all__ = ["COLLECTORS", "Attach", "attach_all", "install_on_import", "names", "register"]
