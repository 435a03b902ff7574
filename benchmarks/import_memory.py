"""Kineto import in bounded memory: a large synthetic trace, imported, with peak memory measured.

    python benchmarks/import_memory.py [--mb 1024] [--gzip]

Writes a synthetic Kineto trace of about --mb megabytes (ProfilerStep ranges, compute kernels, CPU ops,
cudaLaunchKernel records and NCCL AllReduce kernels with their collective args, in the shapes PyTorch
writes), then runs `rltrace import kineto` on it in a child process and reports the child's peak RSS
(getrusage) and wall time. For contrast it also measures `json.load` of a 1/16 slice of the file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench import at_least, run

STEP_US = 100_000.0


def write_trace(path: Path, target_bytes: int, compress: bool) -> int:
    """Stream events into ``path`` until it holds about ``target_bytes`` (uncompressed); returns the count."""
    opener = gzip.open if compress else open
    n = 0
    with opener(path, "wt") as f:
        f.write('{"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8}, '
                '"traceEvents": [\n')
        written, step, first = 0, 0, True
        while written < target_bytes:
            base = step * STEP_US
            batch = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                      "ts": base, "dur": STEP_US}]
            for k in range(200):
                t = base + k * 400.0
                batch.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t, "dur": 30.0,
                              "args": {"External id": n + k, "Input Dims": [[4096, 4096], [4096, 4096]]}})
                batch.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                              "ts": t + 5, "dur": 4.0, "args": {"correlation": n + k, "External id": n + k}})
                batch.append({"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize"
                              "128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas", "pid": 0,
                              "tid": 7, "ts": t + 20, "dur": 300.0, "args": {"correlation": n + k, "device": 0,
                                                                             "stream": 7, "grid": [132, 1, 1]}})
            for k in range(4):
                batch.append({"ph": "X", "cat": "kernel",
                              "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, "
                                      "unsigned long, ncclWork*)",
                              "pid": 0, "tid": 20, "ts": base + 80_000 + k * 4000,
                              "dur": 3500.0, "args": {"Collective name": "allreduce", "In msg nelems": 16777216,
                                                      "Out msg nelems": 16777216, "dtype": "BFloat16", "Group size": 8,
                                                      "Process Group Name": "0",
                                                      "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"}})
            text = ",\n".join(json.dumps(e) for e in batch)
            f.write(("" if first else ",\n") + text)
            first = False
            written += len(text)
            n += len(batch)
            step += 1
        f.write('\n], "baseTimeNanoseconds": 1700000000000000000}\n')
    return n


MEASURE = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(done.returncode)")


def child_peak_rss_mb(cmd: list[str]) -> tuple[float, float]:
    """Peak RSS (MiB) and wall time of ``cmd``, measured by a fresh wrapper process (ru_maxrss of a process's
    children is a running maximum, so each measurement gets its own parent)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", MEASURE, *cmd], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return int(done.stdout.strip().splitlines()[-1]) / 1024, wall  # ru_maxrss is KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=at_least(1), default=1024)
    parser.add_argument("--gzip", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        small = root / "small.json"
        write_trace(small, args.mb * 2**20 // 16, compress=False)
        # contrast: the whole JSON in memory, at 1/16 of the size
        load_mb, _ = child_peak_rss_mb([sys.executable, "-c", f"import json; json.load(open({str(small)!r}))"])
        trace = root / ("big.json.gz" if args.gzip else "big.json")
        started = time.perf_counter()
        events = write_trace(trace, args.mb * 2**20, compress=args.gzip)
        print(f"wrote {trace.stat().st_size / 2**20:,.0f} MiB ({events:,} events) "
              f"in {time.perf_counter() - started:.0f} s")
        rss_mb, wall = child_peak_rss_mb([str(Path(sys.executable).parent / "rltrace"), "import", "kineto", str(trace),
                                          "-o", str(root / "bundle")])
        print(f"machine: {platform.machine()}, Python {sys.version.split()[0]}")
        print(f"json.load of a {small.stat().st_size / 2**20:,.0f} MiB slice: peak RSS {load_mb:,.0f} MiB")
        print(f"rltrace import kineto of {trace.stat().st_size / 2**20:,.0f} MiB: {wall:.0f} s, "
              f"peak RSS {rss_mb:,.0f} MiB")


if __name__ == "__main__":
    run(main)
