"""Replay with real kernels on CPU: torch kernels at replayed shapes, Gloo collectives, comms replay, and
calibration from this machine's kernels (tiny shapes; the CUDA path is the same code on another device)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import polars as pl
import pytest
import torch
from helpers import REPO, RLTRACE, run_cli, tiny_model
from rltrace.replay.costmodels.profile import broadcast_bytes_per_s, device_from_profile, load_profile
from rltrace.replay.execute import comms
from rltrace.replay.execute.kernels import ModelKernels
from rltrace.replay.execute.replay_comms import logical_ops
from rltrace.replay.fidelity import as_recorded_error
from rltrace.replay.loading import Shape, from_bundle
from rltrace.replay.run import CostConfig, ReplayConfig, replay
from rltrace.sample_traces import sample_path

import rltrace
from rltrace.catalog import get_model

pytestmark = pytest.mark.live  # a real job, engine or install: not in `make test-fast`

TINY = get_model("Qwen2.5-7B").__class__(name="tiny", hidden=128, layers=4, heads=4, kv_heads=2, intermediate=256,
                                         vocab=512, head_dim=32, dtype_bytes=4)


def test_kernel_times_scale_to_the_models_depth_and_grow_with_the_work() -> None:
    two = ModelKernels(TINY, "cpu", layers=2)
    assert two.scale == 2.0  # 2 of 4 layers executed
    small, large = two.decode(4, 64), two.decode(64, 2048)
    assert 0 < small.gemm_s and 0 < small.attention_s
    assert large.attention_s > small.attention_s  # 512x the KV cache read
    assert two.train(256).seconds > 0 and two.prefill(256, 4).seconds > 0
    capped = ModelKernels(TINY, "cpu", layers=1, max_tokens=128)
    t = capped.train(1024)  # 8x the executed chunk: scaled linearly, not run
    assert t.seconds > 0


def test_no_leftover_memory_reaches_the_timed_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decode and prefill GEMMs took the attention's output from torch.empty: whatever bytes the allocator held
    (NaNs, denormals) went into the timed GEMMs, which made one replay's decode 0.0003 s and the next 0.099 s. A
    buffer of leftovers no longer reaches them: every input is random values made before the timing."""
    def leftovers(*_: object, **__: object) -> torch.Tensor:
        raise AssertionError("a timed kernel read an uninitialised buffer")

    monkeypatch.setattr(torch, "empty", leftovers)
    kernels = ModelKernels(TINY, "cpu", layers=2)
    assert kernels.decode(4, 64).seconds > 0 and kernels.prefill(256, 4).seconds > 0


def test_comms_replay_reissues_each_operation_and_folds_ranks() -> None:
    ops = [comms.Op("all_reduce", 1 << 16, "float32", (0, 1)), comms.Op("broadcast", 1024, "int64", (0, 1), root=1),
           comms.Op("send", 4096, "float32", (0, 1), root=1, peer=0), comms.Op("all_gather", 100, "float32", (0, 1)),
           comms.Op("reduce_scatter", 1000, "float32", (0, 1)), comms.Op("all_to_all", 1000, "float32", (0, 1)),
           comms.Op("barrier", 0, "none", (0, 1)), comms.Op("all_reduce", 10, "float32", comms.fold([0, 2], 2))]
    seconds = comms.run(ops, 2)
    assert (seconds[:7] > 0).all()
    assert pl.Series(seconds[7:]).is_nan().all()  # ranks 0 and 2 fold onto one rank: nothing to send
    assert comms.fold([0, 1, 2, 3], 2) == (0, 1)


def test_logical_ops_of_the_recorded_tiny_rl_bundle() -> None:
    ops = logical_ops(rltrace.open(sample_path("tiny_rl_cpu")), 3)
    recorded = rltrace.open(sample_path("tiny_rl_cpu")).collectives.collect()
    # one operation per collective of a group (every member records it) and per send (its receive with it)
    assert dict(ops.group_by("pg").len().iter_rows()) == operations_per_group(recorded)
    assert ops.group_by("pg", "seq").len()["len"].max() == 1 and ops["step"].null_count() == 0
    assert ops["supported"].all() and not ops["folded"].any() and ops["skip"].null_count() == ops.height
    assert (ops["recorded_s"] > 0).all()


def test_replay_comms_cli_prints_measured_beside_recorded() -> None:
    result = run_cli("replay-comms", str(sample_path("tiny_rl_cpu")), "--ranks", "3", "--json",
                     env={"RLTRACE_PROGRESS_EVERY_S": "0.05"})
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    runnable = sum(r["skip"] is None for r in rows)  # piped progress counts them (it said only "running, N s")
    assert f"collectives on 3 cpu ranks: {runnable}/{runnable} operations, done in" in result.stderr
    recorded = rltrace.open(sample_path("tiny_rl_cpu")).collectives.collect()
    assert len(rows) == sum(operations_per_group(recorded).values())
    assert all(r["measured_s"] > 0 and r["recorded_s"] > 0 for r in rows)  # every group's operations timed


def operations_per_group(recorded: pl.DataFrame) -> dict[str, int]:
    """Operations per group, counted from the recorded rows: collectives once per member, sends once."""
    counts = recorded.filter(pl.col("op") != "recv").group_by("pg").agg(
        (pl.col("op") == "send").sum().alias("sends"),
        ((pl.col("op") != "send").sum() // pl.col("pg_ranks").first().list.len()).alias("collectives"))
    return {r["pg"]: r["sends"] + r["collectives"] for r in counts.iter_rows(named=True)}


def test_replay_execute_on_the_tiny_rl_sample(tmp_path: Path) -> None:
    result = run_cli("replay", str(sample_path("tiny_rl_cpu")), "-s", "as-recorded", "--execute", "--ranks", "2",
                     "--layers", "1", "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "Executed vs modelled" in result.stdout
    frame = pl.read_parquet(tmp_path / "as-recorded" / "execution.parquet")
    steps = rltrace.open(sample_path("tiny_rl_cpu")).requests.collect()["step"].n_unique()
    phases = set(frame["phase"])
    assert {"generation", "prefill", "train", "weight_sync", "collectives", "kernels"} <= phases
    assert (frame["measured_s"] > 0).all()
    for phase in ("generation", "prefill", "train", "weight_sync"):  # one row per replayed step
        assert frame.filter(pl.col("phase") == phase)["step"].sort().to_list() == list(range(steps))
    # strict JSON: the kernels phase has no modelled time, which was written as a bare NaN (JSON.parse refuses it)
    metrics = json.loads((tmp_path / "as-recorded" / "metrics.json").read_text(), parse_constant=_not_json)
    assert metrics["execution"]["layer_scale"] == 2.0 and metrics["execution"]["ranks"] == 2
    assert metrics["execution"]["phases"]["kernels"]["modelled_s"] is None
    # config.json says what executed it, beside what priced it (it named neither device, backend nor layers)
    config = json.loads((tmp_path / "as-recorded" / "config.json").read_text())
    assert config["execution"] == {"device": "cpu", "backend": "gloo", "ranks": 2, "layers": 1, "layer_scale": 2.0}


def test_one_rank_says_it_executes_no_collective_or_weight_sync() -> None:
    """The table ended at the kernels, titled "1 ranks", with no word on the phases it left out."""
    result = run_cli("replay", "tiny_rl_cpu", "-s", "as-recorded", "--execute", "--ranks", "1", "--layers", "1")
    assert result.returncode == 0, result.stderr
    assert "cpu, 1 rank," in result.stdout and "weight_sync" not in result.stdout
    assert "note: on 1 rank no collective or weight sync is executed (give --ranks 2 or more)" in result.stdout


def _not_json(word: str) -> None:
    raise ValueError(f"{word} is not JSON")


def test_calibrate_device_cpu_writes_a_profile_that_models_the_cpu(tmp_path: Path) -> None:
    model = tiny_model(tmp_path / "model")
    out = tmp_path / "cpu.toml"  # a calibration file: every figure, peaks and collectives too, comes back
    result = run_cli("calibrate", "--device", "cpu", "--model", str(model / "config.json"), "-o", str(out),
                     "--kernels-out", str(tmp_path / "kernels.parquet"), "--ranks", "2", "--json")
    assert result.returncode == 0, result.stderr
    profile = load_profile(out)
    def figures(rows: list[dict]) -> list[dict]:
        return [{key: value for key, value in row.items() if value is not None} for row in rows]
    assert figures(profile.to_dicts()) == figures(json.loads(result.stdout))
    collectives = {f"collective:{op}" for op in ("all_reduce", "broadcast", "all_gather")}
    assert set(profile["regime"]) == {"compute", "memory", "attention"} | collectives
    spec = device_from_profile(profile, "cpu")
    assert spec is not None and spec.flops > 1e9 and spec.hbm_bytes_per_s > 1e9
    kernels = pl.read_parquet(tmp_path / "kernels.parquet")
    assert set(kernels["kind"]) == {"gemm", "decode_attention", "all_reduce", "broadcast", "all_gather"}
    assert (kernels["measured_s"] > 0).all()
    bandwidth = broadcast_bytes_per_s(profile)
    assert bandwidth is not None and bandwidth > 0
    # the recorded tiny RL bundle now replays on a roofline of this CPU
    prepared = from_bundle(rltrace.open(sample_path("tiny_rl_cpu")), Shape(),
                           CostConfig(generation="roofline", profile=str(out)))
    assert "roofline of .tiny_llama on cpu" in prepared.notes[0]
    assert replay(prepared, "as-recorded", ReplayConfig()).metrics["step_time_s"]["mean"] > 0
    # another model: the recorded syncs no longer apply, so they take the measured broadcast bandwidth
    config = str(model / "config.json")
    other = from_bundle(rltrace.open(sample_path("tiny_rl_cpu")), Shape(model=config),
                        CostConfig(generation="roofline", profile=str(out)))
    weights = get_model(config).weight_bytes
    assert other.jobs[0].sync_s[0] == pytest.approx(weights / bandwidth)
    # and its trainer phases, drawn unmeasured, are priced on the profile's peaks (they cost 0 s, unsaid)
    assert min(other.jobs[0].train_s) > 0 and min(other.jobs[0].optimizer_s) > 0
    # estimate takes it too, as its header says ("unknown GPU kind 'cpu'" before)
    estimated = run_cli("estimate", "decode", "--model", config, "--gpu", "cpu", "--profile", str(out), "--batch", "8",
                        "--context", "100", "--json")
    assert estimated.returncode == 0, estimated.stderr
    assert json.loads(estimated.stdout)["seconds"] > 0


@pytest.mark.parametrize(("args", "message"), [
    (["calibrate", "-o", "x.parquet"], "give --tables DIR (public kernel tables) or --device cpu|cuda"),
    (["calibrate", "--device", "tpu", "-o", "x.parquet"], "--device must be cpu or cuda"),
    (["replay-comms", "tiny_rl_cpu", "--ranks", "0"], "--ranks must be >= 2, got 0"),
    (["replay-comms", "tiny_rl_cpu", "--ranks", "1"], "--ranks must be >= 2, got 1"),  # an empty table, exit 0
    (["replay", "tiny_rl_cpu", "-s", "as-recorded", "--execute", "--device", "cuda"], "--device cuda: no CUDA device"),
    # after replaying every job, "the bundle records no model (give --model)" though each job's bundle records one
    (["replay", "--jobs", str(REPO / "examples" / "rollmux" / "jobs.toml"), "--execute"],
     "--execute runs one job's kernels and collectives: it does not take --jobs"),
])
def test_bad_execution_input_is_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_a_model_whose_layer_cannot_fit_is_refused_before_the_replay(tmp_path: Path) -> None:
    """A layer of 51.5 GB failed to allocate after the whole replay had run: a 50-line traceback, exit 1."""
    config = json.loads((tiny_model(tmp_path / "model") / "config.json").read_text())
    config.update(hidden_size=262144, num_attention_heads=64, num_key_value_heads=64, intermediate_size=1024,
                  head_dim=1024, num_hidden_layers=1)  # 68.2 G weights a layer: 273 GB in float32, 3x to execute
    (tmp_path / "huge.json").write_text(json.dumps(config))
    result = run_cli("replay", "tiny_rl_cpu", "-s", "as-recorded", "--execute", "--ranks", "1", "--layers", "1",
                     "--model", str(tmp_path / "huge.json"), "--gpu", "H100", "--gen-gpus", "8", "--tp", "8")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert "one layer of" in lines[-1] and "GB free" in lines[-1] and "Traceback" not in result.stderr, result.stderr
    assert "replay as-recorded" not in result.stderr  # refused before it


def test_a_training_step_whose_activations_cannot_fit_is_refused_before_the_replay(tmp_path: Path) -> None:
    """A model whose layer's weights fit and whose QKV projection does not (25.8 GB of activations for 512 tokens
    in one such case): it passed the weights-only check, replayed, then swapped for a minute and failed in the
    timed training step with a traceback."""
    config = json.loads((tiny_model(tmp_path / "model") / "config.json").read_text())
    config.update(hidden_size=2, num_attention_heads=512, num_key_value_heads=512, intermediate_size=1 << 23,
                  head_dim=8192, num_hidden_layers=1)  # 0.3 GB of weights, 224 GB of activations to train
    (tmp_path / "wide.json").write_text(json.dumps(config))
    result = run_cli("replay", "tiny_rl_cpu", "-s", "as-recorded", "--execute", "--ranks", "1", "--layers", "1",
                     "--model", str(tmp_path / "wide.json"), "--gpu", "H100", "--gen-gpus", "8", "--tp", "8")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert "a training step needs about" in lines[-1] and "GB free" in lines[-1], result.stderr
    assert "replay as-recorded" not in result.stderr  # refused before it


def test_an_engine_calibrated_cpu_profile_lowers_the_replay_error_on_the_tiny_rl_sample(tmp_path: Path) -> None:
    """Kernels alone miss a CPU serving engine's per-iteration work; the profile's measured vLLM overhead adds it."""
    model = tiny_model(tmp_path / "model")
    out = tmp_path / "cpu.parquet"
    result = run_cli("calibrate", "--device", "cpu", "--model", str(model / "config.json"), "--engine", "vllm",
                     "-o", str(out), "--json", env={"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    profile = load_profile(out)
    engine = profile.filter(pl.col("regime") == "engine")
    assert engine.height == 1 and engine["overhead_base_s"][0] > 0
    printed = json.loads(result.stdout)  # vLLM's own log lines (half of stdout) go to stderr
    engine_rows = [row["overhead_base_s"] for row in printed if row["regime"] == "engine"]
    assert engine_rows == engine["overhead_base_s"].to_list()
    profile.filter(pl.col("regime") != "engine").write_parquet(tmp_path / "kernels.parquet")
    bundle = rltrace.open(sample_path("tiny_rl_cpu"))
    before = as_recorded_error(bundle, CostConfig(generation="roofline", profile=str(tmp_path / "kernels.parquet")))
    after = as_recorded_error(bundle, CostConfig(generation="roofline", profile=str(out)))
    assert abs(after.error) < abs(before.error) - 0.15, (before.error, after.error)


def _children(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def test_sigterm_stops_replay_comms_with_its_ranks(tmp_path: Path) -> None:
    """SIGTERM killed replay-comms at once and left its spawned ranks running (re-issuing collectives on the
    CPU with nobody waiting) and its store folder behind. They stop with it now, exit 143."""
    proc = subprocess.Popen([RLTRACE, "replay-comms", "rollpacker_qwen7b", "--ranks", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    deadline = time.monotonic() + 120
    while len(ranks := _children(proc.pid)) < 2:  # the spawned ranks (and their resource tracker) are up
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    time.sleep(1)
    alive = [pid for pid in ranks if Path(f"/proc/{pid}").exists()
             and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()]
    assert not alive, alive
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]
