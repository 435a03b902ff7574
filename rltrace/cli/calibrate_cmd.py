"""``rltrace calibrate``: fit the cost model's efficiency factors to measured kernel tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from rltrace.replay.costmodels.profile import fit_kernel_tables


def calibrate(
    tables: Annotated[Path, typer.Option(help="Folder of kernel tables (e.g. ../shared/data/kernels/h100).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Profile to write (Parquet).")],
    gpu: Annotated[str, typer.Option(help="GPU kind the tables were measured on.")] = "H100",
    as_json: Annotated[bool, typer.Option("--json", help="Print the profile rows as JSON.")] = False,
) -> None:
    """Fit efficiency factors per TP and regime to measured kernels and write a profile.

    `--profile PROFILE` on `rltrace estimate` and `--set cost.profile=PROFILE` on `rltrace replay` load it.
    Example:

        rltrace calibrate --tables ../shared/data/kernels/h100 -o h100_profile.parquet
    """
    profile = fit_kernel_tables(tables, gpu)
    output.parent.mkdir(parents=True, exist_ok=True)
    profile.write_parquet(output)
    if as_json:
        print(json.dumps(profile.to_dicts(), indent=2))
        return
    table = Table(title=f"Efficiency profile ({gpu}) -> {output}", title_justify="left")
    for col in ("source", "tp", "regime", "efficiency", "kernels", "median error"):
        table.add_column(col, justify="left" if col in ("source", "regime") else "right")
    for row in profile.iter_rows(named=True):
        table.add_row(row["source"], str(row["tp"]), row["regime"], f"{row['efficiency']:.3f}", f"{row['kernels']:,}",
                      f"{row['median_abs_error']:.1%}")
    Console(highlight=False, width=120).print(table)
