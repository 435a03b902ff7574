"""A replay from a recording states its spread: seeds of a resampled workload and a bootstrap of the steps its
generation cost is fitted to (replay/uncertainty.py), in metrics, CLI output and the report."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from rltrace.replay.loading import Shape, from_bundle
from rltrace.replay.run import CostConfig, ReplayConfig
from rltrace.replay.uncertainty import bootstrap, replicate, sources
from rltrace.sample_traces import sample_path

import rltrace

RECORDED = str(sample_path("tiny_rl_cpu"))  # a real recording (vLLM on CPU) with engine iterations


def _spread(*args: str) -> dict:
    done = run_cli("replay", RECORDED, "-s", "as-recorded", "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["as-recorded"]


def test_a_replay_from_a_recording_reports_its_spread() -> None:
    metrics = _spread()
    spread = metrics["spread"]
    assert spread["replicates"] == 10 and spread["sources"] == ["fit"]  # not resampled: the fit alone varies
    for key in ("throughput_samples_per_s", "step_time_s.mean", "step_time_s.steady_mean", "makespan_s"):
        band = spread[key]
        assert band["p05"] <= band["median"] <= band["p95"], key
    rate = spread["throughput_samples_per_s"]
    assert rate["p05"] < rate["p95"]  # a real machine's step-to-step drift gives a real interval
    assert rate["p05"] * 0.8 < metrics["throughput_samples_per_s"] < rate["p95"] * 1.2


def test_a_resampled_replay_varies_its_seed_too_and_the_spread_is_reproducible() -> None:
    first = _spread("--samples", "2", "--steps", "6")["spread"]
    assert first["sources"] == ["seed", "fit"]
    assert _spread("--samples", "2", "--steps", "6")["spread"] == first  # same seed, same replicates
    assert _spread("--samples", "2", "--steps", "6", "--seed", "1")["spread"] != first


def test_deterministic_replays_carry_no_spread() -> None:
    assert "spread" not in _spread("--replicates", "0")
    synthetic = run_cli("replay", "-s", "disagg-sync", "--json")  # roofline costs, nothing resampled
    assert synthetic.returncode == 0 and "spread" not in json.loads(synthetic.stdout)["disagg-sync"]


@pytest.mark.parametrize("count", ["1", "-3", "100000"])
def test_an_impossible_replicate_count_is_one_line(count: str) -> None:
    done = run_cli("replay", RECORDED, "-s", "as-recorded", "--replicates", count)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--replicates" in done.stderr


def test_the_cli_prints_the_spread_and_the_report_shows_it(tmp_path) -> None:
    done = run_cli("replay", RECORDED, "-s", "as-recorded,disagg-sync", "--dashboard", str(tmp_path / "r.html"))
    assert done.returncode == 0, done.stderr
    assert "spread (as-recorded, 10 replicates over fit): samples/s median" in done.stdout
    assert "replicate replays for the spread" in done.stderr  # piped: one line per stage
    assert "samples/s, 5% of replicates" in (tmp_path / "r.html").read_text()  # the report's spread table


def test_a_table_figure_outside_its_own_spread_is_said_to_be_one_draw(tmp_path) -> None:
    """Four steps drawn from rollpacker_qwen7b: seed 0's draw is faster than 95% of the seeds the spread draws."""
    out = tmp_path / "runs"
    done = run_cli("replay", "rollpacker_qwen7b", "-s", "disagg-sync", "--gen-gpus", "8", "--train-gpus", "8",
                   "--gpu", "H100", "--steps", "4", "--set", "cost.train_mfu=0.35", "-o", str(out))
    assert done.returncode == 0, done.stderr
    metrics = json.loads(next(out.rglob("metrics.json")).read_text())
    point, rate = metrics["same_work"]["samples_per_s"], metrics["spread"]["same_work.samples_per_s"]
    assert not rate["p05"] <= point <= rate["p95"]
    assert "the table's samples/s lies outside this range: it is one draw" in " ".join(done.stdout.split())


@pytest.mark.parametrize(("steps", "expected_steady"), [((0, 1, 2, 3), 3), ((0, 1), 2), ((4,), 1)])
def test_bootstrap_draws_the_steady_steps_and_keeps_the_warmup_as_the_fit_does(
    steps: tuple, expected_steady: int
) -> None:
    weights = bootstrap(steps, np.random.default_rng(0))
    assert set(weights) == set(steps)
    warm = len(steps) - expected_steady
    assert all(weights[s] == 1.0 for s in sorted(steps)[:warm])
    assert sum(w for s, w in weights.items() if s in sorted(steps)[warm:]) == expected_steady


def test_replicates_come_from_the_api_as_well() -> None:
    bundle = rltrace.open(RECORDED)
    shape = Shape(samples_per_prompt=2)
    prepared = from_bundle(bundle, shape, CostConfig())
    assert sources(prepared, shape) == ("seed", "fit")
    assert sources(prepared, Shape()) == ("fit",)
    on_h100 = Shape(gpu="H100")  # another GPU kind: roofline costs, nothing fitted, nothing resampled
    assert sources(from_bundle(bundle, on_h100, CostConfig()), on_h100) == ()
    spreads = replicate(bundle, shape, CostConfig(), prepared, {"disagg-sync": {}}, ReplayConfig(), count=4)
    assert spreads["disagg-sync"].replicates == 4
