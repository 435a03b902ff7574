"""Throughput of the bundle path: synthesize, write, open + validate, summarise (``rltrace inspect``).

Usage: python benchmarks/bundle_io.py [--steps 100] [--samples 8192] [--out DIR]
Prints one line per stage with wall time and rows/s, then the process's peak RSS over the whole run.
"""

from __future__ import annotations

import argparse
import platform
import resource
import tempfile
import time
from pathlib import Path

from _bench import at_least, run

import rltrace
from rltrace.summary import summarize
from rltrace.synth import load_config, synthesize


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=at_least(1), default=100)
    parser.add_argument("--samples", type=at_least(1), default=8192, help="samples per step (prompts x 8)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    cfg = load_config(
        preset="rollpacker", sets=[f"steps={args.steps}", f"prompts_per_step={args.samples // 8}"]
    )
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "bench"
        t = time.perf_counter()
        result = synthesize(cfg)
        rows = sum(f.height for f in result.tables.values())
        stages = [("synthesize", time.perf_counter() - t)]
        t = time.perf_counter()
        rltrace.write_bundle(out, result.manifest, result.tables, overwrite=True)
        stages.append(("write (validate + zstd Parquet)", time.perf_counter() - t))
        del result
        t = time.perf_counter()
        bundle = rltrace.open(out)
        stages.append(("open + validate", time.perf_counter() - t))
        t = time.perf_counter()
        summary = summarize(bundle)
        stages.append(("summarize (inspect)", time.perf_counter() - t))
        size = sum(f.stat().st_size for f in out.iterdir()) / 2**20
    requests = summary.table_rows["requests"]
    print(f"trace: {args.steps} steps x {args.samples} samples = {requests:,} requests, {rows:,} rows, {size:.1f} MiB")
    for name, seconds in stages:
        print(f"{name:34s} {seconds:7.2f} s  {rows / seconds / 1e6:6.2f} M rows/s")
    print(f"peak RSS {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    run(main)
