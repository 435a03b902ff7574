"""The cost models' constants kept as data (rltrace/calibration/*.toml): every entry sourced, one
loader, the modules reading it, and no numeric cost constant left in the cost-model code."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from rltrace.replay.costmodels import memory, parallel, serving, switching, training

from rltrace.calibration import CALIBRATION, FOLDER, KINDS, defaults, load
from rltrace.catalog import get_gpu, get_model
from rltrace.catalog._toml import load_toml
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
    uncatalogued = dataclasses.replace(get_gpu("H100"), name="my-gpu")  # no topology names it: the fallback ring
    assert parallel.collective_seconds(uncatalogued, "all_reduce", 8, 1.0) == pytest.approx(15e-6, rel=1e-3)
    assert training.default_mfu(get_model("Qwen3-30B-A3B")) == 0.35
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
    ('version = 1\n[constants.x]\nvalue = 1.0\n', r"x lacks unit, kind, source, fit, data \(each entry needs "),
    ('version = 1\nconstants = 5\n', r"constants must be tables \(\[constants.NAME\]\), got 5"),
    ('version = 1\n[constants]\nx = 5\n', r"constant x must be a table \(\[constants.x\]\), got 5"),
    ('version = 1\n[other]\nx = 5\n', "unknown key 'other'"),
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

