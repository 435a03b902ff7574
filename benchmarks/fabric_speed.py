"""Fabric model speed: one ring all-reduce over fat-trees of 256 to 4,096 GPUs (target: 4,096 in < 1 s).

    python benchmarks/fabric_speed.py

Times building the topology (its links) and solving the collective (paths, max-min rates, flow run)
separately, best of three, and prints the flows and links involved.
"""

from __future__ import annotations

import os
import platform
import time

from rltrace.replay.network.collectives import collective
from rltrace.replay.topologies import parse


def smallest_k(gpus: int) -> int:
    k = 2
    while k ** 3 // 4 < gpus:
        k += 2
    return k


def best_of(fn, repeat: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"{'GPUs':>6} {'k':>3} {'links':>7} {'build s':>8} {'ring s':>8} {'hier. s':>8} {'modelled ms':>12} {'busbw GB/s':>11}")
    for gpus in (256, 512, 1024, 2048, 4096):
        k = smallest_k(gpus)
        spec = f"fat-tree:k={k},gpus={gpus},gpus_per_node=8,nic_gbps=400,gpu=H100"
        build_s, topo = best_of(lambda spec=spec: parse(spec))
        ring_s, ring = best_of(lambda t=topo, n=gpus: collective(t, "all_reduce", n, 1 << 30, "ring"))
        hier_s, _ = best_of(lambda t=topo, n=gpus: collective(t, "all_reduce", n, 1 << 30, "hierarchical"))
        print(f"{gpus:>6} {k:>3} {len(topo.links()):>7,} {build_s:>8.3f} {ring_s:>8.4f} {hier_s:>8.4f} "
              f"{ring.seconds * 1e3:>12.2f} {ring.busbw_gbps:>11.1f}")


if __name__ == "__main__":
    main()
