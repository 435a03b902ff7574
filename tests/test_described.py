"""Described jobs: a run's stated setup replayed without a recording (replay/described, docs/described.md)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from rltrace.replay.described import from_description, load_description
from rltrace.replay.described.description import markdown_reference
from rltrace.replay.described.lengths import draw_lengths
from rltrace.replay.jobs import JobSpec, prepare_jobs
from rltrace.replay.loading import Shape
from rltrace.replay.network.network import NetworkConfig
from rltrace.replay.run import CostConfig, ReplayConfig, replay
from rltrace.replay.sweep.point import run_point

from rltrace.cli import main
from rltrace.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "described" / "qwen3_30b_a3b_colocated.toml"
SMALL = """
model = "Qwen2.5-7B"
framework = "verl"
[cluster]
gpu = "H100"
gpus = 8
[batch]
prompts = 8
samples = 4
max_response = 2048
mean_response = 900
steps = 3
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def test_a_described_job_replays_deterministically(tmp_path: Path) -> None:
    d = load_description(write(tmp_path, SMALL))
    config = ReplayConfig()
    runs = [replay(from_description(d, Shape(), config.cost), s, config, keep_log=True)
            for s in ("colocated-sync", "one-step-async") for _ in range(2)]
    for a, b in (runs[0:2], runs[2:4]):
        assert a.event_log == b.event_log and a.event_log
        assert json.dumps(a.metrics, sort_keys=True) == json.dumps(b.metrics, sort_keys=True)


def test_the_documented_example_has_every_phase_with_a_plausible_share() -> None:
    config = ReplayConfig()
    prepared = from_description(load_description(EXAMPLE), Shape(), config.cost)
    phases = replay(prepared, "colocated-sync", config).metrics["phases_s_per_step"]
    for name in ("generation", "reward", "old_logprob", "reference", "train", "optimizer", "sleep", "refit", "wake"):
        assert phases[name] > 0, name
    assert phases["critic"] == 0  # GRPO: no critic
    total = sum(phases.values())
    assert 0.4 < phases["generation"] / total < 0.9  # generation leads a reasoning-RL step
    assert 0.1 < (phases["train"] + phases["old_logprob"] + phases["reference"]) / total < 0.6
    disagg = replay(prepared, "disagg-sync", config).metrics["phases_s_per_step"]
    assert disagg["weight_sync"] > 0 and "refit" not in disagg  # a broadcast, not a colocated refit


def test_a_described_moe_job_reports_the_expert_all_to_alls_its_trainer_time_holds() -> None:
    d = load_description(EXAMPLE)  # Qwen3-30B-A3B, [training] ep = 8
    config = ReplayConfig()
    prepared = from_description(d, Shape(), config.cost)
    job = prepared.jobs[0]
    steps = job.steps
    assert job.alltoalls is not None and job.alltoall_bytes is None  # in the trainer time, for a network to re-time
    metrics = replay(prepared, "one-step-async", config).metrics
    sent = metrics["volume_bytes_per_step"]["expert_alltoall_per_train_rank"]
    per_step = [sum(p.sent_bytes for p in parts or ()) for parts in job.alltoalls]
    assert sent == pytest.approx(sum(per_step) / steps, rel=1e-9) and sent > 0
    # colocated, every one of the 32 GPUs trains: each sends its share of the tokens, half the 16-GPU pool's
    assert job.colocated is not None and job.colocated.alltoall_bytes is not None
    colocated = replay(prepared, "colocated-sync", config).metrics
    whole = colocated["volume_bytes_per_step"]["expert_alltoall_per_train_rank"]
    assert whole == pytest.approx(sum(job.colocated.alltoall_bytes) / steps, rel=1e-9)
    assert whole == pytest.approx(sent / 2, rel=0.05)
    # the same job at EP 1: no all-to-all, a shorter update
    dense = replace(d, training=replace(d.training, ep=1))
    alone = replay(from_description(dense, Shape(), config.cost), "one-step-async", config).metrics
    assert alone["volume_bytes_per_step"]["expert_alltoall_per_train_rank"] == 0.0
    assert alone["phases_s_per_step"]["train"] < metrics["phases_s_per_step"]["train"]
    assert "training TP 1 CP 1 EP 8 PP 1" in prepared.notes[0]
    with pytest.raises(ConfigError, match=r"\[training\] ep \(8\); set it there"):
        from_description(d, Shape(), replace(config.cost, train_ep=8))
    # in a job list, cost.train_ep is the bundles' (MoE recordings): a described job keeps its own
    listed = prepare_jobs([JobSpec(name="described", bundle=str(EXAMPLE))], Shape(), replace(config.cost, train_ep=8))
    assert listed.jobs[0].alltoalls == job.alltoalls
    with pytest.raises(ConfigError, match="set it there, not train_ep"):
        prepare_jobs([JobSpec(name="described", bundle=str(EXAMPLE), train_ep=4)], Shape(), config.cost)


def test_a_topology_re_times_a_described_jobs_expert_all_to_alls() -> None:
    """A disaggregated replay on a network re-times the all-to-alls the trainer time holds, with the factor the
    step's price put on them (the framework's measured MoE update factor): EP 8 groups inside one NVLink node of the
    fat-tree take the built-in node's time (without the factor they took 2.5x less); EP 16 groups crossing nodes of
    an oversubscribed fabric take longer, and the phases move with the spans they sit in (the optimizer stays). A
    colocated run keeps the description's own colocated step and says the topology does not price it."""
    d = load_description(EXAMPLE)
    prepared = from_description(d, Shape(), ReplayConfig().cost)
    parts = [p for step in prepared.jobs[0].alltoalls or [] for p in step or ()]
    assert {p.span for p in parts} == {"forward", "train"} and all(p.scale > 1 for p in parts if p.span == "train")
    priced = sum(p.seconds for p in parts) / prepared.jobs[0].steps
    config = ReplayConfig(network=NetworkConfig(topology="fat-tree:k=8,gpu=H100"))
    network = replay(prepared, "disagg-sync", config).metrics["network"]
    assert network["expert_alltoall_s"] == pytest.approx(priced, rel=1e-6)
    colocated = replay(prepared, "colocated-sync", config)
    assert "network" not in colocated.metrics
    assert any("which the topology does not price" in n for n in colocated.config["notes"])
    wide = from_description(replace(d, training=replace(d.training, ep=16)), Shape(), ReplayConfig().cost)
    alone = replay(wide, "disagg-sync", ReplayConfig()).metrics["phases_s_per_step"]
    crowded = replay(wide, "disagg-sync", ReplayConfig(network=NetworkConfig(
        topology="fat-tree:k=8,gpu=H100,oversub=4"))).metrics
    assert crowded["network"]["expert_alltoall_s"] > 2 * sum(p.seconds for s in wide.jobs[0].alltoalls or [] for p in
                                                             s or ()) / wide.jobs[0].steps
    phases = crowded["phases_s_per_step"]
    assert phases["optimizer"] == pytest.approx(alone["optimizer"], rel=1e-9)
    assert phases["train"] > alone["train"] and phases["old_logprob"] > alone["old_logprob"]
    # in a job list beside a recording, colocated-sync replays the first job alone, the network figures are its
    # own: the described job's colocated step has none (the recording, never run, was routed and priced before)
    listed = prepare_jobs([JobSpec(name="described", bundle=str(EXAMPLE)),
                           JobSpec(name="recorded", bundle="rollpacker_qwen7b", steps=2)], Shape(), ReplayConfig().cost)
    mixed = replay(listed, "colocated-sync", config)
    assert "network" not in mixed.metrics
    assert any(n.startswith("colocated-sync runs the described job's own colocated step") for n in
               mixed.config["notes"])
    first = replay(prepare_jobs(list(reversed([JobSpec(name="described", bundle=str(EXAMPLE)),
                                               JobSpec(name="recorded", bundle="rollpacker_qwen7b", steps=2)])),
                                Shape(), ReplayConfig().cost), "colocated-sync", config)
    assert first.metrics["network"]["expert_alltoall_s"] == 0.0  # the recording's trainer has none (EP 1)
    assert not any("own colocated step" in n for n in first.config["notes"])


@pytest.mark.parametrize("backend", ["megatron", "fsdp"])
def test_context_parallel_ranks_shard_the_optimizer_with_the_data_parallel_ones(tmp_path: Path, backend: str) -> None:
    """CP ranks hold the same parameters as their DP peers, so the gradients and optimizer state shard over DP x CP
    (Megatron's distributed optimizer uses the data-parallel group with context parallelism): TP 2 on 8 GPUs shards
    over 4 ranks with CP 1 or CP 2 alike. The shard group was the DP ranks alone (2 with CP 2)."""
    def optimizer(cp: int) -> float:
        text = SMALL + f"[training]\nbackend = \"{backend}\"\ntp = 2\ncp = {cp}\n"
        prepared = from_description(load_description(write(tmp_path, text)), Shape(), ReplayConfig().cost)
        return replay(prepared, "colocated-sync", ReplayConfig()).metrics["phases_s_per_step"]["optimizer"]

    assert optimizer(2) == pytest.approx(optimizer(1), rel=1e-9) and optimizer(1) > 0


def test_lengths_hit_the_stated_mean_and_pile_up_at_the_cap(tmp_path: Path) -> None:
    d = load_description(write(tmp_path, SMALL.replace("mean_response = 900", "mean_response = 1800")))
    prompt, response, _ = draw_lengths(d, 3)
    assert response.size == prompt.size == 3 * 8 * 4
    assert abs(response.mean() - 1800) < 2  # the median is solved on the drawn set
    assert response.max() == 2048 and (response == 2048).mean() > 0.2


def test_a_cluster_without_a_split_runs_colocated_on_its_own_gpus(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """8 GPUs in one TP-8 engine have no generation and training split: colocated-sync ran (and billed) 9 GPUs, the
    pools' 8 + 1; a single GPU ran as two, generating 1.35x faster. Here: 4 GPUs, one TP-4 engine."""
    path = write(tmp_path, SMALL.replace("gpus = 8", "gpus = 4\n[generation]\ntp = 4"))
    assert main(["replay", str(path), "-s", "colocated-sync,disagg-sync", "--replicates", "0", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert runs["colocated-sync"]["gpus"] == {"generation": 4, "training": 4}
    assert runs["colocated-sync"]["cost_by_pool"]["generation"]["gpus"] == 4
    assert runs["disagg-sync"]["gpus"] == {"generation": 4, "training": 1}
    assert main(["replay", str(path), "-s", "disagg-sync", "--replicates", "0"]) == 0
    assert ("cluster.gpus 4 has no split into whole 4-GPU generation instances and a training pool: colocated "
            "schedulers run on 4 GPUs, disaggregated ones on 4 + 1") in " ".join(capsys.readouterr().out.split())


def test_cost_settings_apply_to_a_described_job_or_say_why_not(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """--set cost.gpu_memory_utilization did nothing on a described job, and cost.sync_gbps nothing, silently."""
    path = write(tmp_path, SMALL)
    d = load_description(path)
    kv = [from_description(d, Shape(), CostConfig(gpu_memory_utilization=u)).jobs[0].generation
          .kv_capacity_tokens(1) for u in (None, 0.3)]
    assert kv[1] < kv[0]
    assert main(["replay", str(path), "-s", "disagg-sync", "--set", "cost.sync_gbps=1", "--replicates", "0"]) == 0
    assert "(cost.sync_gbps unused; --topology, when given, prices them instead)" in " ".join(
        capsys.readouterr().out.split())
    assert main(["replay", str(path.with_name("capped.toml")), "--max-new-tokens", "4000", "--replicates", "0"]) == 2
    path.with_name("capped.toml").write_text(SMALL.replace("max_response = 2048", "max_seq = 2048"))
    assert main(["replay", str(path.with_name("capped.toml")), "--max-new-tokens", "4000", "--replicates", "0"]) == 2
    assert "--max-new-tokens 4000: the described batch.max_seq 2048 (prompt + response) caps every response below " \
        "it" in capsys.readouterr().err


def test_the_stated_engine_prices_generation_or_a_note_says_it_cannot(tmp_path: Path) -> None:
    """generation.engine was checked (vllm or sglang) and then read by nothing: SGLang priced as vLLM, silently."""
    sglang = load_description(write(tmp_path, SMALL + '[generation]\nengine = "sglang"\n'))
    kernels = from_description(sglang, Shape(), CostConfig(generation="kernels"))
    assert any(n.endswith("kernels of Qwen2.5-7B on H100 (sglang)") for n in kernels.notes), kernels.notes
    vllm = from_description(load_description(write(tmp_path, SMALL)), Shape(), CostConfig(generation="kernels"))
    assert kernels.jobs[0].generation.database(1).decode_seconds(64, 1024) != \
        vllm.jobs[0].generation.database(1).decode_seconds(64, 1024)
    roofline = from_description(sglang, Shape(), CostConfig())
    assert "generation.engine = 'sglang': the roofline has no engine term, so generation is priced as vLLM's " \
        "(cost.generation=kernels prices sglang's own measured kernels)" in roofline.notes


def test_a_pipelined_engine_says_it_is_priced_as_one_tp_group(tmp_path: Path) -> None:
    """generation.pp multiplied the instance's GPUs and was then priced as tensor parallelism, without a word."""
    piped = from_description(load_description(write(tmp_path, SMALL + "[generation]\ntp = 2\npp = 2\n")), Shape(),
                             CostConfig())
    assert "generation.pp = 2: each engine is priced as one tensor-parallel group of 4 GPUs (the generation model " \
        "has no pipeline stages)" in piped.notes
    assert not any("generation.pp" in n for n in from_description(load_description(write(tmp_path, SMALL)), Shape(),
                                                                   CostConfig()).notes)


def test_what_if_options_reshape_the_description(tmp_path: Path) -> None:
    d = load_description(write(tmp_path, SMALL))
    prepared = from_description(d, Shape(gen_gpus=4, train_gpus=4, gpu="H200", tp=2, steps=2), CostConfig())
    c = prepared.cluster
    assert (c.gen_gpus, c.train_gpus, c.gen_gpu, c.tp) == (4, 4, "H200", 2)
    assert prepared.jobs[0].steps == 2
    # one pool's kind alone leaves the other's (a sweep's gen_gpu axis put both pools on H20)
    for shape, kinds in ((Shape(gen_gpus=4, train_gpus=4, gen_gpu="H20"), ("H20", "H100")),
                         (Shape(gen_gpus=4, train_gpus=4, train_gpu="H200"), ("H100", "H200"))):
        c = from_description(d, shape, CostConfig()).cluster
        assert (c.gen_gpu, c.train_gpu) == kinds


def test_a_sweep_point_on_a_description_names_the_fabric_its_syncs_were_priced_on(tmp_path: Path) -> None:
    path = write(tmp_path, SMALL)
    point = {"scheduler": "disagg-sync", "gen_gpus": 4, "train_gpus": 4, "gpu": "H100", "steps": 2}
    assert run_point(str(path), point)["fabric"] == "nvswitch:gpus=8,gpu=H100"


def test_replay_cli_takes_a_description(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, SMALL)
    assert main(["replay", str(path), "-s", "colocated-sync,disagg-sync", "--replicates", "0", "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert set(metrics) == {"colocated-sync", "disagg-sync"}
    assert metrics["colocated-sync"]["phases_s_per_step"]["generation"] > 0



def test_seed_draws_the_descriptions_own_lengths_unless_given_even_as_zero(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "seed = 7\n" + SMALL)

    def tokens(*seed: str) -> float:
        assert main(["replay", str(path), "-s", "disagg-sync", "--replicates", "0", "--json", *seed]) == 0
        return float(json.loads(capsys.readouterr().out)["disagg-sync"]["output_tokens"])

    own = tokens()
    assert tokens("--seed", "7") == own
    assert tokens("--seed", "0") != own  # 0 was "not given", so the description's 7 drew it
    # a job list naming the description without a seed of its own draws the description's seed too (it drew 0)
    listed = tmp_path / "jobs.toml"
    listed.write_text(f'[[jobs]]\nname = "a"\nbundle = "{path}"\n')
    assert main(["replay", "--jobs", str(listed), "-s", "disagg-sync", "--replicates", "0", "--json"]) == 0
    assert float(json.loads(capsys.readouterr().out)["disagg-sync"]["output_tokens"]) == own

def test_a_run_folder_names_the_description_it_replayed_and_every_view_says_as_described(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """config.json's ``source`` names the file by absolute path and content digest (an edited file gets another),
    and the terminal table and the report word its unchanged work "as described", not "as recorded"."""
    path = write(tmp_path, SMALL)
    args = ["replay", str(path), "-s", "colocated-sync", "--replicates", "0"]
    assert main([*args, "-o", str(tmp_path / "runs"), "--dashboard", str(tmp_path / "r.html")]) == 0
    table = capsys.readouterr().out
    row = next(line for line in table.splitlines() if line.startswith("│ colocated-sync "))
    assert "│ as described │" in row, row
    report = (tmp_path / "r.html").read_text()
    assert "as described" in report and "recorded" not in report  # not in a sentence, header, figure or label
    source = json.loads((tmp_path / "runs" / "colocated-sync" / "config.json").read_text())["source"]
    assert source["kind"] == "description" and source["path"] == str(path.resolve())
    path.write_text(SMALL.replace("steps = 3", "steps = 2"))
    assert main([*args, "-o", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "colocated-sync" / "config.json").read_text())["source"]
    assert len(source["sha256"]) == len(again["sha256"]) == 12 and again["sha256"] != source["sha256"]


def test_a_run_folder_keeps_the_description_as_replayed(tmp_path: Path) -> None:
    """config.json said cost.train_ep 1 of a job whose trainer runs EP 8 (its [training] ep), and nothing in it said
    which pools or steps the what-if options had replayed: it keeps the description as replayed now."""
    path = REPO / "examples" / "described" / "qwen3_30b_a3b_colocated.toml"
    assert main(["replay", str(path), "-s", "disagg-sync", "--steps", "1", "--gen-gpus", "8", "--train-gpus", "24",
                 "--replicates", "0", "-o", str(tmp_path / "runs")]) == 0
    replayed = json.loads((tmp_path / "runs" / "disagg-sync" / "config.json").read_text())["source"]["description"]
    assert replayed["training"]["ep"] == 8 and replayed["model"] == "Qwen3-30B-A3B"
    pools = replayed["cluster"]["gen_gpus"], replayed["cluster"]["train_gpus"]
    assert replayed["batch"]["steps"] == 1 and pools == (8, 24)


def test_as_recorded_needs_a_recording(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A described job has no recorded layout: as-recorded named is one line and exit 2, and "all" leaves it out
    with a note (it replayed the job disaggregated, whatever its mode)."""
    path = write(tmp_path, SMALL)
    assert main(["replay", str(path), "-s", "as-recorded"]) == 2
    err = capsys.readouterr().err
    assert "as-recorded replays a recording as it ran, and a described job has none" in err
    assert len(err.splitlines()) == 1
    assert main(["replay", str(path), "-s", "all", "--replicates", "0", "--json"]) == 0
    runs = set(json.loads(capsys.readouterr().out))
    assert "as-recorded" not in runs and {"colocated-sync", "disagg-sync"} <= runs
    assert main(["replay", str(path), "-s", "all", "--replicates", "0"]) == 0
    assert "note: as-recorded replays a recording as it ran, and a described job has none: left out" in \
        capsys.readouterr().out


@pytest.mark.parametrize(("change", "key"), [
    (("gpus = 8", "gpus = 8\ngpu_count = 3"), "gpu_count"),
    (("mean_response = 900", "mean_response = 4000"), "batch.mean_response"),
    (("mean_response = 900", ""), "mean_response"),
    (("prompts = 8", 'prompts = "eight"'), "batch.prompts"),
    (('framework = "verl"', 'framework = "nemo"'), "run.toml: framework must be one of"),
    (("gpus = 8", "gpus = 8\n[generation]\ntp = 3"), "generation.tp"),
    (('model = "Qwen2.5-7B"', 'model = "Qwen2.5-7B"\nprecision = "int4"'), "precision"),
    (('gpu = "H100"', 'gpu = "H999"'), "run.toml: cluster.gpu: unknown GPU kind 'H999'"),
    # named neither the key nor, for the model, the file
    (('model = "Qwen2.5-7B"', 'model = "Qwen2.5-7Bx"'), "run.toml: model: unknown model 'Qwen2.5-7Bx'"),
    (('gpu = "H100"', 'gpu = "H100"\ntrain_gpu = "H999"'), "run.toml: cluster.train_gpu: unknown GPU kind 'H999'"),
    (('model = "Qwen2.5-7B"', "model = 5"), "run.toml: model: expected a string, got 5"),
    (("max_response = 2048", "max_seq = 200"), "batch.max_seq 200 leaves no room for a response"),
    (('model = "Qwen2.5-7B"', 'model = "Qwen2.5-7B"\nseed = -1'), "seed must be >= 0, got -1"),
    (("prompts = 8", "prompts = 100000000"), "batch.prompts=100,000,000 is above the limit"),
    (("prompts = 8", "prompts = 5000000"), "batch.prompts x batch.samples=20,000,000 is above"),
    # tracebacks (an OverflowError) or a silent int32 wrap before
    (("max_response = 2048", "max_response = 18446744073709551616"), "batch.max_response=18,446,744,073,709,551,616"),
    (("gpus = 8", "gpus = 8\n[training]\nepochs = 100000"), "training.epochs=100,000 is above the limit of 1,000"),
    (("gpus = 8", "gpus = 8\n[training]\nmicro_batch = 1" + "0" * 40), "training.micro_batch=10" + ",000" * 13),
    (("max_response = 2048", "max_response = 2048\nmean_prompt = 4294967552.0"),
     "batch.mean_prompt must be in (0, 2,147,483,647) tokens"),
])
def test_a_malformed_description_is_one_line_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            change: tuple[str, str], key: str) -> None:
    """One line naming the key, and for the names it gives (framework, GPU kind, a key's type), the file first."""
    path = write(tmp_path, SMALL.replace(*change))
    assert main(["replay", str(path), "--replicates", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rltrace: error:") and key in err


def test_schema_prints_every_description_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    out = capsys.readouterr().out
    for key in ("`model`", "`cluster.gpus`", "`batch.train_batch`", "`batch.max_seq`", "`batch.mean_response`",
                "`generation.tp`", "`training.ep`", "`training.cp`", "`training.pp`", "`precision`", "`framework`"):
        assert key in out
    assert markdown_reference() in out


RUNS_HEADER = ("run_id,publisher,source,framework,mode,model,gpu,gpus,gen_gpus,train_gpus,prompts,samples,max_response,"
               "mean_response,step_s,gen_s,train_s,pair,split\n")


def test_validate_rl_prints_step_errors_sets_and_pairs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs.csv"
    runs.write_text(RUNS_HEADER
                    + "a,me,paper T1,verl,colocated,Qwen2.5-7B,H100,8,,,8,4,2048,900,60,30,20,p,fit\n"
                    + "b,me,paper T1,verl,fully-async,Qwen2.5-7B,H100,8,4,4,8,4,2048,900,40,,25,p,held out\n")
    assert main(["estimate", "validate-rl", "--data", str(runs), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    by_id = {r["run_id"]: r for r in out["runs"]}
    assert set(by_id) == {"a", "b"} and all(r["predicted_step_s"] > 0 for r in by_id.values())
    assert by_id["a"]["error"] == pytest.approx(by_id["a"]["predicted_step_s"] / 60 - 1)
    assert by_id["a"]["predicted_gen_s"] > 0 and by_id["b"]["predicted_gen_s"] is None  # phases where measured
    assert [s["set"] for s in out["sets"]] == ["fit", "held out"]
    assert len(out["pairs"]) == 1 and out["pairs"][0]["measured_ratio"] == pytest.approx(1.5)


def test_validate_rl_refuses_a_runs_file_without_its_columns(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs.csv"
    runs.write_text("run_id,model\nx,Qwen2.5-7B\n")
    assert main(["estimate", "validate-rl", "--data", str(runs)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing column 'publisher'" in err


@pytest.mark.parametrize(("rows", "message"), [
    ("", "no runs"),  # a header alone: a traceback on a missing predicted_step_s column
    ("a,me,paper T1,verl,colocated,Qwen2.5-7B,H100,8,,,8,4,2048,900,0,30,20,p,fit\n",
     "line 2 (a): step_s must be a positive number of seconds, got '0'"),  # was scored, at an infinite error
])
def test_validate_rl_refuses_a_runs_file_without_runs_or_measurements(tmp_path: Path, rows: str, message: str,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs.csv"
    runs.write_text(RUNS_HEADER + rows)
    assert main(["estimate", "validate-rl", "--data", str(runs)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_validate_rl_lists_runs_it_cannot_predict_when_none_can_be(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs.csv"  # every run refused: a null-typed predicted column failed to round
    runs.write_text(RUNS_HEADER + "a,me,paper T1,verl,colocated,NoSuchModel,H100,8,,,8,4,2048,900,60,30,20,p,fit\n")
    assert main(["estimate", "validate-rl", "--data", str(runs), "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["predicted_step_s"] is None and "NoSuchModel" in run["skipped"]
    assert main(["estimate", "validate-rl", "--data", str(runs)]) == 0
    assert "unknown model" in capsys.readouterr().out


@pytest.mark.parametrize("gpu", ["H100", "H200", "H800", "H20", "A100", "A800", "B200", "GB200"])
def test_every_gpu_kind_of_the_published_runs_replays(tmp_path: Path, gpu: str) -> None:
    d = load_description(write(tmp_path, SMALL.replace('gpu = "H100"', f'gpu = "{gpu}"')))
    config = ReplayConfig()
    metrics = replay(from_description(d, Shape(gen_gpus=4, train_gpus=4), config.cost), "disagg-sync",
                     config).metrics
    assert metrics["step_time_s"]["mean"] > 0 and metrics["phases_s_per_step"]["train"] > 0


@pytest.mark.parametrize(("flags", "said", "example"), [
    (["--gen-gpus", "7", "--train-gpus", "8", "--tp", "2"], "reshaped (gen_gpus 7, train_gpus 8, tp 2): ", False),
    (["--prompts", "3"], "the description reshaped (prompts 3): batch.train_batch", False),
    (["--recorded-steps", "1:3"], "--recorded-steps picks steps of a recording; a described job has none", False),
    # a colocated MoE run at EP 8: it said "the 28 training GPUs" of a split whose training pool was 12
    (["--gen-gpus", "16", "--train-gpus", "12"], ("training.ep 8 does not divide the 28 GPUs of the colocated "
     "cluster (gen_gpus + train_gpus), on which a colocated run trains"), True),
])
def test_a_what_if_option_the_description_cannot_take_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               flags: list[str], said: str, example: bool) -> None:
    path = EXAMPLE if example else write(tmp_path, SMALL.replace("steps = 3", "steps = 3\ntrain_batch = 32"))
    assert main(["replay", str(path), "-s", "disagg-sync", "--replicates", "0", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err


def test_gpus_per_node_moves_the_expert_all_to_alls(tmp_path: Path) -> None:
    """cluster.gpus_per_node moved only the optimizer's collectives: EP 8 on nodes of 4 trained as fast as on
    nodes of 8 (145.1 s), and EP 16 in one 16-GPU NVLink domain as slowly as across two nodes (237.1 s)."""
    def train_s(text: str) -> float:
        d = load_description(write(tmp_path, text))
        config = ReplayConfig()
        metrics = replay(from_description(d, Shape(steps=1), config.cost), "disagg-sync", config).metrics
        return metrics["phases_s_per_step"]["train"]

    base = EXAMPLE.read_text()
    ep16 = base.replace("ep = 8", "ep = 16")
    assert train_s(base.replace("gpus = 32", "gpus = 32\ngpus_per_node = 4")) > 1.3 * train_s(base)
    assert train_s(ep16.replace("gpus = 32", "gpus = 32\ngpus_per_node = 16")) < train_s(ep16) / 1.3


@pytest.mark.parametrize(("lengths", "said"), [
    # ran on the drawn lengths, byte for byte as without the file, with no word
    ('[lengths]\npath = "lens.csv"\ncolumn = "resp"\n',
     'lengths.path is read by lengths.kind = "empirical" only (lengths.kind is \'clipped_lognormal\')'),
    # every response came out at the mean (zeros clipped to 1 token, then scaled)
    ('[lengths]\nkind = "empirical"\npath = "zero.csv"\ncolumn = "resp"\n', "column 'resp' holds only zeros"),
])
def test_a_lengths_table_that_would_not_be_read_as_meant_is_refused(tmp_path: Path, lengths: str, said: str) -> None:
    (tmp_path / "lens.csv").write_text("resp\n100\n200\n")
    (tmp_path / "zero.csv").write_text("resp\n0\n0\n")
    text = EXAMPLE.read_text() + "\n" + lengths.replace('"lens.csv"', json.dumps(str(tmp_path / "lens.csv"))
                                                        ).replace('"zero.csv"', json.dumps(str(tmp_path / "zero.csv")))
    with pytest.raises(ConfigError, match=re.escape(said)):
        d = load_description(write(tmp_path, text))
        from_description(d, Shape(steps=1), CostConfig())
