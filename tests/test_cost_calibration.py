"""The cost models' constants kept as data (rltrace/calibration/*.toml): every entry sourced, one
loader, the modules reading it, and no numeric cost constant left in the cost-model code."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from rltrace.replay.costmodels import memory, serving, switching, training
from rltrace.replay.described import from_description, load_description
from rltrace.replay.run import CostConfig, Prepared, ReplayConfig, RunResult, Shape, replay
from rltrace.sample_traces import sample_path

from rltrace.calibration import CALIBRATION, FOLDER, KINDS, Constant, defaults, dumps, load
from rltrace.catalog import get_gpu, get_model
from rltrace.catalog._toml import load_toml
from rltrace.cli import main
from rltrace.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
COSTMODELS = REPO / "replay" / "costmodels"
CALIBRATION_CODE = REPO / "rltrace" / "calibration"
# unit conversions and the numbers every formula has (none of them a measured or fitted figure)
UNITS = {1e12, 1e9, 1e6, 1e3, 1e-3, 1e-6, 1e-9, 0.0, 1.0, 0.5, 2.0}
# structural numbers in formulas, each for a stated reason: (module, value) -> why it is not a cost constant
STRUCTURAL = {
    ("kernels.py", 4.0): "a fused residual-add norm moves 4 x hidden values a token (read two, write two)",
    ("kernels.py", 3.0): "SiLU-and-mul reads 2 x intermediate and writes 1 x",
    ("iteration_costs.py", 8.0): "a QK norm all-reduces two fp32 values a token: 8 bytes",
    ("training.py", 3.0): "forward plus backward: 3 passes over the weights",
    ("parallel.py", 256.0): "the token range an affine fit of a collective is taken over",
    ("profile.py", 2e-05): "a fit's selection threshold: decode-attention kernels below 20 us sit on their floor",
    ("track_record.py", 0.2): "the share of points within 20%, a reporting threshold",
    ("validation.py", 0.9): "the 90th percentile, a reporting statistic",
    ("validation.py", 0.1): "the share within 10%, a reporting threshold",
    ("validation.py", 0.2): "the share within 20%, a reporting threshold",
    ("iteration_fit.py", 1e-12): "a least-squares guard against dividing by zero",
}


def test_every_constant_states_its_source_fit_and_data() -> None:
    assert CALIBRATION.files and len(CALIBRATION.constants) >= 20
    for c in CALIBRATION.constants.values():
        assert c.kind in KINDS and c.unit and c.source, c.name
        if c.kind in ("measured", "fitted"):
            assert c.data, f"{c.name}: a {c.kind} constant names the data it comes from"
        if c.fit:
            script = REPO / c.fit.split()[0]
            assert script.exists(), f"{c.name}: its fit script {script} is not in the repository"
        if c.kind == "fitted":
            assert c.fit, f"{c.name}: a fitted constant names the script that fits it"


def test_the_modules_price_with_the_shipped_values() -> None:
    gib = memory.GIB
    assert (defaults.MEMORY_EFFICIENCY, defaults.COMPUTE_EFFICIENCY) == (CALIBRATION["memory_efficiency"],
                                                                         CALIBRATION["compute_efficiency"])
    figures = serving.KernelFigures.of(CALIBRATION)
    assert figures.gemm_floor_s == CALIBRATION["gemm_floor_s"] and figures.eager_launch_s == 4e-6
    assert figures.gemm_stream[1] == (CALIBRATION["gemm_stream_fp8_ramp_s"], CALIBRATION["gemm_stream_fp8_fraction"])
    assert (memory.non_torch_bytes(1), memory.non_torch_bytes(4)) == (0.25 * gib, 2.07 * gib)
    assert CALIBRATION["nccl_small_latency_s"] == 15e-6 and training.default_mfu(get_model("Qwen3-30B-A3B")) == 0.35
    assert (switching.move_seconds(0, 0, "H100"), switching.move_seconds(0, 0, "H100", warm=False)) == (0.1, 30.0)


def _floats(path: Path) -> set[float]:
    return {n.value for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, float)}


def test_no_numeric_cost_constant_is_left_in_the_code() -> None:
    found = {(p.name, v) for folder in (COSTMODELS, CALIBRATION_CODE) for p in sorted(folder.glob("*.py"))
             for v in _floats(p) - UNITS}
    unexplained = sorted(found - set(STRUCTURAL))
    assert not unexplained, f"move these into rltrace/calibration/*.toml (or state why they are not constants): " \
                            f"{unexplained}"
    assert not set(STRUCTURAL) - found, "a structural number the code no longer has: drop it from the list"


@pytest.mark.parametrize(("text", "message"), [
    ('version = 1\n[constants.x]\nvalue = 1.0\nunit = "s"\nkind = "guessed"\nsource = "s"\nfit = ""\ndata = ""\n',
     "kind must be one of"),
    ('version = 1\n[constants.x]\nvalue = "fast"\nunit = "s"\nkind = "assumed"\nsource = "s"\nfit = ""\ndata = ""\n',
     "value must be a number"),
    ('version = 1\n[constants.x]\nvalue = 1.0\n', "needs value, unit, kind, source, fit, data"),
    ('[constants.x]\nvalue = 1.0\n', "needs an integer version"),
    ("version = = 1\n", "invalid TOML"),
])
def test_a_bad_calibration_file_is_refused_naming_it(tmp_path: Path, text: str, message: str) -> None:
    bad = tmp_path / "mine.toml"
    bad.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load([bad])


def test_a_constant_defined_twice_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "copy.toml"
    copy.write_text((FOLDER / "serving.toml").read_text())
    with pytest.raises(ConfigError, match="memory_efficiency is also in serving.toml"):
        load([FOLDER / "serving.toml", copy])
    assert load([FOLDER / "serving.toml"])["gemm_floor_s"] == 2.44e-6


def test_the_gpu_catalog_holds_datasheet_figures_and_the_fitted_kernels_sit_apart(tmp_path: Path) -> None:
    catalog = REPO / "rltrace" / "catalog"
    datasheet = load_toml(catalog / "gpus.toml")["gpus"]
    fitted = load_toml(catalog / "fused_moe.toml")
    assert not [f"{g}.{k}" for g, raw in datasheet.items() for k in raw if k.startswith("moe_")]
    assert isinstance(fitted["version"], int) and set(fitted["gpus"]) <= set(datasheet)
    h100 = get_gpu("H100")
    assert (h100.moe_fixed_us, h100.moe_stream_efficiency) == (fitted["gpus"]["H100"]["moe_fixed_us"],
                                                               fitted["gpus"]["H100"]["moe_stream_efficiency"])
    assert "moe_kernel_efficiency.py" in h100.moe_source and get_gpu("H20").moe_fixed_us == 0
    # a user's own [gpus.H100] is taken as given: no fitted figures slip into it
    mine = tmp_path / "gpus.toml"
    mine.write_text("[gpus.H100]\nbf16_tflops = 900\nhbm_gbps = 3000\nmemory_gb = 80\nnvlink_gbps = 900\n")
    assert get_gpu("H100", mine).moe_fixed_us == 0


def _mine(tmp_path: Path, **values: float) -> Path:
    """A user's calibration file: the shipped entries of ``values``' names, at those values."""
    entries = [dataclasses.replace(CALIBRATION.constants[name], value=value, source="my own measurement")
               for name, value in values.items()]
    path = tmp_path / "mine.toml"
    path.write_text(dumps(entries, "my H100 measurements", version=3))
    return path


def test_a_users_calibration_replaces_the_shipped_constants_of_its_names(tmp_path: Path) -> None:
    mine = _mine(tmp_path, switch_floor_s=5.0, memory_efficiency=0.3)
    cal = CALIBRATION.overridden(mine)
    assert (cal["switch_floor_s"], cal["memory_efficiency"]) == (5.0, 0.3)
    assert cal["gemm_floor_s"] == CALIBRATION["gemm_floor_s"] and len(cal.constants) == len(CALIBRATION.constants)
    assert CALIBRATION["switch_floor_s"] == 0.1  # the shipped object is not touched
    assert cal.describe()[str(mine)]["version"] == 3 and set(CALIBRATION.files) < set(cal.describe())


@pytest.mark.parametrize(("entry", "message"), [
    (Constant("warp_speed", 2.0, "s", "assumed", "s", "", "", ""), "warp_speed name no calibrated constant"),
    (Constant("switch_floor_s", 100.0, "ms", "measured", "s", "", "", ""), "switch_floor_s is in 's', not 'ms'"),
])
def test_a_users_calibration_names_shipped_constants_in_their_units(tmp_path: Path, entry: Constant,
                                                                    message: str) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(dumps([entry], "mine"))
    with pytest.raises(ConfigError, match=message):
        CALIBRATION.overridden(path)


def _described(tmp_path: Path, calibration: str = "") -> tuple[Prepared, RunResult]:
    description = tmp_path / "run.toml"
    description.write_text('model = "Qwen2.5-7B"\nframework = "verl"\n[cluster]\ngpu = "H100"\ngpus = 8\n'
                           "[batch]\nprompts = 8\nsamples = 4\nmax_response = 2048\nmean_response = 900\nsteps = 2\n")
    config = ReplayConfig(cost=CostConfig(calibration=calibration))
    prepared = from_description(load_description(description), Shape(), config.cost)
    return prepared, replay(prepared, "colocated-sync", config)


def test_a_runs_calibration_reaches_every_cost_it_prices(tmp_path: Path) -> None:
    """One calibration object, passed down: a switch's floor (the schedulers' and the framework's switch costs), a
    kernel's floor (the roofline's kernels) and Adam's bytes (the optimizer step) all move, and the run records it."""
    shipped, before = _described(tmp_path)
    mine = _mine(tmp_path, switch_floor_s=5.0, gemm_floor_s=1e-4, adam_bytes_per_param=64.0, memory_efficiency=0.3)
    own, after = _described(tmp_path, str(mine))
    was, now = before.metrics["phases_s_per_step"], after.metrics["phases_s_per_step"]
    assert now["sleep"] - was["sleep"] == pytest.approx(4.9, abs=0.2)
    assert now["wake"] - was["wake"] == pytest.approx(4.9, abs=0.2)
    assert now["generation"] > 2 * was["generation"]  # every GEMM takes at least 100 us
    # each optimizer step reads 48 more bytes a parameter of its share of the model
    adam = 48.0 * get_model("Qwen2.5-7B").params / own.cluster.train_gpus / get_gpu("H100").hbm_bytes_per_s
    added = [(a - b) / adam for a, b in zip(own.jobs[0].optimizer_s, shipped.jobs[0].optimizer_s)]
    assert all(n >= 0.99 and n == pytest.approx(round(n)) for n in added), added
    assert after.config["calibration"][str(mine)]["version"] == 3
    assert after.config["replay"]["cost"]["memory_efficiency"] == 0.3
    assert before.config["replay"]["cost"]["memory_efficiency"] == CALIBRATION["memory_efficiency"]


def test_a_missing_calibration_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = str(sample_path("tiny_rl_cpu"))
    assert main(["replay", bundle, "-s", "disagg-sync", "--set", f"cost.calibration={tmp_path / 'none.toml'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "none.toml" in err and len(err.splitlines()) == 1


def test_the_docs_example_calibration_is_taken(tmp_path: Path) -> None:
    text = (REPO / "docs" / "costmodels-calibration.md").read_text()
    example = text.split("**Your own constants**", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "mine.toml").write_text(example)
    assert CALIBRATION.overridden(tmp_path / "mine.toml")["switch_floor_s"] == 0.4
