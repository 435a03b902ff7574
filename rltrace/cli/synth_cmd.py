"""``rltrace synth``: write a seeded synthetic workload as a trace bundle."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from rltrace.bundle import save_bundle
from rltrace.cli.progress import stage, stderr
from rltrace.limits import check_output
from rltrace.synth import load_config, memory_notes, presets, synthesize, unused


def synth(
    output: Annotated[Path, typer.Option("-o", "--output", help="Bundle directory to write.")],
    preset: Annotated[
        str | None, typer.Option(help=f"Built-in workload: {', '.join(presets())}.")
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", help="TOML file with synth parameters.")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a parameter, e.g. output.median=800 (repeatable).")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed (overrides the config's).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing bundle at --output.")] = False,
) -> None:
    """Generate a synthetic RL workload (lengths, timestamps, collectives, weight syncs) as a bundle.

    The same parameters and seed always give byte-identical files. Parameters and the timing model: docs/synth.md.

    Example: rltrace synth --preset rollpacker --set steps=20 --seed 3 -o my_trace
    """
    check_output(output, "--output", folder=True, bundle=True)
    err = stderr()
    started = time.perf_counter()
    cfg = load_config(preset=preset, path=config, sets=set_ or [], seed=seed)
    for note in [*unused(cfg), *memory_notes(cfg)]:
        print(f"rltrace: note: {note}", file=sys.stderr)
    with stage(err, f"synthesizing {cfg.steps} steps x {cfg.prompts_per_step * cfg.samples_per_prompt} samples"):
        result = synthesize(cfg)
        written = save_bundle(output, result.manifest, result.tables, overwrite=force)
    rows = ", ".join(f"{v:,} {k}" for k, v in written.tables.items())
    print(f"wrote {output}: {rows} ({time.perf_counter() - started:.2f} s)", file=sys.stderr)
