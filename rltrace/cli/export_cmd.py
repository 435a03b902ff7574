"""``rltrace export perfetto``: a run or a bundle as Chrome trace-event JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rltrace.analysis.runs import load_run
from rltrace.bundle import open_bundle
from rltrace.cli.inspect_cmd import resolve_bundle
from rltrace.cli.progress import stage, stderr
from rltrace.dashboards import perfetto as perfetto_trace
from rltrace.errors import BundleError
from rltrace.files import write_text
from rltrace.limits import check_output

export = typer.Typer(help="Convert a run or a bundle for other tools. Example: rltrace export perfetto "
                          "runs/rollpacker -o trace.json", no_args_is_help=True)


@export.command("perfetto")
def perfetto(
    source: Annotated[Path, typer.Argument(
        help="A run folder (from `rltrace replay -o`), a bundle, or a sample name.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="JSON file to write; a name ending in .gz is "
                                         "gzip-compressed (Perfetto and chrome://tracing open it as it is).")
                      ] = Path("trace.json"),
) -> None:
    """Write Chrome trace-event JSON that opens in ui.perfetto.dev and chrome://tracing: a process per
    actor or rank, a thread per role, counters for running requests (and a bundle's waiting ones) and a run's
    link utilisation.

    Example: rltrace export perfetto runs/rollpacker -o rollpacker.json.gz
    """
    check_output(output, "--output")
    with stage(stderr(), f"converting {source} to trace events"):
        if (source / "metrics.json").is_file():
            trace = perfetto_trace.from_run(load_run(source))
        else:
            trace = perfetto_trace.from_bundle(open_bundle(resolve_bundle(source)))
        if not trace.events:  # an empty timeline is no answer: say so rather than write one
            raise BundleError(f"{source}: nothing to draw (no spans, requests, collectives or weight syncs); "
                              f"{output} not written")
        text = trace.to_json()
    size = write_text(output, text)
    instants = f", {trace.instants.height:,} arrivals without a finish time" if trace.instants.height else ""
    packed = " gzip-compressed" if output.name.endswith(".gz") else ""
    print(f"wrote {output} ({size / 1e6:.1f} MB{packed}, {trace.spans.height:,} spans, "
          f"{trace.counters.height:,} counter samples{instants})")
