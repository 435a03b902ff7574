"""``rltrace import``: traces recorded by other tools (Kineto, execution traces, request logs) as a bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rltrace.bundle import save_bundle
from rltrace.catalog import get_gpu
from rltrace.cli.options import refuse_unused
from rltrace.cli.progress import Bar, stage, stderr
from rltrace.collectors.importers import ImportOptions, importer, names
from rltrace.collectors.importers.base import window_ns
from rltrace.errors import ConfigError
from rltrace.limits import check_int, check_output
from rltrace.manifest import MAX_GPUS


def _mapping(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    pairs = [p.partition("=") for p in text.split(",") if p.strip()]
    if any(not eq or not k.strip() or not v.strip() for k, eq, v in pairs):
        raise ConfigError(f"--map {text!r}: expected arrival=COL,prompt=COL,output=COL")
    return {k.strip(): v.strip() for k, _, v in pairs}


READERS = {"engines": ["azure-llm", "csv", "mooncake"], "window_s": ["azure-llm", "csv", "mooncake", "sglang"],
           "map_": ["csv"], "time_unit": ["csv"]}
"""the source kinds each request-log option applies to (the others would ignore it without a word)"""


def import_cmd(
    ctx: typer.Context,
    kind: Annotated[str, typer.Argument(help=f"Source kind: {', '.join(names())}.")],
    files: Annotated[list[Path], typer.Argument(help="Source files (several: one per rank, or concatenated logs).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Bundle directory to write.")],
    model: Annotated[str | None, typer.Option(help="Catalog model the trace ran (for replay).")] = None,
    gpu: Annotated[str | None, typer.Option(help="GPU kind of the pools (for replay).")] = None,
    engines: Annotated[int, typer.Option(help="Request logs: generation instances to spread requests over.")] = 1,
    window_s: Annotated[float | None, typer.Option(help="Request logs: one step per window of arrival time.")] = None,
    map_: Annotated[str | None, typer.Option("--map", help="csv: arrival=COL,prompt=COL,output=COL.")] = None,
    time_unit: Annotated[str, typer.Option(help="csv: unit of the arrival column: s, ms, us, ns or datetime.")] = "s",
    force: Annotated[bool, typer.Option("--force", help="Replace an existing bundle.")] = False,
) -> None:
    """Import traces recorded elsewhere into a bundle, noting in its manifest what was inferred.

    Example: rltrace import azure-llm AzureLLMInferenceTrace_code.csv -o azure_code --model Llama-2-7B --gpu H100
    """
    chosen = importer(kind)
    refuse_unused(ctx, "import", kind, READERS)
    check_output(output, "--output", folder=True, bundle=True)
    check_int("--engines", engines, 1, MAX_GPUS, what=" (a pool's most devices: the manifest's limit)")
    if window_s is not None:
        window_ns(window_s)
    if gpu is not None:
        get_gpu(gpu)  # an unknown kind is refused here, not when the bundle is replayed
    options = ImportOptions(model=model, gpu=gpu, engines=engines, window_s=window_s, mapping=_mapping(map_),
                            time_unit=time_unit)
    err = stderr()
    with Bar(err, f"import {kind}: reading {len(files)} file(s)", "bytes") as bar:
        result = chosen(files, options, bar.update)
    if not any(table.height for table in result.tables.values()):  # nothing to replay: say why, write nothing
        why = "; ".join(f"{n} skipped: {reason}" for reason, n in sorted(result.skipped.items()))
        raise ConfigError(f"no usable rows in {', '.join(str(f) for f in files)}{f' ({why})' if why else ''}")
    manifest = result.manifest(kind, files, options)
    with stage(err, f"writing {output}"):
        written = save_bundle(output, manifest, result.tables, overwrite=force)
    rows = ", ".join(f"{n} {t}" for t, n in written.tables.items() if n)
    print(f"wrote {output}: {rows or 'no rows'}")
    for why, n in sorted(result.skipped.items()):
        print(f"skipped {n} event(s): {why}")
