"""Replay fidelity against real recordings of three job shapes: record each several times and print the errors.

    python benchmarks/fidelity.py [--job tiny_rl|tcp_rl|ray_rl] [--recordings 8] [--steps 10] [--reuse]
                                  [--out /tmp/rltrace_fidelity] [--replicates 10]

Every recording alternates 8 and 4 samples per prompt step by step (2 x steps + 1 steps, the first with 8),
so both settings run on the same machine at the same time (a drift in the machine's speed between two
separate recordings does not enter). Each is split into its two settings (rltrace.replay.fidelity) and
replayed four ways: A (8 per prompt) and B (4 per prompt) as recorded, A's steps reshaped to B's shape, and
B's to A's. Each row gives the error of the point estimate against the measured mean steady step time and,
in brackets, the 90% interval of its replicates (seeds of the reshaped draw and bootstrap draws of the steps
the generation cost is fitted to, replay/uncertainty.py), then the standard error of the measured mean
(``se``: the measurement's own noise). The summary gives, per check, the median error, the
worst |error|, how many recordings fall within the issue's bound, and the median interval.

The three shapes (none written for rltrace; none imports it but tiny_rl's optional spans):
- tiny_rl: one process spawning a vLLM generator and two DDP trainers (torch.multiprocessing), weight sync by
  broadcast;
- tcp_rl: three plain processes joined by TCP init, n samples per request, long-tailed per-request caps,
  no_sync micro-batches, weight sync by dist.send buckets then a worker-extension collective_rpc;
- ray_rl: the generator and the trainers as Ray actors on a local Ray cluster.
Wall-clock fidelity depends on the machine: run it on an idle one, and report the machine with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from rltrace.replay.fidelity import Fidelity, as_recorded_error, retarget_error, settings

import rltrace

REPO = Path(__file__).resolve().parents[1]
JOBS = ("tiny_rl", "tcp_rl", "ray_rl")
CHECKS = (("a", "as-rec A(8)", 0.04), ("b", "as-rec B(4)", 0.04), ("ab", "A->B", 0.10), ("ba", "B->A", 0.10))
"""(key, column, the issue's bound on every recording)"""


def record(job: str, out: Path, steps: int, model_dir: Path, seed: int) -> Path:
    """Record one interleaved run of ``job`` (8,4 samples per prompt) into ``out``."""
    command = [sys.executable, str(REPO / "examples" / job / "train.py"), "--model-dir", str(model_dir),
               "--steps", str(2 * steps + 1), "--samples", "8,4", "--lr", "1e-5"]
    if job != "tiny_rl":  # each recording its own draw of the long-tailed workload
        command += ["--seed", str(seed)]
    rltrace_cli = Path(sys.executable).with_name("rltrace")
    done = subprocess.run(
        [str(rltrace_cli), "record", "-o", str(out), "--force", "--model", str(model_dir / "config.json"), "--",
         *command],
        capture_output=True, text=True, check=False,  # a failure is reported below, with its stderr
        env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    if done.returncode != 0:
        raise SystemExit(f"recording {out} failed ({done.returncode}): {done.stderr[-2000:]}")
    return out


def checks(bundle: rltrace.Bundle, replicates: int) -> dict[str, Fidelity]:
    """The four checks of one interleaved recording."""
    small, large = settings(bundle).values()  # steps with 4 and with 8 samples per prompt
    return {"a": as_recorded_error(bundle, steps=large, replicates=replicates),
            "b": as_recorded_error(bundle, steps=small, replicates=replicates),
            "ab": retarget_error(bundle, bundle, source_steps=large, target_steps=small, replicates=replicates),
            "ba": retarget_error(bundle, bundle, source_steps=small, target_steps=large, replicates=replicates)}


def cell(f: Fidelity) -> str:
    low, high = f.interval
    band = "" if np.isnan(low) else f" [{low:+.1%}, {high:+.1%}]"
    return f"{f.error:+.1%}{band} se {f.measured_se:.1%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", choices=JOBS, default="tiny_rl")
    parser.add_argument("--recordings", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10, help="steps per setting (the recording has 2 x steps + 1)")
    parser.add_argument("--replicates", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("/tmp/rltrace_fidelity"))
    parser.add_argument("--reuse", action="store_true", help="replay recordings already under --out")
    args = parser.parse_args()
    print(f"job {args.job}; machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    print(f"{'rec':>3} " + " ".join(f"{name:>34}" for _, name, _ in CHECKS), flush=True)
    rows: list[dict[str, Fidelity]] = []
    for k in range(args.recordings):
        out = args.out / args.job / f"rec{k}"
        if not (args.reuse and (out / "manifest.json").exists()):
            record(args.job, out, args.steps, args.out / "model", seed=k)
        rows.append(checks(rltrace.open(out), args.replicates))
        print(f"{k:>3} " + " ".join(f"{cell(rows[-1][key]):>34}" for key, _, _ in CHECKS), flush=True)
    summary = {}
    for key, name, bound in CHECKS:
        errors = np.array([r[key].error for r in rows])
        widths = np.array([r[key].interval[1] - r[key].interval[0] for r in rows])
        summary[key] = {"median": float(np.median(errors)), "worst_abs": float(np.abs(errors).max()),
                        "within": int((np.abs(errors) <= bound).sum()), "bound": bound,
                        "median_interval_width": float(np.nanmedian(widths)) if np.isfinite(widths).any() else None}
        s = summary[key]
        width = "-" if s["median_interval_width"] is None else f"{s['median_interval_width']:.1%}"
        print(f"{name}: median {s['median']:+.1%}, worst |error| {s['worst_abs']:.1%}, within {bound:.0%} in "
              f"{s['within']}/{len(rows)}, median 90% interval width {width}", flush=True)
    rows_json = [{key: {"error": r[key].error, "interval": list(r[key].interval), "measured_s": r[key].measured_s,
                        "measured_se": r[key].measured_se}
                  for key, _, _ in CHECKS} for r in rows]
    (args.out / args.job).mkdir(parents=True, exist_ok=True)
    (args.out / args.job / "fidelity.json").write_text(json.dumps({"rows": rows_json, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
