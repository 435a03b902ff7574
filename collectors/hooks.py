"""Run a callback when a module is first imported (or at once if it already was).

The collectors attach to torch and vLLM this way: recording a job never imports torch or vLLM itself, so a
job that does not use them pays nothing, and attaching happens right after the job's own import.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable
from types import ModuleType

Hook = Callable[[ModuleType], None]
_hooks: dict[str, list[Hook]] = {}
_lock = threading.RLock()
_resolving: set[str] = set()


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, name: str) -> None:
        self.inner = inner
        self.name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        _fire(self.name, module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if name not in _hooks or name in _resolving:
            return None
        _resolving.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            _resolving.discard(name)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader, name)
        return spec


_finder = _Finder()


def _fire(name: str, module: ModuleType) -> None:
    with _lock:
        hooks = _hooks.pop(name, [])
    for hook in hooks:
        hook(module)


def when_imported(name: str, hook: Hook) -> None:
    """Call ``hook(module)`` once ``name`` is imported; at once if it already is."""
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            _hooks.setdefault(name, []).append(hook)
            if _finder not in sys.meta_path:
                sys.meta_path.insert(0, _finder)
            return
    hook(module)
