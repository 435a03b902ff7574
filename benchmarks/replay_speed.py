"""Replay speed: requests replayed per second of wall time, and how it grows with trace size.

    python benchmarks/replay_speed.py [--steps 100] [--samples-per-step 8192] [--scheduler disagg-sync] [--scaling]

Retargets the default RollPacker-like sample to the given shape (resampled lengths, seeded), then times
the event loop alone and the whole replay (loop + timeline + metrics) on one core. Target (replay-engine
issue): >= 200k requests/s, a 100-step x 8,192-sample trace in < 5 s.
"""

from __future__ import annotations

import argparse
import platform
import time

from _bench import at_least, run
from rltrace.replay.loading import Shape, from_bundle
from rltrace.replay.run import CostConfig, ReplayConfig, replay
from rltrace.sample_traces import sample_path

import rltrace


def one(steps: int, per_step: int, scheduler: str) -> dict[str, float]:
    bundle = rltrace.open(sample_path())
    prompts = per_step // 8
    prepared = from_bundle(bundle, Shape(steps=steps, prompts_per_step=prompts, samples_per_prompt=8, seed=1),
                           CostConfig())
    n = prepared.requests_frame.height
    started = time.perf_counter()
    result = replay(prepared, scheduler, ReplayConfig())
    total = time.perf_counter() - started
    return {"requests": n, "events": result.events, "loop_s": result.wall_s, "total_s": total,
            "loop_req_per_s": n / result.wall_s, "total_req_per_s": n / total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=at_least(1), default=100)
    parser.add_argument("--samples-per-step", type=at_least(1), default=8192)
    parser.add_argument("--scheduler", default="disagg-sync")
    parser.add_argument("--scaling", action="store_true", help="also time 1/8, 1/4 and 1/2 of the steps")
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    sizes = [args.steps // 8, args.steps // 4, args.steps // 2, args.steps] if args.scaling else [args.steps]
    print(f"{'steps':>6} {'requests':>10} {'events':>10} {'loop s':>8} {'total s':>8} "
          f"{'loop req/s':>11} {'total req/s':>11}")
    for steps in sizes:
        r = one(max(steps, 1), args.samples_per_step, args.scheduler)
        print(f"{max(steps, 1):>6} {r['requests']:>10,} {r['events']:>10,} {r['loop_s']:>8.2f} {r['total_s']:>8.2f} "
              f"{r['loop_req_per_s']:>11,.0f} {r['total_req_per_s']:>11,.0f}")


if __name__ == "__main__":
    run(main)
