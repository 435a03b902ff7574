"""``rltrace advise``: the cheapest configurations that reach a target throughput."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.table import Table

from rltrace.cli.inspect_cmd import resolve_bundle
from rltrace.cli.progress import Bar, stderr
from rltrace.cli.tables import print_table, stdout_console
from rltrace.errors import ConfigError
from rltrace.limits import check_output
from rltrace.replay.advise import Space, advise, load_space
from rltrace.replay.sources import source_devices
from rltrace.replay.sweep.runner import Store

COLUMNS = (("gpu", "GPU", "{}"), ("scheduler", "scheduler", "{}"), ("gen_gpus", "gen", "{}"),
           ("train_gpus", "train", "{}"), ("topology", "fabric", "{}"), ("samples_per_s", "samples/s", "{:.3g}"),
           ("usd_per_hour", "$/h", "{:.2f}"),
           ("usd_per_1k_samples", "$/1k samples", "{:.3f}"), ("bottleneck", "bottleneck", "{}"))


def advise_cmd(
    bundle: Annotated[Path | None, typer.Argument(
        help="Bundle directory or sample name (default: the RollPacker-like sample).")] = None,
    target_throughput: Annotated[float, typer.Option("--target-throughput",
                                                     help="Samples per second to reach.")] = 10.0,
    budget: Annotated[float | None, typer.Option(help="Most USD per hour for the GPUs.")] = None,
    space: Annotated[Path | None, typer.Option(help="Search space TOML (gpu, scheduler, gen_share, total_gpus, "
                                               "topology lists; [fixed] replay parameters); docs/sweeps.md.")] = None,
    top: Annotated[int, typer.Option(help="Configurations to list.")] = 5,
    workers: Annotated[int, typer.Option(help="Local processes.")] = 2,
    ray: Annotated[bool, typer.Option("--ray", help="Run the replays on a local Ray.")] = False,
    output: Annotated[Path | None, typer.Option("--output", "-o",
                                                help="Keep every replay here (reruns skip them).")] = None,
) -> None:
    """Search pool split, GPU kind, scheduler and fabric for the cheapest configurations that reach a
    throughput, and say why the others lost (bottleneck: generation, training or network).

    Example: rltrace advise rollpacker_qwen7b --target-throughput 20 --budget 400
    """
    if budget is not None and not 0 < budget < math.inf:  # also refuses NaN
        raise ConfigError(f"--budget must be a positive number of USD per hour, got {budget:g}")
    if not 0 < target_throughput < math.inf:
        raise ConfigError(f"--target-throughput must be a positive number of samples per second, got "
                          f"{target_throughput:g}")
    if top < 1:
        raise ConfigError(f"--top must be at least 1, got {top}")
    if output is not None:
        check_output(output, "--output", folder=True)
    chosen = load_space(space) if space is not None else Space()
    path = str(resolve_bundle(bundle))
    source_devices(path)
    err = stderr()
    with tempfile.TemporaryDirectory() as tmp, Bar(err, "advise: replaying designs", "replays") as bar:
        advice = advise(path, target_throughput, Store(output or Path(tmp)), chosen, budget=budget, workers=workers,
                        ray=ray, progress=bar.update)
    console = stdout_console()
    title = f"Cheapest configurations reaching {target_throughput:g} samples/s" + (
        f" within ${budget:g}/h" if budget is not None else "")
    if advice.ranked.height:
        print_table(console, _table(advice.ranked.head(top), title, "vs cheapest"), keep=2)
        best = advice.ranked.row(0, named=True)
        console.print(f"cheapest: {best['scheduler']} on {best['gen_gpus']} + {best['train_gpus']} {best['gpu']}"
                      f"{' over ' + best['topology'] if best['topology'] else ''}: "
                      f"{best['samples_per_s']:.3g} samples/s "
                      f"for ${best['usd_per_hour']:.2f}/h", markup=False)
    else:
        console.print(f"no configuration in the space reaches {target_throughput:g} samples/s"
                      + (f" within ${budget:g}/h" if budget is not None else ""), markup=False)
    lost = pl.concat([advice.ranked.slice(top), advice.lost], how="diagonal_relaxed")
    if lost.height:
        print_table(console, _table(lost.head(15), f"Why the other {lost.height} lost (best first)", "why"), keep=2)
        console.print(lost_summary(advice.lost), markup=False)
    console.print(f"{advice.replays} replays", markup=False)


def lost_summary(lost: pl.DataFrame) -> str:
    """One line: how many designs lost for each reason, with the GPU counts they stopped at, e.g. "41 missed
    the target (at 8-128 GPUs); 16 over budget (at 16-64 GPUs); 2 failed"."""
    reasons = lost.select(
        pl.col("why").str.extract(r"^(missed the target|over budget|failed)").fill_null("lost").alias("reason"),
        pl.col("why").str.extract(r" at (\d+) GPUs").cast(pl.Int64).alias("gpus"))
    counts = (reasons.group_by("reason").agg(pl.len().alias("n"), pl.col("gpus").min().alias("lo"),
                                              pl.col("gpus").max().alias("hi"))
              .sort("n", "reason", descending=[True, False]))
    parts = []
    for reason, n, lo, hi in counts.iter_rows():
        where = "" if lo is None else f" (at {lo} GPUs)" if lo == hi else f" (at {lo}-{hi} GPUs)"
        parts.append(f"{n} {reason}{where}")
    return "; ".join(parts)


def _table(frame: pl.DataFrame, title: str, last: str) -> Table:
    table = Table(title=title, title_justify="left")
    for _, header, _ in COLUMNS:
        table.add_column(header, justify="left" if header in ("GPU", "scheduler", "fabric", "bottleneck") else "right")
    table.add_column(last, max_width=40)  # the reason wraps; numbers never do (rltrace/cli/tables.py)
    for row in frame.iter_rows(named=True):  # at most `top` or 15 rows
        table.add_row(*(fmt.format(row[c]) if row[c] is not None else "-" for c, _, fmt in COLUMNS), row["why"])
    return table
