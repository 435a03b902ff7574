"""Recording a live RL job into a trace bundle (installed as ``rltrace.collectors``).

Usually through the CLI, which needs no change to the job::

    rltrace record -o run -- torchrun --nproc-per-node 2 train.py

For code that cannot be wrapped, the same collectors start from Python in each process, and the shards merge
afterwards::

    from rltrace import collectors
    collectors.start("rec")          # this process records into rec/shards/<host>-<pid>-.../
    ...                              # the job: torch.distributed, vLLM, rltrace.span(...)
    collectors.stop()
    collectors.merge("rec", "run")   # once every process has stopped

One collector per source: ``torch_dist`` (c10d ops, optimizer steps), ``vllm_collector`` (requests, generate
spans, weight updates), ``hf_generate``, ``weight_files``, ``ray_hook``, and ``api`` (explicit spans, steps and
flows). Each attaches through one file under ``sources/`` that registers it by name (found by the registry:
a new collector is one new file there).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltrace.collectors import recorder
from rltrace.collectors.api import log_flow, set_step, span, weight_sync
from rltrace.collectors.autostart import install_collectors

if TYPE_CHECKING:
    from rltrace.collectors.shards import merge

__all__ = ["log_flow", "merge", "set_step", "span", "start", "stop", "weight_sync"]
SHARDS = "shards"  # the shard directory under a recording directory (rltrace.collectors.shards reads it)


def __getattr__(name: str) -> Any:
    # The merge needs polars; recording processes import this package at start-up and must not pay for it.
    if name == "merge":
        return importlib.import_module("rltrace.collectors.shards").merge
    raise AttributeError(f"module 'rltrace.collectors' has no attribute {name!r}")


def start(directory: str | Path) -> recorder.Recorder:
    """Record this process into ``directory`` (its shard goes under ``directory/shards/``).

    Collectors attach to torch and vLLM now if they are imported, or when they are.
    """
    rec = recorder.start(Path(directory) / SHARDS)
    install_collectors()
    return rec


def stop() -> None:
    """Flush this process's shard and stop recording it."""
    recorder.stop()
