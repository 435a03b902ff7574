"""A run's own calibration (``--set cost.calibration=FILE.toml``): its entries replace the shipped constants of the
same names, checked, and the one object the replay builds from it reaches every cost it prices."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rltrace.replay.costmodels import parallel
from rltrace.replay.described import from_description, load_description
from rltrace.replay.jobs import JobSpec, prepare_jobs
from rltrace.replay.loading import Shape, from_bundle
from rltrace.replay.run import CostConfig, Prepared, ReplayConfig, replay
from rltrace.sample_traces import sample_path

from rltrace.bundle import open_bundle
from rltrace.calibration import CALIBRATION, Constant, CostCalibration, dumps
from rltrace.catalog import get_gpu, get_model
from rltrace.cli import main
from rltrace.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
DESCRIBED = ('model = "Qwen2.5-7B"\nframework = "verl"\n[cluster]\ngpu = "H100"\ngpus = 8\n'
             "[batch]\nprompts = 8\nsamples = 4\nmax_response = 2048\nmean_response = 900\nsteps = 2\n")
SAMPLE = "streamrl_qwen32b"


def _mine(tmp_path: Path, **values: float) -> Path:
    """A user's calibration file: the shipped entries of ``values``' names, at those values."""
    entries = [dataclasses.replace(CALIBRATION.constants[name], value=value, source="my own measurement")
               for name, value in values.items()]
    path = tmp_path / "mine.toml"
    path.write_text(dumps(entries, "my H100 measurements", version=3))
    return path


def _described(tmp_path: Path, calibration: str = "") -> Prepared:
    description = tmp_path / "run.toml"
    description.write_text(DESCRIBED)
    return from_description(load_description(description), Shape(), CostConfig(calibration=calibration))


def test_its_entries_replace_the_shipped_constants_of_their_names(tmp_path: Path) -> None:
    mine = _mine(tmp_path, switch_floor_s=5.0, memory_efficiency=0.3)
    cal = CALIBRATION.overridden(mine)
    assert (cal["switch_floor_s"], cal["memory_efficiency"]) == (5.0, 0.3)
    assert cal["gemm_floor_s"] == CALIBRATION["gemm_floor_s"] and len(cal.constants) == len(CALIBRATION.constants)
    assert CALIBRATION["switch_floor_s"] == 0.1  # the shipped object is not touched
    assert cal.describe()[str(mine.resolve())]["version"] == 3 and set(CALIBRATION.files) < set(cal.describe())
    copy = pickle.loads(pickle.dumps(cal))  # a process pool or Ray can carry it
    assert copy == cal and copy is not cal and copy.constants["switch_floor_s"].extra == {}
    again = CALIBRATION.overridden(mine)  # built apart, equal: one key of a cache
    assert {cal: 1}[again] == 1 and hash(copy) == hash(again) != hash(CALIBRATION)


def test_a_file_named_like_a_shipped_one_keeps_both_digests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _mine(tmp_path, switch_floor_s=5.0).rename(tmp_path / "training.toml")
    described = CALIBRATION.overridden("training.toml").describe()
    assert described["training.toml"] == CALIBRATION.describe()["training.toml"]
    assert described[str(tmp_path / "training.toml")]["version"] == 3


@pytest.mark.parametrize(("entry", "message"), [
    (Constant("warp_speed", 2.0, "s", "assumed", "s", "", "", ""), "no calibrated constant is named warp_speed"),
    (Constant("memory_eficiency", 0.5, "fraction of HBM bandwidth", "assumed", "s", "", "", ""),
     r"no calibrated constant is named memory_eficiency \(nearest: memory_efficiency\)"),
    (Constant("switch_floor_s", 100.0, "ms", "measured", "s", "", "", ""), "switch_floor_s is in 's', not 'ms'"),
    (Constant("switch_floor_s", -1.0, "s", "measured", "s", "", "", ""), r"switch_floor_s must be finite and >= 0"),
    (Constant("fp8_gemm_share", 0.0, "ratio", "fitted", "s", "", "", ""), r"fp8_gemm_share must be finite and > 0"),
    (Constant("sync_gbps", float("inf"), "GB/s", "assumed", "s", "", "", ""), r"sync_gbps must be finite and > 0"),
    (Constant("host_link_share", float("nan"), "fraction of the host link", "assumed", "s", "", "", ""),
     r"host_link_share must be in \(0, 1\], got nan"),
    (Constant("gpu_memory_utilization", 1.5, "fraction of GPU memory", "setting", "s", "", "", ""),
     r"gpu_memory_utilization must be in \(0, 1\], got 1.5"),
    (Constant("dense_train_mfu", 2.0, "fraction of peak FLOP/s", "measured", "s", "", "", ""),
     r"dense_train_mfu must be in \(0, 1\]"),
])
def test_an_entry_names_a_shipped_constant_in_its_unit_with_a_sane_value(tmp_path: Path, entry: Constant,
                                                                         message: str) -> None:
    path = tmp_path / "mine.toml"
    odd = {"nan": entry.value != entry.value, "inf": entry.value == float("inf")}  # TOML spells them so
    text = dumps([dataclasses.replace(entry, value=1.0) if any(odd.values()) else entry], "mine")
    path.write_text(text.replace("value = 1.0", f"value = {next(k for k, v in odd.items() if v)}")
                    if any(odd.values()) else text)
    with pytest.raises(ConfigError, match=message):
        CALIBRATION.overridden(path)


@pytest.mark.parametrize("file", ["none.toml", "bad.toml"])
def test_a_bad_calibration_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       file: str) -> None:
    (tmp_path / "bad.toml").write_text(dumps([Constant("warp_speed", 2.0, "s", "assumed", "s", "", "", "")], "bad"))
    bundle = str(sample_path("tiny_rl_cpu"))
    assert main(["replay", bundle, "-s", "disagg-sync", "--set", f"cost.calibration={tmp_path / file}"]) == 2
    err = capsys.readouterr().err.strip()
    assert file in err and len(err.splitlines()) == 1


def _calibrations(value: Any, seen: set[int]) -> Iterator[CostCalibration]:
    """Every reference to a CostCalibration reachable from ``value`` through dataclass fields and lists."""
    if isinstance(value, CostCalibration):
        yield value
        return
    if id(value) in seen:
        return
    seen.add(id(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _calibrations(getattr(value, f.name, None), seen)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _calibrations(item, seen)


def _prepared(kind: str, tmp_path: Path, calibration: str) -> Prepared:
    cost = CostConfig(calibration=calibration)
    if kind == "recording":
        return from_bundle(open_bundle(sample_path("tiny_rl_cpu")), Shape(), cost)
    if kind == "synthetic":
        return from_bundle(open_bundle(sample_path(SAMPLE)), Shape(), cost)
    if kind == "described":
        return _described(tmp_path, calibration)
    specs = [JobSpec(name=f"j{i}", bundle=str(sample_path(SAMPLE)), arrival_s=60.0 * i) for i in range(2)]
    return prepare_jobs(specs, Shape(), cost)


@pytest.mark.parametrize("kind", ["recording", "synthetic", "described", "job list"])
def test_one_calibration_object_is_passed_down_to_every_cost(tmp_path: Path, kind: str) -> None:
    prepared = _prepared(kind, tmp_path, str(_mine(tmp_path, switch_floor_s=5.0)))
    assert prepared.calibration["switch_floor_s"] == 5.0
    found = list(_calibrations(prepared, set()))
    assert len(found) > len(prepared.jobs) and all(c is prepared.calibration for c in found)


def test_a_switch_floor_a_kernel_floor_and_adams_bytes_all_move_a_described_run(tmp_path: Path) -> None:
    config = ReplayConfig()
    shipped = _described(tmp_path)
    mine = _mine(tmp_path, switch_floor_s=5.0, gemm_floor_s=1e-4, adam_bytes_per_param=64.0)
    own = _described(tmp_path, str(mine))
    before, after = (replay(p, "colocated-sync", config) for p in (shipped, own))
    was, now = before.metrics["phases_s_per_step"], after.metrics["phases_s_per_step"]
    assert now["sleep"] - was["sleep"] == pytest.approx(4.9, abs=0.2)  # the framework's own switch costs
    assert now["wake"] - was["wake"] == pytest.approx(4.9, abs=0.2)
    assert now["generation"] > 2 * was["generation"]  # every GEMM takes at least 100 us
    d = load_description(tmp_path / "run.toml")
    steps = d.training.epochs * max(d.batch.prompts * d.batch.samples // d.train_batch, 1)  # optimizer steps a step
    adam = 48.0 * get_model("Qwen2.5-7B").params / own.cluster.train_gpus / get_gpu("H100").hbm_bytes_per_s
    added = [a - b for a, b in zip(own.jobs[0].optimizer_s, shipped.jobs[0].optimizer_s)]
    assert added == pytest.approx([steps * adam] * d.batch.steps)
    assert after.config["calibration"][str(mine.resolve())]["version"] == 3
    assert after.config["replay"]["cost"]["memory_efficiency"] is None  # unset: the calibration's, as recorded there


def test_the_colocated_schedulers_switches_take_the_runs_floor(tmp_path: Path) -> None:
    """A recorded job's switches are the scheduler's own (no framework profile): its floor is the run's."""
    config = ReplayConfig()
    bundle = open_bundle(sample_path(SAMPLE))
    runs = [replay(from_bundle(bundle, Shape(gpu="H800"), CostConfig(calibration=c)), "colocated-sync", config)
            for c in ("", str(_mine(tmp_path, switch_floor_s=5.0)))]
    steps = len(runs[0].steps)
    switches = (runs[1].metrics["makespan_s"] - runs[0].metrics["makespan_s"]) / 4.9
    assert round(switches) in (2 * steps - 1, 2 * steps) and switches == pytest.approx(round(switches), abs=0.05)


def test_an_unusable_path_is_one_error() -> None:
    with pytest.raises(ConfigError, match="not a usable path"):
        CostConfig(calibration="mine\x00.toml")


def test_a_zero_switch_floor_is_taken(tmp_path: Path) -> None:
    assert CALIBRATION.overridden(_mine(tmp_path, switch_floor_s=0.0))["switch_floor_s"] == 0.0


def test_a_collective_on_an_uncatalogued_gpu_takes_the_runs_latency(tmp_path: Path) -> None:
    cal = CALIBRATION.overridden(_mine(tmp_path, nccl_small_latency_s=1e-3))
    gpu = dataclasses.replace(get_gpu("H100"), name="my-gpu")
    assert parallel.collective_seconds(gpu, "all_reduce", 8, 1.0, calibration=cal) == pytest.approx(1e-3, rel=1e-3)


def test_the_docs_example_is_taken(tmp_path: Path) -> None:
    text = (REPO / "docs" / "costmodels-calibration.md").read_text()
    example = text.split("**Your own constants**", 1)[1].split("\n```toml\n", 1)[1].split("\n```\n", 1)[0]
    (tmp_path / "mine.toml").write_text(example + "\n")
    assert CALIBRATION.overridden(tmp_path / "mine.toml")["switch_floor_s"] == 0.4
