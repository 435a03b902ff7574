"""Importers: traces recorded by other tools become rltrace bundles (`rltrace import KIND FILE... -o BUNDLE`).

One module per kind, each registering itself by name with ``@register("kind")``; the registry imports every
module of this package on its first lookup, so a new importer is one new file here. An importer returns an
:class:`Imported` (the tables, and notes saying what was inferred rather than read); the CLI writes the bundle.
"""

from rltrace.collectors.importers.base import IMPORTERS, Imported, ImportOptions, importer, names, register

__all__ = ["IMPORTERS", "ImportOptions", "Imported", "importer", "names", "register"]
