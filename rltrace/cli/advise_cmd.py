"""``rltrace advise``: the cheapest configurations that reach a target throughput."""

from __future__ import annotations

import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import polars as pl
import typer
from rich.table import Table

from rltrace.analysis.verdict import three_digits, usd_label
from rltrace.cli.inspect_cmd import resolve_bundle
from rltrace.cli.progress import Bar, stderr
from rltrace.cli.tables import print_notes, print_table, stdout_console
from rltrace.errors import ConfigError
from rltrace.limits import check_output
from rltrace.replay.advise import Advice, Space, advise, load_space
from rltrace.replay.advise_verdict import FAILED, MET, MISSED, OUTCOMES
from rltrace.replay.sources import source_devices
from rltrace.replay.sweep.runner import Store
from rltrace.scalars import integer

COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("gpu", "GPU", str), ("scheduler", "scheduler", str), ("gen_gpus", "gen", str), ("train_gpus", "train", str),
    ("fabric", "fabric", str), ("samples_per_s", "samples/s", three_digits),  # as every view prints it
    ("usd_per_hour", "$/h", "{:.2f}".format), ("usd_per_1k_samples", "$/1k samples", usd_label),
    ("work", "work", str))
BOUNDS = {"samples_per_s": ("samples_per_s_max", "≤{:.3g}"), "usd_per_hour": ("usd_per_hour_min", "≥{:.2f}")}
"""a column without a replay shows the bound that decided the design instead"""
LEFT = ("GPU", "scheduler", "fabric", "work")


def advise_cmd(
    bundle: Annotated[Path | None, typer.Argument(
        help="Bundle directory, sample name or described job (.toml) (default: the RollPacker-like sample).")] = None,
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
    exhaustive: Annotated[bool, typer.Option("--exhaustive", help="Replay every design at every GPU count up to "
                                             "the one that meets the target: no price floor or trainer bound rules "
                                             "a candidate out (slower; a check of the search).")] = False,
) -> None:
    """Find the cheapest pool split, GPU kind, scheduler and fabric that reach a throughput.

    Says why the others lost, with the bottleneck of each (generation-, trainer-, sync-bound...).
    Throughput is samples/s on the recorded work, as `rltrace replay` and the report show it: a scheduler that
    trains shorter samples first is timed until it has trained as many samples and tokens as were recorded.

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
    designs = len(chosen.designs())
    with tempfile.TemporaryDirectory() as tmp, Bar(err, f"advise: {designs} designs", "decided") as bar:
        advice = advise(path, target_throughput, Store(output or Path(tmp), path), chosen, budget=budget, top=top,
                        workers=workers, ray=ray, progress=bar.update, exhaustive=exhaustive)
    console = stdout_console()
    title = f"Cheapest configurations reaching {target_throughput:g} samples/s" + (
        f" within ${budget:g}/h" if budget is not None else "") + " (samples/s on the workload's same work)"
    if advice.ranked.height:
        print_table(console, _table(advice.ranked.head(top), title, "limit", "bound by"), keep=2)
        best = advice.ranked.row(0, named=True)
        pools = (f"{best['total_gpus']}" if best["gen_gpus"] == best["train_gpus"] == best["total_gpus"]  # colocated
                 else f"{best['gen_gpus']} + {best['train_gpus']}")
        console.print(f"cheapest: {best['scheduler']} on {pools} {best['gpu']} ({best['fabric']}): "
                      f"{three_digits(best['samples_per_s'])} samples/s for ${best['usd_per_hour']:.2f}/h"
                      + (f"; {best['limit']}" if best["limit"] else ""), markup=False, soft_wrap=True)
    else:
        console.print(f"no configuration in the space reaches {target_throughput:g} samples/s"
                      + (f" within ${budget:g}/h" if budget is not None else ""), markup=False, soft_wrap=True)
    # what the replays of the designs that met the target say beside their figures (as `rltrace replay` would)
    print_notes(console, advice.replay_notes, advice.ranked.height, "designs that met the target",
                report=False)  # advise writes no report: every note here
    lost = pl.concat([advice.ranked.slice(top), advice.lost], how="diagonal_relaxed")
    if lost.height:
        print_table(console, _table(lost.head(15), f"Why the other {lost.height} lost (best first)", "why", "why"),
                    keep=2)
        console.print(lost_summary(lost), markup=False, soft_wrap=True)
    for note in advice.notes:
        console.print(f"note: {note}", markup=False, soft_wrap=True)
    console.print(search_summary(advice, exhaustive), markup=False, soft_wrap=True)
    if advice.failed and advice.failed == advice.replays and not advice.ranked.height:  # no answer, only errors
        print(f"rltrace: every one of the {advice.replays} replays failed (the table above says why)", file=sys.stderr)
        raise typer.Exit(1)


def search_summary(advice: Advice, exhaustive: bool) -> str:
    """One line: designs, replays (reused and failed ones), and candidates ruled out without a replay."""
    line = f"{advice.designs} design{'s' * (advice.designs != 1)}, {advice.replays} replay{'s' * (advice.replays != 1)}"
    extra = [f"{n} {what}" for n, what in ((advice.reused, "reused from --output"), (advice.failed, "failed")) if n]
    line += f" ({', '.join(extra)})" if extra else ""
    if exhaustive:
        return line + "; every candidate replayed (--exhaustive)"
    return (line + f"; {advice.ruled_out} candidate{'s' * (advice.ruled_out != 1)} ruled out by a price floor or "
            "trainer bound without a replay (--exhaustive replays them)")


def lost_summary(lost: pl.DataFrame) -> str:
    """One line: how many designs lost each way, with the GPU counts they stopped at, e.g. "3 met the target for
    more $/h; 60 priced out (at 16-32 GPUs); 41 missed the target (at 128 GPUs, 30 by the trainer bound alone)".
    The counts add up to ``lost.height``."""
    parts = []
    for kind in OUTCOMES:
        mine = lost.filter(pl.col("outcome") == kind)
        if not mine.height:
            continue
        lo, hi = integer(mine["total_gpus"].min()), integer(mine["total_gpus"].max())
        where = [f"at {lo} GPUs" if lo == hi else f"at {lo}-{hi} GPUs"] if kind != FAILED else []
        alone = mine.filter(~pl.col("replayed")).height
        if kind == MISSED and alone:
            where.append(f"{alone} by the trainer bound alone")
        label = "met the target for more $/h" if kind == MET else kind
        parts.append(f"{mine.height} {label}" + (f" ({', '.join(where)})" if where and kind != MET else ""))
    return "; ".join(parts)


def _table(frame: pl.DataFrame, title: str, last: str, header: str) -> Table:
    table = Table(title=title, title_justify="left")
    for _, name, _ in COLUMNS:
        table.add_column(name, justify="left" if name in LEFT else "right")
    table.add_column(header, max_width=44)  # the reason wraps; numbers never do (rltrace/cli/tables.py)
    for row in frame.iter_rows(named=True):  # at most `top` or 15 rows
        table.add_row(*(_cell(row, column, fmt) for column, _, fmt in COLUMNS), row[last] or "")
    return table


def _cell(row: dict[str, object], column: str, shown_as: Callable[[Any], str]) -> str:
    if row[column] is not None:
        return shown_as(row[column])
    bound, shown = BOUNDS.get(column, ("", ""))
    return shown.format(row[bound]) if bound and row.get(bound) is not None else "-"
