"""``rltrace diagnose``: what to fix in a recorded job, ranked by the seconds per step it costs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from rltrace import jsontext
from rltrace.analysis.diagnose import DEFAULT_REPLICATES, Diagnosis, diagnose
from rltrace.analysis.runs import Run
from rltrace.bundle import open_bundle
from rltrace.cli.inspect_cmd import MAX_CELL_CHARS, resolve_bundle
from rltrace.cli.progress import say, stage, stderr
from rltrace.cli.tables import print_table, stdout_console
from rltrace.dashboards.report import build as build_report
from rltrace.errors import clean
from rltrace.files import write_text
from rltrace.limits import MAX_REPLICATES, MAX_SEED, check_input, check_int, check_output, check_replicates

MAX_TEXT_CHARS = 4000
"""an evidence or fix sentence is cut here (it quotes trace strings: request ids, process groups)"""


def diagnose_cmd(
    bundle: Annotated[Path, typer.Argument(help="Bundle directory or sample name (e.g. tiny_rl_cpu).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (keys in docs/diagnose.md).")] = False,
    dashboard: Annotated[Path | None, typer.Option(help="Also write an HTML report with a 'What to fix' section "
                                                  "and the replays behind each gain.")] = None,
    profile: Annotated[Path | None, typer.Option(help="A profile of the recorded devices from `rltrace calibrate` "
                                                "(needed for expected times on a device the GPU catalog lacks, "
                                                "such as cpu; its broadcast rate judges transfers).")] = None,
    replicates: Annotated[int, typer.Option(help=f"Bootstrap replicates behind each gain's spread (0: the point "
                                            f"estimate only; else 2..{MAX_REPLICATES}).")] = DEFAULT_REPLICATES,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap draws.")] = 0,
) -> None:
    """Diagnose a recorded job: what costs it time, why, and what to change.

    Finds stragglers, slow transfers, bubbles with their causes, engine settings and phases slower than the
    hardware should give, ranked by the seconds per step each costs, with the evidence, what to change and, where
    a what-if replay prices the change, its gain with the replay's spread.

    Example: rltrace diagnose tiny_rl_cpu --dashboard report.html
    """
    if dashboard is not None:
        check_output(dashboard, "--dashboard")
    check_replicates("--replicates", replicates)
    check_int("--seed", seed, 0, MAX_SEED)
    if profile is not None:
        check_input(profile)
    err = stderr()
    with stage(err, "opening the bundle"):
        source = open_bundle(resolve_bundle(bundle))
    with stage(err, "diagnosing (replays price each fix)"):
        result = diagnose(source, profile=str(profile) if profile else None, replicates=replicates, seed=seed,
                          keep_runs=dashboard is not None, progress=lambda text: say(err, text))
    if dashboard is not None:
        runs = [Run.from_result(name, r) for name, r in result.runs]
        with stage(err, f"writing the report {dashboard}"):
            write_text(dashboard, build_report(runs, source, runs[0].name if runs else None,
                                               diagnosis=result, title=f"rltrace diagnose: {bundle}"))
    if as_json:
        print(jsontext.dumps({"bundle": str(source.path), "run_id": source.manifest.run_id, **result.to_json()},
                             indent=2))
        return
    render(str(bundle), result, stdout_console())
    if dashboard is not None:
        print(f"wrote the report {dashboard}")


def _where(row: dict[str, object]) -> str:
    parts = [f"rank {row['rank']}" if row["rank"] is not None else "", str(row["instance"] or "")]
    return ", ".join(p for p in parts if p) or "-"


def _gain(row: dict[str, object]) -> str:
    if row["gain_s_per_step"] is None:
        return "-"
    return f"{row['gain_s_per_step']:.3f} ({row['gain_p05_s_per_step']:.3f} to {row['gain_p95_s_per_step']:.3f})"


def render(path: str, d: Diagnosis, console: Console) -> None:
    """Print a diagnosis for people; every trace-supplied string is printed as text, never as markup."""
    mean = f", mean step {d.step_s:.3f} s" if d.step_s == d.step_s else ""
    count = f"{d.findings.height} finding" + ("" if d.findings.height == 1 else "s")
    console.print(Text(clean(f"{path}: {count} over {d.judged}{mean}", MAX_CELL_CHARS), style="bold"))
    if d.findings.height:
        table = Table(title=Text("What to fix, most seconds per step first"), title_justify="left",
                      title_style="bold")
        for name, right in (("#", True), ("kind", False), ("phase", False), ("where", False),
                            ("lost s/step", True), ("replayed gain s/step (5% to 95%)", True)):
            table.add_column(name, justify="right" if right else "left")
        for i, row in enumerate(d.findings.iter_rows(named=True)):
            table.add_row(*(Text(clean(c, MAX_CELL_CHARS)) for c in (
                str(i + 1), row["kind"], row["phase"], _where(row), f"{row['lost_s_per_step']:.3f}", _gain(row))))
        print_table(console, table)
        for i, row in enumerate(d.findings.iter_rows(named=True)):
            console.print(Text(clean(f"{i + 1}. {row['kind']} ({row['phase']}, {_where(row)})", MAX_CELL_CHARS),
                               style="bold"))
            for label, key in (("evidence", "evidence"), ("fix", "fix"), ("replayed", "gain_replay")):
                if row[key] is not None:  # indented, wrapped at the console's width; trace text never markup
                    console.print(Padding(Text(f"{label}: {clean(row[key], MAX_TEXT_CHARS)}"), (0, 0, 0, 3)))
    else:
        console.print("Nothing to fix above the floor (10 ms and 2% of the step).")
    phases = Table(title=Text("Is it normal: seconds per step by phase"), title_justify="left", title_style="bold")
    for name in ("phase", "measured", "expected", "x", "expected from", "published", "published run"):
        phases.add_column(name, justify="left" if name in ("phase", "expected from", "published run") else "right")
    for row in d.phases.iter_rows(named=True):
        phases.add_row(*(Text(clean(c, MAX_CELL_CHARS)) for c in (
            row["phase"], _num(row["measured_s"]), _num(row["expected_s"]),
            f"{row['ratio']:.2f}" if row["ratio"] is not None else "-", row["expected_from"] or "-",
            _num(row["published_s"]), row["published_run"] or "-")))
    if d.phases.height:
        print_table(console, phases)
    for note in d.notes:
        console.print(Text(f"note: {clean(note)}"))


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"

