"""Weight files: which process wrote a weights file, so a reload of it elsewhere is that process's weight sync.

A trainer that syncs through a file writes it (``safetensors.torch.save_file`` / ``save_model``, which
``save_pretrained`` uses too) and a generator process reloads it (``collective_rpc``, recorded by the vLLM
collector with the files it names). Each process notes, in its shard's meta, the files it wrote (absolute path
-> end times of its last writes) and the files each of its reloads read (version -> paths); the merge makes a
reload's source the trainer that last wrote one of its files before the reload began. Bounded: the newest
``KEEP`` entries of each.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

from rltrace.collectors import recorder

KEEP = 256
WRITES = "weight_files"
READS = "reload_files"


def _bounded(table: dict[str, Any], key: str, value: Any) -> None:
    table.pop(key, None)
    table[key] = value
    while len(table) > KEEP:
        table.pop(next(iter(table)))


def note_reload(version: int, paths: list[str]) -> None:
    """Record that weight version ``version`` of this process's engine was loaded from ``paths``."""
    rec = recorder.current()
    if rec is not None and paths:
        _bounded(rec.meta.setdefault(READS, {}), str(version), sorted({os.path.abspath(p) for p in paths}))


def _writer(save: Any) -> Any:
    @functools.wraps(save)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = save(*args, **kwargs)
        rec = recorder.current()
        if rec is not None:
            with rec.guard("weight file collector"):
                path = kwargs.get("filename", args[1] if len(args) > 1 else None)
                if isinstance(path, (str, os.PathLike)):
                    key = os.path.abspath(os.fspath(path))
                    writes = rec.meta.setdefault(WRITES, {})
                    _bounded(writes, key, [*writes.get(key, [])[-7:], time.time_ns()])
        return result

    wrapper.__rltrace_wrapped__ = True  # type: ignore[attr-defined]  # a marker on the wrapper function
    return wrapper


def install(module: Any) -> None:
    """Patch ``safetensors.torch`` once it is imported."""
    rec = recorder.current()
    if rec is None:
        return
    with rec.guard("weight file collector install"):
        for name in ("save_file", "save_model"):
            original = getattr(module, name, None)
            if original is not None and not getattr(original, "__rltrace_wrapped__", False):
                setattr(module, name, _writer(original))


def writer_of(paths: list[str], before_ns: int, writes: dict[str, dict[str, list[int]]]) -> str | None:
    """The actor whose last write of one of ``paths`` ended last before ``before_ns`` (``writes``: actor ->
    its shard's ``weight_files``), or None."""
    best: tuple[int, str] | None = None
    for actor, files in writes.items():
        for path in paths:
            done = [t for t in files.get(path, []) if t <= before_ns]
            if done and (best is None or max(done) > best[0]):
                best = (max(done), actor)
    return best[1] if best else None
