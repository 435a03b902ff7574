"""Real CLI runs of every command: output, JSON keys, and one-line exit-2 errors on bad input."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_cli, small_config
from rltrace.sample_traces import sample_path

import rltrace
from rltrace.synth import synthesize

COMMANDS = {"advise", "calibrate", "dashboard", "estimate", "export", "fabric", "inspect", "record", "replay", "schema",
            "sweep", "synth", "import"}


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


def test_inspect_without_argument_summarises_the_default_sample() -> None:
    result = run_cli("inspect")
    assert result.returncode == 0, result.stderr
    for text in ("rollpacker_qwen7b", "Qwen2.5-7B", "max_over_median", "Per step", "all_gather", "Weight syncs", "generate"):
        assert text in result.stdout, text


def test_inspect_accepts_a_sample_name() -> None:
    result = run_cli("inspect", "streamrl_qwen32b")
    assert result.returncode == 0, result.stderr
    assert "Qwen2.5-32B" in result.stdout


def test_inspect_json_has_the_documented_keys() -> None:
    result = run_cli("inspect", "--json")
    info = json.loads(result.stdout)
    for table in ("requests", "collectives", "weight_syncs", "spans"):
        assert info["tables"][table]["rows"] > 0
    assert info["requests"]["steps"] == 12
    assert set(info["requests"]["output_tokens"]) >= {"mean", "p50", "p90", "p99", "max", "max_over_median"}
    assert set(info["collectives"]["by_op"]) == {"all_gather", "reduce_scatter"}
    assert set(info["collectives"]["by_op"]["all_gather"]) >= {"count", "bytes"}
    assert set(info["weight_syncs"]) >= {"count", "bytes"}
    assert info["spans"]["by_phase"]["generate"]["seconds"] > info["spans"]["by_phase"]["train"]["seconds"] > 0


def test_synth_then_inspect(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    result = run_cli("synth", "--preset", "rollpacker", "--set", "steps=2", "--set", "prompts_per_step=4", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stderr and "requests" in result.stderr
    info = json.loads(run_cli("inspect", "--json", str(out)).stdout)
    assert info["tables"]["requests"]["rows"] == 2 * 4 * 8
    again = run_cli("synth", "--preset", "rollpacker", "--set", "steps=2", "--set", "prompts_per_step=4", "-o", str(out), "--force")
    assert again.returncode == 0, again.stderr


def test_synth_from_a_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "w.toml"
    cfg.write_text('steps = 1\nprompts_per_step = 2\nmax_new_tokens = 512\n[output]\nmedian = 100.0\n')
    result = run_cli("synth", "--config", str(cfg), "-o", str(tmp_path / "b"))
    assert result.returncode == 0, result.stderr
    info = json.loads(run_cli("inspect", "--json", str(tmp_path / "b")).stdout)
    assert info["requests"]["output_tokens"]["max"] <= 512


def _bad_inputs(tmp: Path) -> list[tuple[list[str], str]]:
    (tmp / "file.txt").write_text("hello")
    (tmp / "bad.toml").write_text("steps = [")
    existing = tmp / "exists"
    existing.mkdir()
    (existing / "manifest.json").write_text("{}")
    out = str(tmp / "out")
    return [
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
            ["synth", "-o", out, "--set", "output.kind=empirical", "--set", "output.path=/nope.csv", "--set", "output.column=x"],
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


def test_hostile_strings_print_as_text(tmp_path: Path) -> None:
    """Trace-supplied strings must not be interpreted as rich markup."""
    result = synthesize(small_config())
    result.manifest.run_id = "[bold red]<script>alert(1)</script>"
    rltrace.write_bundle(tmp_path / "b", result.manifest, result.tables)
    shown = run_cli("inspect", str(tmp_path / "b"))
    assert shown.returncode == 0, shown.stderr
    assert "[bold red]<script>alert(1)</script>" in shown.stdout


def test_python_m_rltrace_runs_the_same_cli(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "rltrace", "schema"], check=False, capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == run_cli("schema").stdout
    assert sample_path().is_dir()


@pytest.mark.parametrize("args", [["inspect"], ["inspect", "--json"], ["schema"]])
def test_a_closed_pipe_ends_quietly(args: list[str]) -> None:
    rltrace = str(Path(sys.executable).parent / "rltrace")
    result = subprocess.run(
        f"{shlex.quote(rltrace)} {' '.join(args)} | head -n 1", check=False, shell=True, capture_output=True, text=True, timeout=120
    )
    assert result.stdout.count("\n") == 1
    assert "Traceback" not in result.stderr and "Error" not in result.stderr, result.stderr
