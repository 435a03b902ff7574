"""``rltrace inspect``: summarise a trace bundle, as rich tables or as JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from rltrace import jsontext
from rltrace.bundle import open_bundle
from rltrace.cli.tables import print_table, stdout_console
from rltrace.errors import clean
from rltrace.sample_traces import resolve
from rltrace.summary import Summary, summarize

MAX_STEP_ROWS = 24
MAX_CELL_CHARS = 200
"""A trace string longer than this is cut in a table cell (a 10^6-character phase name stays one line)."""


def resolve_bundle(path: Path | None) -> Path:
    """No path: the default sample. A bare sample name that is not a local path: that sample."""
    return resolve(path)


def inspect(
    bundle: Annotated[
        Path | None,
        typer.Argument(help="Bundle directory or sample name (default: the bundled RollPacker-like sample)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (keys in docs/inspect.md).")] = False,
) -> None:
    """Summarise a trace bundle: tables, per-step requests, output-length tail, collectives, weight syncs, phases.

    Example: rltrace inspect streamrl_qwen32b --json  (a shipped sample by name, or a bundle folder)
    """
    summary = summarize(open_bundle(resolve_bundle(bundle)))
    if as_json:
        print(jsontext.dumps(summary.to_json(), indent=2))
    else:
        render(summary, stdout_console())


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB"):
        if abs(n) < 1024 or unit == "ZiB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    raise AssertionError("unreachable")


def _count(n: float) -> str:
    """A parameter count people read: 7.62B, 12.3M, 45.1K, 850."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:,.0f}"


def _table(title: str, frame: pl.DataFrame, formats: dict[str, str] | None = None) -> Table:
    table = Table(title=Text(title), title_justify="left", title_style="bold")
    formats = formats or {}
    for name, dtype in frame.schema.items():
        table.add_column(name, justify="right" if dtype.is_numeric() else "left")
    for row in frame.iter_rows():
        cells = []
        for name, value in zip(frame.columns, row):
            fmt = formats.get(name)
            if value is None:
                cells.append("-")
            elif fmt == "bytes":
                cells.append(_bytes(value))
            elif fmt:
                cells.append(format(value, fmt))
            else:
                cells.append(str(value))
        # cells are Text, never markup: a phase named '[/x]' is printed as it is, control characters escaped
        table.add_row(*(Text(clean(c, MAX_CELL_CHARS)) for c in cells))
    return table


def render(s: Summary, console: Console) -> None:
    """Print a summary for people; every trace-supplied string is printed as text, never as markup."""
    m = s.manifest
    console.print(f"[bold]{escape(clean(s.path))}[/bold]", markup=True, highlight=False)
    facts = [("run", m.run_id), ("source", m.source), ("format", m.format_version)]
    if m.model:
        info = m.model
        traits = [f"{_count(info.params)} params"]
        if info.experts:  # format 1.4 manifests record the architecture
            traits.append(f"MoE: {info.experts} experts, top-{info.experts_per_token}")
        if info.kv_lora_rank:
            traits.append("MLA")
        if info.dtype_bytes == 1:
            traits.append("FP8")
        facts.append(("model", f"{clean(info.name, MAX_CELL_CHARS)} ({', '.join(traits)})"))
    if m.cluster:
        facts.append(("cluster", ", ".join(f"{k}: {p.count} x {p.device} (tp {p.tp})" for k, p in m.cluster.items())))
    if m.rl:
        rl = (f"{m.rl.algorithm}, {m.rl.prompts_per_step} prompts x {m.rl.samples_per_prompt} samples per step, "
              f"max {m.rl.max_new_tokens:,} new tokens")
        facts.append(("rl", rl))
    for key, value in facts:
        console.print(f"  {key:8s} ", end="", highlight=False)
        console.print(clean(value, MAX_CELL_CHARS), markup=False, highlight=False)

    tables = pl.DataFrame({"table": list(s.table_rows), "rows": list(s.table_rows.values())})
    print_table(console, _table("Tables", tables, {"rows": ","}))
    if s.unchecked:
        console.print(f"note: {', '.join(s.unchecked)} carry no page checksums (an older writer's): a damaged byte "
                      "there can change a value without an error (bundles this rltrace writes carry them)",
                      markup=False, highlight=False)
    ot = s.output_tokens
    if ot["max"] is not None:
        stats = pl.DataFrame({"statistic": list(ot), "output tokens": [v for v in ot.values()]})
        print_table(console, _table("Output length per sample", stats, {"output tokens": ",.1f"}))
        steps = s.per_step
        title = "Per step"
        if steps.height > MAX_STEP_ROWS:
            title += f" (first {MAX_STEP_ROWS} of {steps.height})"
            steps = steps.head(MAX_STEP_ROWS)
        print_table(
            console, _table(title, steps, {"requests": ",", "output_tokens": ",", "max_output_tokens": ",",
                                           "generate_s": ",.1f"})
        )
    if s.collectives_by_op.height:
        print_table(console, _table("Collectives by op", s.collectives_by_op, {"count": ",", "bytes": "bytes"}))
    ws = s.weight_syncs
    methods = s.weight_syncs_by_method.iter_rows(named=True)
    split = ", ".join(f"{m['method']} {m['count']:,} flows {_bytes(m['bytes'])}" for m in methods)
    console.print(f"[bold]Weight syncs[/bold]: {ws['count']:,} flows, {_bytes(ws['bytes'])}"
                  + (f" ({split})" if s.weight_syncs_by_method.height > 1 else ""),
                  highlight=False)  # the methods are the schema's names: no markup
    if s.spans_by_phase.height:
        print_table(console, _table("Time by phase (summed over actors)", s.spans_by_phase,
                                    {"spans": ",", "seconds": ",.1f"}))
