"""Sweeps and advise: grid expansion (table-driven), a 24-point grid on a local process pool and on a real
local Ray with identical metrics, a sweep on a cluster from `ray start`, resume, failure isolation, bad grids,
and advise end to end."""

from __future__ import annotations

import html
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from browser import open_page
from helpers import REPO, RLTRACE, run_cli, small_config
from rich.console import Console
from rltrace.replay.advise import Space, advise, load_space, point_of
from rltrace.replay.advise_verdict import bottleneck
from rltrace.replay.sweep import runner
from rltrace.replay.sweep.grid import Grid, check, point_id, settings
from rltrace.replay.sweep.point import ROW_COLUMNS, ROW_VERSION, run_point
from rltrace.replay.sweep.runner import Store, source_identity
from rltrace.sample_traces import sample_path

import rltrace
from rltrace.cli.sweep_cmd import print_best
from rltrace.cli.tables import MAX_NOTES, print_notes
from rltrace.errors import ConfigError
from rltrace.synth import synthesize

GRID = """
[axes]
scheduler = ["disagg-sync", "one-step-async", "rollpacker", "streamrl"]
gen_gpus = [2, 4]
gpu = ["H100", "H800", "A100"]

[fixed]
train_gpus = 2
"cost.train_mfu" = 0.4
"""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    result = synthesize(small_config())
    return rltrace.write_bundle(tmp_path_factory.mktemp("sweep") / "small", result.manifest, result.tables)


@pytest.mark.parametrize("axes, fixed, count", [
    ({"scheduler": ["a"]}, {}, 1),
    ({"scheduler": ["a", "b"], "seed": [0, 1, 2]}, {"steps": 2}, 6),
    ({"scheduler": ["a", "b"], "gen_gpus": [1, 2], "gpu": ["H100", "A100"], "topology": ["", "x"]}, {}, 16),
])
def test_grid_expands_every_combination(axes, fixed, count):
    points = Grid(axes, fixed).points()
    assert len(points) == count and len({point_id(p) for p in points}) == count
    assert all(p.items() >= fixed.items() for p in points)
    assert points[0] == {**fixed, **{k: v[0] for k, v in axes.items()}}


def test_a_point_naming_a_file_is_a_new_point_when_the_file_changes(tmp_path: Path) -> None:
    mine = tmp_path / "mine.toml"
    point = {"scheduler": "disagg-sync", "cost.calibration": str(mine)}
    ids = []
    for text in ("version = 1\n", "version = 2\n", "version = 1\n"):
        mine.write_text(text)
        ids.append(point_id(point))
    assert ids[0] == ids[2] != ids[1]


def test_point_id_ignores_key_order_and_settings_keep_their_types():
    assert point_id({"a": 1, "b": "x"}) == point_id({"b": "x", "a": 1}) != point_id({"a": 2, "b": "x"})
    assert settings({"scheduler": "s", "cost.train_mfu": 0.4, "topology": "fat-tree:k=4", "sync_strategy": ""}) == {
        "cost.train_mfu": 0.4, "network.topology": "fat-tree:k=4"}


@pytest.mark.parametrize("point, message", [
    ({"gen_gpus": 2}, "needs a scheduler"),
    ({"scheduler": "nosuch"}, "unknown scheduler 'nosuch'"),
    ({"scheduler": "disagg-sync", "gpus": 4}, "unknown parameter 'gpus'"),
    ({"scheduler": "disagg-sync", "cost.nosuch": 1}, "unknown key 'cost.nosuch'"),
    ({"scheduler": "disagg-sync", "rollpacker.short_round_quantile": 0.5}, "unknown key"),  # another scheduler's key
    ({"scheduler": "disagg-sync", "topology": "mesh:n=3"}, "unknown topology 'mesh'"),  # read where the grid is
    ({"scheduler": "disagg-sync", "topology": "rail:nodes=two"}, "topology rail.nodes: expected an integer"),
    ({"scheduler": "disagg-sync", "sync_strategy": "bucketed"}, "sync_strategy 'bucketed' and no topology"),
    ({"scheduler": "disagg-sync", "topology": "", "network.sync_strategy": "bucketed"}, "and no topology"),
    # replay and compare refuse colocation on two kinds; the sweep ran it, billed as 16 H20
    ({"scheduler": "colocated-sync", "gen_gpu": "H20", "train_gpu": "H800"}, "runs generation and training on the"),
    ({"scheduler": "colocated-sync", "gpu": "H100", "train_gpu": "H20"}, "on H100 generation and H20 training"),
    # a string or a list of lists where a list of steps belongs ended in a TypeError inside every point
    ({"scheduler": "disagg-sync", "source_steps": "0:2"}, "source_steps must be a list of recorded step numbers"),
    ({"scheduler": "disagg-sync", "source_steps": [[0, 1]]}, "source_steps must be a list"),
])
def test_bad_points_are_refused_before_anything_runs(point, message):
    with pytest.raises(ConfigError, match=message):
        check([point], "grid.toml")


def _frame(out: Path) -> pl.DataFrame:
    return pl.read_parquet(out / "sweep.parquet").drop("replay_wall_s").sort("point_id")


@pytest.mark.live  # a local Ray
@pytest.mark.browser
def test_a_24_point_grid_locally_and_on_ray_gives_identical_metrics(bundle: Path, tmp_path: Path):
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    local = run_cli("sweep", str(bundle), "--grid", str(grid), "-o", str(tmp_path / "local"), "--workers", "2")
    assert local.returncode == 0, local.stderr
    assert "24 points on 2 local process(es): 24 ran, 0 already done, 0 failed" in local.stdout
    on_ray = run_cli("sweep", str(bundle), "--grid", str(grid), "-o", str(tmp_path / "ray"), "--ray", "--workers", "2")
    assert on_ray.returncode == 0, on_ray.stderr
    assert "24 points on a local Ray: 24 ran" in on_ray.stdout
    a, b = _frame(tmp_path / "local"), _frame(tmp_path / "ray")
    assert a.height == 24 and a.equals(b)
    assert set(a.columns) >= {"scheduler", "gen_gpus", "gpu", "train_gpus", "cost.train_mfu", "samples_per_s",
                              "usd_per_1k_samples", "gen_skewness_bubble", "metrics_json"}
    # the grid's parameters reached the replay: more generation GPUs, other GPU kinds, other schedulers differ
    assert a["samples_per_s"].n_unique() > 6
    config = json.loads(a["metrics_json"][0])
    assert config["samples"] == a["samples"][0]
    rerun = run_cli("sweep", str(bundle), "--grid", str(grid), "-o", str(tmp_path / "local"), "--workers", "2")
    assert rerun.returncode == 0 and "0 ran, 24 already done" in rerun.stdout
    assert _frame(tmp_path / "local").equals(a)
    with open_page(tmp_path / "local" / "report.html") as loaded:
        assert loaded.console == []
        assert loaded.page.locator("table tbody tr").count() == 24


@pytest.fixture()
def ray_cluster(tmp_path: Path) -> Iterator[str]:
    """A real Ray head started by `ray start`, as a user's cluster would be: token auth on (Ray >= 2.59's
    default), the token in ~/.ray/auth_token."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ray = str(Path(sys.executable).with_name("ray"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    started = subprocess.run([ray, "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
                              "--disable-usage-stats"], check=False, cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=180)
    assert started.returncode == 0, started.stderr[-2000:]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([ray, "stop", "--force"], check=False, env=env, capture_output=True, timeout=120)


@pytest.mark.live  # a Ray cluster started by `ray start`
def test_a_sweep_on_an_existing_ray_cluster_matches_the_local_pool(bundle: Path, tmp_path: Path, ray_cluster: str):
    grid = tmp_path / "grid.toml"
    grid.write_text('[axes]\nscheduler = ["disagg-sync", "rollpacker"]\ngen_gpus = [2, 4]\n[fixed]\ntrain_gpus = 2\n')
    local = run_cli("sweep", str(bundle), "--grid", str(grid), "-o", str(tmp_path / "local"), "--workers", "2")
    assert local.returncode == 0, local.stderr
    remote = run_cli("sweep", str(bundle), "--grid", str(grid), "-o", str(tmp_path / "remote"),
                     "--ray-address", ray_cluster, env={"RAY_AUTH_MODE": "token"})
    assert remote.returncode == 0, remote.stderr
    assert f"4 points on Ray at {ray_cluster}: 4 ran, 0 already done, 0 failed" in remote.stdout
    assert _frame(tmp_path / "local").equals(_frame(tmp_path / "remote"))


def test_a_failed_point_is_reported_and_the_others_finish(bundle: Path, tmp_path: Path):
    grid = tmp_path / "grid.toml"
    # 3 generation GPUs cannot hold instances of tp 2: a point that fails as it runs (names are checked before)
    grid.write_text('[axes]\nscheduler = ["disagg-sync"]\ngen_gpus = [2, 3, 4]\n[fixed]\ntp = 2\n')
    out = tmp_path / "out"
    done = run_cli("sweep", str(bundle), "--grid", str(grid), "-o", str(out), "--workers", "2")
    assert done.returncode == 1
    assert "3 points on 2 local process(es): 2 ran, 0 already done, 1 failed" in done.stdout
    assert "do not split into instances of tp 2" in done.stdout and "Traceback" not in done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == "rltrace: 1 of 3 points failed (listed on stdout)"
    assert pl.read_parquet(out / "sweep.parquet")["gen_gpus"].sort().to_list() == [2, 4]
    errors = list((out / "points").glob("*.error.json"))
    assert len(errors) == 1 and json.loads(errors[0].read_text())["point"]["gen_gpus"] == 3
    again = run_cli("sweep", str(bundle), "--grid", str(grid), "-o", str(out), "--workers", "1")
    assert "0 ran, 2 already done, 1 failed" in again.stdout  # only the failed point is tried again
    # by its values, not its hash alone
    assert re.search(r"failed [0-9a-f]{16} \(scheduler=disagg-sync, gen_gpus=3\): ", again.stdout)
    assert re.search(r"failed: [0-9a-f]{16} \(scheduler=disagg-sync, gen_gpus=3\): ", (out / "report.html").read_text())


def test_a_worker_of_another_rltrace_install_is_a_failed_point(bundle: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray workers that import another rltrace than the driver wrote rows of another row version, which the store
    then dropped: "12 ran, 0 failed; no point finished", exit 0 and no table. Here this process reads one version
    on (what a newer driver would), and its worker, itself, writes the current one."""
    monkeypatch.setattr(runner, "ROW_VERSION", ROW_VERSION + 1)
    result = runner.run_sweep(str(bundle), [{"scheduler": "disagg-sync"}], Store(tmp_path / "out", str(bundle)),
                              workers=1)
    assert result.ran == 0 and len(result.failed) == 1
    assert f"the worker's rltrace wrote row version {ROW_VERSION}, this one" in next(iter(result.failed.values()))
    assert f"reads {ROW_VERSION + 1}: the workers import another rltrace install" in next(iter(result.failed.values()))


def test_a_sweep_folder_holds_one_sources_points(bundle: Path, tmp_path: Path) -> None:
    """A folder swept with one bundle, then another, gave back the first bundle's results ("12 already done"); a
    sweep into a folder with a dashboard's report.html deleted it when no point finished."""
    grid = tmp_path / "grid.toml"
    grid.write_text('[axes]\nscheduler = ["disagg-sync"]\n[fixed]\nsteps = 1\n')
    out = tmp_path / "out"
    assert run_cli("sweep", str(bundle), "--grid", str(grid), "-o", str(out)).returncode == 0
    other = run_cli("sweep", "tiny_rl_cpu", "--grid", str(grid), "-o", str(out))
    assert other.returncode == 2 and f"holds the points of a sweep of {bundle.resolve()}, not of " in other.stderr
    Store(out, str(bundle))  # the same source: its points are kept
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in bundle.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    Store(out, str(copy))  # the same content at another path (a sample through another install): the same source
    Store(tmp_path / "out2", str(copy))
    (tmp_path / "legacy" / "points").mkdir(parents=True)  # an older rltrace's folder names no source: taken as this
    assert Store(tmp_path / "legacy", str(bundle)).root.joinpath("source.json").is_file()
    (tmp_path / "out2" / "points" / "p.json").write_text("{}")  # a point it holds
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**manifest, "run_id": "recorded-again"}))
    with pytest.raises(ConfigError, match="as it was then"):
        Store(tmp_path / "out2", str(copy))
    # a sweep that stopped before any point ran (no Ray at --ray-address auto) left its source and no point: the
    # folder was refused to any other source ("holds the points of a sweep of ..."), though it held none
    Store(tmp_path / "started", str(bundle))
    assert Store(tmp_path / "started", str(copy)).root.joinpath("source.json").read_text() == json.dumps(
        source_identity(str(copy)))
    report = tmp_path / "dash"
    report.mkdir()
    (report / "report.html").write_text("a dashboard's")
    refused = run_cli("sweep", str(bundle), "--grid", str(grid), "-o", str(report))
    assert refused.returncode == 2 and "holds a report.html or sweep.parquet but no sweep's points" in \
        refused.stderr and (report / "report.html").read_text() == "a dashboard's"


@pytest.mark.live  # a signal to a running sweep
@pytest.mark.parametrize(("where", "signum", "code"), [
    (["--workers", "1"], signal.SIGINT, 130), (["--workers", "1"], signal.SIGTERM, 143),
    (["--workers", "2"], signal.SIGTERM, 143), (["--ray"], signal.SIGTERM, 143)])
def test_an_interrupted_sweep_says_what_it_kept_and_resumes(bundle: Path, tmp_path: Path, where: list[str],
                                                            signum: int, code: int) -> None:
    """An interrupted sweep ended at 130 without a word on what it kept or how to go on; SIGTERM (a scheduler's
    stop) killed it silently, or under Ray dumped a native stack and exited 1."""
    grid = tmp_path / "grid.toml"
    grid.write_text("[axes]\nseed = [" + ", ".join(map(str, range(40))) + "]\n[fixed]\n"
                    'scheduler = "disagg-sync"\n')
    out = tmp_path / "out"
    proc = subprocess.Popen([RLTRACE, "sweep", str(bundle), "--grid", str(grid), "-o", str(out), *where],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not ((out / "points").is_dir() and any((out / "points").glob("*.json"))):  # a point has finished
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=120)
    said = re.search(r"rltrace: interrupted; (\d+) of 40 points are kept in .*: the same command resumes the sweep",
                     stderr)
    assert proc.returncode == code and said and "SIGTERM received" not in stderr, stderr
    assert not list((out / "points").glob("*.tmp"))
    again = run_cli("sweep", str(bundle), "--grid", str(grid), "-o", str(out), "--workers", "1")
    assert again.returncode == 0 and f"{40 - int(said[1])} ran, {said[1]} already done" in again.stdout


def test_a_sweep_says_what_each_points_replay_says(bundle: Path, tmp_path: Path) -> None:
    """A sweep dropped every replay's notes: an A100 point under an H100 topology was priced on the H100's NVLink
    with no word (`rltrace replay` says so). Each row keeps its notes; the terminal and report give each once."""
    grid = tmp_path / "grid.toml"
    grid.write_text('[axes]\ngpu = ["H100", "A100"]\n[fixed]\nscheduler = "disagg-sync"\n'
                    'topology = "fat-tree:k=4,gpu=H100"\n')
    out = tmp_path / "out"
    done = run_cli("sweep", str(bundle), "--grid", str(grid), "-o", str(out), "--workers", "1")
    assert done.returncode == 0, done.stderr
    alone = run_cli("replay", str(bundle), "-s", "disagg-sync", "--gpu", "A100", "--topology", "fat-tree:k=4,gpu=H100",
                    "--replicates", "0")
    rows = pl.read_parquet(out / "sweep.parquet")
    a100 = rows.filter(pl.col("gpu") == "A100")["notes"].to_list()[0]
    said = next(note for note in a100 if note.startswith("the topology's GPUs are H100s"))

    def flat(text: str) -> str:  # the terminal wraps long lines
        return " ".join(text.split())

    assert flat(f"note: {said}") in flat(alone.stdout)
    assert flat(f"note: {said} (1 of 2 points)") in flat(done.stdout)
    assert said in html.unescape((out / "report.html").read_text())


@pytest.mark.parametrize("grid, message", [
    ("[axes]\nscheduler = []\n", "axes.scheduler must be a non-empty list"),
    ('[axes]\nscheduler = ["x"]\n', "unknown scheduler 'x'"),
    ('[axes]\nscheduler = ["disagg-sync"]\n[fixed]\nscheduler = "streamrl"\n', "both varied and fixed"),
    ('[fixed]\nscheduler = "streamrl"\n', "no [axes]"),
    ("[axes\n", "invalid TOML"),
    ("axes = 3\n", "axes must be a table ([axes] with one key per parameter), got int"),  # tracebacks before
    ('[[axes]]\nscheduler = ["disagg-sync"]\n', "axes must be a table ([axes] with one key per parameter), got list"),
    ('fixed = 2\n[axes]\nscheduler = ["disagg-sync"]\n', "fixed must be a table"),
    ('[axes]\nscheduler = ["disagg-sync"]\ngpu = ["H100", "Z9"]\n', "unknown GPU kind 'Z9'"),
    ('[axes]\nscheduler = ["disagg-sync"]\n[fixed]\nmodel = "GPT-9"\n', "unknown model 'GPT-9'"),
])
def test_bad_grid_is_one_line_and_exit_2(grid, message, bundle: Path, tmp_path: Path):
    path = tmp_path / "grid.toml"
    path.write_text(grid)
    done = run_cli("sweep", str(bundle), "--grid", str(path), "-o", str(tmp_path / "o"))
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def _phases(step: float, **phases: float) -> dict[str, str]:
    return {"metrics_json": json.dumps({"phases_s_per_step": phases, "step_time_s": {"mean": step}})}


@pytest.mark.parametrize(("changed", "said"), [(False, False), (True, True)])
def test_the_cheapest_point_says_when_it_changed_the_work(changed: bool, said: bool,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    frame = pl.DataFrame({"scheduler": ["disagg-sync", "rollpacker"], "samples_per_s": [2.0, 3.0],
                          "run_samples_per_s": [2.0, 4.0], "usd_per_hour": [10.0, 10.0],
                          "usd_per_1k_samples": [1.4, 0.9], "work_changed": [False, changed]})
    print_best(frame, ["scheduler"])
    said_last = " ".join(capsys.readouterr().out.split("cheapest per 1k samples:", 1)[1].split())  # wraps unwrapped
    assert said_last.startswith("scheduler=rollpacker: $0.900")
    assert ("(changed work)" in said_last) == said


@pytest.mark.parametrize("row, expected", [
    (_phases(70, generation=40, train=20, weight_sync=20),
     ("weight sync", "sync-bound: weight syncs 20 s of each 70 s step")),
    (_phases(70, generation=180, train=62, weight_sync=0.1),
     ("training", "trainer-bound: trainers busy 62 s of each 70 s step")),
    (_phases(100, generation=70, old_logprob=10, train=15, optimizer=5),
     ("generation", "generation-bound: trainers wait 70 s of each 100 s step for samples")),
    (_phases(100, generation=40, train=30, sleep=10, refit=10, wake=10),
     ("role switches", "switch-bound: role switches 30 s of each 100 s step")),
    ({"metrics_json": json.dumps({"phases_s_per_step": {}})}, ("", "")),
])
def test_bottleneck_comes_from_the_phase_breakdown(row, expected):
    assert bottleneck(row) == expected


def test_point_of_splits_the_gpus():
    design = {"gpu": "H100", "scheduler": "disagg-sync", "gen_share": 0.75, "topology": ""}
    assert point_of(design, 8, {"steps": 2}) == {"steps": 2, "scheduler": "disagg-sync", "gpu": "H100", "gen_gpus": 6,
                                                 "train_gpus": 2}
    assert point_of({**design, "gen_share": 0.99}, 4, {})["train_gpus"] == 1
    with pytest.raises(ConfigError):
        Space(gen_share=(1.0,))


@pytest.mark.parametrize("text, expected", [
    ('gpu = "H800"\ntotal_gpus = 16\n', {"gpu": ("H800",), "total_gpus": (16,)}),  # one value: a list of one
    ('gpu = ["H100", "A100"]\ngen_share = [0.5, 0.75]\n', {"gpu": ("H100", "A100"), "gen_share": (0.5, 0.75)}),
])
def test_a_space_takes_lists_or_single_values(text, expected, tmp_path: Path):
    path = tmp_path / "space.toml"
    path.write_text(text)
    space = load_space(path)
    assert {key: getattr(space, key) for key in expected} == expected


@pytest.mark.parametrize("text, message", [
    ("gpu = 8\n", "gpu must be strings"),  # not walked letter by letter, nor digit by digit
    ('total_gpus = ["16"]\n', "total_gpus must be whole numbers"),
    ("gen_share = []\n", r"gen_share must be numbers \(one, or a non-empty list\), got \[\]"),
    ('fixed = "steps=2"\n', "fixed must be a table"),
    # each candidate sets these from its design: a fixed value was dropped without a word
    ('[fixed]\nscheduler = "rollpacker"\n', "fixed.scheduler is what the search chooses"),
    ("[fixed]\ngen_gpus = 4\n", "fixed.gen_gpus is what the search chooses: give it as the space's gen_share and"),
])
def test_a_badly_typed_space_is_refused(text, message, tmp_path: Path):
    path = tmp_path / "space.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_space(path)


@pytest.mark.slow  # over 5 s on 2 cores
def test_advise_prints_the_cheapest_configuration_meeting_the_target(tmp_path: Path):
    space = tmp_path / "space.toml"
    space.write_text('gpu = ["H100", "A100", "H20"]\nscheduler = ["disagg-sync", "one-step-async", "fully-async"]\n'
                     'gen_share = [0.5, 0.75]\ntotal_gpus = [8, 16, 32]\n[fixed]\nsteps = 3\n')
    done = run_cli("advise", "--target-throughput", "10", "--space", str(space), "--workers", "2",
                   "-o", str(tmp_path / "replays"))
    assert done.returncode == 0, done.stderr
    assert "Cheapest configurations reaching 10 samples/s" in done.stdout and "cheapest:" in done.stdout
    cheapest = done.stdout.split("cheapest:", 1)[1].splitlines()[0]
    rate = float(cheapest.split(": ")[1].split(" samples/s")[0])
    assert rate >= 10
    points = [json.loads(p.read_text()) for p in (tmp_path / "replays" / "points").glob("*.json")]
    meeting = [p["row"]["usd_per_hour"] for p in points if p["row"] and p["row"]["samples_per_s"] >= 10]
    price = float(cheapest.rsplit("$", 1)[1].split("/h")[0])
    assert price == pytest.approx(min(meeting), abs=0.01)  # no replay that met the target was cheaper
    assert "Why the other" in done.stdout
    # what `rltrace replay` says beside a winner's figures, advise says too (it said nothing)
    assert re.search(r"note: generation cost: roofline of Qwen2.5-7B on (H100|A100|H20)", done.stdout)
    budget = run_cli("advise", "--target-throughput", "10", "--budget", "1", "--space", str(space),
                     "-o", str(tmp_path / "replays"))
    assert budget.returncode == 0 and "no configuration in the space reaches 10 samples/s within $1/h" in budget.stdout
    assert "over budget" in budget.stdout


def test_advise_whose_every_replay_failed_exits_1_and_says_so(tmp_path: Path) -> None:
    """It printed "no configuration in the space reaches 10 samples/s" and exited 0: no answer read as an answer."""
    job = tmp_path / "run.toml"
    job.write_text('model = "Qwen2.5-7B"\n[cluster]\ngpu = "H100"\ngpus = 8\n[batch]\nprompts = 8\nsamples = 4\n'
                   'max_response = 2048\nmean_response = 900\nsteps = 2\n')
    space = tmp_path / "space.toml"  # a described job has no recorded steps to pick: every replay fails
    space.write_text('scheduler = ["disagg-sync"]\ngpu = ["H100"]\ntotal_gpus = [8]\n[fixed]\nsource_steps = [1]\n')
    done = run_cli("advise", str(job), "--space", str(space), "--workers", "1")
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == "rltrace: every one of the 2 replays failed (the table above says why)"
    assert "2 designs, 2 replays (2 failed); 0 candidates ruled out" in done.stdout


@pytest.mark.parametrize(("report", "last"), [(True, "note: 3 more notes in the report"), (False, "note: n8")])
def test_notes_past_the_terminal_limit_go_to_a_report_only_where_there_is_one(report: bool, last: str) -> None:
    """advise writes no report, yet said "2 more notes in the report": those notes were nowhere."""
    console = Console(record=True, width=200)
    print_notes(console, [(f"n{i}", 1) for i in range(MAX_NOTES + 3)], 1, "points", report=report)
    lines = console.export_text().splitlines()
    assert lines[-1] == last and len(lines) == (MAX_NOTES + 1 if report else MAX_NOTES + 3)


COUNTS_SPACE = ('gpu = ["H100", "A100", "H20"]\n'
                'scheduler = ["disagg-sync", "one-step-async", "fully-async", "rollpacker"]\n'
                'gen_share = [0.5, 0.75]\ntotal_gpus = [8, 16, 32]\n[fixed]\nsteps = 2\n')


def _advise(space: Path, store: Path, *flags: str) -> tuple[str, str]:
    done = run_cli("advise", "--target-throughput", "10", "--space", str(space), "--workers", "2", "-o", str(store),
                   *flags, env={"RLTRACE_PROGRESS_EVERY_S": "0.05"})
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


@pytest.mark.slow  # two searches, one exhaustive: over 5 s on 2 cores
def test_advise_counts_add_up_and_match_an_exhaustive_search(tmp_path: Path) -> None:
    space, store = tmp_path / "space.toml", tmp_path / "replays"
    space.write_text(COUNTS_SPACE)
    designs = 3 * 4 * 2
    out, err = _advise(space, store)
    # progress: designs decided out of all designs, ending at all of them
    progress = [tuple(map(int, m)) for m in re.findall(rf"advise: {designs} designs: (\d+)/(\d+) decided", err)]
    assert progress and all(total == designs and done <= designs for done, total in progress), err
    assert progress[-1] == (designs, designs)
    # the listed winners, the designs that lost (each one way) and the replays add up
    first = out.split("cheapest:")[0].split("└")[0]  # a wide table prints in column groups: count the first
    listed = len(re.findall(r"^│ (?:H100|A100|H20) ", first, flags=re.MULTILINE))
    lost = int(re.search(r"Why the other (\d+) lost", out)[1])
    summary = out.strip().splitlines()[-2]  # the line before "N designs, M replays ..."
    assert "cheapest:" in out and listed + lost == designs, out
    assert sum(int(part.split()[0]) for part in summary.split("; ")) == lost, summary
    totals = re.search(r"^(\d+) designs, (\d+) replays", out.strip().splitlines()[-1])
    assert totals and int(totals[1]) == designs
    assert int(totals[2]) == len(list((store / "points").glob("*.json")))  # every replay this search ran, once
    # ranked on the same work, each listed design saying whether it trained the recorded work
    rows = [json.loads(p.read_text())["row"] for p in (store / "points").glob("*.json")]
    assert any(r and r["work_changed"] for r in rows) and any(r and not r["work_changed"] for r in rows)
    assert "(samples/s on the workload's same work)" in out and re.search(r"│ (same|changed) ", out), out
    # an exhaustive search, on the same replays and more, lists the same configurations
    full, _ = _advise(space, store, "--exhaustive")
    assert full.split("cheapest:")[0] == out.split("cheapest:")[0]
    assert "every candidate replayed (--exhaustive)" in full


def test_sweep_rows_carry_the_replays_same_work_figures(tmp_path: Path) -> None:
    """A sweep point, advise's target check (a point's samples_per_s) and `rltrace replay`'s table are one answer:
    samples/s on the same work, the run's own rate beside it, for a scheduler that trains other work too; the
    GPUs each role ran on and the used share as the run's metrics.json has them (a colocated run's roles share
    the whole cluster; RollArt's generation pool counts its prefill GPUs, which advise's 'gen' column left out)."""
    schedulers = ["colocated-sync", "disagg-sync", "fully-async", "rollart"]
    grid = tmp_path / "grid.toml"
    grid.write_text(f"[axes]\nscheduler = {json.dumps(schedulers)}\n[fixed]\nsteps = 2\n")
    swept = run_cli("sweep", "rollpacker_qwen7b", "--grid", str(grid), "-o", str(tmp_path / "sweep"), "--workers", "1")
    assert swept.returncode == 0, swept.stderr
    assert "run samples/s" in swept.stdout
    # the columns in the order docs/sweeps.md lists them (the stored points' keys are sorted)
    columns = pl.read_parquet(tmp_path / "sweep" / "sweep.parquet").columns
    row = next(line for line in (REPO / "docs" / "sweeps.md").read_text().splitlines()
               if line.startswith("| `OUT/sweep.parquet`"))
    documented = re.findall(r"\w+", " ".join(re.findall(r"`([^`]+)`", row)))
    assert columns[0] == "point_id"
    metrics = [c for c in columns if c in ROW_COLUMNS]
    assert metrics == list(ROW_COLUMNS) == [w for w in documented if w in ROW_COLUMNS]
    rows = _frame(tmp_path / "sweep").rows_by_key("scheduler", named=True, unique=True)
    shown = json.loads(run_cli("replay", "rollpacker_qwen7b", "-s", ",".join(schedulers), "--steps", "2",
                               "--replicates", "0", "--json").stdout)
    for name in schedulers:
        same, row = shown[name]["same_work"], rows[name]
        assert row["samples_per_s"] == pytest.approx(same["samples_per_s"], rel=1e-12)
        assert row["usd_per_1k_samples"] == pytest.approx(same["usd_per_1k_samples"], rel=1e-12)
        assert row["run_samples_per_s"] == pytest.approx(shown[name]["throughput_samples_per_s"], rel=1e-12)
        assert row["work_changed"] == same["changed"]
        used = shown[name]["gpus"]
        generation = sum(n for role, n in used.items() if role.split("/")[0] == "generation")
        assert (row["gen_pool_gpus"], row["train_pool_gpus"]) == (generation, used["training"])
        assert row["gen_used"] == pytest.approx(shown[name]["gpu_utilization"]["generation"], rel=1e-12)
    colocated = rows["colocated-sync"]
    assert colocated["gen_pool_gpus"] == colocated["train_pool_gpus"] == colocated["gpus"] == 32
    for split in ("disagg-sync", "rollart"):  # RollArt's 16 generation GPUs: 8 decode, 8 prefill
        assert rows[split]["gen_pool_gpus"] + rows[split]["train_pool_gpus"] == rows[split]["gpus"]
    assert rows["rollart"]["gen_pool_gpus"] > shown["rollart"]["gpus"]["generation"]
    assert not rows["disagg-sync"]["work_changed"]
    assert rows["fully-async"]["work_changed"]  # it trains the samples that finish first
    assert rows["fully-async"]["samples_per_s"] < rows["fully-async"]["run_samples_per_s"]
    # a point stored by an older rltrace (its samples/s the run's own, no row version) runs again
    stored = next((tmp_path / "sweep" / "points").glob("*.json"))
    saved = json.loads(stored.read_text())
    del saved["row"]["row_version"]
    stored.write_text(json.dumps(saved))
    again = run_cli("sweep", "rollpacker_qwen7b", "--grid", str(grid), "-o", str(tmp_path / "sweep"), "--workers", "1")
    assert again.returncode == 0 and "1 ran, 3 already done" in again.stdout, again.stdout
    assert json.loads(stored.read_text())["row"]["row_version"] == ROW_VERSION


def test_a_sweep_over_calibration_files_prices_each_point_with_its_own(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative path prices each point with the file it names here; an edited file makes a new point."""
    monkeypatch.chdir(tmp_path)
    floor = '[constants.switch_floor_s]\nunit = "s"\nkind = "measured"\nsource = "mine"\nfit = ""\ndata = ""\n'
    Path("mine.toml").write_text(f"version = 1\n{floor}value = 5.0\n")
    grid = tmp_path / "grid.toml"
    grid.write_text('[axes]\n"cost.calibration" = ["", "mine.toml"]\n[fixed]\nscheduler = "colocated-sync"\n'
                    "steps = 2\n")
    args = ("sweep", "rollpacker_qwen7b", "--grid", str(grid), "-o", str(tmp_path / "sweep"), "--workers", "1")
    assert run_cli(*args).returncode == 0
    rows = _frame(tmp_path / "sweep").rows_by_key("cost.calibration", named=True, unique=True)
    assert rows["mine.toml"]["samples_per_s"] < rows[""]["samples_per_s"]  # 4.9 s more for each switch
    Path("mine.toml").write_text(f"version = 1\n{floor}value = 0.1\n")  # the shipped floor again
    assert run_cli(*args).returncode == 0
    rows = _frame(tmp_path / "sweep").rows_by_key("cost.calibration", named=True, unique=True)
    assert rows["mine.toml"]["samples_per_s"] == pytest.approx(rows[""]["samples_per_s"])


def test_a_grid_replays_only_the_recorded_steps_it_names(tmp_path: Path) -> None:
    """source_steps was suggested for a misspelt key and passed the check, then failed every point with "TypeError:
    unhashable type: 'list'"."""
    grid = tmp_path / "grid.toml"
    grid.write_text('[axes]\nsource_steps = [[0, 1], [2]]\n[fixed]\nscheduler = "disagg-sync"\n')
    done = run_cli("sweep", "tiny_rl_cpu", "--grid", str(grid), "-o", str(tmp_path / "o"), "--workers", "1")
    assert done.returncode == 0, done.stderr
    rows = pl.read_parquet(tmp_path / "o" / "sweep.parquet").sort("samples")
    per_step = rltrace.open(sample_path("tiny_rl_cpu")).requests.group_by("step").len().collect()
    want = dict(zip(per_step["step"].to_list(), per_step["len"].to_list()))
    assert rows["samples"].to_list() == sorted([want[0] + want[1], want[2]])


def test_a_colocated_design_is_one_design_whatever_the_generation_share() -> None:
    """Every split of a colocated cluster runs the same (all GPUs in both roles): listed once per GPU kind, where
    each share was a design of its own (advise listed "H20 colocated-sync 8/8" twice, at 1.97 and 1.09 samples/s)."""
    space = Space(gpu=("H100", "H20", "H100"), scheduler=("colocated-sync", "disagg-sync", "disagg-sync"),
                  gen_share=(0.5, 0.75), total_gpus=(8,))
    designs = [(d["gpu"], d["scheduler"], d["gen_share"]) for d in space.designs()]
    assert designs == [("H100", "colocated-sync", 0.5), ("H100", "disagg-sync", 0.5), ("H100", "disagg-sync", 0.75),
                       ("H20", "colocated-sync", 0.5), ("H20", "disagg-sync", 0.5), ("H20", "disagg-sync", 0.75)]


def test_two_shares_that_round_to_one_split_are_one_configuration(tmp_path: Path) -> None:
    """At 3 GPUs the shares 0.5 and 0.75 both give 2 + 1: advise replayed that point twice and listed it twice,
    once replayed (2.69 samples/s) and once by its bound (<= 4.12)."""
    space = tmp_path / "space.toml"
    space.write_text('gpu = ["H100"]\nscheduler = ["disagg-sync"]\ngen_share = [0.5, 0.75]\ntotal_gpus = [3]\n'
                     '[fixed]\nsteps = 1\n')
    advice = advise(str(sample_path("rollpacker_qwen7b")), 0.1, Store(tmp_path / "o"), load_space(space), workers=1)
    listed = pl.concat([advice.ranked, advice.lost])
    assert listed.select("gen_gpus", "train_gpus").rows() == [(2, 1)] and listed["replayed"].to_list() == [True]
    assert advice.replays == 1


def test_advise_ranks_designs_of_one_price_by_their_cost_per_sample(tmp_path: Path) -> None:
    """Prices summed in another order differ in their last bits (10.8 and 10.800000000000002 for 8 H20): the noise
    ranked rollpacker 6+2 at $3.27/1k above 4+4 at $1.93/1k, and --budget 10.8 called 10.800000000000002 over it."""
    space = tmp_path / "space.toml"
    space.write_text('gpu = ["H20"]\nscheduler = ["disagg-sync", "one-step-async", "rollpacker"]\n'
                     'gen_share = [0.5, 0.75]\ntotal_gpus = [8]\n[fixed]\nsteps = 4\n')
    advice = advise(str(sample_path("rollpacker_qwen7b")), 0.5, Store(tmp_path / "o"), load_space(space), budget=10.8,
                    top=6, workers=1)
    ranked = advice.ranked
    assert ranked.height == 6 and advice.lost.height == 0
    assert ranked["usd_per_hour"].round(6).n_unique() == 1
    assert ranked["usd_per_1k_samples"].to_list() == sorted(ranked["usd_per_1k_samples"].to_list())


def test_a_colocated_design_left_unreplayed_holds_every_gpu_in_both_columns(tmp_path: Path) -> None:
    """A colocated design priced out before its replay showed its total split in half (4 | 4 at 8 GPUs), where a
    replayed one shows the total in both (sweeps.md)."""
    space = tmp_path / "space.toml"
    space.write_text('gpu = ["H100", "H200"]\nscheduler = ["colocated-sync"]\ntotal_gpus = [8]\n[fixed]\nsteps = 1\n')
    advice = advise(str(sample_path("rollpacker_qwen7b")), 0.5, Store(tmp_path / "o"), load_space(space), top=1,
                    workers=1)
    rows = pl.concat([advice.ranked, advice.lost], how="diagonal_relaxed")
    assert sorted(rows["replayed"].to_list()) == [False, True]  # one replayed, one priced out
    assert rows.select("total_gpus", "gen_gpus", "train_gpus").unique().rows() == [(8, 8, 8)]


def test_a_design_whose_smallest_cluster_fails_is_tried_larger(tmp_path: Path) -> None:
    """At 24 GPUs a 0.875 share gives 21 generation GPUs, which TP 2 does not divide: the design was dropped there
    ("no configuration reaches") though 32 GPUs meet the target."""
    space = tmp_path / "space.toml"
    space.write_text('gpu = ["H100"]\nscheduler = ["disagg-sync"]\ngen_share = [0.875]\ntotal_gpus = [24, 32]\n'
                     '[fixed]\nsteps = 1\n')
    described = str(REPO / "examples" / "described" / "qwen3_30b_a3b_colocated.toml")
    advice = advise(described, 1.0, Store(tmp_path / "o"), load_space(space), workers=1)
    assert advice.ranked.height == 1 and advice.ranked["total_gpus"].to_list() == [32], advice.lost
    assert advice.failed == 1


def test_a_point_that_colocates_on_the_bundles_two_kinds_fails_with_the_reason() -> None:
    """The recorded pools' kinds (the RollArt sample: H20 generation, H800 training) reach the replay unnamed by the
    point: colocated-sync ran there, billed as H20s, where replay refuses it."""
    with pytest.raises(ConfigError, match="generation GPUs are H20 and its training GPUs H800"):
        run_point(str(sample_path("rollart_qwen3_8b")), {"scheduler": "colocated-sync", "steps": 1})


def test_a_miss_below_a_failed_count_is_reported_at_the_count_that_missed(tmp_path: Path) -> None:
    """With the largest count failing, the design was reported missed at that count with the smaller count's
    figures, "the most tried", and the failure unsaid."""
    space = tmp_path / "space.toml"
    space.write_text('gpu = ["H100"]\nscheduler = ["disagg-sync"]\ngen_share = [0.875]\ntotal_gpus = [16, 24]\n'
                     '[fixed]\nsteps = 1\n')
    described = str(REPO / "examples" / "described" / "qwen3_30b_a3b_colocated.toml")
    advice = advise(described, 1000.0, Store(tmp_path / "o"), load_space(space), workers=1, exhaustive=True)
    (row,) = advice.lost.iter_rows(named=True)
    assert (row["outcome"], row["total_gpus"], row["gen_gpus"]) == ("missed the target", 16, 14)
    assert "at 24 GPUs it failed: the description reshaped (gen_gpus 21" in row["why"]


def test_a_colocated_design_takes_a_split_its_tp_divides(tmp_path: Path) -> None:
    """A colocated design runs on the space's first share; at 24 GPUs a 0.875 share's 21 generation GPUs do not
    split into TP 2 instances, though all 24 (the colocated pool) do: it takes the next share whose split works."""
    space = tmp_path / "space.toml"
    space.write_text('gpu = ["H100"]\nscheduler = ["colocated-sync"]\ngen_share = [0.875, 0.5]\ntotal_gpus = [24]\n'
                     '[fixed]\nsteps = 1\n')
    described = str(REPO / "examples" / "described" / "qwen3_30b_a3b_colocated.toml")
    advice = advise(described, 1.0, Store(tmp_path / "o"), load_space(space), workers=1)
    assert advice.failed == 0 and advice.ranked["total_gpus"].to_list() == [24]


def test_designs_tied_on_price_are_listed_alike_by_a_search_and_an_exhaustive_one(tmp_path: Path) -> None:
    """fully-async's syncs are off its critical path, so its fabrics tie to the last bit: a search listed them in the
    order it met them and an exhaustive one in another, naming another "cheapest"."""
    space = tmp_path / "space.toml"
    space.write_text('gpu = ["A100"]\nscheduler = ["fully-async"]\ngen_share = [0.25]\ntotal_gpus = [16]\n'
                     'topology = ["fat-tree:k=8,gpu=H100", "cross-dc:nodes=4,split=2,dci_gbps=10,gpu=H100"]\n'
                     '[fixed]\nsteps = 4\n"cost.train_mfu" = 0.4\n')
    listed = [advise(str(sample_path("rollpacker_qwen7b")), 10.0, Store(tmp_path / name), load_space(space),
                     workers=1, exhaustive=exhaustive).ranked.select("fabric", "usd_per_1k_samples").rows()
              for name, exhaustive in (("plain", False), ("full", True))]
    assert listed[0] == listed[1] and listed[0][0][1] == listed[0][1][1]  # a tie, in one order
    assert [fabric for fabric, _ in listed[0]] == sorted(fabric for fabric, _ in listed[0])
