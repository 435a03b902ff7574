"""Importers: traces recorded by other tools become rltrace bundles (`rltrace import KIND FILE... -o BUNDLE`).

One module per kind, each registering itself by name. An importer returns an :class:`Imported` (the tables,
and notes saying what was inferred rather than read); the CLI writes the bundle.
"""

from rltrace.collectors.importers import et, kineto, requests_trace  # noqa: F401  (they register themselves)
from rltrace.collectors.importers.base import IMPORTERS, Imported, ImportOptions, importer, register

__all__ = ["IMPORTERS", "ImportOptions", "Imported", "importer", "register"]
