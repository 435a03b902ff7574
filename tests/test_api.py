"""The library API: ``rltrace.compare`` returns polars frames and run folders, and the CLI gives the same numbers."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest
from helpers import REPO, run_cli

import rltrace

SCHEDULERS = ["disagg-sync", "one-step-async"]


def test_compare_gives_frames_folders_and_a_report_with_the_clis_numbers(tmp_path: Path) -> None:
    cmp = rltrace.compare("rollpacker_qwen7b", SCHEDULERS, steps=2)
    table = cmp.table()
    assert table["run"].to_list() == SCHEDULERS and table["baseline"].to_list() == [True, False]
    metrics = cmp.metrics()
    assert metrics["scheduler"].to_list() == SCHEDULERS
    assert {"step_time_s.mean", "same_work.samples_per_s", "gpu_busy.generation"} <= set(metrics.columns)
    assert cmp.timeline()["run"].unique().sort().to_list() == SCHEDULERS
    out = cmp.write(tmp_path / "runs")
    assert all((out / name / "metrics.json").is_file() for name in SCHEDULERS)
    assert cmp.report(tmp_path / "r.html").stat().st_size > 100_000
    shown = json.loads(run_cli("replay", "rollpacker_qwen7b", "-s", ",".join(SCHEDULERS), "--steps", "2",
                               "--replicates", "0", "--json").stdout)
    for row in table.iter_rows(named=True):
        assert shown[row["run"]]["same_work"]["samples_per_s"] == pytest.approx(row["samples_per_s"], rel=1e-12)
    with pytest.raises(rltrace.ConfigError, match="unknown scheduler"):
        rltrace.compare(None, "disagg-sync,nosuch")
    with pytest.raises(rltrace.ConfigError, match="baseline"):
        cmp.report(tmp_path / "x.html", baseline="rollart")


def test_the_notebook_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["compare.py", str(tmp_path / "out")])
    runpy.run_path(str(REPO / "examples" / "notebook" / "compare.py"), run_name="__main__")
    printed = capsys.readouterr().out
    assert "fastest on the recorded work:" in printed and (tmp_path / "out" / "report.html").is_file()
