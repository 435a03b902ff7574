"""Start recording a process from the environment (what ``rltrace record``'s injected sitecustomize runs).

``RLTRACE_RECORD_DIR`` names the shard root. Every Python process the recorded command starts inherits the
environment, so torchrun workers, multiprocessing spawn/forkserver children and vLLM's engine processes
record too; forked children open their own shard (``os.register_at_fork``). Ray workers, which the raylet
starts with the job's ``runtime_env``, record through Ray's worker setup hook (``ray_hook``).
"""

from __future__ import annotations

import atexit
import functools
import multiprocessing.util
import os
import signal
import sys
from pathlib import Path
from typing import Any

from rltrace.collectors import recorder
from rltrace.collectors.sources import attach_all

ENV_DIR = "RLTRACE_RECORD_DIR"
SITECUSTOMIZE_TEMPLATE = Path(__file__).with_name("sitecustomize_template.py")


def install_collectors() -> None:
    """Attach every collector (torch.distributed, vLLM, Hugging Face generate, safetensors reloads, Ray: one file
    each under rltrace/collectors/sources/) when, or if, the job imports what it patches."""
    attach_all()


_SIGNAL = signal.signal
_GETSIGNAL = signal.getsignal


def _flush_on_sigterm() -> None:
    """Flush before the default SIGTERM death, where SIGTERM is at its default; a handler the job installs itself
    (SIG_DFL included) replaces it.

    The job never sees the flush handler: ``signal.getsignal(SIGTERM)`` says SIG_DFL while it is in place, and
    ``signal.signal`` returns SIG_DFL as the handler it replaced. A job that installs its own only over the
    default, or chains to the "previous" handler when that is callable (else restores the default and signals
    itself again), then acts as unrecorded."""
    if _GETSIGNAL(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def flush(signum: int, frame: Any) -> None:
        recorder.stop_at_exit()
        _SIGNAL(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    @functools.wraps(_GETSIGNAL)
    def getsignal(signalnum: int) -> Any:
        found = _GETSIGNAL(signalnum)
        return signal.SIG_DFL if found is flush else found

    @functools.wraps(_SIGNAL)
    def set_signal(signalnum: int, handler: Any) -> Any:  # the standard library's parameter names: by keyword too
        previous = _SIGNAL(signalnum, handler)
        return signal.SIG_DFL if previous is flush else previous

    _SIGNAL(signal.SIGTERM, flush)
    setattr(signal, "getsignal", getsignal)  # noqa: B010 - the module's own functions, replaced for the job
    setattr(signal, "signal", set_signal)  # noqa: B010


class _ForkToken:
    """A weak-referenceable key for multiprocessing's after-fork registry."""


_FORK_TOKEN = _ForkToken()


def _flush_at_child_exit(_token: object) -> None:
    # multiprocessing children started by fork (and forkserver) leave through os._exit, skipping atexit; their
    # bootstrap clears the finalizer registry first, then runs after-fork callbacks like this one, and runs
    # the finalizers registered here on the way out.
    multiprocessing.util.Finalize(None, recorder.stop_at_exit, exitpriority=100)


def boot() -> None:
    """Start recording this process if ``RLTRACE_RECORD_DIR`` is set; never raises into the job."""
    root = os.environ.get(ENV_DIR)
    if not root:
        return
    try:
        recorder.start(root)
        install_collectors()
        atexit.register(recorder.stop_at_exit)
        multiprocessing.util.register_after_fork(_FORK_TOKEN, _flush_at_child_exit)
        _flush_on_sigterm()
    except Exception as e:  # noqa: BLE001 - recording must never stop the job from starting
        print(f"rltrace: recording disabled in this process: {type(e).__name__}: {e}", file=sys.stderr)
