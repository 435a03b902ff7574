"""Described RL jobs: a run's setup as its publisher states it, replayed without a recording (docs/described.md)."""

from rltrace.replay.described.description import Description, is_description, load_description, markdown_reference
from rltrace.replay.described.prepare import from_description

__all__ = ["Description", "from_description", "is_description", "load_description", "markdown_reference"]
