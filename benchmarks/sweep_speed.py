"""Sweep throughput: points per second of `rltrace sweep` on a local process pool and on a local Ray.

    python benchmarks/sweep_speed.py [--points 48] [--workers 1,2] [--no-ray]

The grid: the default RollPacker-like sample (12,288 requests over 12 steps, replayed at 4 steps resampled),
schedulers x generation GPUs x GPU kinds, the same for every backend. Times the whole `rltrace sweep` command
(process start, workers, replays, Parquet, report) into a fresh folder each time, and checks that every
backend wrote the same metrics.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
from _bench import at_least

SCHEDULERS = ["disagg-sync", "one-step-async", "fully-async", "streamrl", "rollpacker", "orchestrrl"]
GPUS = ["H100", "H800", "A100", "H20"]


def grid(points: int) -> str:
    gen = [8, 16, 24, 32][: max(1, points // (len(SCHEDULERS) * len(GPUS)))]
    return (f"[axes]\nscheduler = {SCHEDULERS!r}\ngen_gpus = {gen!r}\ngpu = {GPUS!r}\n"
            "[fixed]\ntrain_gpus = 8\nsteps = 4\n").replace("'", '"')


def run(args: list[str], out: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run([str(Path(sys.executable).parent / "rltrace"), "sweep", "rollpacker_qwen7b", *args,
                           "-o", str(out)], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(done.stdout + done.stderr)
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    step = len(SCHEDULERS) * len(GPUS)
    parser.add_argument("--points", type=at_least(step), default=48,
                        help=f"grid points: a multiple of {step} (schedulers x GPU kinds), at most {4 * step}")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    if args.points % step or args.points > 4 * step:  # 50 ran 48 points and 100 ran 96, unsaid
        parser.error(f"--points {args.points}: a multiple of {step} up to {4 * step}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "grid.toml").write_text(grid(args.points))
        backends = [(f"local, {w} worker(s)", ["--workers", w]) for w in args.workers.split(",")]
        if not args.no_ray:
            backends.append(("local Ray, 2 CPUs", ["--ray", "--workers", "2"]))
        frames = {}
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
        for i, (name, flags) in enumerate(backends):
            out = root / f"out{i}"
            wall = run(["--grid", str(root / "grid.toml"), *flags], out)
            frames[name] = pl.read_parquet(out / "sweep.parquet").drop("replay_wall_s").sort("point_id")
            n = frames[name].height
            print(f"{name}: {n} points in {wall:.1f} s = {n / wall:.2f} points/s")
            rerun = run(["--grid", str(root / "grid.toml"), *flags], out)
            print(f"  rerun (every point already done): {rerun:.1f} s")
        first = next(iter(frames.values()))
        print("identical metrics on every backend:", all(f.equals(first) for f in frames.values()))


if __name__ == "__main__":
    main()
