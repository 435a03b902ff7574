"""Replay fidelity against real recordings: record examples/tiny_rl in pairs and print the errors.

    python benchmarks/fidelity.py [--pairs 3] [--steps 10] [--interleaved] [--out /tmp/rltrace_fidelity]

Each pair records the example with 8 and with 4 samples per prompt (learning rate 1e-5), then replays each
as recorded and each retargeted to the other's shape (rltrace.replay.fidelity). With ``--interleaved`` a
pair is one recording that alternates 8 and 4 samples per prompt step by step (2 x steps + 1 steps, the
first with 8), split into its two settings: both then run on the same machine at the same time, so a drift
in the machine's speed between two separate recordings does not enter. Wall-clock fidelity depends on the
machine: run it on an idle one, and report the machine with the figures.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
from rltrace.replay.fidelity import as_recorded_error, retarget_error, settings

import rltrace

REPO = Path(__file__).resolve().parents[1]


def record(out: Path, samples: str, steps: int, model_dir: Path) -> Path:
    target = out / f"samples{samples.replace(',', '_')}"
    rltrace_cli = Path(sys.executable).with_name("rltrace")
    subprocess.run(
        [str(rltrace_cli), "record", "-o", str(target), "--force", "--model", str(model_dir / "config.json"), "--",
         sys.executable, str(REPO / "examples" / "tiny_rl" / "train.py"), "--model-dir", str(model_dir),
         "--steps", str(steps), "--samples", samples, "--lr", "1e-5"],
        check=True, capture_output=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--interleaved", action="store_true", help="one recording alternating both settings per pair")
    parser.add_argument("--out", type=Path, default=Path("/tmp/rltrace_fidelity"))
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"{'pair':>4} {'as-rec A(8)':>12} {'as-rec B(4)':>12} {'A->B':>8} {'B->A':>8}")
    errors: dict[str, list[float]] = {"a": [], "b": [], "ab": [], "ba": []}
    for pair in range(args.pairs):
        out = args.out / f"pair{pair}"
        if args.interleaved:
            both = rltrace.open(record(out, "8,4", 2 * args.steps + 1, args.out / "model"))
            small, large = settings(both).values()  # steps with 4 and with 8 samples per prompt
            row = {"a": as_recorded_error(both, steps=large).error, "b": as_recorded_error(both, steps=small).error,
                   "ab": retarget_error(both, both, source_steps=large, target_steps=small).error,
                   "ba": retarget_error(both, both, source_steps=small, target_steps=large).error}
        else:
            a = rltrace.open(record(out, "8", args.steps, args.out / "model"))
            b = rltrace.open(record(out, "4", args.steps, args.out / "model"))
            row = {"a": as_recorded_error(a).error, "b": as_recorded_error(b).error,
                   "ab": retarget_error(a, b).error, "ba": retarget_error(b, a).error}
        for key, value in row.items():
            errors[key].append(value)
        print(f"{pair:>4} {row['a']:>+12.1%} {row['b']:>+12.1%} {row['ab']:>+8.1%} {row['ba']:>+8.1%}")
    mean_abs = {k: float(np.mean(np.abs(v))) for k, v in errors.items()}
    print(f"{'mean |error|':>12} {mean_abs['a']:>+6.1%} {mean_abs['b']:>+12.1%} {mean_abs['ab']:>+8.1%} {mean_abs['ba']:>+8.1%}")


if __name__ == "__main__":
    main()
