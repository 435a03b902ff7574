"""``rltrace dashboard``: one self-contained HTML report comparing replay runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rltrace.analysis.runs import load_runs
from rltrace.analysis.verdict import Objective
from rltrace.bundle import open_bundle
from rltrace.cli.inspect_cmd import resolve_bundle
from rltrace.cli.progress import stage, stderr
from rltrace.dashboards.report import ReportConfig, build
from rltrace.errors import ConfigError
from rltrace.files import write_text
from rltrace.limits import check_output


def dashboard(
    runs: Annotated[list[Path], typer.Argument(help="Run folders (from `rltrace replay -o OUT`), or OUT itself.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="HTML file to write.")] = Path("report.html"),
    bundle: Annotated[Path | None, typer.Option(help="The replayed bundle (or sample name): adds what it "
                                                "recorded (collectives, weight-sync flows, request latency).")] = None,
    baseline: Annotated[str | None, typer.Option(help="Run (its label, folder or scheduler name) the others are "
                                                 "compared to (default: the first).")] = None,
    max_segments: Annotated[int, typer.Option(help="Timeline intervals drawn per run; more are aggregated.")] = 20_000,
    title: Annotated[str, typer.Option(help="Page title.")] = "rltrace report",
    objective: Annotated[str, typer.Option(
        help="What the first screen picks the run for: throughput (most samples/s on the same work) or cost "
             "(lowest $ per 1k samples).")] = "throughput",
    max_staleness: Annotated[int | None, typer.Option(help="Only runs whose samples lag at most this many weight "
                                                      "versions at training (0: on-policy).")] = None,
    same_distribution: Annotated[bool, typer.Option(
        "--same-distribution/--any-distribution",
        help="Lead with a run that trained the recorded samples and tokens, their length distribution unchanged "
             "(default); --any-distribution lets a run that changed the trained work lead.")] = True,
) -> None:
    """Compare replay runs in one HTML file that works offline.

    Its first screen names the run to choose for
    an objective and why, every run on the same work (the recorded samples and tokens); then bubbles,
    timelines, output lengths, per-instance load, request latency, network.

    Example: rltrace replay -s all -o runs && rltrace dashboard runs --bundle rollpacker_qwen7b -o report.html
    """
    check_output(output, "--output")
    goal = Objective(goal=objective, max_staleness=max_staleness, same_distribution=same_distribution)
    limits = ReportConfig(max_segments=max_segments)  # before the runs are read
    err = stderr()
    with stage(err, "reading runs"):
        loaded = load_runs(runs)
        source = open_bundle(resolve_bundle(bundle)) if bundle is not None else None
    replayed = {run.config.get("source", {}).get("run_id") for run in loaded if isinstance(run.config, dict)
                and isinstance(run.config.get("source"), dict)} - {None}
    if source is not None and replayed and source.manifest.run_id not in replayed:
        # its recorded figures would be shown beside runs of another workload
        raise ConfigError(f"--bundle {bundle} is the recording {source.manifest.run_id!r}, not the one the runs "
                          f"replayed ({', '.join(sorted(map(repr, replayed)))}); give that one, or no --bundle")
    with stage(err, f"building the report of {len(loaded)} run(s)"):
        html = build(loaded, source, baseline, limits, title=title, objective=goal)
    write_text(output, html)
    print(f"wrote {output} ({len(html) / 1e6:.1f} MB, {len(loaded)} run(s))")
