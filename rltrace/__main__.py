"""``python -m rltrace``: the same as the ``rltrace`` command."""

from rltrace.cli import console

console()
