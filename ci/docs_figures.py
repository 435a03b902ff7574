"""Regenerate the figures the docs print from the commands and data that produce them.

    python ci/docs_figures.py            # rewrite every figure that is out of date
    python ci/docs_figures.py --check    # list the stale ones, exit 1 if any (tests/test_docs_figures.py)

Each figure is a block of a docs page: the fenced output after a ``$ rltrace ...`` line, or the rows of a Markdown
table under a known header. A model change that moves a validated figure reruns this script in the same commit;
the test fails until it has.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import io
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from rltrace.replay.network.validation import multinode_compare, multinode_summary

from rltrace.analysis import verdict
from rltrace.analysis.runs import Run
from rltrace.api import compare
from rltrace.catalog import load_gpus
from rltrace.cli import main as rltrace_main

REPO = Path(__file__).resolve().parents[1]


def cli_output(command: str, columns: int = 120) -> list[str]:
    """stdout of ``rltrace ...`` run in this process at a terminal ``columns`` wide (refused: RuntimeError)."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(columns)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            try:
                code = rltrace_main(command.split()[1:])
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 0
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved
    if code:
        raise RuntimeError(f"{command}: exit {code}")
    return out.getvalue().splitlines()


def multinode_rows() -> list[str]:
    """docs/fabrics-multinode.md's summary of the multi-node collective validation, one row per slice."""
    return [f"| {r['op']} | {r['gpu']} | {r['nodes']} | {r['size_band']} | {r['points']} | {r['clusters']} | "
            f"{100 * r['median_abs_error']:.1f}% | {100 * r['max_abs_error']:.1f}% |"
            for r in multinode_summary(multinode_compare()).iter_rows(named=True)]


@functools.cache
def _reproduce() -> ModuleType:
    """benchmarks/reproduce.py, a script, as a module."""
    spec = importlib.util.spec_from_file_location("reproduce", REPO / "benchmarks" / "reproduce.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def reproduction_rows() -> list[str]:
    """docs/schedulers-reproduction.md's table: every seed row on its sample and on its paper's setup."""
    reproduce = _reproduce()
    return str(reproduce.markdown(reproduce.rows())).splitlines()[2:]


SAME_WORK_RUNS = ("as-recorded", "fully-async", "rollart", "rollpacker")


def same_work_rows() -> list[str]:
    """docs/dashboards.md's same-work table: the default sample's runs as run and on the same work."""
    comparison = compare(None, list(SAME_WORK_RUNS))
    runs = [Run.from_result(name, comparison.results[name]) for name in SAME_WORK_RUNS]
    rows = []
    for r in verdict.table(runs, "as-recorded").iter_rows(named=True):
        same = verdict.three_digits(r["samples_per_s"]) + ("" if r["baseline"] else f" ({r['samples_per_s_x']:.2f}x)")
        samples = "" if r["trained_samples"] == r["recorded_samples"] else f" ({r['trained_samples']:,} samples)"
        name = r["run"] + (" (baseline)" if r["baseline"] else "")
        lengths = f"{r['trained_p99'] / 1e3:.1f}k / {r['trained_max'] / 1e3:.1f}k"
        rows.append(f"| {name} | {verdict.three_digits(r['run_samples_per_s'])} | {same} | "
                    f"{r['tokens_share']:.1%}{samples} | {lengths} |")
    return rows


MOE_FABRICS = (None, "rail:nodes=4,gpu=H800", "fat-tree:k=8,gpu=H800", "fat-tree:k=8,gpu=H800,oversub=4")


def moe_fabric_rows() -> list[str]:
    """docs/fabrics.md's MoE table: the default sample as Qwen3-30B-A3B on 16 + 16 H800 (disagg-sync, 2 steps)
    on each fabric, at trainer EP 1 and EP 16."""
    rows = []
    for topology in MOE_FABRICS:
        steps = {}
        for ep in (1, 16):
            result = compare(None, "disagg-sync", settings=[f"cost.train_ep={ep}"], topology=topology,
                             model="Qwen3-30B-A3B", gen_gpus=16, train_gpus=16, gpu="H800", steps=2)
            steps[ep] = result.results["disagg-sync"].metrics
        if topology is None:
            rows.append(f"| none (built-in leaf-spine of NVSwitch nodes) | {steps[1]['step_time_s']['mean']:.1f} | "
                        f"{steps[16]['step_time_s']['mean']:.1f} | (in the step) | (one copy over `cost.sync_gbps`) |")
            continue
        network, ep1, ep16 = steps[16]["network"], steps[1]["step_time_s"]["mean"], steps[16]["step_time_s"]["mean"]
        rows.append(f"| `{topology}` | {ep1:.1f} | {ep16:.1f} | {network['expert_alltoall_s']:.2f} | "
                    f"{network['weight_sync_s']:.3f} |")
    return rows


DESCRIBED = REPO / "examples" / "described" / "qwen3_30b_a3b_colocated.toml"
DESCRIBED_FABRICS = (None, "fat-tree:k=8,gpu=H100", "fat-tree:k=8,gpu=H100,oversub=4")


def described_fabric_rows() -> list[str]:
    """docs/described.md's table: the Qwen3-30B-A3B example under disagg-sync on 16 + 16 H100, its trainer at EP
    8 (the example's) and EP 16, built in and on each fabric."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ep16 = Path(tmp) / "ep16.toml"
        text = DESCRIBED.read_text()
        if text.count("\nep = 8\n") != 1:  # else the EP 16 rows would silently be the EP 8 ones
            raise RuntimeError(f"{DESCRIBED}: expected one line 'ep = 8' to set to 16")
        ep16.write_text(text.replace("\nep = 8\n", "\nep = 16\n"))
        for ep, source in ((8, DESCRIBED), (16, ep16)):
            for topology in DESCRIBED_FABRICS[:2] if ep == 8 else DESCRIBED_FABRICS:
                metrics = compare(source, "disagg-sync", topology=topology, gen_gpus=16,
                                  train_gpus=16).results["disagg-sync"].metrics
                network = metrics.get("network") or {}
                alltoalls = f"{network['expert_alltoall_s']:.1f}" if topology else "(in the step)"
                rows.append(f"| {ep} | {f'`{topology}`' if topology else 'none (built-in)'} | "
                            f"{metrics['step_time_s']['mean']:.1f} | {metrics['phases_s_per_step']['train']:.1f} | "
                            f"{alltoalls} |")
    return rows


def price_rows() -> list[str]:
    """docs/costmodels.md's price table: every catalog GPU's $/GPU-hour and where it comes from."""
    return [f"| {g.name} | {g.usd_per_hour:.2f} | {g.price_source} |" for g in load_gpus().values()]


@dataclass(frozen=True)
class Figure:
    """One generated block of a docs page."""

    name: str
    page: str
    """path under the repository"""
    anchor: str
    """``$ rltrace ...`` (the fenced block after it) or a table's header line (the rows under it)"""
    make: Callable[[], list[str]]

    def span(self, lines: list[str]) -> tuple[int, int]:
        """[start, end) of the figure's lines in the page."""
        at = lines.index(self.anchor) + (1 if self.anchor.startswith("$ ") else 2)  # a table: header, separator
        if self.anchor.startswith("$ "):
            end = next(i for i in range(at, len(lines)) if lines[i].startswith("```"))
        else:
            end = next((i for i in range(at, len(lines)) if not lines[i].startswith("| ")), len(lines))
        return at, end

    def stale(self) -> bool:
        """Whether the page shows other lines than the figure makes now (trailing blanks aside: an editor strips
        the CLI's column padding)."""
        lines = (REPO / self.page).read_text().splitlines()
        at, end = self.span(lines)
        return [x.rstrip() for x in lines[at:end]] != [x.rstrip() for x in self.make()]

    def write(self) -> None:
        path = REPO / self.page
        text = path.read_text()
        lines = text.splitlines()
        at, end = self.span(lines)
        lines[at:end] = [x.rstrip() for x in self.make()]
        path.write_text("\n".join(lines) + ("\n" if text.endswith("\n") else ""))


DECODE = "rltrace estimate decode --model Qwen3-30B-A3B --gpu H100 --batch 64 --context 512"
TRAIN = "rltrace estimate train --model Qwen3-30B-A3B --gpu H100 --precision fp8 --tokens 65536 --gpus 16 --ep 8"
BENCH = ("rltrace fabric bench --topology rail:nodes=2,nics_per_node=8,nic_gbps=200,gpu=H100 --op all_reduce "
         "--dtype float --size 256M")
FIGURES = {f.name: f for f in (
    Figure("estimate-validate", "docs/costmodels-validation.md", "$ rltrace estimate validate",
           lambda: cli_output("rltrace estimate validate")),
    Figure("decode-example", "docs/costmodels.md", f"$ {DECODE}", lambda: cli_output(DECODE)),
    Figure("train-example", "docs/costmodels.md", f"$ {TRAIN}", lambda: cli_output(TRAIN)),
    Figure("price-table", "docs/costmodels.md", "| GPU | $/GPU-hour | source |", price_rows),
    Figure("moe-fabric-table", "docs/fabrics.md", "| fabric | mean step, EP 1 (s) | mean step, EP 16 (s) | "
           "expert all-to-alls a step (s) | weight sync (s) |", moe_fabric_rows),
    Figure("described-fabric-table", "docs/described.md", "| trainer EP | fabric | mean step (s) | train a step (s) "
           "| expert all-to-alls a step (s) |", described_fabric_rows),
    Figure("multinode-table", "docs/fabrics-multinode.md", "| op | GPU | nodes | size band | points | clusters | "
           "median \\|error\\| | max \\|error\\| |", multinode_rows),
    Figure("bench-example", "docs/fabrics.md", f"$ {BENCH}", lambda: cli_output(BENCH, columns=250)),
    Figure("same-work-table", "docs/dashboards.md", "| run | samples/s as run | samples/s, same work | "
           "tokens / recorded | trained p99 / max |", same_work_rows),
    Figure("reproduction-table", "docs/schedulers-reproduction.md",
           "| system | paper | baseline | paper's range | on the sample | with oracle lengths | inside | "
           "on the paper's setup | inside | what is compared on the sample |", reproduction_rows),
)}
"""every generated figure of the docs, by name"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="list stale figures and exit 1 if any; write nothing")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"only these figures ({', '.join(FIGURES)}; "
                        "default: all)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in FIGURES]
    if unknown:
        parser.error(f"unknown figure {unknown[0]!r} (known: {', '.join(FIGURES)})")
    stale = [f for name, f in FIGURES.items() if (not args.names or name in args.names) and f.stale()]
    for figure in stale:
        if args.check:
            print(f"{figure.page}: {figure.name} is out of date (python ci/docs_figures.py {figure.name})")
        else:
            figure.write()
            print(f"{figure.page}: {figure.name} rewritten")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
