"""The validation tables the docs print are the commands' current output, not a figure from an older model.

A model change that moves a validated figure must re-measure the doc in the same commit: these tests fail until it
does (docs/costmodels-validation.md's `rltrace estimate validate` block, docs/costmodels.md's decode example,
docs/fabrics-multinode.md's multi-node table and docs/fabrics.md's bench example).
"""

from __future__ import annotations

import pytest
from helpers import REPO, run_cli
from rltrace.replay.network.validation import multinode_compare, multinode_summary


def _block_after(doc: str, command: str) -> list[str]:
    """The lines of the fenced block that follow ``$ command`` in ``doc``."""
    lines = doc.splitlines()
    start = lines.index(f"$ {command}") + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    return lines[start:end]


@pytest.mark.slow  # over 5 s on 2 cores
def test_costmodels_doc_shows_the_current_estimate_validate_output() -> None:
    done = run_cli("estimate", "validate")
    assert done.returncode == 0, done.stderr
    shown = _block_after((REPO / "docs" / "costmodels-validation.md").read_text(), "rltrace estimate validate")
    # the CLI pads its columns with trailing blanks, which an editor may strip
    assert [line.rstrip() for line in shown] == [line.rstrip() for line in done.stdout.splitlines()]


def test_costmodels_doc_shows_the_current_decode_example() -> None:
    command = "rltrace estimate decode --model Qwen3-30B-A3B --gpu H100 --batch 64 --context 512"
    done = run_cli(*command.split()[1:])
    assert done.returncode == 0, done.stderr
    assert _block_after((REPO / "docs" / "costmodels.md").read_text(), command) == done.stdout.splitlines()


def test_fabrics_doc_shows_the_current_multi_node_table() -> None:
    rows = [f"| {r['op']} | {r['gpu']} | {r['nodes']} | {r['size_band']} | {r['points']} | {r['clusters']} | "
            f"{100 * r['median_abs_error']:.1f}% | {100 * r['max_abs_error']:.1f}% |"
            for r in multinode_summary(multinode_compare()).iter_rows(named=True)]
    lines = (REPO / "docs" / "fabrics-multinode.md").read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| op | GPU | nodes | size band |"))
    shown = []
    for line in lines[header + 2:]:
        if not line.startswith("| "):
            break
        shown.append(line)
    assert shown == rows


def test_fabrics_doc_shows_the_current_bench_example() -> None:
    command = ("rltrace fabric bench --topology rail:nodes=2,nics_per_node=8,nic_gbps=200,gpu=H100 --op all_reduce "
               "--dtype float --size 256M")
    done = run_cli(*command.split()[1:], env={"COLUMNS": "250"})
    assert done.returncode == 0, done.stderr
    assert _block_after((REPO / "docs" / "fabrics.md").read_text(), command) == done.stdout.splitlines()
