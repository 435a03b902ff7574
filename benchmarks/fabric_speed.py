"""Fabric model speed: a 1 GiB all-reduce over fat-trees of 256 to 16,384 GPUs (target: 16,384 in < 1 s, one core).

    taskset -c 0 python benchmarks/fabric_speed.py

Times building the topology (its links) and solving the collective (channels, paths, link loads or max-min
rates) separately, best of three: the ring, NCCL's tree, and auto (the tuner: ring, tree and NVLSTree, the
fastest algorithm x protocol), and prints what auto picked and its modelled time and bus bandwidth.
"""

from __future__ import annotations

import argparse
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
    print(f"{'GPUs':>6} {'k':>3} {'links':>7} {'build s':>8} {'ring s':>8} {'tree s':>8} {'auto s':>8} {'picked':>16} "
          f"{'modelled ms':>12} {'busbw GB/s':>11}")
    for gpus in (256, 1024, 4096, 16384):
        k = smallest_k(gpus)
        spec = f"fat-tree:k={k},gpus={gpus},gpus_per_node=8,nic_gbps=400,gpu=H100"
        build_s, topo = best_of(lambda spec=spec: parse(spec))
        ring_s, _ = best_of(lambda t=topo, n=gpus: collective(t, "all_reduce", n, 1 << 30, "ring"))
        tree_s, _ = best_of(lambda t=topo, n=gpus: collective(t, "all_reduce", n, 1 << 30, "tree"))
        auto_s, auto = best_of(lambda t=topo, n=gpus: collective(t, "all_reduce", n, 1 << 30))
        picked = f"{auto.algorithm}/{auto.protocol}"  # type: ignore[attr-defined]
        print(f"{gpus:>6} {k:>3} {len(topo.links()):>7,} {build_s:>8.3f} {ring_s:>8.4f} {tree_s:>8.4f} {auto_s:>8.4f} "
              f"{picked:>16} {auto.seconds * 1e3:>12.2f} {auto.busbw_gbps:>11.1f}")  # type: ignore[attr-defined]


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # no options: --help, or refused
    main()
