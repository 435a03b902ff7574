"""Wall time of `rltrace advise` on the default sample (its speed target: under 10 s on 2 cores).

    python benchmarks/advise_speed.py [--repeat 3] [--workers 2] [--target 10] [--exhaustive]

Times the whole command (process start, the search, its replays, the tables) on the default RollPacker-like sample
and the default space (120 designs: every catalog GPU kind x 8 schedulers x 2 generation shares, the colocated
scheduler once, at 8 to 128 GPUs), into a fresh folder each time, and prints its replay count and CPU time (the
command's and its workers').
The machine's load average goes beside them: on a shared machine the wall time follows it. ``--exhaustive`` also
runs ``rltrace advise --exhaustive`` (every candidate replayed) once and checks that both list the same
configurations.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench import at_least
from _bench import run as run_script

SAMPLE = "rollpacker_qwen7b"


def run(args: list[str], out: Path) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the command and its workers, stdout) of one `rltrace advise`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([str(Path(sys.executable).parent / "rltrace"), "advise", SAMPLE, *args, "-o", str(out)],
                          capture_output=True, text=True, check=False, env={**os.environ, "COLUMNS": "200"})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(done.stdout + done.stderr)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def listed(stdout: str) -> str:
    """The listed configurations: the first table and the line naming the cheapest."""
    head, _, rest = stdout.partition("cheapest:")
    return head + rest.split("\n", 1)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=at_least(1), default=3)
    parser.add_argument("--workers", type=at_least(1), default=2)
    parser.add_argument("--target", type=float, default=10.0)
    parser.add_argument("--exhaustive", action="store_true", help="also time --exhaustive and compare the answers")
    args = parser.parse_args()
    flags = ["--target-throughput", f"{args.target:g}", "--workers", str(args.workers)]
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; "
          f"rltrace advise {SAMPLE} {' '.join(flags)}")
    walls = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            load = os.getloadavg()[0]
            wall, cpu, stdout = run(flags, Path(tmp) / f"run{i}")
            walls.append(wall)
            summary = re.search(r"^\d+ designs, \d+ replays.*$", stdout, flags=re.MULTILINE)
            print(f"run {i + 1}: {wall:.1f} s wall, {cpu:.1f} s CPU, load average {load:.1f} before; "
                  f"{summary[0] if summary else '?'}")
        print(f"advise wall time: min {min(walls):.1f} s, median {statistics.median(walls):.1f} s "
              f"over {len(walls)} run(s)")
        if args.exhaustive:
            wall, cpu, full = run([*flags, "--exhaustive"], Path(tmp) / "exhaustive")
            print(f"--exhaustive: {wall:.1f} s wall, {cpu:.1f} s CPU; the same configurations listed: "
                  f"{listed(full) == listed(stdout)}")


if __name__ == "__main__":
    run_script(main)
