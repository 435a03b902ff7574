"""Network topologies, one module each, found by name in a spec (``fat-tree:k=16,...``). Importing this
package imports every module in it, and each registers itself with ``@register("name")`` (see :mod:`.base`)."""

import importlib
import pkgutil

from rltrace.replay.topologies.base import Links, Topology, names, parse, register

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Links", "Topology", "names", "parse", "register"]
