"""`rltrace replay` for real: the baselines on the RollPacker-like sample, run folders, and bad input."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import polars as pl
import pytest
from helpers import REPO, run_cli
from rltrace.sample_traces import sample_path

import rltrace
from rltrace.analysis.network import sync_durations
from rltrace.analysis.runs import load_runs
from rltrace.schema import TABLES

BASELINES = ["colocated-sync", "disagg-sync", "one-step-async", "fully-async"]
FIXED_KEYS = ["throughput_samples_per_s", "throughput_tokens_per_s", "step_time_s", "makespan_s", "bubble_fraction",
              "gpu_utilization", "staleness", "weight_sync_s", "cost_usd", "usd_per_1k_samples", "samples",
              "output_tokens", "latency"]


@pytest.fixture(scope="module")
def baselines(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("runs")
    result = run_cli("replay", "--scheduler", ",".join(BASELINES), "--json", "-o", str(out))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), out


def test_every_run_has_the_documented_metric_keys(baselines: tuple[dict, Path]) -> None:
    metrics, _ = baselines
    assert list(metrics) == BASELINES
    for name, m in metrics.items():
        assert all(k in m for k in FIXED_KEYS), name
        assert set(m["step_time_s"]) == {"mean", "p50", "p95", "steady_mean"}
        for column in ("queue_s", "ttft_s", "tpot_s", "e2e_s"):  # per-request latency (docs/format.md)
            assert set(m["latency"][column]) == {"mean", "p50", "p90", "p99", "max"}, name
        assert set(m["bubble_fraction"]) == {"generation", "training"}
        for pool in ("generation", "training"):
            b = m["bubble_fraction"][pool]
            assert set(b) == {"dependency", "skewness"}
            assert 0 <= b["dependency"] and 0 <= b["skewness"]
            assert b["dependency"] + b["skewness"] + m["gpu_utilization"][pool] == pytest.approx(1.0)
        assert m["samples"] == 12 * 1024  # every recorded sample trained on once
        assert m["colocated"] is (name == "colocated-sync")
        assert m["cost_usd"] > 0 and m["usd_per_1k_samples"] == pytest.approx(m["cost_usd"] / m["samples"] * 1000)


def test_async_beats_sync_on_the_long_tail_and_the_bubbles_say_why(baselines: tuple[dict, Path]) -> None:
    m, _ = baselines
    tput = {name: m[name]["throughput_samples_per_s"] for name in BASELINES}
    assert tput["fully-async"] >= tput["one-step-async"] >= tput["disagg-sync"]
    assert tput["one-step-async"] >= tput["colocated-sync"]
    # overlapping the stages removes dependency bubbles: the idle time waiting for the other stage
    for pool in ("generation", "training"):
        dep = {name: m[name]["bubble_fraction"][pool]["dependency"] for name in BASELINES}
        assert dep["one-step-async"] < dep["disagg-sync"], pool
    # fully-async also stops waiting for each step's long tail
    skew = {name: m[name]["bubble_fraction"]["training"]["skewness"] for name in BASELINES}
    assert skew["fully-async"] < skew["disagg-sync"]
    assert m["disagg-sync"]["staleness"]["max"] == 0 and m["one-step-async"]["staleness"]["max"] == 1


def test_each_scheduler_gets_a_run_folder(baselines: tuple[dict, Path]) -> None:
    metrics, out = baselines
    for name in BASELINES:
        folder = out / name
        assert json.loads((folder / "metrics.json").read_text()) == metrics[name]
        config = json.loads((folder / "config.json").read_text())
        assert config["scheduler"]["name"] == name and config["cluster"]["gen_gpus"] == 16
        source = config["source"]  # what was replayed: the default sample, by path and run id
        assert source["kind"] == "bundle" and Path(source["path"]).is_absolute() and source["run_id"]
        timeline = pl.read_parquet(folder / "timeline.parquet")
        assert timeline.columns == ["resource", "pool", "kind", "step", "job", "id", "start_s", "end_s"]
        assert (timeline["end_s"] >= timeline["start_s"]).all()
        assert {"request", "train", "reward"} <= set(timeline["kind"])


def test_the_table_compares_the_runs() -> None:
    result = run_cli("replay", "--scheduler", "disagg-sync,one-step-async", "--steps", "3", "--gen-gpus", "8",
                     "--train-gpus", "8", "--gpu", "H100")
    assert result.returncode == 0, result.stderr
    for text in ("disagg-sync", "one-step-async", "samples/s", "roofline of Qwen2.5-7B on H100"):
        assert text in result.stdout
    # the roofline's record on the nearest public measurements: no Qwen2.5-7B was measured, H100 was
    flat = " ".join(result.stdout.split())
    assert "note: generation cost's track record (" in flat
    assert "points of other models on H100, Qwen2.5-7B unmeasured" in flat
    fitted = run_cli("replay", "-s", "disagg-sync", "--steps", "1", "--gpu", "H100",
                     "--set", "cost.memory_efficiency=0.5")
    assert fitted.returncode == 0 and "track record" not in fitted.stdout  # not the validated defaults: no record


def test_gpu_gives_each_pool_its_kind(tmp_path: Path) -> None:
    result = run_cli("replay", "-s", "disagg-sync", "--steps", "1", "--gpu", "H20,H800", "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    cluster = json.loads((tmp_path / "disagg-sync" / "config.json").read_text())["cluster"]
    assert (cluster["gen_gpu"], cluster["train_gpu"]) == ("H20", "H800")
    assert "roofline of Qwen2.5-7B on H20" in result.stdout


def test_a_cpu_recording_on_a_gpu_says_its_trainer_phases_stay_as_measured() -> None:
    """The catalog has no peak FLOP/s for the recorded cpu: the trainer's spans cannot be rescaled, and the table,
    whose generation and sync moved to the H100, says so instead of mixing hardware without a word."""
    result = run_cli("replay", "tiny_rl_cpu", "-s", "disagg-sync", "--gpu", "H100", "--replicates", "0")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "trainer phases as measured on cpu, not rescaled to H100" in text
    same = run_cli("replay", "tiny_rl_cpu", "-s", "disagg-sync", "--replicates", "0")
    assert "trainer phases as measured" not in same.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scheduler", "nope"], "unknown scheduler 'nope'"),
        (["--gen-gpus", "0"], "gen_gpus must be >= 1"),
        (["--gen-gpus", "3", "--tp", "2"], "do not split into instances of tp 2"),
        (["--set", "fully-async.bogus=1", "-s", "fully-async"], "unknown key 'fully-async.bogus'"),
        (["--set", "rollpacker.seed=-1", "-s", "rollpacker"], "rollpacker seed must be >= 0, got -1"),  # a traceback
        (["--set", "streamrl.seed=99999999999", "-s", "streamrl"], "streamrl seed=99,999,999,999 is above the limit"),
        # each grew until the kernel killed it, or ran on at 0 events: refused before the replay allocates
        (["--set", "rollpacker.responses=100000", "-s", "rollpacker"],
         "rollpacker launches 20,000,000 responses a round"),
        (["--set", "rollart.alpha=100000", "-s", "rollart"], "rollart alpha 100,000 starts"),
        (["--set", "fully-async.eta=100000", "-s", "fully-async"], "fully-async eta 100,000 launches"),
        (["--set", "cost.train_mfu=2"], "cost.train_mfu must be in (0, 1]"),
        (["--set", "nokey"], "expected key=value"),
        (["--gpu", "Z80"], "Z80"),
        (["--gpu", "H20,Z80", "--steps", "1"], "unknown GPU kind 'Z80'"),
        (["--gpu", "H20,"], "give one GPU kind, or two as GENERATION,TRAINING"),
        (["-s", "disagg-sync,,"], "--scheduler 'disagg-sync,,' has an empty name"),  # was replayed as "disagg-sync"
        (["-s", ",disagg-sync"], "has an empty name"),
        (["--gpu", "H20,H800,H100"], "give one GPU kind, or two as GENERATION,TRAINING"),
        (["/no/such/bundle"], "/no/such/bundle"),
        (["--model", "Llama-2-70B", "--gpu", "A100", "--tp", "1", "--steps", "1"], "leaves no KV cache"),
        (["--recorded-steps", "1:x"], "give START:STOP[:STRIDE]"),
        (["--recorded-steps", "3:1"], "selects no step"),
        (["--recorded-steps", "0:40"], "recorded steps 12..39 are not in the bundle, whose steps are 0..11"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = run_cli("replay", *args)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_rollmux_takes_a_job_list(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(
        '[[jobs]]\nname = "a"\nbundle = "rollpacker_qwen7b"\nsteps = 2\n'
        '[[jobs]]\nname = "b"\nbundle = "rollpacker_qwen7b"\narrival_s = 20.0\nsteps = 2\nseed = 1\n'
    )
    result = run_cli("replay", "--jobs", str(jobs), "-s", "rollmux,disagg-sync", "--json")
    assert result.returncode == 0, result.stderr
    m = json.loads(result.stdout)
    assert m["rollmux"]["samples"] == 2 * 2 * 1024 and m["disagg-sync"]["samples"] == 2 * 1024
    assert m["rollmux"]["extra"]["groups"] >= 1
    table = run_cli("replay", "--jobs", str(jobs), "-s", "rollmux,disagg-sync")
    assert "replay(s) the first job only (a)" in table.stdout
    said = " ".join((table.stdout + table.stderr).split())  # each job resampled by its entry's steps, said so
    assert "b: the workload is drawn from the recorded one (seed 1)" in said, said
    jobs.write_text('[[jobs]]\nname = "a"\nbundle = "rollpacker_qwen7b"\nslo = 0.5\n')
    bad = run_cli("replay", "--jobs", str(jobs), "-s", "rollmux")
    assert bad.returncode == 2 and "slo must be >= 1" in bad.stderr
    both = run_cli("replay", "rollpacker_qwen7b", "--jobs", str(jobs), "-s", "rollmux")
    assert both.returncode == 2
    jobs.write_text('[[jobs]]\nname = "a"\nbundle = "rollpacker_qwen7b"\nsteps = 0\n')  # said no job's name
    bad = run_cli("replay", "--jobs", str(jobs), "-s", "rollmux")
    assert bad.returncode == 2 and "rltrace: error: job 'a': steps must be >= 1, got 0" in bad.stderr, bad.stderr


def test_a_job_lists_phases_and_syncs_are_per_job_step_in_every_view(tmp_path: Path) -> None:
    """With two jobs, disagg-sync (which replays the first) reported every phase at half its time: its spans were
    counted as a second job's steps. rollmux's weight_sync_s added both jobs' syncs of step k into one figure,
    2x the phase breakdown's, and the report's sync chart drew that sum."""
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(
        '[[jobs]]\nname = "a"\nbundle = "rollpacker_qwen7b"\nsteps = 2\n'
        '[[jobs]]\nname = "b"\nbundle = "rollpacker_qwen7b"\narrival_s = 20.0\nsteps = 2\nseed = 1\n'
    )
    result = run_cli("replay", "--jobs", str(jobs), "-s", "rollmux,disagg-sync", "-o", str(tmp_path / "runs"))
    assert result.returncode == 0, result.stderr
    one = json.loads((tmp_path / "runs" / "disagg-sync" / "metrics.json").read_text())
    phases = one["phases_s_per_step"]
    assert sum(phases.values()) == pytest.approx(one["step_time_s"]["mean"], rel=1e-6)  # a sync step is its phases
    assert phases["weight_sync"] == pytest.approx(one["weight_sync_s"], rel=1e-6) and one["weight_sync_s"] > 0
    both = json.loads((tmp_path / "runs" / "rollmux" / "metrics.json").read_text())
    assert both["weight_sync_s"] == pytest.approx(both["phases_s_per_step"]["weight_sync"], rel=1e-6)
    charted = sync_durations(load_runs(tmp_path / "runs"))
    for name, metrics in (("rollmux", both), ("disagg-sync", one)):
        per_step = charted.filter(pl.col("run") == name)["duration_s"]
        assert per_step.mean() == pytest.approx(metrics["weight_sync_s"], rel=1e-6), name


def test_a_one_job_schedulers_network_figures_are_its_jobs_alone() -> None:
    """disagg-sync on a job list with a topology replays the first job, yet its network figures averaged every
    job's routed syncs and collectives: 0.853 s a weight sync (rollmux's all-jobs figure) beside 0.339 s in its own
    timeline."""
    args = ["--topology", "fat-tree:k=16,gpu=H800", "--sync-strategy", "tree", "--replicates", "0", "--json"]
    listed = run_cli("replay", "--jobs", str(REPO / "examples" / "rollmux" / "jobs.toml"), "-s", "disagg-sync", *args)
    alone = run_cli("replay", "rollpacker_qwen7b", "--steps", "4", "-s", "disagg-sync", *args)
    assert listed.returncode == alone.returncode == 0, listed.stderr + alone.stderr
    listed_m, alone_m = (json.loads(r.stdout)["disagg-sync"] for r in (listed, alone))
    assert listed_m["network"]["weight_sync_s"] == pytest.approx(listed_m["weight_sync_s"], rel=1e-9)
    for key in ("weight_sync_s", "collective_s"):
        assert listed_m["network"][key] == pytest.approx(alone_m["network"][key], rel=1e-9), key


def test_recorded_steps_replay_only_those_steps() -> None:
    whole = run_cli("replay", "tiny_rl_cpu", "-s", "as-recorded", "--json")
    odd = run_cli("replay", "tiny_rl_cpu", "-s", "as-recorded", "--recorded-steps", "1,3", "--json")
    assert whole.returncode == 0 and odd.returncode == 0, whole.stderr + odd.stderr
    samples = rltrace.open(sample_path("tiny_rl_cpu")).requests.group_by("step").len().collect()
    want = samples.filter(pl.col("step").is_in([1, 3]))["len"].sum()
    assert json.loads(odd.stdout)["as-recorded"]["samples"] == want < json.loads(whole.stdout)["as-recorded"]["samples"]


@pytest.mark.slow  # every scheduler on the whole default sample, twice, and a report: over 5 s on 2 cores
def test_the_terminal_json_and_report_give_one_same_work_answer(tmp_path: Path) -> None:
    """Every run of `replay -s all` on the default sample: the same-work samples/s of --json, of the terminal table
    and of the report's first screen agree to the printed precision, and a run that trained other work is flagged in
    all three."""
    args = ("replay", "-s", "all", "--replicates", "0")
    shown = json.loads(run_cli(*args, "--json", "--dashboard", str(tmp_path / "r.html")).stdout)
    table = run_cli(*args, env={"COLUMNS": "200"}).stdout
    report = (tmp_path / "r.html").read_text()
    assert len(shown) >= 10
    flagged = []
    for name, m in shown.items():
        w = m["same_work"]
        figure = f"{w['samples_per_s']:#.3g}"  # trailing zeros kept: 6.00 beside 9.86
        work = "changed" if w["changed"] else "as recorded"
        row = next(line for line in table.splitlines() if line.startswith(f"│ {name} "))
        cells = [c.strip() for c in row.strip("│").split("│")]
        assert cells[1] == figure and cells[3] == work, (name, cells, w)
        html_row = re.search(rf"<td>{re.escape(name)}</td><td>([^<]*)</td>.*?<td>(changed|as recorded)[^<]*</td></tr>",
                             report)
        assert html_row and html_row.group(1) == figure and html_row.group(2) == work, (name, figure, work)
        flagged += [name] if w["changed"] else []
    assert {"fully-async", "rollart", "rollpacker"} <= set(flagged)
    assert f"changed work: {', '.join(flagged)} trained other samples" in table


def test_each_pool_says_its_gpu_kind_and_cost(tmp_path: Path) -> None:
    args = ("replay", "rollart_qwen3_8b", "-s", "disagg-sync,rollart", "--steps", "2", "--replicates", "0")
    shown = json.loads(run_cli(*args, "--json", "--dashboard", str(tmp_path / "r.html")).stdout)
    for name, m in shown.items():
        pools = m["cost_by_pool"]
        assert sum(p["cost_usd"] for p in pools.values()) == pytest.approx(m["cost_usd"], rel=1e-9), name
    # its H800 prefill half, and the serverless reward workers it bills per second
    assert {p["gpu"] for p in shown["rollart"]["cost_by_pool"].values()} == {"H20", "H800", "serverless"}
    table = run_cli(*args).stdout
    assert "cost (rollart): generation 8 H20 $" in table and "generation/prefill 8 H800 $" in table
    assert "GPUs and cost by pool" in (tmp_path / "r.html").read_text()


def test_an_unpriced_run_shows_no_cost_per_sample() -> None:
    """CPU pools have no price: the table shows "-" for $/1k samples (it showed 0.000), as the report says no run
    has a cost."""
    table = run_cli("replay", "tiny_rl_cpu", "-s", "disagg-sync", "--replicates", "0", env={"COLUMNS": "200"}).stdout
    row = next(line for line in table.splitlines() if line.startswith("│ disagg-sync "))
    assert [c.strip() for c in row.strip("│").split("│")][2] == "-", row


@pytest.mark.parametrize("renumber", [{0: 100, 1: 101, 2: 102, 3: 103}, {0: 0, 1: 1, 2: 6, 3: 9}])
def test_a_bundle_whose_steps_start_later_or_skip_replays_as_the_same_steps(
        renumber: dict[int, int], tmp_path: Path) -> None:
    """A job resumed at step 100, or one that numbers only some steps, crashed every scheduler with an IndexError:
    a replay indexes its steps 0, 1, ... while the requests kept the bundle's numbers."""
    source = rltrace.open(sample_path("tiny_rl_cpu"))
    moved = tmp_path / "moved"
    shutil.copytree(source.path, moved)
    for table in moved.glob("*.parquet"):
        frame = pl.read_parquet(table)
        if "step" in frame.columns and frame.height:
            moved_step = pl.col("step").replace_strict(renumber, default=pl.col("step")).cast(frame.schema["step"])
            frame.with_columns(moved_step).write_parquet(table)
    runs = [run_cli("replay", str(bundle), "-s", "colocated-sync,fully-async", "--replicates", "0", "--json")
            for bundle in (source.path, moved)]
    assert [r.returncode for r in runs] == [0, 0], runs[1].stderr
    same, shifted = (json.loads(r.stdout) for r in runs)
    for scheduler in ("colocated-sync", "fully-async"):
        assert shifted[scheduler]["samples"] == same[scheduler]["samples"]
        assert shifted[scheduler]["makespan_s"] == pytest.approx(same[scheduler]["makespan_s"], rel=1e-9)


@pytest.mark.parametrize(("source", "steps"), [("rollpacker_qwen7b", "2"),
                                               (str(REPO / "examples" / "described" / "qwen3_30b_a3b_colocated.toml"),
                                                "1")])
def test_colocated_sync_gives_one_answer_for_every_split_of_the_same_gpus(source: str, steps: str) -> None:
    """Every GPU of a colocated cluster trains, but a recording's trainer time was priced on the training pool alone
    (16 + 16 H100: 8.7 samples/s, 24 + 8: 7.7), and a described job whose pool could not hold its layout had its
    reward (host work) scaled with the trainer's time (4.1 s a step at 16 + 16, 32.8 at 28 + 4)."""
    runs = []
    for gen, train in ((16, 16), (24, 8), (28, 4)):
        done = run_cli("replay", source, "-s", "colocated-sync", "--gpu", "H100", "--gen-gpus", str(gen),
                       "--train-gpus", str(train), "--steps", steps, "--replicates", "0", "--json")
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout)["colocated-sync"])
    for run in runs[1:]:
        assert run["throughput_samples_per_s"] == pytest.approx(runs[0]["throughput_samples_per_s"], rel=1e-9)
        assert run["phases_s_per_step"] == pytest.approx(runs[0]["phases_s_per_step"], rel=1e-9)


def test_work_still_running_when_a_run_ends_is_on_its_timeline(tmp_path: Path) -> None:
    """fully-async and rollart end the run with requests still generating; that work had no span, so the busy rows,
    the Perfetto batch counter and gpu_busy stopped at the last finished request."""
    done = run_cli("replay", "rollpacker_qwen7b", "-s", "fully-async,rollart", "--steps", "3", "--replicates", "0",
                   "--set", "fully-async.interruptible=false", "-o", str(tmp_path))
    assert done.returncode == 0, done.stderr
    for name in ("fully-async", "rollart"):
        timeline = pl.read_parquet(tmp_path / name / "timeline.parquet")
        makespan = json.loads((tmp_path / name / "metrics.json").read_text())["makespan_s"]
        dropped = timeline.filter(pl.col("kind") == "dropped")
        assert dropped.height and (dropped["end_s"] == makespan).all() and (dropped["start_s"] < makespan).all()
        assert timeline.filter(pl.col("kind") == "busy")["end_s"].max() == makespan
        assert (timeline["end_s"] >= timeline["start_s"]).all()


def test_a_colocated_run_on_a_fabric_syncs_no_weights_over_it(tmp_path: Path) -> None:
    """colocated-sync refits in place (weight_sync_s 0), yet its network figures priced a two_stage sync over the
    fabric (12.3 s a step on a 10 Gb/s cross-datacenter link) and printed it beside the run."""
    done = run_cli("replay", "rollpacker_qwen7b", "-s", "colocated-sync", "--steps", "2", "--replicates", "0",
                   "--topology", "cross-dc:nodes=4,split=2,dci_gbps=10,gpu=H800", "--sync-strategy", "two_stage",
                   "--json")
    assert done.returncode == 0, done.stderr
    metrics = json.loads(done.stdout)["colocated-sync"]
    assert metrics["weight_sync_s"] == metrics["network"]["weight_sync_s"] == 0.0
    assert metrics["network"]["collective_s"] > 0  # its training collectives still cross the fabric


DESCRIBED = str(REPO / "examples" / "described" / "qwen3_30b_a3b_colocated.toml")


@pytest.mark.parametrize(("args", "said"), [
    ([DESCRIBED, "-s", "colocated-sync", "--steps", "2", "--replicates", "5"], "a described job draws one workload"),
    (["rollpacker_qwen7b", "-s", "disagg-sync", "--steps", "2", "--replicates", "5"], None),  # resampled: a spread
    (["rollpacker_qwen7b", "-s", "disagg-sync", "--replicates", "5"], "nothing in this replay varies"),
    (["rollpacker_qwen7b", "-s", "disagg-sync"], None),  # the default, not asked for: no word
    ([DESCRIBED, "-s", "colocated-sync", "--steps", "2", "--replicates", "0"], None),
    (["--jobs", str(REPO / "examples" / "rollmux" / "jobs.toml"), "-s", "disagg-sync", "--replicates", "5"],
     "a job list draws each job's workload once"),
])
def test_replicates_asked_for_where_nothing_varies_say_so(args: list[str], said: str | None) -> None:
    """`--replicates 5` on a replay that cannot vary gave no spread and no word on why."""
    done = run_cli("replay", *args)
    assert done.returncode == 0, done.stderr
    flat = " ".join(done.stdout.split())
    if said is None:
        assert "no spread" not in flat
    else:
        assert f"note: --replicates 5: no spread, {said}" in flat and "spread (" not in flat


@pytest.mark.parametrize(("args", "said"), [
    # the recorded shape asked for is a new draw (8.012 samples/s against 7.956 without it), and nothing said so
    (["--steps", "12"], "the workload is drawn from the recorded one (seed 0): its steps and samples are resampled"),
    (["--seed", "5"], "--seed 5 unused: nothing is drawn, the recording replays as it ran"),  # changed nothing
    (["--seed", "5", "--samples", "8"], "the workload is drawn from the recorded one (seed 5)"),
    ([], None),
])
def test_a_replay_says_when_it_draws_the_workload_and_when_a_seed_draws_nothing(args: list[str],
                                                                                said: str | None) -> None:
    done = run_cli("replay", "rollpacker_qwen7b", "-s", "disagg-sync", "--replicates", "0", *args)
    assert done.returncode == 0, done.stderr
    flat = " ".join((done.stdout + done.stderr).split())
    if said is None:
        assert "drawn from the recorded one" not in flat and "unused: nothing is drawn" not in flat
    else:
        assert f"note: {said}" in flat, flat[-2000:]


def test_a_cost_setting_the_measured_source_leaves_unused_says_so() -> None:
    """On a recording whose trainer spans and weight syncs were all measured, cost.train_mfu and cost.sync_gbps
    changed nothing, and nothing said so."""
    args = ("replay", "-s", "disagg-sync", "--steps", "2", "--replicates", "0")
    plain = run_cli(*args, "--json")
    given = run_cli(*args, "--json", "--set", "cost.train_mfu=0.1", "--set", "cost.sync_gbps=0.5")
    assert plain.returncode == given.returncode == 0, given.stderr
    makespans = [json.loads(done.stdout)["disagg-sync"]["makespan_s"] for done in (plain, given)]
    assert makespans[0] == makespans[1]
    for key, what in (("train_mfu", "trainer phase"), ("sync_gbps", "weight sync")):
        assert f"cost.{key} unused: every {what} of the source was measured" in given.stderr


def test_a_pool_the_manifest_counts_as_empty_is_named(tmp_path: Path) -> None:
    """A manifest's trainer pool of 0 GPUs was refused as 'pools need at least one GPU each, got 1 generation and 0
    training GPUs', by replay and diagnose alike, naming neither the manifest nor the flag that replays it."""
    copy = tmp_path / "bundle"
    shutil.copytree(sample_path("tiny_rl_cpu"), copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["cluster"]["trainer"]["count"] = 0
    (copy / "manifest.json").write_text(json.dumps(manifest))
    said = ("the bundle records 0 GPUs for its trainer pool (manifest.json cluster.trainer.count): replay it with "
            "--train-gpus N")
    for args in (["replay", str(copy), "-s", "disagg-sync"], ["diagnose", str(copy), "--replicates", "0"]):
        refused = run_cli(*args)
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr
    assert run_cli("replay", str(copy), "-s", "disagg-sync", "--train-gpus", "2", "--replicates", "0").returncode == 0


def test_a_recording_with_a_step_left_unmeasured_replays_with_a_note(tmp_path: Path) -> None:
    """A recording stopped mid-step (no train span in its last step) on a device the catalog lacks was refused as a
    device without a training cost model, though the rest of it was measured."""
    bundle = rltrace.open("tiny_rl_cpu")
    tables = {name: bundle.table(name).collect() for name in TABLES}
    last = tables["spans"]["step"].max()
    trained = pl.col("phase").is_in(["train", "optimizer"])
    tables["spans"] = tables["spans"].filter(~((pl.col("step") == last) & trained))
    rltrace.write_bundle(tmp_path / "partial", bundle.manifest, tables)
    done = run_cli("replay", str(tmp_path / "partial"), "-s", "as-recorded", "--replicates", "0")
    assert done.returncode == 0, done.stderr
    assert "1 of 4 steps have no measured train time, and 'cpu' no cost model to price one" in " ".join(
        done.stdout.split())
