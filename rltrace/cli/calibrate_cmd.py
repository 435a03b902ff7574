"""``rltrace calibrate``: fit the cost model's efficiency factors to measured kernels (public tables, or this
machine's own kernels with ``--device``)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from rltrace import calibration, jsontext
from rltrace.catalog import get_model
from rltrace.cli.extras import needs_torch
from rltrace.cli.progress import stage, stderr
from rltrace.cli.tables import print_table, stdout_console
from rltrace.errors import ConfigError
from rltrace.limits import MAX_LOCAL_RANKS, check_int, check_output
from rltrace.replay.costmodels.profile import fit_kernel_tables, kernel_tables, profile_entries


def calibrate(
    output: Annotated[Path, typer.Option("--output", "-o", help=(
        "Profile to write: a calibration file (.toml, the shipped calibration's format) or Parquet (any other "
        "suffix)."))],
    tables: Annotated[Path | None, typer.Option(
        help="Folder of kernel tables (e.g. ../shared/data/kernels/h100).")] = None,
    device: Annotated[str | None, typer.Option(
        help="Measure the model's kernels here instead: cpu or cuda (needs torch).")] = None,
    model: Annotated[str, typer.Option(
        help="With --device: catalog model or config.json whose kernels to measure.")] = "Qwen2.5-7B",
    gpu: Annotated[str, typer.Option(help="With --tables: GPU kind the tables were measured on.")] = "H100",
    engine: Annotated[str | None, typer.Option(
        help="With --device: also measure a serving engine's per-iteration overhead (vllm; --model must be a model "
             "folder's config.json).")] = None,
    ranks: Annotated[int, typer.Option(help="With --device: also time collectives by size on this many local "
                                         "processes (1: none).")] = 1,
    kernels_out: Annotated[Path | None, typer.Option(
        help="Also write every kernel (measured here, or the public tables converted) as Parquet.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the profile rows as JSON.")] = False,
) -> None:
    """Fit efficiency factors per TP and regime to measured kernels and write a profile.

    `--profile PROFILE` on `rltrace estimate` and `--set cost.profile=PROFILE` on `rltrace replay` load it. A profile
    measured with `--device cpu` also carries this CPU's measured peaks, so replays can model a `cpu` device. Example:

        rltrace calibrate --tables ../shared/data/kernels/h100 -o h100_profile.toml
        rltrace calibrate --device cpu --model my_model/config.json --engine vllm -o cpu_profile.toml
    """
    check_output(output, "--output", make_parents=True)
    if kernels_out is not None:
        check_output(kernels_out, "--kernels-out")
    if ranks < 1:
        raise ConfigError(f"--ranks must be at least 1 (1: no collectives), got {ranks}")
    check_int("--ranks", ranks, 1, MAX_LOCAL_RANKS, what=" local processes (one per rank, on this machine)")
    if engine is not None and engine != "vllm":
        raise ConfigError(f"--engine {engine!r}: the only engine measured is vllm")
    if (tables is None) == (device is None):
        raise ConfigError("give --tables DIR (public kernel tables) or --device cpu|cuda (measure here), one of them")
    if device is not None:
        if device not in ("cpu", "cuda"):
            raise ConfigError(f"--device must be cpu or cuda, got {device!r}")
        # torch is an optional extra: only this path imports it
        with needs_torch("calibrate --device"):
            from rltrace.replay.execute.calibrate_device import calibrate_device

        engine_dir = None
        if engine is not None:
            if not Path(model).is_file():
                raise ConfigError("--engine vllm needs --model PATH/config.json of a model folder with its weights")
            engine_dir = Path(model).parent
        with stage(stderr(), f"measuring {model}'s kernels on {device}"):
            profile, kernels = calibrate_device(get_model(model), device, engine_dir, ranks)
        if kernels_out is not None:
            kernels.write_parquet(kernels_out)
        name = profile["gpu"][0]
    else:
        assert tables is not None
        profile, name = fit_kernel_tables(tables, gpu), gpu
        if kernels_out is not None:  # the public tables converted once to measured-kernel rows
            kernel_tables(tables, gpu).write_parquet(kernels_out)
    output.parent.mkdir(parents=True, exist_ok=True)
    if output.suffix == ".toml":
        if device is not None:
            command = shlex.join(["rltrace", "calibrate", "--device", device, "--model", model,
                                  *(["--engine", engine] if engine else []),
                                  *(["--ranks", str(ranks)] if ranks > 1 else [])])
            data = f"kernels measured on {device} by the command in 'fit'"
        else:
            command = shlex.join(["rltrace", "calibrate", "--tables", str(tables), "--gpu", gpu])
            data = f"the kernel tables in {tables}"
        header = (f"Efficiency profile for {name}, written by `{command}`.\n"
                  "Load it with `rltrace estimate --profile FILE` or `rltrace replay --set cost.profile=FILE`.")
        output.write_text(calibration.dumps(profile_entries(profile, command, data), header), encoding="utf-8")
    else:
        profile.write_parquet(output)
    if as_json:
        print(jsontext.dumps(profile.to_dicts(), indent=2))
        return
    table = Table(title=f"Efficiency profile ({name}) -> {output}", title_justify="left")
    for col in ("source", "tp", "regime", "efficiency", "kernels", "median error"):
        table.add_column(col, justify="left" if col in ("source", "regime") else "right")
    for row in profile.iter_rows(named=True):
        table.add_row(row["source"], str(row["tp"]), row["regime"], f"{row['efficiency']:.3f}", f"{row['kernels']:,}",
                      f"{row['median_abs_error']:.1%}")
    print_table(stdout_console(), table)
