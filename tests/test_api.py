"""The library API: ``rltrace.compare`` returns polars frames and run folders, and the CLI gives the same numbers."""

from __future__ import annotations

import gzip
import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, run_cli

import rltrace
from rltrace.analysis import verdict
from rltrace.analysis.runs import load_runs
from rltrace.summary import summarize

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
    again = rltrace.compare("rollpacker_qwen7b", SCHEDULERS[:1], steps=2)
    again.write(out)  # the other run of the first write stays, and the notes say so
    assert any(f"also holds {SCHEDULERS[1]} from an earlier replay" in n for n in again.notes)
    assert cmp.report(tmp_path / "r.html").stat().st_size > 100_000
    shown = json.loads(run_cli("replay", "rollpacker_qwen7b", "-s", ",".join(SCHEDULERS), "--steps", "2",
                               "--replicates", "0", "--json").stdout)
    for row in table.iter_rows(named=True):
        assert shown[row["run"]]["same_work"]["samples_per_s"] == pytest.approx(row["samples_per_s"], rel=1e-12)
    with pytest.raises(rltrace.ConfigError, match="unknown scheduler"):
        rltrace.compare(None, "disagg-sync,nosuch")
    with pytest.raises(rltrace.ConfigError, match="baseline"):
        cmp.report(tmp_path / "x.html", baseline="rollart")
    # the report is written as `replay --dashboard` writes it: through a temporary file, gzip for .gz
    assert gzip.decompress(cmp.report(tmp_path / "r.html.gz").read_bytes()).startswith(b"<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "r.html.gz", "runs"]


def test_the_notebook_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["compare.py", str(tmp_path / "out")])
    runpy.run_path(str(REPO / "examples" / "notebook" / "compare.py"), run_name="__main__")
    printed = capsys.readouterr().out
    assert "fastest on the recorded work:" in printed and (tmp_path / "out" / "report.html").is_file()


@pytest.mark.parametrize(("call", "said"), [
    (lambda: rltrace.compare("rollpacker_qwen7b", 3), "takes scheduler names"),
    (lambda: rltrace.compare("rollpacker_qwen7b", ["disagg-sync", 3]), "takes scheduler names"),
    (lambda: rltrace.compare("rollpacker_qwen7b", "disagg-sync", replicates=-1), "replicates must be >= 0"),
    (lambda: rltrace.compare("rollpacker_qwen7b", "disagg-sync", topology="rail:nodes=4,gpu=H800",
                             settings=["network.topology=fat-tree:k=8"]),
     "topology= / sync_strategy= and --set 'network.topology=fat-tree:k=8' both set network.topology: give one"),
    (lambda: rltrace.compare("rollpacker_qwen7b", "disagg-sync", replicates="3"), "replicates must be an integer"),
    (lambda: rltrace.compare("rollpacker_qwen7b", "disagg-sync", stepz=2),
     "unknown argument 'stepz' (did you mean steps?)"),
    (lambda: rltrace.compare("rollpacker_qwen7b", "disagg-sync", gpu="H20,H800"), "give gen_gpu and train_gpu"),
    (lambda: rltrace.compare("rollpacker_qwen7b", "disagg-sync", source_steps="0:2"),
     "source_steps takes recorded step numbers"),
    (lambda: rltrace.compare("tiny_rl_cpu", "disagg-sync", gen_gpu="H100"),
     "from the recorded cpu training devices to H100 generation GPUs have no network model"),
    (lambda: rltrace.compare("rollpacker_qwen7b", ["disagg-sync", ""]), "has an empty name"),
    # ran, unchanged from the run without it: the CLI and a sweep refuse a strategy without a fabric
    (lambda: rltrace.compare("rollpacker_qwen7b", "disagg-sync", steps=2, sync_strategy="tree"), "needs a topology"),
    (lambda: rltrace.compare("rollpacker_qwen7b", "disagg-sync", steps=2, settings="network.sync_strategy=tree"),
     "sync_strategy='tree'"),
    (lambda: rltrace.compare("rollpacker_qwen7b", "colocated-sync", steps=2, gen_gpu="H20", train_gpu="H800"),
     "runs generation and training on the same GPUs"),
    (lambda: rltrace.analysis.diagnose.diagnose(3), "diagnose takes a bundle, a bundle folder or a sample name"),
    (lambda: rltrace.analysis.diagnose.diagnose("tiny_rl_faults", replicates=1), "replicates must be 0 (off)"),
    (lambda: rltrace.compare("tiny_rl_cpu", "disagg-sync", samples=4), "(did you mean samples_per_prompt?)"),
    # a TypeError or AttributeError from deep inside, or a dict's keys read as items
    (lambda: rltrace.compare("rollpacker_qwen7b", "disagg-sync", steps=1, settings=5), "settings takes"),
    (lambda: rltrace.compare("rollpacker_qwen7b", "disagg-sync", steps=1, settings=[5]), "settings takes"),
    (lambda: rltrace.compare(5, "disagg-sync"), "a bundle is a folder's path or a shipped sample's name, got 5"),
    (lambda: rltrace.open(123), "a bundle is a folder's path or a shipped sample's name, got 123"),
    # a TypeError from pathlib, or polars' ColumnNotFoundError / an AttributeError on 'table'
    (lambda: rltrace.compare(None, "rollmux", jobs=5), "jobs must be a path (a string or pathlib.Path), got 5"),
    (lambda: load_runs(5), "load_runs takes a run folder's path or a non-empty list of them, got 5"),
    (lambda: load_runs([]), "load_runs takes a run folder's path or a non-empty list of them, got []"),
    (lambda: verdict.table([]), "table takes a non-empty list of runs"),
    (lambda: summarize("rollpacker_qwen7b"), "summarize takes an opened bundle"),
])
def test_wrong_arguments_raise_one_config_error(call, said: str) -> None:
    with pytest.raises(rltrace.errors.RltraceError) as info:  # ConfigError, or BundleError for a bundle's name
        call()
    assert said in str(info.value)


def test_the_api_takes_what_the_cli_takes_and_says_what_it_left_out() -> None:
    described = REPO / "examples" / "described" / "qwen3_30b_a3b_colocated.toml"
    listed = rltrace.compare(described, ["all"], settings="cost.train_mfu=0.4", steps=1)  # as "all", one setting
    assert "as-recorded" not in listed.results and "colocated-sync" in listed.results
    assert any("as-recorded replays a recording as it ran" in n for n in listed.notes)
    assert len(repr(listed)) < 400 and "notes" in repr(listed)
    found = rltrace.analysis.diagnose.diagnose("tiny_rl_faults", replicates=0)  # a sample's name, as the CLI takes
    assert {"straggler", "slow_transfer", "config"} <= set(found.findings["kind"])


def test_numpy_numbers_and_generators_are_taken_as_the_builtins_are() -> None:
    import numpy as np

    cmp = rltrace.compare("tiny_rl_cpu", ("disagg-sync",), replicates=np.int64(0),
                          source_steps=(int(s) for s in np.arange(1, 3)))  # a generator, read once
    assert cmp.prepared.jobs[0].steps == 2
    assert rltrace.api.named("all,") is False and rltrace.api.named(list(rltrace.api.BASELINES)) is False
    assert rltrace.api.named(["disagg-sync"]) is True


def test_runs_read_back_in_the_order_compared_and_notes_are_the_clis(tmp_path: Path) -> None:
    """load_runs sorted a folder's runs by name, so its table and report took another baseline than the replay's
    (rollpacker against disagg-sync 0.81x; read back, disagg-sync against rollpacker 1.23x); and notes lacked the
    track record and the runs' own notes the CLI prints (a topology's GPUs unlike the replay's)."""
    cmp = rltrace.compare("rollpacker_qwen7b", ["rollpacker", "disagg-sync"], steps=1, topology="fat-tree:k=8")
    cmp.write(tmp_path / "runs")
    back = verdict.table(load_runs(tmp_path / "runs"))
    assert back["run"].to_list() == ["rollpacker", "disagg-sync"] and back["baseline"].to_list() == [True, False]
    assert back["samples_per_s_x"].to_list() == pytest.approx(cmp.table()["samples_per_s_x"].to_list(), rel=1e-12)
    # a damaged order file was read as none: the runs came back by name, under another baseline, without a word
    (tmp_path / "runs" / "runs.json").write_text('{"runs": "rollpacker"}')
    with pytest.raises(rltrace.ConfigError, match=r"runs\.json: not the run order a replay writes"):
        load_runs(tmp_path / "runs")
    (tmp_path / "runs" / "runs.json").unlink()
    (tmp_path / "runs" / "runs.json").mkdir()
    with pytest.raises(rltrace.ConfigError, match=r"runs\.json: cannot read \(Is a directory\)"):
        load_runs(tmp_path / "runs")
    (tmp_path / "runs" / "runs.json").rmdir()
    (tmp_path / "runs" / "runs.json").write_text("{")
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "runs.json").write_text("{")  # no runs to order: what the folder lacks is said
    with pytest.raises(rltrace.ConfigError, match="not a run folder .no metrics.json. and holds none"):
        load_runs(tmp_path / "none")
    cmp.write(tmp_path / "runs")  # a replay writing there again replaces it
    assert [r.name for r in load_runs(tmp_path / "runs")] == ["rollpacker", "disagg-sync"]
    assert any(n.startswith("generation cost's track record") for n in cmp.notes)
    assert any("the topology's GPUs are H100s, the training GPUs H800s" in n for n in cmp.notes)
    shown = run_cli("replay", "rollpacker_qwen7b", "-s", "rollpacker,disagg-sync", "--steps", "1", "--topology",
                    "fat-tree:k=8", "--replicates", "0", "--json")
    assert [line.removeprefix("note: ") for line in shown.stderr.splitlines() if line.startswith("note: ")] == \
        cmp.notes  # --json printed none


def test_settings_as_a_mapping_and_outputs_checked_as_the_cli_checks_them(tmp_path: Path) -> None:
    """A mapping of settings was read as its keys ("expected key=value"); a report into a missing folder or a
    run folder onto a file were an OSError from deep inside."""
    as_text = rltrace.compare("tiny_rl_cpu", "disagg-sync", settings="cost.train_mfu=0.3", gpu="H100")
    as_map = rltrace.compare("tiny_rl_cpu", "disagg-sync", settings={"cost.train_mfu": 0.3}, gpu="H100")
    assert as_map.metrics().equals(as_text.metrics())
    slow = rltrace.compare("tiny_rl_cpu", "disagg-sync", settings={"cost.train_mfu": 0.3, "fast_path": False},
                           gpu="H100")  # a bool as the CLI writes it ("False" was refused)
    generated = rltrace.compare("tiny_rl_cpu", "disagg-sync", settings=(s for s in ["cost.train_mfu=0.3"]),
                                gpu="H100")
    assert slow.metrics()["same_work.samples_per_s"].equals(as_map.metrics()["same_work.samples_per_s"])
    assert generated.metrics().equals(as_text.metrics())
    with pytest.raises(rltrace.ConfigError, match="settings\\['cost.calibration'\\] must be a string"):
        rltrace.compare("tiny_rl_cpu", "disagg-sync", settings={"cost.calibration": None})
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(rltrace.ConfigError, match="does not exist"):
        as_map.report(tmp_path / "nodir" / "x.html")
    with pytest.raises(rltrace.ConfigError, match="exists and is not a folder"):
        as_map.write(tmp_path / "file.txt")
    for wrong, said in ((lambda: as_map.write(5), "folder must be a path"), (lambda: as_map.report(5), "path must be"),
                        (lambda: as_map.table(baseline=3), "baseline must be a run's name .a string., got 3"),
                        (lambda: as_map.report(tmp_path / "r.html", baseline=3), "baseline must be a run's name")):
        with pytest.raises(rltrace.ConfigError, match=said):  # a TypeError from pathlib or os.path
            wrong()


def test_a_rewritten_run_folder_keeps_no_table_of_the_run_before(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    rltrace.compare("rollpacker_qwen7b", "disagg-sync", steps=1, topology="fat-tree:k=8,gpu=H800").write(out)
    assert (out / "disagg-sync" / "links.parquet").is_file()
    rltrace.compare("rollpacker_qwen7b", "disagg-sync", steps=1).write(out)  # no network model this time
    assert not (out / "disagg-sync" / "links.parquet").exists()


def test_python_started_in_the_checkout_finds_every_subpackage() -> None:
    """From the repository's root, ``import rltrace`` is the source folder, which holds the core only: opening a
    sample (rltrace.sample_traces) or importing rltrace.replay raised ModuleNotFoundError there."""
    probe = ("import rltrace, rltrace.replay.fidelity, rltrace.dashboards.report, rltrace.collectors.recorder; "
             "print(rltrace.open('rollpacker_qwen7b').manifest.run_id); print(rltrace.replay.__file__)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    run_id, replay = done.stdout.split()
    assert run_id.startswith("synth-rollpacker_qwen7b") and Path(replay) == REPO / "replay" / "__init__.py"
