"""An MoE in a replay (issue 28's item 6): H20 generation plus H800 training, the trainer expert-parallel, and the
bytes its steps move, in metrics.json and in the report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers import run_cli
from rltrace.replay.costmodels.training import AllToAll, TrainingCost, step_seconds

from rltrace.catalog import get_gpu, get_model

MOE = "Qwen3-30B-A3B"


def test_a_trainers_expert_all_to_all_volume_is_dispatch_and_combine_per_moe_layer_and_pass() -> None:
    """Per training rank and step: its share of the tokens, each sent to top-k experts as BF16 hidden states,
    (ep - 1) / ep of them leaving the rank; a dispatch and a combine per MoE layer, forward and backward for the
    trained tokens, forward only for each of the forward-only passes (reference and old log-probabilities)."""
    spec, tokens, gpus = get_model(MOE), 1_000_000.0, 16
    for ep, passes in ((8, 2), (4, 0), (1, 2)):
        cost = TrainingCost(model=spec, gpu=get_gpu("H800"), gpus=gpus, recorded_gpus=gpus, recorded_gpu=None,
                            ep=ep, forward_passes=passes)
        per_message = tokens / gpus * spec.experts_per_token * spec.hidden * 2 * (ep - 1) / ep
        expected = (2 * 2 + 2 * passes) * spec.moe_layers * per_message
        assert cost.alltoall_bytes(tokens) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("gpu", ["H800", "GB200"])
def test_a_trainers_all_to_alls_span_nodes_as_its_gpu_kinds_nvlink_domain_does(gpu: str) -> None:
    """ep 16 leaves an 8-GPU HGX node for the network, and stays on NVLink inside a GB200 NVL72 rack: the modelled
    step prices the all-to-alls over the GPU kind's own NVLink domain, as a described job's does."""
    spec, kind, tokens = get_model(MOE), get_gpu(gpu), 1_000_000.0
    cost = TrainingCost(model=spec, gpu=kind, gpus=32, recorded_gpus=32, recorded_gpu=None, ep=16, forward_passes=0)
    (part,) = cost.alltoalls(tokens)
    domain = step_seconds(spec, kind, tokens=tokens, gpus=32, ep=16, gpus_per_node=kind.nvlink_domain)
    assert step_seconds(spec, kind, tokens=tokens, gpus=32, ep=16) == domain  # the default is the kind's domain
    assert part.seconds == pytest.approx(domain.comm_s, rel=1e-12)
    assert cost.train_seconds(None, tokens) == pytest.approx(domain.seconds, rel=1e-12)
    across = step_seconds(spec, kind, tokens=tokens, gpus=32, ep=16, gpus_per_node=8).comm_s
    assert (part.seconds < 0.5 * across) == (kind.nvlink_domain > 16)


def test_an_moe_replay_on_h20_and_h800_reports_weight_sync_and_expert_all_to_all_volume(tmp_path: Path) -> None:
    """The default sample (a Qwen2.5-7B recording) replayed as Qwen3-30B-A3B: each sync delivers a copy of the
    replayed model (61 GB), not the recorded 7B's 15 GB; the H800 trainers, expert-parallel over 8 GPUs, send the
    closed form above; the report's per-run table shows both."""
    out = tmp_path / "runs"
    done = run_cli("replay", "--model", MOE, "--gpu", "H20,H800", "--set", "cost.train_ep=8", "--steps", "1",
                   "-s", "disagg-sync", "--replicates", "0", "-o", str(out))
    assert done.returncode == 0, done.stderr
    folder = out / "disagg-sync"
    volume = json.loads((folder / "metrics.json").read_text())["volume_bytes_per_step"]
    spec = get_model(MOE)
    assert volume["weight_sync"] == spec.weight_bytes
    cluster = json.loads((folder / "config.json").read_text())["cluster"]
    assert (cluster["gen_gpu"], cluster["train_gpu"]) == ("H20", "H800")
    requests = pl.read_parquet(folder / "requests.parquet").filter(pl.col("step") == 0)
    tokens = float((requests["prompt_tokens"] + requests["output_tokens"]).sum())
    cost = TrainingCost(model=spec, gpu=get_gpu("H800"), gpus=cluster["train_gpus"],
                        recorded_gpus=cluster["train_gpus"], recorded_gpu=None, ep=8)
    assert volume["expert_alltoall_per_train_rank"] == pytest.approx(cost.alltoall_bytes(tokens), rel=1e-9)
    step = pl.read_parquet(folder / "steps.parquet").row(0, named=True)  # the one step's own figures, as their mean
    assert (step["weight_sync_bytes"], step["expert_alltoall_bytes_per_train_rank"]) == (
        volume["weight_sync"], volume["expert_alltoall_per_train_rank"])

    plain = run_cli("replay", "--model", MOE, "--gpu", "H20,H800", "--steps", "1", "-s", "disagg-sync",
                    "--replicates", "0", "--json")
    assert plain.returncode == 0, plain.stderr
    figures = json.loads(plain.stdout)["disagg-sync"]
    assert figures["volume_bytes_per_step"]["expert_alltoall_per_train_rank"] == 0.0  # ep 1: no all-to-all
    # the one step (its samples in, then forward-only, train, optimizer, sync) is longer by the priced all-to-alls
    h800, gpus = get_gpu("H800"), cluster["train_gpus"]
    added = sum(step_seconds(spec, h800, tokens=t, gpus=gpus, ep=8, passes=p).comm_s  # train, then 2 forward-only
                for t, p in ((tokens, 3.0), (2 * tokens, 1.0)))
    with_ep = json.loads((folder / "metrics.json").read_text())["step_time_s"]["mean"]
    assert with_ep - figures["step_time_s"]["mean"] == pytest.approx(added, rel=1e-6)

    report = tmp_path / "report.html"
    drawn = run_cli("dashboard", str(out), "-o", str(report))
    assert drawn.returncode == 0, drawn.stderr
    html = report.read_text()
    assert "weight sync per step, one model copy per generation instance (GB)" in html
    assert "expert all-to-all per step, sent by each training GPU (GB)" in html
    sent = volume["expert_alltoall_per_train_rank"] / 1e9
    assert f"{spec.weight_bytes / 1e9:,.1f}" in html and f"{sent:,.1f}" in html


def test_measured_trainer_spans_keep_their_own_all_to_alls(tmp_path: Path) -> None:
    """A bundle whose steps carry trainer spans (synthesised here, as a recording would) replays them as measured:
    cost.train_ep adds nothing to them, reports no modelled volume and says so."""
    bundle = tmp_path / "moe"
    made = run_cli("synth", "--preset", "rollpacker", "--set", "steps=1", "--set", f"model={MOE}", "-o", str(bundle))
    assert made.returncode == 0, made.stderr
    runs = {ep: run_cli("replay", str(bundle), "--set", f"cost.train_ep={ep}", "-s", "disagg-sync", "--replicates",
                        "0", "--json") for ep in (1, 8)}
    assert all(r.returncode == 0 for r in runs.values()), runs[8].stderr
    one, eight = (json.loads(runs[ep].stdout)["disagg-sync"] for ep in (1, 8))
    assert eight["volume_bytes_per_step"]["expert_alltoall_per_train_rank"] == 0.0
    assert eight["step_time_s"] == one["step_time_s"]
    shown = run_cli("replay", str(bundle), "--set", "cost.train_ep=8", "-s", "disagg-sync", "--replicates", "0")
    assert "every step's trainer time is measured, and its all-to-alls with it" in " ".join(
        (shown.stdout + shown.stderr).split())


@pytest.mark.parametrize(("model", "ep", "gpus", "message"), [
    (None, 8, 16, "cost.train_ep 8: expert parallelism needs an MoE; Qwen2.5-7B has no experts"),
    (MOE, 5, 16, "cost.train_ep 5 must divide Qwen3-30B-A3B's 128 experts"),
    (MOE, 8, 12, "cost.train_ep 8 must divide the 12 training GPUs"),
    (MOE, 32, 16, "cost.train_ep 32 must divide the 16 training GPUs"),
    (MOE, 0, 16, "cost.train_ep must be >= 1, got 0"),
])
def test_an_impossible_trainer_expert_parallelism_is_one_line_and_exit_2(model: str | None, ep: int, gpus: int,
                                                                         message: str) -> None:
    args = ["replay", "--steps", "1", "--train-gpus", str(gpus), "--set", f"cost.train_ep={ep}",
            *(["--model", model] if model else [])]
    done = run_cli(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


def test_a_job_list_sets_expert_parallelism_per_job(tmp_path: Path) -> None:
    """rollmux's job list mixes a dense job with an MoE one: only the MoE job's trainer runs expert-parallel.
    steps.parquet holds each job's step volumes (the dense job's all-to-alls null: none modelled); metrics.json's
    weight sync is the mean over both jobs' steps, its all-to-all the mean over the steps that model one."""
    jobs = tmp_path / "jobs.toml"
    jobs.write_text('[[jobs]]\nname = "dense"\nbundle = "rollpacker_qwen7b"\nsteps = 1\n'
                    f'[[jobs]]\nname = "moe"\nbundle = "rollpacker_qwen7b"\nsteps = 1\nmodel = "{MOE}"\ntrain_ep = 8\n')
    out = tmp_path / "runs"
    done = run_cli("replay", "--jobs", str(jobs), "-s", "rollmux", "--replicates", "0", "-o", str(out))
    assert done.returncode == 0, done.stderr
    volume = json.loads((out / "rollmux" / "metrics.json").read_text())["volume_bytes_per_step"]
    dense, moe = get_model("Qwen2.5-7B").weight_bytes, get_model(MOE).weight_bytes
    assert volume["weight_sync"] == pytest.approx((dense + moe) / 2, rel=0.01)
    steps = pl.read_parquet(out / "rollmux" / "steps.parquet").sort("job", "step")
    assert steps["job"].to_list() == [0, 1] and steps["weight_sync_bytes"].to_list() == [dense, moe]
    alltoall = steps["expert_alltoall_bytes_per_train_rank"].to_list()
    assert alltoall[0] is None and alltoall[1] == pytest.approx(volume["expert_alltoall_per_train_rank"], rel=1e-12)
    assert alltoall[1] > 0
    everywhere = run_cli("replay", "--jobs", str(jobs), "-s", "rollmux", "--set", "cost.train_ep=8")
    assert everywhere.returncode == 2 and "Qwen2.5-7B has no experts" in everywhere.stderr


def _routed(tmp_path: Path, ep: int, topology: str, gen: int, train: int,
            *extra: str) -> tuple[dict, pl.DataFrame, str]:
    """Two disaggregated steps of the MoE on H800s of ``topology``: its metrics, links and printed output."""
    out = tmp_path / f"ep{ep}-{topology.replace(':', '-').replace(',', '-').replace('=', '')}-{gen}"
    done = run_cli("replay", "--model", MOE, "--gpu", "H800", "--gen-gpus", str(gen), "--train-gpus", str(train),
                   "--set", f"cost.train_ep={ep}", "--steps", "2", "-s", "disagg-sync", "--replicates", "0",
                   "--topology", topology, "-o", str(out), *extra)
    assert done.returncode == 0, done.stderr
    folder = out / "disagg-sync"
    return (json.loads((folder / "metrics.json").read_text()), pl.read_parquet(folder / "links.parquet"),
            " ".join((done.stdout + done.stderr).split()))


def test_expert_all_to_alls_take_the_topologys_time_and_links(tmp_path: Path) -> None:
    """With --topology the trainer's expert all-to-alls run on it: EP groups of consecutive training GPUs, every
    group at once. Inside one node (EP 8, two groups on two nodes) the rail node's NVSwitch times them as the
    built-in node does, on NVLink only: each byte a GPU sends crosses its link to the switch and the switch's link
    to the receiver; the step grows by exactly their time. Across nodes (EP 16) they cross the NICs, take longer,
    and the command prints them."""
    plain, plain_links, _ = _routed(tmp_path, 1, "rail:nodes=4,gpu=H800", 16, 16)
    inside, links, _ = _routed(tmp_path, 8, "rail:nodes=4,gpu=H800", 16, 16)
    steps = json.loads(run_cli("replay", "--model", MOE, "--gpu", "H800", "--gen-gpus", "16", "--train-gpus", "16",
                               "--set", "cost.train_ep=8", "--steps", "2", "-s", "disagg-sync", "--replicates", "0",
                               "--json").stdout)["disagg-sync"]
    assert inside["network"]["expert_alltoall_s"] > 0
    assert inside["step_time_s"]["mean"] - plain["step_time_s"]["mean"] == pytest.approx(
        inside["network"]["expert_alltoall_s"], rel=1e-6)
    # the built-in node prices the same all-to-alls: the same steps, whatever the fabric does to the rest
    assert inside["volume_bytes_per_step"] == steps["volume_bytes_per_step"]
    def trained(frame: pl.DataFrame, kind: str) -> float:
        return float(frame.filter((pl.col("what") == "train") & (pl.col("kind") == kind))["bytes"].sum())

    sent = inside["volume_bytes_per_step"]["expert_alltoall_per_train_rank"]
    assert trained(links, "nic") == pytest.approx(trained(plain_links, "nic"), rel=1e-12)  # FSDP's, as without EP
    added = trained(links, "nvlink") - trained(plain_links, "nvlink")
    assert added == pytest.approx(2 * 16 * sent * 2, rel=1e-9)  # 2 hops, 16 GPUs, 2 steps
    across, links16, printed = _routed(tmp_path, 16, "rail:nodes=4,gpu=H800", 16, 16)
    assert links16.filter((pl.col("what") == "train") & (pl.col("kind") == "nic"))["bytes"].sum() > 0
    assert across["network"]["expert_alltoall_s"] > inside["network"]["expert_alltoall_s"]
    assert f"expert all-to-alls {across['network']['expert_alltoall_s']:.3f} s per step" in printed


def test_expert_all_to_alls_on_a_reconfigurable_fabric_and_a_pool_that_starts_mid_node(tmp_path: Path) -> None:
    """RFabric times the all-to-alls on settled circuits: its reconfiguration delay is its syncs' and collectives',
    not charged once per call. A training pool that starts mid-node splits EP groups over two nodes, which the run
    says."""
    slow, _, _ = _routed(tmp_path, 16, "rfabric:k=8,gpu=H800,reconfig_ms=100", 8, 16)
    quick, _, _ = _routed(tmp_path, 16, "rfabric:k=8,gpu=H800,reconfig_ms=0.01", 8, 16)
    assert slow["network"]["expert_alltoall_s"] == pytest.approx(quick["network"]["expert_alltoall_s"], rel=1e-9)
    _, _, printed = _routed(tmp_path, 8, "rail:nodes=4,gpu=H800", 12, 16, "--tp", "4")
    assert ("expert-parallel groups of 8 cross nodes: the training GPUs start at GPU 12, inside a node of 8"
            in printed)


@pytest.mark.parametrize(("ep", "per_peer_kib"), [
    (8, (4.0, 16.0, 16.001, 64.0, 512.0)),  # inside a node: LL up to 16 KiB a peer, Simple past it
    (16, (4.0, 16.0, 16.001, 64.0, 512.0)),  # across the two nodes: Simple at every size
    (8, (100.0, 300.0, 700.0)),  # one protocol: the two ends' line
    (8, (4.0, 16.0 + 1 / 8192)),  # the largest just one byte past the threshold: the knots at both ends of it
    (8, (16.0, 16.0)),  # one size only
])
def test_each_steps_all_to_all_is_timed_as_the_collective_of_its_size(ep: int, per_peer_kib: tuple[float, ...]) -> None:
    """route() re-times each step's expert all-to-alls from a few timing runs per EP group (the job's smallest and
    largest message, and both sides of point-to-point's LL threshold when the sizes cross it): every step's time is
    the collective model's for its own size, the slowest group's, to rounding."""
    from rltrace.replay.costmodels.generation import FittedGeneration
    from rltrace.replay.costmodels.iteration import IterationModel
    from rltrace.replay.job import Job
    from rltrace.replay.network.collectives import collective
    from rltrace.replay.network.network import NetworkConfig, route
    from rltrace.replay.topologies import TopologySpec

    steps = len(per_peer_kib)
    sizes = [kib * 1024 * ep for kib in per_peer_kib]
    job = Job(id=0, name="job0", first=list(range(steps + 1)),
              generation=FittedGeneration(model=IterationModel.fixed(0.01)), train_s=[1.0] * steps,
              forward_s=[0.0] * steps, optimizer_s=[0.0] * steps, sync_s=[0.0] * steps, reward_s=[0.0] * steps,
              other_s=[0.0] * steps,
              alltoalls=[(AllToAll("train", size, 3, ep, 0.0, 0.0),) for size in sizes])
    spec = TopologySpec.parse("rail:nodes=4,gpu=H800")
    routed = route([job], 16, 16, NetworkConfig(topology=spec))
    topo = spec.build()
    groups = (16 + np.arange(16)).reshape(-1, ep)
    for step, size in enumerate(sizes):
        expected = 3 * max(collective(topo, "all_to_all", g, size).seconds for g in groups)
        assert routed.alltoall_s[(0, step)] == pytest.approx(expected, rel=1e-9), (step, size)
        assert job.train_s[step] == pytest.approx(1.0 + expected, rel=1e-9)


def test_a_trainer_too_small_for_the_models_adam_state_says_so() -> None:
    """The weights and mixed-precision Adam state a switch would move (fp32 master weight, two moments, the
    gradient), sharded over every training GPU: Qwen3-235B-A22B on 16 H800s needs 265 GB a GPU, above 80;
    Qwen3-30B-A3B fits."""
    from rltrace.replay.costmodels.switching import ModelState

    spec = get_model("Qwen3-235B-A22B")
    per_gpu = ModelState(params=float(spec.params), weight_bytes=float(spec.weight_bytes)).training_bytes(16)
    big = run_cli("replay", "--model", spec.name, "--gpu", "H20,H800", "--tp", "8", "--steps", "1",
                  "-s", "disagg-sync", "--replicates", "0")
    assert big.returncode == 0, big.stderr
    said = " ".join((big.stdout + big.stderr).split())
    assert (f"training Qwen3-235B-A22B on 16 H800s: its weights and Adam state alone are {per_gpu / 1e9:,.0f} GB a GPU"
            in said)
    small = run_cli("replay", "--model", MOE, "--gpu", "H20,H800", "--steps", "1", "-s", "disagg-sync",
                    "--replicates", "0")
    assert small.returncode == 0 and "Adam state" not in small.stdout + small.stderr
