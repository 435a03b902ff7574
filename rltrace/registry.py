"""Plugins found by name: schedulers, topologies, importers and collectors, each one file in its package.

A plugin module registers itself, once, with ``@register("name")``; the registry finds the modules: on the
first ``names()`` or ``lookup()`` it imports every module of its package folder (``pkgutil.iter_modules``),
so adding a plugin is adding one file, and no list of modules is kept by hand. The package is the one the
registry is created in (``Registry("scheduler")`` in ``rltrace/replay/schedulers/base.py`` discovers
``rltrace.replay.schedulers``), or the one named by ``package=``.

A name may be registered once: a second object under a taken name is an error, whichever module it comes
from. Code outside the package (a test's scheduler) may register too; ``names()`` then lists it, and
``shipped()`` lists only what the package's own modules registered.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

from rltrace.errors import ConfigError

T = TypeVar("T")
P = TypeVar("P")


class Registry(Generic[T]):
    """Plugins of one kind ("scheduler", "topology", ...) by name. ``check`` vets an object as it registers
    (raise ValueError to refuse it); ``package`` is where discovery looks (default: the creating module's)."""

    def __init__(self, kind: str, check: Callable[[str, Any], None] | None = None, *,
                 package: str | None = None) -> None:
        if package is None:  # the package of the module that creates the registry: its plugins live beside it
            package = sys._getframe(1).f_globals.get("__package__") or ""
        self.kind, self.package, self._check = kind, package, check
        self._entries: dict[str, T] = {}
        self._discovered = False
        self._discovering = False

    def register(self, name: str) -> Callable[[P], P]:
        """Decorator: register the class or function it decorates as ``name``; returns it unchanged."""
        def add(obj: P) -> P:
            self.add(name, cast(T, obj))  # the decorated class or function is the registry's kind of plugin
            return obj

        return add

    def add(self, name: str, obj: T) -> None:
        """Register ``obj`` as ``name``; a name already taken is a ValueError naming both."""
        if not (self._discovered or self._discovering) and not str(getattr(obj, "__module__", "")).startswith(
                f"{self.package}."):
            # from outside the package (a test's plugin): find the package's own first, so that taking a shipped
            # name fails here, not later inside the shipped module's import
            self.discover()
        if name in self._entries:
            raise ValueError(f"{self.kind} name {name!r} is registered twice ({_label(self._entries[name])}, "
                             f"{_label(obj)})")
        if self._check is not None:
            self._check(name, obj)
        self._entries[name] = obj

    def discover(self) -> None:
        """Import every module of the package (once); each registers its plugins as it is imported. A module
        that cannot be imported is a ConfigError naming it (after the others are imported); discovery is then
        tried again on the next call, so the registry never answers from a partial list."""
        if self._discovered or self._discovering or not self.package:
            return
        self._discovering = True  # a plugin module that looks names up while importing must not recurse
        failed = []
        try:
            path = getattr(importlib.import_module(self.package), "__path__", [])
            for module in pkgutil.iter_modules(path):
                if module.name.startswith("_"):
                    continue
                try:
                    importlib.import_module(f"{self.package}.{module.name}")
                except ValueError:  # a name registered twice: the registry's own error, as it is
                    raise
                except Exception as e:  # noqa: BLE001 - reported below, with every other module imported
                    failed.append(f"{self.package}.{module.name} ({type(e).__name__}: {e})")
        finally:
            self._discovering = False
        if failed:
            raise ConfigError(f"{self.kind} plugins that cannot be imported: {'; '.join(failed)}")
        self._discovered = True

    def loaded(self) -> list[str]:
        """The names registered so far, sorted, without discovering (what a failed discovery did load)."""
        return sorted(self._entries)

    def names(self) -> list[str]:
        """Every registered name, sorted (after discovery)."""
        self.discover()
        return sorted(self._entries)

    def shipped(self) -> list[str]:
        """The names registered by the package's own modules, sorted: what ships, without a test's plugins."""
        self.discover()
        prefix = f"{self.package}."
        return sorted(n for n, obj in self._entries.items() if str(getattr(obj, "__module__", "")).startswith(prefix))

    def lookup(self, name: str) -> T:
        """The object registered as ``name``; an unknown name is a ConfigError listing the known ones."""
        if name not in self._entries:
            self.discover()
        try:
            return self._entries[name]
        except KeyError:
            raise ConfigError(f"unknown {self.kind} {name!r} (known: {', '.join(self.names())})") from None


def _label(obj: Any) -> str:
    return str(getattr(obj, "__qualname__", None) or type(obj).__qualname__)
