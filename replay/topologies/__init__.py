"""Network topologies, one module each, found by name in a spec (``fat-tree:k=16,...``). Each module registers
itself with ``@register("name")`` (see :mod:`.base`); the registry imports every module of this package on
its first lookup, so a new topology is one new file here."""

from rltrace.replay.topologies.base import Links, Topology, TopologySpec, names, parse, register

__all__ = ["Links", "Topology", "TopologySpec", "names", "parse", "register"]
