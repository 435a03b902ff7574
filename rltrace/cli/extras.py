"""Optional extras a command imports only when it needs them (torch for real kernels and collectives)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rltrace.errors import ConfigError


@contextmanager
def needs_torch(what: str) -> Iterator[None]:
    """Imports inside the block that fail for want of torch become one ConfigError naming ``what`` (another
    missing module is a real error and stays one)."""
    try:
        yield
    except ImportError as e:
        if (e.name or "").split(".")[0] != "torch":
            raise
        raise ConfigError(f"{what} needs torch, which is not installed here (pip install torch)") from None
