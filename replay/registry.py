"""Plugins found by name: schedulers and topologies register themselves, once each, with ``@register("name")``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from rltrace.errors import ConfigError

T = TypeVar("T")
C = TypeVar("C", bound=type)


class Registry(Generic[T]):
    """Classes by name, for one kind of plugin ("scheduler", "topology"). A second class under a name
    already taken is an error; ``check`` vets a class as it registers (raise ValueError to refuse it)."""

    def __init__(self, kind: str, check: Callable[[str, type], None] | None = None) -> None:
        self.kind, self._check, self._classes = kind, check, {}

    def register(self, name: str) -> Callable[[C], C]:
        def add(cls: C) -> C:
            if name in self._classes:
                raise ValueError(f"{self.kind} name {name!r} is registered twice ({self._classes[name].__qualname__}, "
                                 f"{cls.__qualname__})")
            if self._check is not None:
                self._check(name, cls)
            self._classes[name] = cls
            return cls

        return add

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._classes)

    def lookup(self, name: str) -> type:
        """The class registered as ``name``; an unknown name is a ConfigError listing the known ones."""
        try:
            return self._classes[name]
        except KeyError:
            raise ConfigError(f"unknown {self.kind} {name!r} (known: {', '.join(self.names())})") from None
