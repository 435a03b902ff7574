"""The wheel: namespace layout, package data, and a clean install in an empty venv (no torch)."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from helpers import REPO

pytestmark = pytest.mark.live  # a real job, engine or install: not in `make test-fast`


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(REPO)],
        check=True,
        timeout=600,
    )
    (path,) = out.glob("rltrace-*.whl")
    return path


def test_wheel_installs_subpackages_inside_the_rltrace_namespace(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"rltrace"}
    for module in ("collectors", "replay", "dashboards", "sample_traces", "catalog", "synth", "cli"):
        assert f"rltrace/{module}/__init__.py" in names
    assert "rltrace/sample_traces/rollpacker_qwen7b/manifest.json" in names
    assert "rltrace/sample_traces/streamrl_qwen32b/requests.parquet" in names
    assert "rltrace/catalog/models.toml" in names
    assert "rltrace/synth/presets/rollpacker.toml" in names
    # what `fabric validate` and `estimate validate` read
    for data in ("replay/network/data/multinode_nccl.csv", "replay/network/data/one_node_nccl.parquet",
                 "replay/costmodels/data/generation_validation.csv", "replay/costmodels/data/generation_heldout.csv",
                 "replay/costmodels/data/training_heldout.csv", "replay/costmodels/data/offline_heldout.csv"):
        assert f"rltrace/{data}" in names
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    torch_reqs = [line for line in metadata.splitlines() if line.startswith("Requires-Dist: torch")]
    # a lower bound: installed into a job's environment, the extra never replaces the torch its framework pinned
    assert torch_reqs == ['Requires-Dist: torch>=2.4; extra == "torch"']


def test_fresh_venv_install_runs_inspect_without_torch(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([py, "-m", "pip", "install", "--quiet", str(wheel)], check=True, timeout=900)
    work = tmp_path / "elsewhere"
    work.mkdir()
    shown = subprocess.run([env_dir / "bin" / "rltrace", "inspect"], cwd=work, capture_output=True, text=True,
                           check=False)
    assert shown.returncode == 0, shown.stderr
    assert "rollpacker_qwen7b" in shown.stdout and "max_over_median" in shown.stdout
    ok = subprocess.run([py, "-c", "import rltrace.replay, rltrace.collectors, rltrace.dashboards"], cwd=work,
                        check=False)
    assert ok.returncode == 0
    for top in ("collectors", "replay", "dashboards", "torch"):
        missing = subprocess.run([py, "-c", f"import {top}"], cwd=work, capture_output=True, text=True, check=False)
        assert missing.returncode != 0 and "ModuleNotFoundError" in missing.stderr, top


def test_tests_exercise_the_installed_package() -> None:
    """`make test` installs a wheel; importing rltrace from the source tree would hide packaging bugs."""
    import rltrace.sample_traces

    import rltrace

    editable = (REPO / "rltrace" / "__init__.py").resolve() == Path(rltrace.__file__).resolve()
    if editable:  # a developer's `pip install -e .`: the mapped subpackages must still resolve
        assert Path(rltrace.sample_traces.__file__).parent == REPO / "sample_traces"
    else:
        assert "site-packages" in rltrace.__file__


def test_public_names_resolve_lazily() -> None:
    import rltrace

    for name in rltrace.__all__:
        assert getattr(rltrace, name) is not None, name
