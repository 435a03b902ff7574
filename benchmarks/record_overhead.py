"""Recording overhead: per captured event, and on the step time of the tiny RL job.

The per-event cost comes from benchmarks/jobs/event_cost.py (one-rank Gloo, alternating rounds, three clocks).
The tiny RL job runs alternately without and with ``rltrace record``; it times its own steps, so start-up and
the final merge are not counted.

    python benchmarks/record_overhead.py [--rl-repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RLTRACE = str(Path(sys.executable).parent / "rltrace")


def run(cmd: list[str], record: bool, tmp: Path) -> list[dict]:
    if record:
        cmd = [RLTRACE, "record", "-o", str(tmp / "run"), "--force", "--", *cmd]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env, timeout=900).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rl-repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, {platform.machine()}, python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        cost = run([sys.executable, str(REPO / "benchmarks" / "jobs" / "event_cost.py"), "20000"], False, tmp)[0]
        print("per captured collective (one-rank Gloo all_reduce, best of 5 alternating rounds):")
        for clock in ("wall", "thread_cpu", "process_cpu"):
            c = cost[clock]
            print(f"  {clock:12s} {c['plain_us']:7.2f} us plain, {c['recorded_us']:7.2f} us recorded: "
                  f"{c['added_us']:+.2f} us")
        o = cost["other_ops"]
        print(f"  other torch ops (not intercepted) {o['plain_us']:.3f} us plain, {o['recorded_us']:.3f} us recorded: "
              f"{o['added_us']:+.3f} us")

        model_dir = tmp / "model"
        rl = [sys.executable, str(REPO / "examples" / "tiny_rl" / "train.py"), "--model-dir", str(model_dir)]
        steps_base, steps_rec = [], []
        for _ in range(args.rl_repeats):
            steps_base += next(d for d in run(rl, False, tmp) if "step_s" in d)["step_s"][1:]  # first step warms up
            steps_rec += next(d for d in run(rl, True, tmp) if "step_s" in d)["step_s"][1:]
        b, r = statistics.mean(steps_base), statistics.mean(steps_rec)
        noise = statistics.stdev(steps_base) / len(steps_base) ** 0.5
        print(f"tiny RL job: mean step {b:.3f} s without, {r:.3f} s recorded: {100 * (r - b) / b:+.1f}% "
              f"({len(steps_base)} steps each; standard error of the mean {100 * noise / b:.1f}%)")


if __name__ == "__main__":
    main()
