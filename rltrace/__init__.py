"""rltrace: record, replay and compare RL post-training workloads.

The trace bundle is the one artifact everything passes through::

    import rltrace
    b = rltrace.open("rollpacker_qwen7b")        # a shipped sample's name, or a bundle directory
    b.requests.select("output_tokens").collect()

Recording API (no-ops unless the process records, e.g. under ``rltrace record``)::

    rltrace.set_step(k)
    with rltrace.span("reward", step=k): ...
    with rltrace.weight_sync(version=k, src="trainer/rank0", dst="rollout/engine0", bytes=n): ...

Subpackages: ``rltrace.collectors`` (recording a live job), ``rltrace.replay`` (what-if simulation),
``rltrace.dashboards`` (HTML reports). Importing rltrace never imports torch, and names load lazily so that
a recording process only pays for what it uses.
"""

from __future__ import annotations

import importlib
import os
import signal
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

# Imported from a checkout (Python started in the repository's root), this is the source folder, which holds the
# core only: the subpackages that live in top-level folders there (replay/, collectors/, dashboards/,
# sample_traces/; installed inside this package) are found beside it, as installed.
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "replay")) and os.path.isfile(
        os.path.join(_CHECKOUT, "replay", "__init__.py")):
    __path__.append(_CHECKOUT)

# The environment as this process started, before any import changed it: polars sets _RJEM_MALLOC_CONF, its
# allocator's settings, when it loads. `rltrace record` hands the job these values, not what its own imports left.
_STARTING_ENVIRON = dict(os.environ)
# The signals this process started with ignored (a shell's background job starts with SIGINT ignored): polars
# installs its own SIGINT handler when it loads, and a handler, unlike an ignored signal, does not pass to a child.
_STARTING_IGNORED = tuple(s for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTERM, signal.SIGUSR1,
                                       signal.SIGUSR2) if signal.getsignal(s) is signal.SIG_IGN)

# The file descriptors past 0-2 the `rltrace` command was handed open (``3>log``, a jobserver's pipe, a socket a
# launcher activated), which `rltrace record` hands on to the job: noted by the command's entry point
# (rltrace.__main__) before anything else opens one; () in any other process, a recorded one included.
_STARTING_FDS: tuple[int, ...] = ()


def _inheritable_fds(fds: Iterable[int] | None = None) -> tuple[int, ...]:
    """Of ``fds`` (None: every descriptor open now, past 0-2), those open and inheritable: handed to this process,
    not opened by it (Python opens its own non-inheritable, PEP 446). () where /proc cannot be listed."""
    if fds is None:
        try:
            fds = [int(n) for n in os.listdir("/proc/self/fd") if n.isdigit() and int(n) > 2]
        except OSError:
            return ()
    found = []
    for fd in sorted(fds):
        try:
            if os.get_inheritable(fd):
                found.append(fd)
        except OSError:
            pass  # closed (the listing's own descriptor, say)
    return tuple(found)

_EXPORTS = {
    "__version__": ("rltrace.version", "__version__"),  # reads the package metadata: 19 ms a recorded process
    "open_bundle": ("rltrace.bundle", "open_bundle"),
    "write_bundle": ("rltrace.bundle", "write_bundle"),
    "save_bundle": ("rltrace.bundle", "save_bundle"),
    "Bundle": ("rltrace.bundle", "Bundle"),
    "TableWriter": ("rltrace.bundle", "TableWriter"),
    "BundleError": ("rltrace.errors", "BundleError"),
    "ConfigError": ("rltrace.errors", "ConfigError"),
    "RltraceError": ("rltrace.errors", "RltraceError"),
    "ValidationError": ("rltrace.errors", "ValidationError"),
    "Manifest": ("rltrace.manifest", "Manifest"),
    "ModelInfo": ("rltrace.manifest", "ModelInfo"),
    "Pool": ("rltrace.manifest", "Pool"),
    "RLConfig": ("rltrace.manifest", "RLConfig"),
    "FORMAT_VERSION": ("rltrace.schema", "FORMAT_VERSION"),
    "TABLES": ("rltrace.schema", "TABLES"),
    "set_step": ("rltrace.collectors.api", "set_step"),
    "span": ("rltrace.collectors.api", "span"),
    "weight_sync": ("rltrace.collectors.api", "weight_sync"),
    "log_flow": ("rltrace.collectors.api", "log_flow"),
    "compare": ("rltrace.api", "compare"),
    "Comparison": ("rltrace.api", "Comparison"),
}

__all__ = [
    "FORMAT_VERSION", "TABLES", "Bundle", "BundleError", "Comparison", "ConfigError", "Manifest", "ModelInfo", "Pool",
    "RLConfig", "RltraceError", "TableWriter", "ValidationError", "__version__", "compare", "log_flow", "open",
    "open_bundle", "save_bundle", "set_step",
    "span", "weight_sync", "write_bundle",
]

if TYPE_CHECKING:
    from rltrace.api import Comparison, compare
    from rltrace.bundle import Bundle, TableWriter, open_bundle, save_bundle, write_bundle
    from rltrace.collectors.api import log_flow, set_step, span, weight_sync
    from rltrace.errors import BundleError, ConfigError, RltraceError, ValidationError
    from rltrace.manifest import Manifest, ModelInfo, Pool, RLConfig
    from rltrace.schema import FORMAT_VERSION, TABLES
    from rltrace.version import __version__


def open(path: str | os.PathLike[str], *, validate: bool = True) -> Bundle:
    """Open a trace bundle: a directory, or a shipped sample's name (``rltrace.open("rollpacker_qwen7b")``)
    when no such path exists here, as the CLI accepts it. ``validate`` as in :func:`rltrace.bundle.open_bundle`.
    Raises :class:`BundleError` or :class:`ValidationError`."""
    from rltrace.bundle import open_bundle
    from rltrace.sample_traces import resolve

    return open_bundle(resolve(path), validate=validate)


def __getattr__(name: str) -> Any:
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'rltrace' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # cache: later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return __all__
