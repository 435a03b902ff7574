"""``rltrace sweep``: a grid of replays, locally or on Ray, into one Parquet and one report."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import polars as pl
import typer
from rich.table import Table

from rltrace.analysis.verdict import three_digits, usd_label
from rltrace.cli.inspect_cmd import resolve_bundle
from rltrace.cli.progress import Bar, stage, stderr
from rltrace.cli.tables import print_notes, print_table, stdout_console
from rltrace.dashboards.report import build_sweep
from rltrace.errors import ConfigError
from rltrace.files import write_text
from rltrace.limits import check_output, check_ray_reachable
from rltrace.replay.sources import source_devices
from rltrace.replay.sweep.grid import check_names, load_grid, point_id
from rltrace.replay.sweep.point import note_counts
from rltrace.replay.sweep.runner import Store, run_sweep
from rltrace.signals import EXIT_TERMINATED, terminate_as_interrupt


def sweep(
    bundle: Annotated[Path, typer.Argument(help="Bundle directory, sample name or described job (.toml).")],
    grid: Annotated[Path, typer.Option(help="Grid TOML: [axes] to combine, [fixed] values (docs/sweeps.md).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Sweep folder: points/, sweep.parquet, report.html.")],
    workers: Annotated[int, typer.Option(help="Local processes (or, with --ray and no address, Ray CPUs).")] = max(
        1, min(os.cpu_count() or 1, 8)),
    ray: Annotated[bool, typer.Option("--ray", help="Run the points as Ray tasks on a local Ray started for the "
                                      "sweep (needs rltrace[ray]).")] = False,
    ray_address: Annotated[str | None, typer.Option(help="Run on the existing Ray cluster at this address "
                                                    "(e.g. ray://head:10001 or auto); implies --ray.")] = None,
) -> None:
    """Replay a bundle at every point of a grid (schedulers x pool splits x GPU kinds x fabrics x seeds...).

    Finished points are kept in OUT/points and skipped on a rerun; a failed point is reported and the others
    go on. Writes OUT/sweep.parquet (one row per point: its parameters, then its metrics) and OUT/report.html.
    Example:

        rltrace sweep rollpacker_qwen7b --grid grid.toml -o sweep --workers 2
    """
    check_output(output, "--output", folder=True)
    if ray_address is not None:
        check_ray_reachable(ray_address)
    points = load_grid(grid).points()
    axes = list(load_grid(grid).axes)
    path = str(resolve_bundle(bundle))
    check_names(points, str(grid), source_devices(path))  # a bad source fails here, once, not in every point
    if not (output / "points").is_dir() and any((output / n).exists() for n in ("sweep.parquet", "report.html")):
        # not a sweep's folder: a report another command wrote here (a dashboard's) would be replaced, or deleted
        # if no point finished
        raise ConfigError(f"--output {output}: holds a report.html or sweep.parquet but no sweep's points; write "
                          "to another folder")
    store = Store(output, path)  # refuses a folder of another source's points
    err = stderr()
    where = f"Ray at {ray_address}" if ray_address else "a local Ray" if ray else f"{workers} local process(es)"
    try:
        with terminate_as_interrupt() as stop, Bar(err, f"sweep: {len(points)} points on {where}", "points") as bar:
            result = run_sweep(path, points, store, workers=workers, ray=ray_address or ray, progress=bar.update)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: every point that finished is kept, say how to go on
        kept = sum(store.done(point_id(p)) for p in points)
        print(f"rltrace: interrupted; {kept} of {len(points)} points are kept in {output / 'points'}: the same "
              "command resumes the sweep", file=sys.stderr)
        if stop.terminated:
            raise typer.Exit(EXIT_TERMINATED) from None
        raise
    frame = store.frame(points)
    named = {point_id(p): ", ".join(f"{k}={p[k]}" for k in axes if k in p) for p in points}
    failed = {f"{pid} ({named.get(pid, '?')})": error for pid, error in result.failed.items()}
    if frame.height:
        with stage(err, f"writing {output / 'sweep.parquet'} and the report"):
            frame.write_parquet(output / "sweep.parquet")
            write_text(output / "report.html", build_sweep(frame, axes, failed))
        print_best(frame, axes)
        wrote = f"wrote {output / 'sweep.parquet'} and {output / 'report.html'}"
    else:  # no point finished: an earlier sweep's table and report would describe another grid
        for stale in (output / "sweep.parquet", output / "report.html"):
            stale.unlink(missing_ok=True)
        wrote = f"no point finished, so no table or report (each failure is in {output / 'points'})"
    print(f"{len(points)} points on {where}: {result.ran} ran, {result.skipped} already done, "
          f"{len(result.failed)} failed; {wrote}")
    for label, error in failed.items():  # by its axes' values, which tell the failed points apart
        print(f"failed {label}: {error}")
    if result.failed:
        print(f"rltrace: {len(result.failed)} of {len(points)} points failed (listed on stdout)", file=sys.stderr)
        raise typer.Exit(1)


BEST = 5
"""points the terminal lists (the report lists more)"""
FIGURES: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("samples_per_s", "samples/s", three_digits), ("run_samples_per_s", "run samples/s", three_digits),
    ("usd_per_hour", "$/h", "{:.2f}".format), ("usd_per_1k_samples", "$/1k samples", usd_label))
"""the terminal's figures: samples/s and $ per 1k samples on the same work (rltrace.replay.work), as the replay
table prints them; the run's own rate beside"""


def print_best(frame: pl.DataFrame, axes: list[str]) -> None:
    """The highest-throughput points (the grid's varied parameters, then throughput and cost), and the point
    cheapest per 1k samples."""
    console = stdout_console()
    ranked = frame.sort("samples_per_s", descending=True, nulls_last=True)
    shown = ranked.head(BEST)
    table = Table(title=f"Best points by samples/s ({shown.height} of {frame.height})", title_justify="left")
    for axis in axes:
        table.add_column(axis, justify="left")
    for _, header, _ in FIGURES:
        table.add_column(header, justify="right")
    for row in shown.iter_rows(named=True):
        table.add_row(*(_value(row.get(a)) for a in axes),
                      *(shown_as(row[c]) if row.get(c) is not None else "-" for c, _, shown_as in FIGURES))
    print_table(console, table, keep=min(len(axes), 2))
    changed = shown.filter(pl.col("work_changed")) if "work_changed" in shown.columns else shown.clear()
    if changed.height:
        console.print(f"changed work: {changed.height} of these points trained another length distribution than "
                      "the workload's own (their samples/s is on the workload's work, extrapolated where short)",
                      markup=False)
    cheapest = frame.filter(pl.col("usd_per_1k_samples") > 0).sort("usd_per_1k_samples").head(1)
    if cheapest.height:
        row = cheapest.row(0, named=True)
        where = ", ".join(f"{a}={_value(row.get(a))}" for a in axes)
        rate, price = row.get("samples_per_s"), row.get("usd_per_hour")
        figures = ", ".join([*([f"{three_digits(rate)} samples/s"] if rate is not None else []),
                             *([f"${price:.2f}/h"] if price is not None else [])])
        other_work = ("; it trained another length distribution than the workload's own (changed work)"
                      if row.get("work_changed") else "")
        console.print(f"cheapest per 1k samples: {where}: ${row['usd_per_1k_samples']:.3f} ({figures}){other_work}",
                      markup=False)
    print_notes(console, note_counts(frame), frame.height, "points")



def _value(value: object) -> str:
    return "-" if value is None or value == "" else str(value)
