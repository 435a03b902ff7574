"""``rltrace calibrate``: fit the cost model's efficiency factors to measured kernels (public tables, or this
machine's own kernels with ``--device``)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from rltrace import calibration, jsontext
from rltrace.catalog import get_model
from rltrace.cli.extras import needs_torch
from rltrace.cli.progress import stage, stderr, stdout_to_stderr
from rltrace.cli.tables import print_table, stdout_console
from rltrace.errors import ConfigError
from rltrace.files import write_text
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
    model: Annotated[str | None, typer.Option(
        help="With --device: catalog model or config.json whose kernels to measure [default: Qwen2.5-7B].")] = None,
    gpu: Annotated[str | None, typer.Option(
        help="With --tables: GPU kind the tables were measured on [default: H100].")] = None,
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
    check_output(output, "--output")  # a file, in a folder that exists: as every file output, --kernels-out too
    if kernels_out is not None:
        check_output(kernels_out, "--kernels-out")
        if kernels_out.resolve() == output.resolve():  # the profile, written second, replaced the kernels unsaid
            raise ConfigError(f"--kernels-out {kernels_out} is the --output file too: give each its own file")
    if ranks < 1:
        raise ConfigError(f"--ranks must be at least 1 (1: no collectives), got {ranks}")
    check_int("--ranks", ranks, 1, MAX_LOCAL_RANKS, what=" local processes (one per rank, on this machine)")
    if engine is not None and engine != "vllm":
        raise ConfigError(f"--engine {engine!r}: the only engine measured is vllm")
    if (tables is None) == (device is None):
        raise ConfigError("give --tables DIR (public kernel tables) or --device cpu|cuda (measure here), one of them")
    # an option of the other mode would be ignored without a word
    other = ([("--gpu", gpu)] if device is not None else
             [("--model", model), ("--engine", engine), ("--ranks", ranks if ranks > 1 else None)])
    for flag, value in other:
        if value is not None:
            mode = "--tables (--device measures its own device)" if device is not None else "--device, not --tables"
            raise ConfigError(f"{flag} applies with {mode}: drop it")
    model_name, gpu_name = model or "Qwen2.5-7B", gpu or "H100"
    if device is not None:
        if device not in ("cpu", "cuda"):
            raise ConfigError(f"--device must be cpu or cuda, got {device!r}")
        # torch is an optional extra: only this path imports it
        with needs_torch("calibrate --device"):
            from rltrace.replay.execute.calibrate_device import calibrate_device, gemm_tokens
            from rltrace.replay.execute.kernels import check_fits

        engine_dir = None
        if engine is not None:
            engine_dir = model_folder(Path(model_name))
        measured = get_model(model_name)
        # before any measurement, as replay --execute: its GEMMs (no training step; the grid's attention is fitted
        # to what is free)
        check_fits(measured, device, train=False, tokens=max(gemm_tokens(device)))
        # vLLM logs to stdout (its engine process too): the result alone goes there
        err = stderr()
        with stage(err, f"measuring {model_name}'s kernels on {device}"), stdout_to_stderr():
            profile, kernels = calibrate_device(
                measured, device, engine_dir, ranks,
                note=lambda line: err.print(f"rltrace: {line}", markup=False, highlight=False, soft_wrap=True))
        if kernels_out is not None:
            kernels.write_parquet(kernels_out)
        name = profile["gpu"][0]
    else:
        assert tables is not None
        profile, name = fit_kernel_tables(tables, gpu_name), gpu_name
        if kernels_out is not None:  # the public tables converted once to measured-kernel rows
            kernel_tables(tables, gpu_name).write_parquet(kernels_out)
    if output.suffix == ".toml":
        if device is not None:
            command = shlex.join(["rltrace", "calibrate", "--device", device, "--model", model_name,
                                  *(["--engine", engine] if engine else []),
                                  *(["--ranks", str(ranks)] if ranks > 1 else [])])
            data = f"kernels measured on {device} by the command in 'fit'"
        else:
            command = shlex.join(["rltrace", "calibrate", "--tables", str(tables), "--gpu", gpu_name])
            data = f"the kernel tables in {tables}"
        header = (f"Efficiency profile for {name}, written by `{command}`.\n"
                  "Load it with `rltrace estimate --profile FILE` or `rltrace replay --set cost.profile=FILE`.")
        write_text(output, calibration.dumps(profile_entries(profile, command, data), header))
    else:
        profile.write_parquet(output)
    if as_json:
        print(jsontext.dumps(profile.to_dicts(), indent=2))
        return
    table = Table(title=f"Efficiency profile ({name}) -> {output}", title_justify="left")
    for col in ("source", "tp", "regime", "efficiency", "fitted cost", "kernels", "median error"):
        table.add_column(col, justify="left" if col in ("source", "regime", "fitted cost") else "right")
    for row in profile.iter_rows(named=True):
        cost = fitted_cost(row)
        table.add_row(row["source"], str(row["tp"]), row["regime"], "-" if cost else f"{row['efficiency']:.3f}",
                      cost or "-", f"{row['kernels']:,}", f"{row['median_abs_error']:.1%}")
    print_table(stdout_console(), table, keep=3)  # source, tp, regime: which row each figure is


WEIGHTS = ("*.safetensors", "*.bin", "*.pt")
"""weight files a vLLM engine loads from a model folder (one of them must be there)"""
TOKENIZERS = ("tokenizer.json", "tokenizer.model", "vocab.json", "tekken.json")
"""tokenizer files a vLLM engine reads from a model folder (Hugging Face fast or SentencePiece, BPE, Mistral's)"""


def model_folder(config: Path) -> Path:
    """The folder of ``config`` (a model's config.json) when it holds what a vLLM engine loads: weights and a
    tokenizer; else a ConfigError naming what is missing (found only after the kernels' measurement, as a
    traceback)."""
    if not config.is_file():
        raise ConfigError("--engine vllm needs --model PATH/config.json of a model folder with its weights")
    folder = config.parent
    if not any(next(folder.glob(pattern), None) for pattern in WEIGHTS):
        raise ConfigError(f"--engine vllm: {folder} holds no weights ({_either(WEIGHTS)}) beside its config.json")
    if not any((folder / name).is_file() for name in TOKENIZERS):
        raise ConfigError(f"--engine vllm: {folder} holds no tokenizer ({_either(TOKENIZERS)}) beside its "
                          "config.json")
    return folder


def _either(names: tuple[str, ...]) -> str:
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]


def fitted_cost(row: dict[str, Any]) -> str:
    """What an engine or collective row fitted instead of an efficiency, as the docs quote it ("1.9 ms + 74 us x
    batch", "3.9 ms + 2.6 GB/s"); empty for a kernel row."""
    base = row.get("overhead_base_s")
    if base is None:
        return ""
    if row.get("bytes_per_s") is not None:
        return f"{base * 1e3:.3g} ms + {row['bytes_per_s'] / 1e9:.3g} GB/s"
    return f"{base * 1e3:.3g} ms + {(row.get('overhead_per_seq_s') or 0.0) * 1e6:.3g} us x batch"
