"""Schedulers, one module each, found by name: each registers itself with ``@register("name")`` (see :mod:`.base`),
and the registry imports every module of this package on its first lookup, so a new scheduler is one new file."""

from rltrace.replay.schedulers.base import Scheduler, create, lookup, names, register, shipped

__all__ = ["Scheduler", "create", "lookup", "names", "register", "shipped"]
