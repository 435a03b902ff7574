"""Report size and speed on a million-request run (dashboards issue target: < 10 s into < 15 MB).

    python benchmarks/dashboard_speed.py [--steps 128] [--samples-per-step 8192] [--runs disagg-sync]
        [--browser]

Retargets the default RollPacker-like sample to steps x samples-per-step requests (128 x 8,192 = 1,048,576),
replays it (not timed here: benchmarks/replay_speed.py does), then times the report built from the in-memory
runs (the `rltrace replay --dashboard` path), the same from run folders on disk (`rltrace dashboard`), and
the Perfetto export (plain, and gzipped as `-o trace.json.gz` writes it). With --browser, also the time
Chromium takes from load to every figure drawn.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

from _bench import at_least, run
from rltrace.dashboards import perfetto
from rltrace.dashboards.report import build
from rltrace.replay.loading import Shape, from_bundle
from rltrace.replay.run import CostConfig, ReplayConfig, replay
from rltrace.sample_traces import sample_path

import rltrace
from rltrace.analysis import Run, load_runs
from rltrace.files import write_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=at_least(1), default=128)
    parser.add_argument("--samples-per-step", type=at_least(1), default=8192)
    parser.add_argument("--runs", default="disagg-sync", help="schedulers, comma-separated")
    parser.add_argument("--browser", action="store_true", help="also time the render in headless Chromium")
    args = parser.parse_args()
    bundle = rltrace.open(sample_path())
    prepared = from_bundle(bundle, Shape(steps=args.steps, prompts_per_step=args.samples_per_step // 8,
                                         samples_per_prompt=8, seed=1), CostConfig())
    results = {}
    for name in args.runs.split(","):
        started = time.perf_counter()
        results[name] = replay(prepared, name, ReplayConfig())
        print(f"replayed {name}: {prepared.requests_frame.height:,} requests, {results[name].timeline.height:,} "
              f"timeline rows in {time.perf_counter() - started:.1f} s")
    runs = [Run.from_result(name, result) for name, result in results.items()]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        html = build(runs, bundle)
        in_memory = time.perf_counter() - started
        for name, result in results.items():
            result.write(folder / "runs" / name)
        started = time.perf_counter()
        html_disk = build(load_runs([folder / "runs"]), bundle)
        from_disk = time.perf_counter() - started
        report = folder / "report.html"
        report.write_text(html)
        started = time.perf_counter()
        trace = perfetto.from_run(runs[0]).to_json()
        export_s = time.perf_counter() - started
        started = time.perf_counter()
        packed = write_text(folder / "trace.json.gz", trace)  # what `export perfetto -o x.json.gz` writes
        gzip_s = time.perf_counter() - started
        browser_s = _browser(report) if args.browser else None
    print(f"machine: {platform.machine()}, {platform.processor() or platform.system()}, "
          f"Python {sys.version.split()[0]}")
    print(f"report from memory: {in_memory:.2f} s, {len(html) / 1e6:.1f} MB; from run folders: {from_disk:.2f} s, "
          f"{len(html_disk) / 1e6:.1f} MB (target: < 10 s, < 15 MB)")
    if browser_s is not None:
        print(f"headless Chromium, load to every figure drawn: {browser_s:.1f} s")
    print(f"perfetto export of {runs[0].name}: {export_s:.2f} s, {len(trace) / 1e6:.0f} MB; "
          f"gzipped (-o trace.json.gz): +{gzip_s:.2f} s, {packed / 1e6:.1f} MB")


def _browser(report: Path) -> float:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    # the tests' Chromium driver: playwright is a test extra, so only --browser needs it
    from browser import open_page

    started = time.perf_counter()
    with open_page(report, timeout_ms=600_000) as loaded:
        if loaded.console:
            print("console:", loaded.console)
        return time.perf_counter() - started


if __name__ == "__main__":
    run(main)
