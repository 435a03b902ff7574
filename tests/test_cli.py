"""Real CLI runs of every command: output, JSON keys, and one-line exit-2 errors on bad input."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from helpers import REPO, run_cli, small_config
from rltrace.replay.sweep.grid import load_grid
from rltrace.sample_traces import sample_path

import rltrace
from rltrace.manifest import Pool
from rltrace.schema import TABLES
from rltrace.synth import synthesize

COMMANDS = {"advise", "calibrate", "dashboard", "diagnose", "estimate", "export", "fabric", "inspect", "record",
            "replay", "schema", "sweep", "synth", "import"}


def test_help_lists_exactly_the_working_commands() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    listed = set(re.findall(r"^│ (\w+)\s{2,}", result.stdout, flags=re.MULTILINE)) - {"--help"}
    assert listed == COMMANDS, result.stdout


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help_with_an_example(command: str) -> None:
    result = run_cli(command, "--help")
    assert result.returncode == 0
    assert "Example:" in result.stdout and f"rltrace {command}" in result.stdout
    # a file the examples name ships with the project (the help is read from the checkout)
    named = re.findall(r"\b(?:examples|sample_traces)/[\w./-]+", result.stdout)
    assert all((REPO / path.rstrip(".")).exists() for path in named), named


def test_inspect_without_argument_summarises_the_default_sample() -> None:
    result = run_cli("inspect")
    assert result.returncode == 0, result.stderr
    for text in ("rollpacker_qwen7b", "Qwen2.5-7B", "max_over_median", "Per step", "all_gather", "Weight syncs",
                 "generate"):
        assert text in result.stdout, text


def test_inspect_accepts_a_sample_name() -> None:
    result = run_cli("inspect", "streamrl_qwen32b")
    assert result.returncode == 0, result.stderr
    assert "Qwen2.5-32B" in result.stdout


def test_inspect_json_has_the_documented_keys() -> None:
    result = run_cli("inspect", "--json")
    info = json.loads(result.stdout)
    assert set(info["tables"]) == set(TABLES)  # every table of the format: docs/inspect.md's tables.<table>.rows
    for table in ("requests", "collectives", "weight_syncs", "spans"):
        assert info["tables"][table]["rows"] > 0
    tiny = json.loads(run_cli("inspect", "--json", "tiny_rl_cpu").stdout)  # a recording: vLLM's iterations too
    recorded = rltrace.open(sample_path("tiny_rl_cpu")).manifest.tables["iterations"]
    assert tiny["tables"]["iterations"]["rows"] == recorded > 0
    assert info["requests"]["steps"] == 12
    assert set(info["requests"]["output_tokens"]) >= {"mean", "p50", "p90", "p99", "max", "max_over_median"}
    assert set(info["collectives"]["by_op"]) == {"all_gather", "reduce_scatter"}
    assert set(info["collectives"]["by_op"]["all_gather"]) >= {"count", "bytes"}
    assert set(info["weight_syncs"]) >= {"count", "bytes", "by_method"}
    # tiny_rl's engine reloads from disk the copy the trainer sent over Gloo: two transports, each said apart
    methods = tiny["weight_syncs"]["by_method"]
    assert set(methods) == {"gloo", "disk"} and methods["gloo"]["count"] == methods["disk"]["count"] == 4
    assert sum(m["bytes"] for m in methods.values()) == tiny["weight_syncs"]["bytes"]
    shown = run_cli("inspect", "tiny_rl_cpu").stdout
    assert "Weight syncs: 8 flows, 14.0 MiB (disk 4 flows 7.0 MiB, gloo 4 flows 7.0 MiB)" in shown
    assert info["spans"]["by_phase"]["generate"]["seconds"] > info["spans"]["by_phase"]["train"]["seconds"] > 0


def test_synth_then_inspect(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    result = run_cli("synth", "--preset", "rollpacker", "--set", "steps=2", "--set", "prompts_per_step=4",
                     "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stderr and "requests" in result.stderr
    info = json.loads(run_cli("inspect", "--json", str(out)).stdout)
    assert info["tables"]["requests"]["rows"] == 2 * 4 * 8
    again = run_cli("synth", "--preset", "rollpacker", "--set", "steps=2", "--set", "prompts_per_step=4",
                    "-o", str(out), "--force")
    assert again.returncode == 0, again.stderr


def test_synth_from_a_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "w.toml"
    cfg.write_text('steps = 1\nprompts_per_step = 2\nmax_new_tokens = 512\n[output]\nmedian = 100.0\n')
    result = run_cli("synth", "--config", str(cfg), "-o", str(tmp_path / "b"))
    assert result.returncode == 0, result.stderr
    info = json.loads(run_cli("inspect", "--json", str(tmp_path / "b")).stdout)
    assert info["requests"]["output_tokens"]["max"] <= 512


RUN_METRICS = {"steps": 2, "samples": 8, "makespan_s": 10.0, "cost_usd": 1.0, "throughput_samples_per_s": 0.8,
               "step_time_s": {"mean": 5.0}, "bubble_fraction": {}, "gpu_utilization": {}}
"""the keys every replay's metrics.json holds"""


def _bad_inputs(tmp: Path) -> list[tuple[list[str], str]]:
    (tmp / "file.txt").write_text("hello")
    (tmp / "bad.toml").write_text("steps = [")
    existing = tmp / "exists"
    existing.mkdir()
    (existing / "manifest.json").write_text("{}")
    out = str(tmp / "out")
    (tmp / "binary.toml").write_bytes(b"\xff\xfe\x00steps")
    header = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    (tmp / "ok.csv").write_text(header + "2023-11-16 18:15:46.6805900,374,44\n")
    (tmp / "words.csv").write_text(header + "2023-11-16 18:15:46.6805900,abc,44\n")
    (tmp / "negative.csv").write_text(header + "2023-11-16 18:15:46.6805900,-374,44\n")
    (tmp / "grid.toml").write_text('[fixed]\nscheduler = "colocated-sync"\n[axes]\ngpu = ["Z9"]\n')
    run = tmp / "runs" / "colocated-sync"  # a run folder whose metrics.json holds a word where a figure belongs
    run.mkdir(parents=True)
    (run / "metrics.json").write_text('{"makespan_s": "lots"}')
    (run / "config.json").write_text("{}")
    flat = tmp / "flat" / "colocated-sync"  # a section of figures that is not a table
    flat.mkdir(parents=True)
    (flat / "metrics.json").write_text('{"volume_bytes_per_step": 5}')
    (flat / "config.json").write_text("{}")
    for name, metrics in (("empty", "{}"), ("negative", json.dumps({**RUN_METRICS, "cost_usd": -3.0}))):
        # read as zeros: a confident verdict ("0% now", "at -0.55x the cost per sample") from a damaged file
        (tmp / name / "disagg-sync").mkdir(parents=True)
        (tmp / name / "disagg-sync" / "metrics.json").write_text(metrics)
        (tmp / name / "disagg-sync" / "config.json").write_text("{}")
    return [
        # bad input found by a sweep of 489 cases on 2026-11-26, each a traceback or a silent acceptance before
        (["estimate", "decode", "--model", "Qwen2.5-7B", "--gpu", "H100", "--tp", "0"], "--tp must be >= 1, got 0"),
        (["synth", "-o", out, "--config", str(tmp)], "a folder, expected a file"),
        (["synth", "-o", out, "--config", str(tmp / "binary.toml")], "not a TOML file (not UTF-8 text)"),
        (["synth", "-o", out, "--seed", "-1"], "seed must be >= 0, got -1"),
        (["synth", "-o", "/proc/rltrace-no-such-folder", "--preset", "rollpacker"], "cannot write a bundle there"),
        (["import", "azure-llm", str(tmp / "words.csv"), "-o", out], "token counts and arrival times must be numbers"),
        (["import", "azure-llm", str(tmp / "negative.csv"), "-o", out], "no usable rows in"),
        (["import", "azure-llm", str(tmp / "ok.csv"), "-o", out, "--gpu", "Z9"], "unknown GPU kind 'Z9'"),
        (["import", "azure-llm", str(tmp), "-o", out], "a folder, expected a file"),
        (["import", "mooncake", str(tmp / "file.txt"), "-o", out], "line 1 is not JSON"),
        (["import", "azure-llm", str(tmp / "ok.csv"), "-o", out, "--time-unit", "ms"],  # read in seconds regardless
         "--time-unit does not apply to import azure-llm (it is for csv): drop it"),
        (["import", "kineto", str(tmp / "ok.csv"), "-o", out, "--engines", "3"],
         "--engines does not apply to import kineto (it is for azure-llm, csv, mooncake): drop it"),
        (["fabric", "validate", "--gpu", "H999"], "--gpu goes with --tables (the packaged sets state their own)"),
        (["fabric", "validate", "--tables", str(tmp / "file.txt")], "file.txt: a file (--tables takes a folder"),
        (["dashboard", str(tmp / "runs"), "-o", str(tmp / "r.html"), "--max-segments", "0"],
         "--max-segments must be at least 1, got 0"),  # "report limits must be positive", naming no flag
        (["fabric", "bench", "--topology", "nvswitch:gpus=8,gpu=H100", "--size", "0.5"], "at least 1 byte(s)"),
        (["fabric", "bench", "--topology", "nvswitch:gpus=8,gpu=H100", "--size", "1G", "--price", "cable_usd=-1"],
         "cable_usd must be a price >= 0"),
        (["fabric", "validate", "--min-size", "lots"], "--min-size 'lots'"),
        (["calibrate", "--device", "cpu", "--ranks", "0", "-o", str(tmp / "p.parquet")], "--ranks must be at least 1"),
        # the kernels were written, then replaced by the profile, exit 0
        (["calibrate", "--tables", str(tmp), "-o", str(tmp / "p.parquet"), "--kernels-out", str(tmp / "p.parquet")],
         "is the --output file too: give each its own file"),
        # each was ignored without a word, the estimate printed as without it
        (["estimate", "decode", "--model", "Llama-2-7B", "--gpu", "H100", "--gpus", "4"],
         "--gpus does not apply to estimate decode (it is for train): drop it"),
        (["estimate", "train", "--model", "Llama-2-7B", "--gpu", "H100", "--batch", "7"],
         "--batch does not apply to estimate train (it is for decode): drop it"),
        (["estimate", "validate-rl", "--by", "gpu"],
         "--by does not apply to estimate validate-rl (it is for validate)"),
        (["advise", "rollpacker_qwen7b", "--top", "0"], "--top must be at least 1"),
        (["dashboard", str(tmp / "runs"), "-o", str(tmp / "r.html")], "makespan_s must be a number, got 'lots'"),
        (["dashboard", str(tmp / "empty"), "-o", str(tmp / "r.html")],
         ("missing steps, samples, makespan_s, cost_usd, throughput_samples_per_s, step_time_s, bubble_fraction, "
         "gpu_utilization (every replay writes them: a damaged file)")),
        (["dashboard", str(tmp / "negative"), "-o", str(tmp / "r.html")], "cost_usd must be >= 0, got -3.0"),
        (["dashboard", str(tmp / "flat"), "-o", str(tmp / "r.html")],
         "volume_bytes_per_step must be a table of figures, got 5"),
        (["sweep", "rollpacker_qwen7b", "--grid", str(tmp / "grid.toml"), "-o", out], "unknown GPU kind 'Z9'"),
        (["diagnose", "/no/such/bundle"], "/no/such/bundle: no such file or directory"),
        (["diagnose", str(tmp / "file.txt")], "not a trace bundle"),
        (["diagnose", "tiny_rl_cpu", "--replicates", "1"], "--replicates must be 0 (off) or 2..1000, got 1"),
        (["diagnose", "tiny_rl_cpu", "--profile", str(tmp / "none.parquet")], "none.parquet: no such file"),
        (["diagnose", "tiny_rl_cpu", "--profile", str(tmp / "file.txt")], "not a readable profile"),
        (["diagnose", "tiny_rl_cpu", "--dashboard", str(tmp)], "is a folder, expected a file name"),
        (["inspect", "/no/such/bundle"], "/no/such/bundle: no such file or directory"),
        (["inspect", str(tmp / "file.txt")], "not a trace bundle"),
        (["inspect", str(existing)], "manifest.json: missing field 'run_id'"),
        (["inspect", "--bogus"], "No such option: --bogus"),
        (["nosuchcommand"], "No such command 'nosuchcommand'"),
        (["synth"], "Missing option '-o'"),
        (["synth", "-o", out, "--preset", "nope"], "unknown preset 'nope' (known: rollart, rollpacker, streamrl)"),
        (["synth", "-o", out, "--set", "steps=0"], "steps must be >= 1, got 0"),
        (["synth", "-o", out, "--set", "nokey=1"], "--set 'nokey=1': unknown key 'nokey'"),
        (["synth", "-o", out, "--set", "steps"], "--set 'steps': expected key=value"),
        (["synth", "-o", out, "--set", "model=GPT-9"], "unknown model 'GPT-9'"),
        (["synth", "-o", out, "--set", "generation.device=TPU"], "unknown GPU kind 'TPU'"),
        (["synth", "-o", out, "--config", str(tmp / "none.toml")], "none.toml: no such file"),
        (["synth", "-o", out, "--config", str(tmp / "bad.toml")], "bad.toml: invalid TOML"),
        (["synth", "-o", out, "--seed", "x"], "Invalid value for '--seed'"),
        (["synth", "-o", str(existing), "--preset", "rollpacker"], "already exists (pass --force to replace it)"),
        (
            ["synth", "-o", out, "--set", "output.kind=empirical", "--set", "output.path=/nope.csv",
             "--set", "output.column=x"],
            "/nope.csv: no such file",
        ),
    ]


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for args, fragment in _bad_inputs(tmp_path):
        result = run_cli(*args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, (args, result.stderr)
        assert lines[0].startswith("rltrace: error: ") and fragment in lines[0], (args, lines[0])
        assert "Traceback" not in result.stderr
        assert result.stdout == ""
    assert not (tmp_path / "out").exists()


def _audited_inputs(tmp: Path) -> list[tuple[list[str], str]]:
    """Bad input a second sweep found: tracebacks, a run of hours or gigabytes, outputs written into a bundle,
    options that did nothing, and messages in a library's words."""
    copy = tmp / "copy"
    shutil.copytree(sample_path("tiny_rl_cpu"), copy)  # a bundle the outputs below must not be written into
    synthetic = synthesize(small_config())
    empty = tmp / "empty"  # a bundle with no requests (an import of collectives only)
    rltrace.write_bundle(empty, synthetic.manifest, {**synthetic.tables,
                                                      "requests": synthetic.tables["requests"].head(0)})
    (tmp / "constants.toml").write_text("version = 1\nconstants = 5\n")
    (tmp / "twice.toml").write_text('[axes]\nscheduler = ["disagg-sync", "disagg-sync"]\n')
    (tmp / "kinds.toml").write_text('[axes]\ngpu = ["H100", "h100"]\n[fixed]\nscheduler = "disagg-sync"\n')
    (tmp / "fabrics.toml").write_text('[axes]\ntopology = ["fat-tree:k=8,gpu=H800", "fat-tree:gpu=h800, k=8"]\n'
                                      '[fixed]\nscheduler = "disagg-sync"\n')
    (tmp / "steps.toml").write_text('[axes]\nsource_steps = [[2, 4], [4, 2, 2]]\n[fixed]\nscheduler = "disagg-sync"\n')
    (tmp / "kinds_space.toml").write_text('scheduler = ["disagg-sync"]\ngpu = ["H100", "h100"]\n')
    (tmp / "both.toml").write_text('[axes]\ntopology = ["fat-tree:k=8,gpu=H800"]\n[fixed]\nscheduler = "disagg-sync"\n'
                                   '"network.topology" = "rail:nodes=4,gpu=H800"\n')
    (tmp / "grid.toml").write_text('[axes]\nscheduler = ["disagg-sync"]\n')
    (tmp / "space.toml").write_text('scheduler = ["rollmux"]\n')
    (tmp / "recorded.toml").write_text('scheduler = "as-recorded"\n')
    (tmp / "ok.csv").write_text("a,b\n1,2\n")
    (tmp / "words.toml").write_text('steps = "x"\n')
    (tmp / "jobs.toml").write_text('[[jobs]]\nname = "a"\nbundle = "nope"\n')
    out = str(tmp / "out")
    return [
        (["diagnose", "tiny_rl_cpu", "--seed", "-1"], "--seed must be >= 0, got -1"),
        # a profile's factors did nothing here, silently
        (["estimate", "validate", "--profile", str(tmp / "p.toml")],
         "--profile prices decode and prefill estimates; estimate validate does not use it"),
        (["replay", "tiny_rl_cpu", "-s", "disagg-sync", "--set", f"cost.profile={tmp / 'p.toml'}", "--set",
          "cost.memory_efficiency=0.9"], "cost.profile replaces cost.memory_efficiency (give one or the other)"),
        (["replay", "tiny_rl_cpu", "-s", "disagg-sync", "--set", f"cost.calibration={tmp / 'constants.toml'}"],
         "constants must be tables ([constants.NAME]), got 5"),
        (["estimate", "decode", "--model", "Qwen2.5-7B", "--gpu", "H100", "--batch", "99999999999999999999999"],
         "--batch=99,999,999,999,999,999,999,999 is above the limit"),
        (["estimate", "prefill", "--model", "Qwen2.5-7B", "--gpu", "H100", "--samples", "-3"],
         "--samples must be >= 1, got -3"),
        (["estimate", "decode", "--model", "qwen2.5-7", "--gpu", "H100"], "(nearest: Qwen2.5-7B,"),
        (["estimate", "decode", "--model", "Qwen2.5-7B", "--gpu", "H100", "--batch", "lots"],
         "Invalid value for '--batch': not a whole number"),
        (["sweep", "rollpacker_qwen7b", "--grid", str(tmp / "grid.toml"), "-o", out, "--ray-address", "foo"],
         "--ray-address must be auto, local, HOST:PORT or ray://HOST:PORT (port 1..65535), got 'foo'"),
        # record takes neither local nor ray:// (refused by name), and its error named both
        (["record", "--ray-address", "foo", "--", "true"], "--ray-address must be auto or HOST:PORT (port 1..65535)"),
        # Ray retried an address where nothing listens for minutes, silently (port 1: nothing listens there)
        (["sweep", "rollpacker_qwen7b", "--grid", str(tmp / "grid.toml"), "-o", out, "--ray-address", "127.0.0.1:1"],
         "--ray-address 127.0.0.1:1: nothing answers there (Connection refused)"),
        (["sweep", "rollpacker_qwen7b", "--grid", str(tmp / "twice.toml"), "-o", out],
         "axes.scheduler lists 'disagg-sync' twice"),
        (["sweep", "rollpacker_qwen7b", "--grid", str(tmp / "kinds.toml"), "-o", out],
         "axes.gpu lists 'H100' and 'h100' twice"),
        # one point spelt two ways ran twice, identical rows under two ids (and took two of advise's --top rows)
        (["sweep", "rollpacker_qwen7b", "--grid", str(tmp / "fabrics.toml"), "-o", out],
         "axes.topology lists 'fat-tree:k=8,gpu=H800' and 'fat-tree:gpu=h800, k=8' twice (each value is one point)"),
        (["sweep", "rollpacker_qwen7b", "--grid", str(tmp / "steps.toml"), "-o", out],
         "axes.source_steps lists [2, 4] and [4, 2, 2] twice"),
        (["sweep", "rollpacker_qwen7b", "--grid", str(tmp / "both.toml"), "-o", out],
         "a point gives both topology and network.topology: give one"),
        (["advise", "rollpacker_qwen7b", "--space", str(tmp / "kinds_space.toml")],
         "gpu lists 'H100' and 'h100' twice (each value is one design)"),
        (["sweep", str(empty), "--grid", str(tmp / "grid.toml"), "-o", out], "no requests, so no RL step to replay"),
        (["advise", str(empty)], "no requests, so no RL step to replay"),
        (["advise", "rollpacker_qwen7b", "--space", str(tmp / "space.toml")],
         "scheduler 'rollmux' runs a mix of several jobs, not a design advise can choose"),
        (["advise", "--target-throughput", "abc"], "Invalid value for '--target-throughput': not a number"),
        (["synth", "-o", out, "--set", "steps=100000000"], "steps=100,000,000 is above the limit of 100,000"),
        (["synth", "-o", out, "--set", "agentic.turns=100000"], "requests in one bundle"),
        (["synth", "-o", out, "--set", "algorithm=xyz"], "algorithm must be one of grpo, ppo, got 'xyz'"),
        (["synth", "-o", out, "--set", "output.sigma=1e308"], "sigma at most 4"),
        (["synth", "-o", out, "--set", "output.scale=-1"], "scale must be > 0"),
        (["synth", "-o", out, "--set", "agentic.env_sigma=1e308"],
         "env_sigma and observation_sigma must be at most 4"),
        (["replay", "-s", "disagg-sync", "--execute", "--ranks", "100000"],
         "--ranks=100,000 is above the limit of 256"),
        (["calibrate", "--device", "cpu", "--ranks", "100000", "-o", str(tmp / "p.parquet")],
         "--ranks=100,000 is above the limit of 256"),
        (["advise", "rollpacker_qwen7b", "--space", str(tmp / "recorded.toml")],
         "scheduler 'as-recorded' replays the recording's own decisions"),
        (["replay-comms", "tiny_rl_cpu", "--ranks", "100000"], "--ranks=100,000 is above the limit of 256"),
        (["diagnose", "tiny_rl_cpu", "--dashboard", str(copy / "manifest.json")], "inside the trace bundle"),
        (["export", "perfetto", "tiny_rl_cpu", "-o", str(copy / "trace.json")], "inside the trace bundle"),
        (["replay", str(copy), "-s", "disagg-sync", "-o", str(copy)], "is the trace bundle"),
        (["synth", "-o", str(copy / "inner"), "--preset", "rollpacker"], "inside the trace bundle"),
        (["replay", "--topology", "fat-tree:k=8,k=16"], "topology fat-tree: k is given twice"),
        # the --set one was dropped without a word
        (["replay", "--topology", "rail:nodes=4,gpu=H800", "--set", "network.topology=fat-tree:k=8"],
         ("--topology and --set 'network.topology=fat-tree:k=8' both set network.topology: give "
         "one")),
        (["replay", "-s", "disagg-sync", "--ranks", "4"], "--device, --ranks and --layers go with --execute"),
        (["replay", "-s", "disagg-sync", "--baseline", "disagg-sync"], "--baseline goes with --dashboard"),
        (["import", "sglang", str(tmp / "ok.csv"), "-o", out], "line 1 is not a JSON object"),
        (["calibrate", "--tables", str(tmp / "nonexist"), "-o", str(tmp / "p.parquet")], "no such folder"),
        (["synth", "-o", out, "--config", str(tmp / "words.toml")], "words.toml: synth.steps: expected an integer"),
        (["replay", "-s", "rollmux", "--jobs", str(tmp / "jobs.toml")], "job 'a': bundle 'nope': no such file"),
        # the drawn workload's trainer phases priced at 0 s on a device the catalog lacks: the pool idled, unsaid
        (["replay", "tiny_rl_cpu", "-s", "as-recorded", "--model", "Qwen2.5-7B", "--set", "cost.generation=trace"],
         "no training cost model for 'cpu': give a catalog GPU kind for the training pool (--gpu), or a profile"),
    ]


def test_audited_bad_input_is_one_line_and_exit_2_before_any_work(tmp_path: Path) -> None:
    manifest = (sample_path("tiny_rl_cpu") / "manifest.json").read_text()
    for args, fragment in _audited_inputs(tmp_path):
        result = run_cli(*args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rltrace: error: "), (args, result.stderr)
        assert fragment in lines[0], (args, lines[0])
    assert not (tmp_path / "out").exists()
    assert (tmp_path / "copy" / "manifest.json").read_text() == manifest  # nothing was written into the bundle
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == sorted(
        p.name for p in sample_path("tiny_rl_cpu").iterdir())


@pytest.mark.parametrize(("address", "said"), [
    ("foo", "--ray-address must be auto"),
    ("127.0.0.1:1", "--ray-address 127.0.0.1:1: nothing answers there (Connection refused)"),
    # taken, then the job's workers ran unrecorded (ray://) or in a cluster of their own (local), exit 0
    ("ray://127.0.0.1:10001", "--ray-address ray://127.0.0.1:10001: record attaches to a running cluster"),
    ("local", "--ray-address local: record attaches to a running cluster by its own address (HOST:PORT, or auto)"),
])
def test_record_refuses_a_bad_ray_address_before_the_job_runs(address: str, said: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    result = run_cli("record", "-o", str(tmp_path / "b"), "--ray-address", address, "--", sys.executable, "-c",
                     f"open({str(marker)!r}, 'w')")
    assert result.returncode == 2 and said in result.stderr, result.stderr
    assert not marker.exists() and not (tmp_path / "b").exists()


def test_a_sweep_whose_every_point_fails_writes_and_claims_no_table(tmp_path: Path) -> None:
    grid = tmp_path / "grid.toml"
    grid.write_text('[axes]\nscheduler = ["disagg-sync"]\ntp = [3]\n')  # tiny_rl has 1 generation GPU
    out = tmp_path / "sweep"
    (out / "points").mkdir(parents=True)  # an earlier sweep's folder
    (out / "sweep.parquet").write_text("an earlier grid's table")
    result = run_cli("sweep", "tiny_rl_cpu", "--grid", str(grid), "-o", str(out), "--workers", "1")
    assert result.returncode == 1, result.stderr
    assert "no point finished, so no table or report" in result.stdout and "wrote" not in result.stdout
    assert not (out / "sweep.parquet").exists() and not (out / "report.html").exists()


def test_hostile_strings_print_as_text(tmp_path: Path) -> None:
    """Trace-supplied strings must not be interpreted as rich markup."""
    result = synthesize(small_config())
    result.manifest.run_id = "[bold red]<script>alert(1)</script>"
    rltrace.write_bundle(tmp_path / "b", result.manifest, result.tables)
    shown = run_cli("inspect", str(tmp_path / "b"))
    assert shown.returncode == 0, shown.stderr
    assert "[bold red]<script>alert(1)</script>" in shown.stdout


def test_python_m_rltrace_runs_the_same_cli(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "rltrace", "schema"], check=False, capture_output=True, text=True,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == run_cli("schema").stdout
    assert sample_path().is_dir()


DEFAULT_SIGINT_EXEC = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                       "os.execv(sys.argv[1], sys.argv[1:])")
"""runs argv[1:] in this process with SIGINT at its default, whatever the test runner left it at"""


def _loading_polars(pid: int) -> bool:
    """Whether process ``pid`` has mapped polars' library: it is past the interpreter's start, importing the CLI."""
    with contextlib.suppress(OSError):
        return "polars" in Path(f"/proc/{pid}/maps").read_text()
    return False


@pytest.mark.parametrize("command", [[str(Path(sys.executable).parent / "rltrace")], [sys.executable, "-m", "rltrace"]],
                         ids=["console-script", "python-m"])
def test_ctrl_c_while_the_cli_loads_ends_it_without_a_traceback(command: list[str]) -> None:
    """Ctrl-C in the second or so the CLI's modules take to load printed a KeyboardInterrupt traceback, and the
    process died of SIGINT; once a command runs, Ctrl-C ends it with 130 and no traceback. Both do that now."""
    proc = subprocess.Popen([sys.executable, "-c", DEFAULT_SIGINT_EXEC, *command, "replay", "rollpacker_qwen7b", "-s",
                             "disagg-sync", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _loading_polars(proc.pid):  # a SIGINT while the interpreter starts kills it outright, as it should
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)  # about half a second of the CLI's imports is still to come (then seconds of work)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and stdout == "", stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr


@pytest.mark.parametrize("args", [["inspect"], ["inspect", "--json"], ["schema"]])
def test_a_closed_pipe_ends_quietly(args: list[str]) -> None:
    rltrace = str(Path(sys.executable).parent / "rltrace")
    result = subprocess.run(
        f"{shlex.quote(rltrace)} {' '.join(args)} | head -n 1",
        check=False, shell=True, capture_output=True, text=True, timeout=120,
    )
    assert result.stdout.count("\n") == 1
    assert "Traceback" not in result.stderr and "Error" not in result.stderr, result.stderr


# ---- a first hour without surprises (issue 30) -------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_help_shows_bracketed_toml_words() -> None:
    """Typer reads help as rich markup, which ate [axes], [fixed], [[jobs]] and rltrace[ray]."""
    sweep = run_cli("sweep", "--help", env={"COLUMNS": "200"})
    assert "Grid TOML: [axes] to combine, [fixed] values" in sweep.stdout
    assert "rltrace[ray]" in sweep.stdout
    replay = run_cli("replay", "--help", env={"COLUMNS": "200"})
    assert "[[jobs]]" in replay.stdout


@pytest.mark.parametrize(("command", "sentence", "example"), [
    ("sweep", "a failed point is reported and the others go on. Writes OUT/sweep.parquet",
     "    rltrace sweep rollpacker_qwen7b --grid"),
    ("replay", "with -o, an HTML report with --dashboard", "    rltrace replay -s all --dashboard report.html"),
    ("record", "pass through; SIGINT, SIGTERM", "Example: rltrace record -o run"),
])
def test_help_prose_wraps_to_the_terminal_and_examples_keep_their_indent(
        command: str, sentence: str, example: str) -> None:
    """Typer kept each docstring line break, so an 80-column terminal broke the source's 120-column lines again
    mid-sentence ("the others" / "go on."); joining them lost an example block's indent."""
    shown = run_cli(command, "--help", env={"COLUMNS": "200"})
    lines = [line.strip("│ ").rstrip() for line in ANSI.sub("", shown.stdout).splitlines()]
    assert any(sentence in line for line in lines), shown.stdout
    assert any(line.startswith(example) for line in (raw[1:] for raw in ANSI.sub("", shown.stdout).splitlines())), \
        shown.stdout


def test_tables_on_an_80_column_terminal_keep_every_number_whole(tmp_path: Path) -> None:
    args = ["replay", "-s", "disagg-sync,one-step-async,rollpacker", "--steps", "2", "--replicates", "0"]
    # TTY_COMPATIBLE: rich treats the pipe as a terminal of COLUMNS columns (as a user's terminal would be)
    shown = run_cli(*args, cwd=tmp_path, env={"COLUMNS": "80", "TTY_COMPATIBLE": "1", "NO_COLOR": "1"})
    assert shown.returncode == 0, shown.stderr
    text = ANSI.sub("", shown.stdout)
    table = [line for line in text.splitlines() if line.startswith(("│", "┃", "┏", "└"))]
    assert table and max(len(line) for line in table) <= 80
    assert "…" not in text
    metrics = json.loads(run_cli(*args, "--json", cwd=tmp_path).stdout)
    for name, m in metrics.items():  # every figure of every run is printed whole
        w = m["same_work"]
        for figure in (f"{w['samples_per_s']:.3g}", f"{w['usd_per_1k_samples']:.3f}",
                       f"{m['throughput_samples_per_s']:.2f}", f"{m['step_time_s']['mean']:.2f}"):
            assert re.search(rf"│ +{re.escape(figure)} │", text), (name, figure)


def test_a_piped_replay_reports_each_stage_and_never_goes_quiet(tmp_path: Path) -> None:
    # a copy of the default sample: one this process opened before is cached, and prepared within the grace
    bundle = shutil.copytree(sample_path("rollpacker_qwen7b"), tmp_path / "bundle")
    done = run_cli("replay", str(bundle), "-s", "disagg-sync", "--steps", "2", "--replicates", "4", "--dashboard",
                   str(tmp_path / "r.html"), cwd=tmp_path, env={"RLTRACE_PROGRESS_EVERY_S": "0.05"})
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    # (stages running past the grace, here 0.05 s, say when they start, where they are, and when they end)
    for stage in ("opening and preparing the bundle", "4 replicate replays for the spread",
                  f"writing the report {tmp_path / 'r.html'}"):
        assert f"rltrace: {stage} ..." in lines, stage
        assert any(line.startswith(f"rltrace: {stage}:") and "done in" in line for line in lines), stage
    assert any(re.fullmatch(r"rltrace: .*: (running|[\d,/]+ \w+), \d+ s", line) for line in lines)


@pytest.mark.live  # a real kernel run
def test_a_piped_execute_reports_its_steps(tmp_path: Path) -> None:
    """`replay --execute` printed nothing for 600 s when piped; now every step says so (a line per stage), with the
    layers it runs of the model's (it said "10 layers" of a 2-layer model)."""
    done = run_cli("replay", "tiny_rl_cpu", "-s", "disagg-sync", "--replicates", "0", "--execute", "--ranks", "1",
                   "--layers", "1", cwd=tmp_path, env={"RLTRACE_PROGRESS_EVERY_S": "0.5"}, timeout=600)
    assert done.returncode == 0, done.stderr
    text = "executing disagg-sync's replay on cpu (1 ranks, 1 of 2 layers)"
    assert re.search(rf"rltrace: {re.escape(text)}: (\d+)/\1 steps, done in", done.stderr)
    assert "Executed vs modelled" in done.stdout


def test_advise_summarises_why_the_others_lost(tmp_path: Path) -> None:
    space = tmp_path / "space.toml"
    space.write_text('gpu = ["H100", "H20"]\nscheduler = ["disagg-sync", "one-step-async"]\ngen_share = [0.5]\n'
                     'total_gpus = [8, 16]\n[fixed]\nsteps = 2\n')
    done = run_cli("advise", "--target-throughput", "40", "--budget", "200", "--space", str(space), "--workers", "1",
                   cwd=tmp_path, env={"COLUMNS": "80", "TTY_COMPATIBLE": "1", "NO_COLOR": "1"})
    assert done.returncode == 0, done.stderr
    text = ANSI.sub("", done.stdout)
    assert max(len(line) for line in text.splitlines() if line.startswith(("│", "┃"))) <= 80 and "…" not in text
    summary = text.strip().splitlines()[-2]  # the line before "N designs, M replays ..."
    where = r"( \(at \d+(-\d+)? GPUs(, \d+ by the trainer bound alone)?\))?"
    part = rf"\d+ (met the target for more \$/h|(priced out|over budget|missed the target){where}|failed)"
    assert re.fullmatch(rf"{part}(; {part})*", summary), summary
    assert " at ;" not in done.stdout and not summary.endswith(" at ")


@pytest.mark.slow  # over 5 s on 2 cores
def test_the_shipped_sweep_grid_runs(tmp_path: Path) -> None:
    grid = Path(__file__).resolve().parents[1] / "examples" / "sweep" / "grid.toml"
    points = load_grid(grid).points()
    done = run_cli("sweep", "rollpacker_qwen7b", "--grid", str(grid), "-o", str(tmp_path / "sweep"), "--workers", "2",
                   cwd=tmp_path, timeout=600, env={"RLTRACE_PROGRESS_EVERY_S": "0.05"})
    assert done.returncode == 0, done.stderr
    n = len(points)
    assert f"{n} points on 2 local process(es): {n} ran" in done.stdout
    assert f"rltrace: sweep: {n} points on 2 local process(es) ..." in done.stderr.splitlines()
    assert re.search(rf"rltrace: sweep: {n} points on 2 local process\(es\): {n}/{n} points, done in", done.stderr)
    table = pl.read_parquet(tmp_path / "sweep" / "sweep.parquet")
    assert table.height == len(points)
    h800 = table.filter(pl.col("gpu") == "H800")  # its [fixed] key is one the points use (a train MFU was not)
    assert h800.height and ((h800["usd_per_hour"] - 2.2 * h800["gpus"]).abs() < 1e-9).all()


def test_rltrace_open_takes_the_sample_names_the_cli_takes(tmp_path: Path) -> None:
    code = ("import rltrace; b = rltrace.open('rollpacker_qwen7b'); print(b.path.name, "
            "b.requests.select('output_tokens').collect().height)")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["rollpacker_qwen7b", str(12 * 1024)]
    with pytest.raises(rltrace.BundleError, match="no such file or directory$"):
        rltrace.open(tmp_path / "rollpacker_qwen7b_missing")  # a path: no sample names
    with pytest.raises(rltrace.BundleError, match=r"directory \(nor a shipped sample: rollpacker_qwen7b, "):
        rltrace.open("rollpacker_qwen")  # a bare name: the samples, nearest first
    with pytest.raises(rltrace.BundleError, match=r"rltrace.open\('tiny_rl_cpu'\) opens it"):
        rltrace.bundle.open_bundle("tiny_rl_cpu")  # paths only: the hint names what takes a sample's name
    assert Pool(device="H100", count=1, tp=2).instances == 1 and Pool(device="H100", count=16, tp=4).instances == 4


def test_inspect_gives_a_small_models_parameter_count_in_its_unit() -> None:
    done = run_cli("inspect", "tiny_rl_cpu")
    assert done.returncode == 0, done.stderr
    assert re.search(r"\((\d+(\.\d+)?)K params\)", done.stdout), done.stdout[:400]
    assert "0.00B" not in done.stdout


@pytest.mark.slow  # over 5 s on 2 cores
def test_piped_dashboard_and_validations_say_what_they_are_doing(tmp_path: Path) -> None:
    """dashboard, fabric validate and estimate validate went quiet when piped (they used a terminal-only
    spinner or nothing): past the grace, here 0.05 s, each stage says that it ended and how long it took."""
    env = {"RLTRACE_PROGRESS_EVERY_S": "0.05"}
    runs = tmp_path / "runs"
    assert run_cli("replay", "-s", "disagg-sync", "--steps", "2", "--replicates", "0", "-o", str(runs),
                   cwd=tmp_path).returncode == 0
    cases = [(("dashboard", str(runs), "-o", str(tmp_path / "r.html")), "building the report of 1 run(s)"),
             (("fabric", "validate"), "pricing every measured point"),
             (("estimate", "validate", "--backend", "roofline"), "predicting every point")]
    for args, text in cases:
        done = run_cli(*args, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        assert re.search(rf"^rltrace: {re.escape(text)}: done in \d+\.\d s$", done.stderr, re.MULTILINE), (
            args, done.stderr)


@pytest.mark.parametrize(("redirect", "stdout"), [("", "after\n"), (">&-", "")])
def test_stdout_to_stderr_keeps_stdout_for_the_result_even_when_closed(redirect: str, stdout: str) -> None:
    """What a library writes to fd 1 inside the block (vLLM's log lines under `calibrate --json`) goes to stderr; a
    closed stdout (`>&-`, where Python sets sys.stdout None) failed with an AttributeError and now stays closed."""
    code = ("import os\nfrom rltrace.cli.progress import stdout_to_stderr\n"
            "with stdout_to_stderr():\n    os.write(1, b'inside\\n')\nprint('after', flush=True)\n")
    done = subprocess.run(["bash", "-c", f'"$1" -c "$0" {redirect}', code, sys.executable], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout == stdout and done.stderr == "inside\n", done.stderr
