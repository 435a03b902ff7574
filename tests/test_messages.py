"""Messages that name what is wrong: each case is one wrong input a new user tried, the one line it gets, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_cli

CASES = [
    # a misspelt grid axis is named, with the key it was meant as, before "every point needs a scheduler"
    ("sweep-axis", lambda d: ("sweep", "tiny_rl_cpu", "--grid", _grid(d), "-o", str(d / "sweep")),
     "unknown parameter 'schedular' (did you mean 'scheduler'?"),
    ("rail-nodes", lambda d: ("fabric", "bench", "--topology", "rail:nodes=0", "--size", "1M"), "nodes=0"),
    ("run-folders", lambda d: ("inspect", _runs(d)), "it holds replay run folders (disagg-sync); `rltrace dashboard"),
    ("run-folder", lambda d: ("inspect", str(Path(_runs(d)) / "disagg-sync")), "it is a replay run folder"),
    ("model-file", lambda d: ("estimate", "decode", "--model", _csv(d), "--gpu", "H100"), "is a file, but a model"),
    # colocation on pools of two GPU kinds would be priced on one kind and timed on the other: refused when named
    ("mixed-kinds", lambda d: ("replay", "rollart_qwen3_8b", "-s", "colocated-sync", "--steps", "2", "--replicates",
                               "0"), ("colocated-sync runs generation and training on the same GPUs, but this "
                                      "cluster's generation GPUs are H20 and its training GPUs H800")),
    # at TP 1 it said "(ep 1 or 1)"
    ("serving-ep", lambda d: ("estimate", "decode", "--model", "Qwen3-30B-A3B", "--gpu", "H100", "--ep", "2"),
     "ep 2: a serving instance runs its experts over its own TP group (ep 1, at tp 1)"),
]


def _grid(d: Path) -> str:
    (d / "g.toml").write_text('[axes]\nschedular = ["disagg-sync"]\n')
    return str(d / "g.toml")


def _runs(d: Path) -> str:
    if not (d / "runs").exists():
        assert run_cli("replay", "-s", "disagg-sync", "--steps", "2", "--replicates", "0", "-o",
                       str(d / "runs")).returncode == 0
    return str(d / "runs")


def _csv(d: Path) -> str:
    (d / "my.csv").write_text("a,b\n")
    return str(d / "my.csv")


@pytest.mark.parametrize(("name", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_wrong_input_gets_one_line_that_names_it(name: str, args, expected: str, tmp_path: Path) -> None:
    done = run_cli(*args(tmp_path))
    assert done.returncode == 2, (name, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("rltrace: error: ") and expected in lines[0], lines


@pytest.mark.parametrize(("size", "nbytes"), [("1GB", 10**9), ("1G", 1 << 30), ("1GiB", 1 << 30), ("64MB", 64 * 10**6),
                                              ("64M", 64 << 20), ("4kB", 4000), ("4K", 4096)])
def test_decimal_and_binary_sizes_mean_what_they_say(size: str, nbytes: int) -> None:
    done = run_cli("fabric", "bench", "--topology", "nvswitch:gpus=8,gpu=H100", "--size", size)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"all_reduce of {nbytes:,} B over 8 GPUs"), done.stdout


def test_a_training_step_that_cannot_fit_says_so() -> None:
    done = run_cli("estimate", "train", "--model", "DeepSeek-V3", "--gpu", "H800", "--gpus", "8")
    assert done.returncode == 0, done.stderr
    assert "note: does not fit" in done.stdout and "it needs at least" in done.stdout
    shown = json.loads(run_cli("estimate", "train", "--model", "DeepSeek-V3", "--gpu", "H800", "--gpus", "8",
                               "--json").stdout)
    assert shown["fits"] is False and shown["memory_needed_gb"] > 1000
    small = json.loads(run_cli("estimate", "train", "--model", "Llama-3-8B", "--gpu", "H100", "--gpus", "8",
                               "--json").stdout)
    assert small["fits"] is True


def test_all_leaves_out_a_colocated_run_on_two_gpu_kinds_and_says_so() -> None:
    done = run_cli("replay", "rollart_qwen3_8b", "-s", "all", "--steps", "2", "--replicates", "0", "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert "colocated-sync" not in shown and "disagg-sync" in shown
    table = run_cli("replay", "rollart_qwen3_8b", "-s", "all", "--steps", "2", "--replicates", "0").stdout
    assert "note: colocated-sync runs generation and training on the same GPUs" in table and "left out" in table
    one_kind = json.loads(run_cli("replay", "rollart_qwen3_8b", "-s", "colocated-sync,disagg-sync", "--gpu", "H800",
                                  "--steps", "2", "--replicates", "0", "--json").stdout)
    assert set(one_kind) == {"colocated-sync", "disagg-sync"}
