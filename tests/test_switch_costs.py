"""Switch and reload costs from model bytes and the GPU's host link, RollMux's measurements as their check,
weight syncs re-priced on another GPU kind, and scheduler counters that agree with their timelines."""

from __future__ import annotations

import json

import polars as pl
import pytest
from helpers import run_cli
from rltrace.replay.costmodels.switching import ModelState, host_link_bytes_per_s, switch_seconds
from rltrace.replay.loading import Shape, from_bundle
from rltrace.replay.network.network import NetworkConfig
from rltrace.replay.network.weight_sync import reprice_syncs
from rltrace.replay.run import CostConfig, ReplayConfig, replay
from rltrace.sample_traces import sample_path

from rltrace.bundle import open_bundle
from rltrace.calibration import CALIBRATION
from rltrace.catalog import get_gpu

FLOOR_S, LINK_SHARE = CALIBRATION["switch_floor_s"], CALIBRATION["host_link_share"]

TINY = "tiny_rl_cpu"
# RollMux's measurements (arXiv 2512.11306, H800): (params, rollout warm, rollout cold, training warm, training
# cold) seconds: the check of the switch model, never its input
ROLLMUX_MEASURED = ((7e9, 0.9, 38.8, 4.1, 32.7), (32e9, 1.7, 81.7, 5.9, 81.2))


def state(params: float) -> ModelState:
    return ModelState(params=params, weight_bytes=2 * params)  # bf16 serving weights


@pytest.mark.parametrize(
    ("role", "params", "gpu", "tp", "gpus", "moved_bytes"),
    [
        ("rollout", 7e9, "H100", 1, 1, 14e9),  # one GPU loads the whole serving copy
        ("rollout", 7e9, "H100", 4, 1, 14e9 / 4),  # a TP-4 instance: a quarter on each GPU
        ("rollout", 32e9, "A100", 2, 1, 64e9 / 2),
        ("training", 7e9, "H800", 1, 8, (14e9 + 16 * 7e9) / 8),  # weights + Adam state, sharded over 8
        ("training", 1.5e6, "B200", 1, 3, (3e6 + 16 * 1.5e6) / 3),
    ],
)

def test_a_warm_switch_is_the_floor_plus_the_bytes_each_gpu_moves_over_its_host_link(
        role: str, params: float, gpu: str, tp: int, gpus: int, moved_bytes: float) -> None:
    link = get_gpu(gpu).host_link_gbps * 1e9 * LINK_SHARE
    assert switch_seconds(state(params), role, gpu, tp=tp, gpus=gpus) == pytest.approx(FLOOR_S + moved_bytes / link)


def test_switch_costs_scale_with_the_model_and_a_tiny_model_pays_about_the_floor() -> None:
    tiny, small, large = (switch_seconds(state(p), "training", "H100", gpus=8) for p in (1.5e6, 7e9, 32e9))
    assert tiny == pytest.approx(FLOOR_S, rel=2e-3)  # 1.5M parameters: 27 MB over 8 GPUs, 0.1 ms of PCIe
    assert (large - FLOOR_S) / (small - FLOOR_S) == pytest.approx(32 / 7)
    # a faster host link (B200's PCIe Gen6 against A100's Gen4) moves the same state 4x sooner
    b200, a100 = (switch_seconds(state(7e9), "rollout", g) - FLOOR_S for g in ("B200", "A100"))
    assert a100 / b200 == pytest.approx(4.0)
    assert switch_seconds(state(7e9), "rollout", "cpu") > switch_seconds(state(7e9), "rollout", "H100")
    assert host_link_bytes_per_s("no-such-gpu") == host_link_bytes_per_s("cpu")


def test_rollmux_measured_switches_as_a_check_of_the_bytes_model() -> None:
    # RollMux's H800 figures (arXiv 2512.11306) against the model on H800 with one parameter set: rollout
    # instances of TP 1, training sharded over one 8-GPU node. Nothing is fitted to these figures; the
    # docs (docs/schedulers.md, "Switch costs") carry the same table.
    rows = []
    for params, ro_warm, ro_cold, tr_warm, tr_cold in ROLLMUX_MEASURED:
        s = state(params)
        rows.append((params, switch_seconds(s, "rollout", "H800"), ro_warm,
                     switch_seconds(s, "training", "H800", gpus=8), tr_warm,
                     switch_seconds(s, "rollout", "H800", warm=False), ro_cold,
                     switch_seconds(s, "training", "H800", gpus=8, warm=False), tr_cold))
    for _, ro, ro_measured, tr, tr_measured, ro_c, ro_c_measured, tr_c, tr_c_measured in rows:
        assert ro == pytest.approx(ro_measured, rel=0.5)  # rollout warm within 50% (7B -40%, 32B +24%)
        assert tr < tr_measured  # the measured training switch holds a fixed part that bytes do not explain
        assert ro_c < ro_c_measured and tr_c < tr_c_measured
    # what grows with the model does follow its bytes: 7B -> 32B adds 1.8 s measured to a training switch
    (_, _, _, tr7, tr7_m, *_), (_, _, _, tr32, tr32_m, *_) = rows
    assert tr32 - tr7 == pytest.approx(tr32_m - tr7_m, rel=0.1)


def test_colocated_sync_on_a_tiny_recorded_model_pays_tiny_switches() -> None:
    # The tiny RL example (459k parameters, recorded on CPU): colocated-sync's switches are the floor, so a
    # step is about the recorded one (it was 5.7 s a step against 0.7 s with 7B switch costs).
    out = json.loads(run_cli("replay", str(sample_path(TINY)), "-s", "colocated-sync,as-recorded,disagg-sync,rollmux",
                             "--json").stdout)
    colocated, recorded = out["colocated-sync"], out["as-recorded"]
    assert colocated["step_time_s"]["mean"] < 1.5 * recorded["step_time_s"]["mean"]
    # one job alone on rollmux's pools never switches: it is disaggregation, step for step
    assert out["rollmux"]["makespan_s"] == pytest.approx(out["disagg-sync"]["makespan_s"], rel=1e-9)
    assert "warm_switches" not in out["rollmux"]["extra"] and "cold_switches" not in out["rollmux"]["extra"]


def test_a_sync_replayed_on_another_gpu_kind_is_priced_by_the_network_model() -> None:
    bundle = open_bundle(sample_path(TINY))
    here = from_bundle(bundle, Shape(), CostConfig())
    moved = from_bundle(bundle, Shape(gpu="H100"), CostConfig())
    measured, priced = here.jobs[0].sync_s, moved.jobs[0].sync_s
    job = moved.jobs[0]
    assert priced == pytest.approx(reprice_syncs(job.sync_bytes, 1, 2, "H100", tensors=job.sync_tensors))
    assert max(priced) < min(measured) / 100  # 1.8 MB over NVLink, not the CPU's Gloo send
    # the same as routing it through that fabric explicitly
    routed = replay(moved, "as-recorded", ReplayConfig(network=NetworkConfig(topology="nvswitch:gpus=3,gpu=H100")))
    assert routed.metrics["weight_sync_s"] == pytest.approx(sum(priced) / len(priced))


def test_rollart_counters_agree_with_its_timeline() -> None:
    p = from_bundle(open_bundle(sample_path("rollart_qwen3_8b")), Shape(steps=4), CostConfig())
    result = replay(p, "rollart", ReplayConfig())
    extra, kinds = result.metrics["extra"], dict(result.timeline.group_by("kind").len().iter_rows())
    assert extra["stale_aborts"] == kinds["stale_abort"] > 0
    assert extra["stale_running_turns"] == kinds.get("aborted", 0)
    assert result.metrics["aborted_attempts"] == extra["stale_running_turns"] + extra["stale_queued_turns"]
    # a finished turn of a stale trajectory keeps its request span but is never trained on
    trained = result.requests.filter(pl.col("finished")).height - extra["stale_finished_turns"]
    assert result.metrics["samples"] <= trained
