"""SIGTERM as an interrupt for long commands, and keeping it so under libraries that install their own handlers.

A job scheduler or a timeout stops a long sweep with SIGTERM. By default Python dies on it at once (a half-written
file left behind, no word on what was kept); Ray, once started in the process, prints a native stack dump and exits
1. :func:`terminate_as_interrupt` raises :class:`Terminated` (a ``KeyboardInterrupt``) instead, so the command's
cleanup and its "interrupted" message run as for Ctrl-C; the command then exits :data:`EXIT_TERMINATED`.
:func:`keep_sigterm` restores whatever handler was in place around a call that replaces it (``ray.init``).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

EXIT_TERMINATED = 128 + signal.SIGTERM
"""the exit code of a command stopped by SIGTERM, as a shell reports a process killed by it"""
EXIT_INTERRUPTED = 128 + signal.SIGINT
"""Ctrl-C's exit code, whether it comes while the CLI loads or while a command runs"""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command was running (a library may re-raise it as a plain KeyboardInterrupt:
    :attr:`Stop.terminated` says which signal it was)."""


@dataclass(slots=True)
class Stop:
    """What stopped a :func:`terminate_as_interrupt` block."""

    terminated: bool = False
    """SIGTERM arrived (else a KeyboardInterrupt is Ctrl-C)"""

    def _raise(self, signum: int, frame: FrameType | None) -> None:
        self.terminated = True
        raise Terminated()


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def terminate_as_interrupt() -> Iterator[Stop]:
    """Within the block, SIGTERM raises :class:`Terminated`; the previous handler is restored after. A SIGTERM the
    process inherited ignored (``trap '' TERM``) stays ignored; off the main thread, nothing changes."""
    stop = Stop()
    if not _main_thread() or signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        yield stop
        return
    previous = signal.signal(signal.SIGTERM, stop._raise)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def keep_sigterm() -> Iterator[None]:
    """Restore the SIGTERM handler in place before the block once it ends (``ray.init`` installs its own)."""
    if not _main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if previous is not None:  # None: set from outside Python, which cannot be put back from here
            signal.signal(signal.SIGTERM, previous)
