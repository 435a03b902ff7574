"""Per-request latency of a replay: queueing, TTFT, TPOT and end-to-end, per request and as percentiles."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from replay_helpers import TAU, make
from rltrace.replay.costmodels.generation import FittedGeneration
from rltrace.replay.costmodels.iteration import IterationModel
from rltrace.replay.run import ReplayConfig, replay

KEYS = {"mean", "p50", "p90", "p99", "max"}


def test_one_slot_instance_queues_requests_in_turn() -> None:
    # One instance that runs one sequence at a time: each request waits for the ones before it.
    prepared = make([[100, 20, 30]], max_seqs=1)
    prefill = 0.05
    prepared.jobs[0].generation = FittedGeneration(model=IterationModel.fixed(TAU), prefill_base_s=prefill)
    req = replay(prepared, "disagg-sync", ReplayConfig()).requests.sort("request")
    runs = [prefill + n * TAU for n in (100, 20, 30)]  # each request: its prefill, then one iteration per token
    begins = np.concatenate([[0.0], np.cumsum(runs)[:-1]])
    assert req["submit_s"].to_list() == [0.0, 0.0, 0.0]
    assert np.allclose(req["queue_s"].to_numpy(), begins)
    assert np.allclose(req["ttft_s"].to_numpy(), begins + prefill)
    assert np.allclose(req["e2e_s"].to_numpy(), begins + runs)
    assert np.allclose(req["tpot_s"].to_numpy(), [n * TAU / (n - 1) for n in (100, 20, 30)])
    # e2e = TTFT + TPOT x (tokens - 1), for every request
    parts = req["ttft_s"] + req["tpot_s"] * (req["output_tokens"] - 1)
    assert np.allclose(parts.to_numpy(), req["e2e_s"].to_numpy())


def test_metrics_carry_percentiles_and_both_engine_paths_agree() -> None:
    rng = np.random.default_rng(3)
    lengths = [rng.integers(2, 400, 64).tolist() for _ in range(3)]
    prepared = make(lengths, max_seqs=16, gen_gpus=2, train_s=0.3)
    results = [replay(prepared, "one-step-async", ReplayConfig(fast_path=fast)) for fast in (True, False)]
    fast, slow = results
    lat = fast.metrics["latency"]
    assert lat["requests"] == 3 * 64
    for col in ("queue_s", "ttft_s", "tpot_s", "e2e_s"):
        assert set(lat[col]) == KEYS
        values = fast.requests[col].to_numpy()
        assert lat[col]["p50"] == pytest.approx(np.percentile(values, 50))
        assert lat[col]["p99"] == pytest.approx(np.percentile(values, 99))
        assert lat[col]["max"] == pytest.approx(values.max())
        assert lat[col]["p50"] <= lat[col]["p90"] <= lat[col]["p99"] <= lat[col]["max"]
        assert all(np.isclose(lat[col][k], slow.metrics["latency"][col][k]) for k in KEYS), col
    assert lat["queue_s"]["max"] > 0  # 16 slots per instance for 32 requests each: half of them wait


def test_every_scheduler_of_a_cli_replay_writes_latency(tmp_path) -> None:
    out = tmp_path / "runs"
    proc = run_cli("replay", "-s", "disagg-sync,fully-async,rollart,rollpacker", "--steps", "2", "--replicates", "0",
                   "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for name in ("disagg-sync", "fully-async", "rollart", "rollpacker"):
        metrics = json.loads((out / name / "metrics.json").read_text())
        lat = metrics["latency"]
        assert lat["requests"] > 0, name
        assert 0 < lat["ttft_s"]["p50"] <= lat["e2e_s"]["p50"], name
        assert 0 < lat["tpot_s"]["p50"] < lat["e2e_s"]["p50"], name
        printed = f"latency ({name}, {lat['requests']:,} requests, p50 / p99): queueing "
        ttft = f"TTFT {lat['ttft_s']['p50']:.3g} / {lat['ttft_s']['p99']:.3g} s"
        assert printed in proc.stdout and ttft in proc.stdout
