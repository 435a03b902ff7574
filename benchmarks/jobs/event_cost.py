"""What recording adds per captured collective, without communication noise.

A one-rank Gloo world runs N real all_reduces of 256 floats, alternately plain and with the collector's op
kernels installed and recording every op (``min_ranks=1``; by default one-rank groups are skipped). Three
clocks: wall time (Gloo runs the op on its own thread, so recording work overlaps it), CPU time of the calling
thread (the Python kernel, the boxed redispatch, argument parsing, buffering), and CPU time of the whole
process (adds the flush thread and completion callbacks). Prints JSON.

With ``cuda`` the world is one NCCL rank on the first GPU and the tensor lives there; each timed loop ends with a
device synchronize, so wall time covers the GPU's work. ``rltrace record`` sets ``TORCH_NCCL_ENABLE_TIMING=1``
(CUDA events around every collective, for their durations); run it with and without that variable to see what the
events cost apart from the collector.

    python benchmarks/jobs/event_cost.py [N] [cpu|cuda]
"""

import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import torch
import torch.distributed as dist
from rltrace.collectors import torch_dist

from rltrace import collectors


def timed(n: int, device: str) -> tuple[float, float, float]:
    """Per op: wall time, CPU time of this thread, CPU time of the whole process (every thread)."""
    t = torch.ones(256, device=device)
    for _ in range(500):
        dist.all_reduce(t)
    sync()
    wall, thread, process = time.perf_counter(), time.thread_time(), time.process_time()
    for _ in range(n):
        dist.all_reduce(t)
    sync()
    return ((time.perf_counter() - wall) / n, (time.thread_time() - thread) / n, (time.process_time() - process) / n)


def sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def other_ops(n: int) -> float:
    """Per op CPU time of small non-communication ops (the collector must not touch them)."""
    x = torch.ones(64)
    start = time.thread_time()
    for _ in range(n):
        x = x * 1.0001 + 0.0001
    return (time.thread_time() - start) / (2 * n)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30_000
    device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
    rounds = 5
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)
    plain, recorded, ops_plain, ops_recorded = [], [], [], []
    with tempfile.TemporaryDirectory() as root:
        collectors.start(root)
        for _ in range(rounds):  # alternate, and keep each side's best: the machine's noise only adds time
            torch_dist.uninstall()  # start() attached the collector already (one-rank groups skipped)
            plain.append(timed(n, device))
            ops_plain.append(other_ops(n))
            torch_dist.install(min_ranks=1)
            recorded.append(timed(n, device))
            ops_recorded.append(other_ops(n))
            torch_dist.uninstall()
        collectors.stop()
        rows = pq.ParquetDataset(list(Path(root).rglob("collectives-*.parquet"))).read().num_rows
    dist.destroy_process_group()
    result = {"ops": n, "rounds": rounds, "rows_recorded": rows, "device": device,
              "nccl_timing": os.environ.get("TORCH_NCCL_ENABLE_TIMING", "")}
    for i, clock in enumerate(("wall", "thread_cpu", "process_cpu")):
        b, r = min(p[i] for p in plain), min(p[i] for p in recorded)
        result[clock] = {"plain_us": round(b * 1e6, 2), "recorded_us": round(r * 1e6, 2),
                         "added_us": round((r - b) * 1e6, 2)}
    b, r = min(ops_plain), min(ops_recorded)
    result["other_ops"] = {"plain_us": round(b * 1e6, 3), "recorded_us": round(r * 1e6, 3),
                           "added_us": round((r - b) * 1e6, 3)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
