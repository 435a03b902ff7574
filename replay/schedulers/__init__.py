"""Schedulers, one module each, found by name. Importing this package imports every module in it, and
each registers itself with ``@register("name")`` (see :mod:`.base`)."""

import importlib
import pkgutil

from rltrace.replay.schedulers.base import Scheduler, create, lookup, names, register

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("base", "common"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Scheduler", "create", "lookup", "names", "register"]
