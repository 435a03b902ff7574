"""``rltrace replay-comms``: re-issue every recorded collective on N local ranks; measured vs recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.console import Console
from rich.table import Table

from rltrace.bundle import open_bundle
from rltrace.cli.inspect_cmd import resolve_bundle
from rltrace.errors import ConfigError


def replay_comms(
    bundle: Annotated[Path | None, typer.Argument(help="Bundle directory or sample name.")] = None,
    ranks: Annotated[int, typer.Option(help="Local processes (Gloo on CPU, NCCL on CUDA); recorded ranks fold onto them.")] = 2,
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per operation.")] = False,
) -> None:
    """Re-issue every recorded collective (group, dtype, size, order) on local ranks (needs torch).

    Prints measured beside recorded latency per operation kind and size. Example:

        rltrace replay-comms tiny_rl_cpu --ranks 2
    """
    if device not in ("cpu", "cuda") or ranks < 1:
        raise ConfigError("replay-comms needs --device cpu|cuda and --ranks >= 1")
    # torch is an optional extra: only this command imports it
    from rltrace.replay.execute import comms
    from rltrace.replay.execute.replay_comms import logical_ops

    source = open_bundle(resolve_bundle(bundle))
    ops = logical_ops(source, ranks)
    if ops.height == 0:
        raise ConfigError(f"{source.path}: the bundle records no collectives")
    runnable = ops.filter(pl.col("supported"))
    with Console(stderr=True).status(f"re-issuing {runnable.height} collectives on {ranks} {device} ranks"):
        seconds = comms.run(runnable["op_spec"].to_list(), ranks, device)
    done = runnable.drop("op_spec").with_columns(pl.Series("measured_s", seconds))
    skipped_folded = int(done["measured_s"].is_nan().sum())
    notes = [(f"{ops.height} recorded operations; {int(ops['folded'].sum())} on recorded ranks folded onto {ranks} "
              f"(rank % {ranks}); {skipped_folded} folded onto one rank and not run; "
              f"{ops.height - runnable.height} of unsupported kinds skipped")]
    if as_json:
        for row in done.iter_rows(named=True):
            print(json.dumps({**row, "ranks": list(row["ranks"])}))
        return
    table = Table(title=f"Recorded vs re-issued on {ranks} local {device} ranks (median per operation)", title_justify="left")
    for col in ("op", "dtype", "bytes", "count", "recorded us", "measured us", "measured / recorded"):
        table.add_column(col, justify="left" if col in ("op", "dtype") else "right")
    grouped = done.filter(~pl.col("measured_s").is_nan()).group_by("op", "dtype", "bytes").agg(
        pl.len().alias("n"), pl.col("recorded_s").median(), pl.col("measured_s").median()).sort("op", "bytes")
    for r in grouped.iter_rows(named=True):
        table.add_row(r["op"], r["dtype"], f"{r['bytes']:,}", str(r["n"]), f"{r['recorded_s'] * 1e6:,.1f}",
                      f"{r['measured_s'] * 1e6:,.1f}", f"{r['measured_s'] / r['recorded_s']:.2f}" if r["recorded_s"] else "-")
    console = Console(highlight=False, width=120)
    console.print(table)
    for note in notes:
        console.print(f"note: {note}", markup=False)
