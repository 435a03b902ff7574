"""``rltrace replay-comms``: re-issue every recorded collective on N local ranks; measured vs recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.table import Table

from rltrace import jsontext
from rltrace.bundle import open_bundle
from rltrace.cli.extras import needs_torch
from rltrace.cli.inspect_cmd import resolve_bundle
from rltrace.cli.progress import Bar, stderr
from rltrace.cli.tables import print_table, stdout_console
from rltrace.errors import ConfigError
from rltrace.limits import MAX_LOCAL_RANKS, check_int


def replay_comms(
    bundle: Annotated[Path | None, typer.Argument(
        help="Bundle directory or sample name (default: the RollPacker-like sample).")] = None,
    ranks: Annotated[int, typer.Option(
        help="Local processes (Gloo on CPU, NCCL on CUDA); recorded ranks fold onto them.")] = 2,
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per operation.")] = False,
) -> None:
    """Re-issue every recorded collective (group, dtype, size, order) on local ranks (needs torch).

    Prints measured beside recorded latency per operation kind, size and group size (a recorded group folded onto
    fewer local ranks shows both: "16 -> 2"), then what was run, folded onto the local ranks and skipped (with the
    reason), overall and per process group. Example:

        rltrace replay-comms tiny_rl_cpu --ranks 2
    """
    if device not in ("cpu", "cuda"):
        raise ConfigError(f"--device must be cpu or cuda, got {device!r}")
    check_int("--ranks", ranks, 2, MAX_LOCAL_RANKS, what=" local processes (one per rank, on this machine)")
    # torch is an optional extra: only this command imports it
    with needs_torch("replay-comms"):
        from rltrace.replay.execute import comms
        from rltrace.replay.execute.replay_comms import logical_ops, report

    source = open_bundle(resolve_bundle(bundle))
    ops = logical_ops(source, ranks)
    if ops.height == 0:
        raise ConfigError(f"{source.path}: the bundle records no collectives")
    runnable = ops.filter(pl.col("skip").is_null())
    with Bar(stderr(), f"re-issuing {runnable.height} collectives on {ranks} {device} ranks", "operations",
             announce=True) as bar:
        seconds = comms.run(runnable["op_spec"].to_list(), ranks, device, progress=bar.update)
    measured = pl.Series("measured_s", [float("nan")] * ops.height)
    measured = measured.scatter(ops.with_row_index("i").filter(pl.col("skip").is_null())["i"], seconds)
    run_ranks = pl.Series("run_ranks", [len(o.ranks) for o in ops["op_spec"].to_list()], dtype=pl.Int32)
    done = ops.drop("op_spec").with_columns(measured, run_ranks)
    notes = report(ops, ranks)
    unmeasured = int(done.filter(pl.col("skip").is_null())["measured_s"].is_nan().sum())
    if unmeasured:
        notes.append(f"{unmeasured} operations ran but returned no timing")
    if as_json:
        for row in done.iter_rows(named=True):
            skipped = row["measured_s"] != row["measured_s"]  # NaN: not run (its skip says why)
            measured_s = None if skipped else row["measured_s"]
            print(jsontext.dumps({**row, "ranks": list(row["ranks"]), "measured_s": measured_s}))
        for note in notes:
            typer.echo(f"note: {note}", err=True)
        return
    table = Table(title=f"Recorded vs re-issued on {ranks} local {device} ranks (median per operation)",
                  title_justify="left")
    for col in ("op", "dtype", "bytes", "ranks", "operations", "recorded us", "measured us", "measured / recorded"):
        table.add_column(col, justify="left" if col in ("op", "dtype", "ranks") else "right")
    # a folded group runs on fewer ranks than recorded (an all-gather gathers less): its row says so
    grouped = (done.filter(pl.col("skip").is_null())
               .with_columns(pl.col("ranks").list.len().alias("recorded_ranks"))
               .group_by("op", "dtype", "bytes", "recorded_ranks", "run_ranks")
               .agg(pl.len().alias("n"), pl.col("recorded_s").median(), pl.col("measured_s").median())
               .sort("op", "bytes", "recorded_ranks"))
    for r in grouped.iter_rows(named=True):
        folded = r["recorded_ranks"] != r["run_ranks"]
        table.add_row(r["op"], r["dtype"], f"{r['bytes']:,}",
                      f"{r['recorded_ranks']} -> {r['run_ranks']}" if folded else str(r["run_ranks"]), str(r["n"]),
                      f"{r['recorded_s'] * 1e6:,.1f}" if r["recorded_s"] else "-", f"{r['measured_s'] * 1e6:,.1f}",
                      f"{r['measured_s'] / r['recorded_s']:.2f}" if r["recorded_s"] else "-")
    console = stdout_console()
    print_table(console, table)
    for note in notes:
        console.print(f"note: {note}", markup=False, soft_wrap=True)
