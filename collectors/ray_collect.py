"""Collect an attached recording's shards from every node of a Ray cluster (``record --ray-address``).

Workers of an attached job write their shards on their own node (``<node session dir>/rltrace-<session>/``,
see :mod:`rltrace.collectors.ray_hook`); no shared filesystem is assumed. After the job, rltrace connects to
the cluster, runs one zero-CPU task pinned to each alive node (``NodeAffinitySchedulingStrategy``, not soft)
that waits for the job's workers there to be gone, returns the node's shards as one tar archive and deletes
them, and unpacks every archive into the local recording directory, where the merge reads them like any other.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import socket
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from rltrace.collectors import ray_hook
from rltrace.collectors.ray_hook import _alive, node_root

COLLECT_TIMEOUT_S = 120.0
WORKERS_GONE_S = 10.0  # how long a node waits for the finished job's workers to exit before packing


@dataclass(slots=True)
class NodeShards:
    """What one node gave back: its Ray node id, host name, and how many shards."""

    node_id: str
    host: str
    shards: int


def _pack_node(session: str) -> tuple[str, str, bytes]:
    """Runs on one node: its shards for ``session`` as a tar archive (then removed from the node)."""
    import ray

    root = node_root(session)
    shards = root / "shards"
    deadline = time.monotonic() + WORKERS_GONE_S
    while time.monotonic() < deadline and any(_alive(p) for p in _pids(shards)):
        time.sleep(0.1)  # the raylet is still ending the job's workers; each flushed before the driver left
    buf = io.BytesIO()
    if shards.is_dir():
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for shard in sorted(p for p in shards.iterdir() if p.is_dir()):
                tar.add(shard, arcname=shard.name)
    shutil.rmtree(root, ignore_errors=True)
    return ray.get_runtime_context().get_node_id(), socket.gethostname(), buf.getvalue()


def _pids(shards: Path) -> list[int]:
    pids, me = [], os.getpid()
    for meta in shards.glob("*/meta.json"):
        try:
            pid = json.loads(meta.read_text()).get("pid")
        except (OSError, ValueError):
            continue
        if isinstance(pid, int) and pid != me:
            pids.append(pid)
    return pids


def unpack(data: bytes, dest: Path) -> int:
    """One node's archive (:func:`_pack_node`) into ``dest``; the number of shards it held. A node that ran none of
    the job's processes has no shards folder and sends no archive: 0 (its empty bytes failed to open as a tar and
    ended the collection, losing every node after it, whose shards were already removed)."""
    if not data:
        return 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        members = [m for m in tar.getmembers() if not (dest / m.name).exists()]  # one host, two nodes
        tar.extractall(dest, members=members, filter="data")
        return len({m.name.split("/", 1)[0] for m in tar.getmembers()})


def collect(address: str, session: str, dest: Path, timeout_s: float = COLLECT_TIMEOUT_S) -> list[NodeShards]:
    """Bring every alive node's shards of ``session`` into ``dest`` (the recording's shard root)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    dest.mkdir(parents=True, exist_ok=True)
    ray.init(address=address, namespace=f"rltrace-collect-{session}", log_to_driver=False,
             logging_level=logging.WARNING, configure_logging=False)
    # The task travels by value (its code and this module's helpers, not a reference to rltrace): a node's
    # worker may not import rltrace as this process does (a source checkout in its working directory shadows
    # the installed package, or the node's Python lacks it) and must still hand back its shards.
    by_value = [sys.modules[__name__], ray_hook]
    for module in by_value:
        ray.cloudpickle.register_pickle_by_value(module)
    try:
        task = ray.remote(num_cpus=0, max_retries=1)(_pack_node)
        refs = [
            task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(session)
            for n in ray.nodes() if n.get("Alive")
        ]
        return [NodeShards(node_id, host, unpack(data, dest))
                for node_id, host, data in ray.get(refs, timeout=timeout_s)]
    finally:
        for module in by_value:
            ray.cloudpickle.unregister_pickle_by_value(module)
        ray.shutdown()
