"""Calibration: decode latency fitted from a recording, efficiency profiles from public kernel tables."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from helpers import require_shared, run_cli
from replay_helpers import make
from rltrace.replay.costmodels.calibrate import _batch_slope, fit_trace, iteration_slope
from rltrace.replay.costmodels.iteration import IterationModel, Linear
from rltrace.replay.costmodels.profile import factors, fit_kernel_tables, fit_rows, load_profile
from rltrace.replay.run import ReplayConfig, replay
from rltrace.sample_traces import sample_path

import rltrace
from rltrace.errors import ConfigError


@pytest.mark.parametrize(
    ("base", "slope", "noise", "kept"),
    [
        (5e-3, 2e-4, 0.02, True),   # a clear batch effect is kept
        (5e-3, 0.0, 0.30, False),   # contention noise alone: a constant time per token
        (5e-3, 2e-6, 0.30, False),  # an effect far below the noise is not extrapolated
    ],
)
def test_the_batch_slope_is_kept_only_when_measured(base: float, slope: float, noise: float, kept: bool) -> None:
    rng = np.random.default_rng(0)
    batch = rng.uniform(1, 64, 400)
    tokens = rng.integers(2, 200, 400)
    per_token = (base + slope * batch) * rng.lognormal(0, noise, 400)
    b, s = _batch_slope(batch, per_token, tokens)
    if kept:
        assert s == pytest.approx(slope, rel=0.1) and b == pytest.approx(base, rel=0.1)
    else:
        assert s == 0.0
        assert b == pytest.approx(np.average(per_token, weights=tokens))


def test_fit_from_the_recorded_tiny_rl_sample() -> None:
    requests = rltrace.open(sample_path("tiny_rl_cpu")).requests.collect()
    cost, fit = fit_trace(requests)
    # the first step (vLLM's start-up) is left out of the fit
    assert fit.requests == requests.filter(pl.col("output_tokens") >= 2, pl.col("step") >= 1).height
    assert 1e-3 < fit.base_s + 16 * fit.per_seq_s < 0.05  # a CPU decode step of the tiny model: milliseconds
    assert 0 <= fit.median_abs_error < 0.5
    assert cost.iteration_model(1).iteration(16, 1000) == pytest.approx(fit.base_s + 16 * fit.per_seq_s)
    with pytest.raises(ConfigError, match="too few requests"):
        fit_trace(requests.head(1))


@pytest.fixture(scope="module")
def profile() -> pl.DataFrame:
    return fit_kernel_tables(require_shared("kernels/h100/vidur_llama-2-7b_mlp.csv").parent)


def test_kernel_tables_fit_per_tp_and_regime(profile: pl.DataFrame) -> None:
    assert set(profile["regime"]) == {"compute", "memory", "attention"}
    assert set(profile.filter(pl.col("source").str.starts_with("vidur"))["tp"]) == {1, 2, 4, 8}
    assert profile["efficiency"].is_between(0.2, 1.0).all()
    vidur = profile.filter(pl.col("source").str.starts_with("vidur"), pl.col("regime") == "compute").sort("tp")
    assert vidur["efficiency"].to_list() == sorted(vidur["efficiency"].to_list(), reverse=True)  # falls with TP
    compute = profile.filter(pl.col("regime") == "compute")
    assert (compute["median_abs_error"] < 0.2).all()  # one factor fits compute-bound GEMMs well
    f1, f8 = factors(profile, "H100", 1), factors(profile, "H100", 8)
    assert f1.compute_efficiency == pytest.approx(0.687, abs=0.01) and f8.memory_efficiency < f1.memory_efficiency
    assert f1.attention_efficiency is not None and 0.5 < f1.attention_efficiency < 0.9
    with pytest.raises(ConfigError, match="no rows for GPU 'H20'"):
        factors(profile, "H20", 1)


def test_calibrate_writes_a_profile_that_estimate_and_replay_use(tmp_path, profile: pl.DataFrame) -> None:
    out = tmp_path / "h100.parquet"
    tables = str(require_shared("kernels/h100/vidur_llama-2-7b_mlp.csv").parent)
    result = run_cli("calibrate", "--tables", tables, "-o", str(out), "--json", "--kernels-out", str(tmp_path / "k.parquet"))
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)) == profile.height
    assert load_profile(out).equals(profile)
    # the tables converted once to measured-kernel rows fit to the same profile (the path --device takes)
    rows = pl.read_parquet(tmp_path / "k.parquet")
    refit = pl.concat([fit_rows(g, src, "H100") for (src,), g in rows.group_by("source", maintain_order=True)])
    assert refit.sort("source", "tp", "regime").equals(profile)
    args = ["estimate", "decode", "--model", "Llama-2-7B", "--gpu", "H100", "--tp", "4", "--batch", "8", "--json"]
    default = json.loads(run_cli(*args).stdout)
    fitted = json.loads(run_cli(*args, "--profile", str(out)).stdout)
    assert fitted["seconds"] > default["seconds"]  # TP-4 kernels reach less of the datasheet than the defaults
    replayed = run_cli("replay", "-s", "disagg-sync", "--steps", "1", "--gpu", "H100", "--set", f"cost.profile={out}")
    assert replayed.returncode == 0 and "efficiencies from" in replayed.stdout, replayed.stderr
    other = run_cli("estimate", "decode", "--model", "Llama-2-7B", "--gpu", "A100", "--profile", str(out))
    assert other.returncode == 2 and "no rows for GPU 'A100'" in other.stderr
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet")
    bad = run_cli("estimate", "decode", "--model", "Llama-2-7B", "--gpu", "H100", "--profile", str(junk))
    assert bad.returncode == 2 and "not a readable profile" in bad.stderr
    empty = run_cli("calibrate", "--tables", str(tmp_path), "-o", str(tmp_path / "x.parquet"))
    assert empty.returncode == 2 and "no kernel tables found" in empty.stderr


def test_the_trace_fit_recovers_a_known_decode_cost_from_replayed_timings() -> None:
    """Closed loop: replay a workload with tau(B) = 2 ms + 0.1 ms x B, hand its request timings to the fit as
    if recorded, and get tau back."""
    rng = np.random.default_rng(3)
    lengths = [rng.integers(20, 400, 160).tolist() for _ in range(3)]
    truth = IterationModel(compute=Linear(2e-3, 1e-4), memory=Linear())
    result = replay(make(lengths, model=truth, max_seqs=32, gen_gpus=1), "disagg-sync", ReplayConfig(fast_path=False))
    r = result.requests
    ns = lambda c: (pl.col(c) * 1e9).cast(pl.Int64)
    recorded = r.select("step", ns("start_s").alias("arrival_ns"), ns("start_s").alias("scheduled_ns"),
                        ns("first_token_s").alias("first_token_ns"), ns("finish_s").alias("finish_ns"),
                        "output_tokens", pl.lit("engine0").alias("engine"))
    # (with no prefill, first token = admission: time per token over out - 1 tokens reads 1/out high)
    _, fit = fit_trace(recorded)
    assert fit.base_s == pytest.approx(2e-3, rel=0.05)
    assert fit.per_seq_s == pytest.approx(1e-4, rel=0.05)


def _iterations(batch: np.ndarray, seconds: np.ndarray, step: int | np.ndarray = 1) -> pl.DataFrame:
    start = np.concatenate([[0.0], np.cumsum(seconds)[:-1]])
    return pl.DataFrame({"step": np.broadcast_to(step, batch.shape).astype(np.int32), "engine": "engine0",
                         "start_ns": (start * 1e9).astype(np.int64), "end_ns": ((start + seconds) * 1e9).astype(np.int64),
                         "requests": batch.astype(np.int32)})


@pytest.mark.parametrize(("rows", "slope", "warmup", "noise", "expected"), [
    (2000, 1e-4, False, 0.4, 1e-4),  # one duration per batch size resolves the slope under 40% noise
    (2000, 0.0, False, 0.4, 0.0),    # constant iteration time: nothing, or a slope within noise of zero
    (8, 1e-4, False, 0.4, None),     # too few iterations to say
    (2000, 1e-4, True, 0.4, 1e-4),   # step 0 (warm-up, 3x slower at small batches) is left out
    # few iterations under contention as bad as a shared CPU's (+-95%): the slope is 1.6 standard errors,
    # and kept, since zero is further off than the estimate
    (28, 1e-4, False, 0.95, 1e-4),
])
def test_iteration_slope(rows: int, slope: float, warmup: bool, noise: float, expected: float | None) -> None:
    rng = np.random.default_rng(1)
    batch = rng.integers(1, 33, rows).astype(float)
    seconds = (2e-3 + slope * batch) * rng.uniform(1 - noise, 1 + noise, rows)
    step = np.where(np.arange(rows) < rows // 4, 0, 1 + np.arange(rows) % 3)
    if warmup:
        seconds = np.where(step == 0, seconds + 4e-3 * (batch < 8), seconds)
    got = iteration_slope(_iterations(batch, seconds, step))
    if expected is None:
        assert got is None
    elif expected == 0.0:
        assert got is None or got[0] < 3 * got[1] < 1e-5
    else:
        assert got is not None and got[0] == pytest.approx(expected, rel=0.25 if noise > 0.5 else 0.1)
        assert (got[0] >= 3 * got[1]) == (noise < 0.5)


def test_recorded_iterations_give_the_slope_that_noisy_request_timings_cannot() -> None:
    """Closed loop as above, with contention noise on every request's decode time (+-40%): the request fit
    cannot resolve the slope; the engine's iterations (one duration per batch size) do, and the requests
    then set the base."""
    rng = np.random.default_rng(3)
    lengths = [rng.integers(20, 400, 160).tolist() for _ in range(3)]
    truth = IterationModel(compute=Linear(2e-3, 1e-4), memory=Linear())
    result = replay(make(lengths, model=truth, max_seqs=32, gen_gpus=1), "disagg-sync", ReplayConfig(fast_path=False))
    r = result.requests.with_columns(
        (pl.col("first_token_s") + (pl.col("finish_s") - pl.col("first_token_s")) * rng.uniform(0.6, 1.4, 480))
        .alias("finish_s"))
    ns = lambda c: (pl.col(c) * 1e9).cast(pl.Int64)
    recorded = r.select("step", ns("start_s").alias("arrival_ns"), ns("start_s").alias("scheduled_ns"),
                        ns("first_token_s").alias("first_token_ns"), ns("finish_s").alias("finish_ns"),
                        "output_tokens", pl.lit("engine0").alias("engine"))
    _, alone = fit_trace(recorded)
    assert alone.per_seq_s == 0.0 and alone.slope_from == "requests"
    batch = rng.integers(1, 33, 3000).astype(float)
    iterations = _iterations(batch, (2e-3 + 1e-4 * batch) * rng.uniform(0.6, 1.4, 3000))
    cost, fit = fit_trace(recorded, iterations=iterations)
    assert fit.slope_from.startswith("3000 iterations, +-") and "slope from 3000 iterations" in str(fit)
    assert fit.per_seq_s == pytest.approx(1e-4, rel=0.1)
    assert fit.base_s == pytest.approx(2e-3, rel=0.1)
    assert cost.iteration_model(1).iteration(16, 1000) == pytest.approx(fit.base_s + 16 * fit.per_seq_s)
