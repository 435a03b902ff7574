"""The shipped published-RL-runs set (replay/described/data/rl_runs.csv): its rows, its replays and its calibration."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from rltrace.replay.described.fit import fit_calibration
from rltrace.replay.described.frameworks import CALIBRATION_CSV
from rltrace.replay.described.validation import pairs, read_runs, summary, validate_runs


@pytest.fixture(scope="module")
def results() -> pl.DataFrame:
    return validate_runs()


def test_the_set_has_sourced_runs_from_several_publishers_and_a_held_out_part() -> None:
    runs = read_runs()
    assert runs.height >= 30 and runs["publisher"].n_unique() >= 5
    assert runs["source"].str.len_chars().min() > 20  # a repository and path, or a paper and table
    assert set(runs["split"]) == {"fit", "held out"} and (runs["split"] == "held out").sum() >= 10
    unscored = runs.filter(pl.col("scored") != "yes")
    assert unscored["scored"].str.starts_with("no: ").all()  # every unscored run says why
    assert (runs.filter(pl.col("scored") == "yes")["lengths"] == "stated").all()


@pytest.mark.slow  # over 5 s on 2 cores
def test_every_run_replays_and_the_figures_are_reported_by_set(results: pl.DataFrame) -> None:
    assert (results["skipped"] == "").all(), results.filter(pl.col("skipped") != "")["skipped"].to_list()
    assert (results["predicted_step_s"] > 0).all()
    sets = summary(results)
    assert sets["set"].to_list() == ["fit", "held out", "not scored"]
    assert sets["runs"].sum() == results.height
    compared = pairs(results)
    assert compared.height >= 8 and compared["measured_ratio"].is_not_null().all()


def test_the_shipped_calibration_is_the_fit_of_the_fit_split() -> None:
    fitted = fit_calibration()
    shipped = pl.read_csv(CALIBRATION_CSV)
    assert shipped.select("framework", "quantity", "value").equals(fitted.select("framework", "quantity", "value"))
    held_out = set(read_runs().filter(pl.col("split") == "held out")["run_id"])
    used = {run for ids in fitted["fitted_on"] for run in ids.split()}
    assert used and not used & held_out  # no held-out run chose a constant


@pytest.mark.slow  # over 5 s on 2 cores
def test_the_docs_state_the_figures_the_set_gives(results: pl.DataFrame) -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "described.md").read_text()
    for row in summary(results).iter_rows(named=True):
        label = "not scored" if row["set"] == "not scored" else row["set"]
        median = f"{row['median_abs_error']:.0%}" if label == "not scored" else f"{row['median_abs_error']:.1%}"
        line = next(line for line in text.splitlines() if line.startswith(f"| {label}"))
        assert f"| {row['runs']} | {row['publishers']} | {median} |" in line, (line, median)
    for row in results.filter(pl.col("scored") == "yes").iter_rows(named=True):
        assert f"| {row['predicted_step_s']:.1f} | {row['error']:+.1%} |" in text, row["run_id"]
