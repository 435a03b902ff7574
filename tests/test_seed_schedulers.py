"""The seed schedulers' rules, pinned on small hand-made workloads (one rule per test)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers import REPO
from rltrace.replay.cluster import Cluster
from rltrace.replay.costmodels.generation import FittedGeneration
from rltrace.replay.costmodels.iteration import IterationModel
from rltrace.replay.costmodels.switching import ModelState, switch_seconds
from rltrace.replay.job import Job
from rltrace.replay.jobs import JobSpec, prepare_jobs
from rltrace.replay.loading import Shape, from_bundle
from rltrace.replay.network.network import NetworkConfig, route
from rltrace.replay.run import CostConfig, Prepared, ReplayConfig, replay
from rltrace.replay.topologies import TopologySpec
from rltrace.sample_traces import sample_path

import rltrace

TAU = 0.01
SEVEN_B = ModelState(params=7e9, weight_bytes=14e9)


def grouped(steps: list[list[list[int]]], *, gen_gpus: int = 1, max_seqs: int = 1000, train_s: float = 0.0,
            tp_speedup: float = 1.0, kv_tokens: int = 1 << 40) -> Prepared:
    """``steps[s][g]`` are the response lengths of prompt g of step s; fixed TAU per iteration, no prefill."""
    rows = [(s, g, n) for s, prompts in enumerate(steps) for g, lengths in enumerate(prompts) for n in lengths]
    step, group, out = (np.array(c) for c in zip(*rows))
    frame = pl.DataFrame({"step": step.astype(np.int32), "group": group.astype(np.int32),
                          "prompt_tokens": np.full(len(out), 10), "output_tokens": out,
                          "job": np.zeros(len(out), np.int32)})
    counts = [sum(len(p) for p in prompts) for prompts in steps]
    first = np.concatenate([[0], np.cumsum(counts)]).astype(int).tolist()
    n = len(steps)
    generation = FittedGeneration(model=IterationModel.fixed(TAU), tp_speedup=tp_speedup, kv_tokens=kv_tokens)
    job = Job(id=0, name="job0", first=first, generation=generation,
              train_s=[train_s] * n, forward_s=[0.0] * n, optimizer_s=[0.0] * n, sync_s=[0.0] * n, reward_s=[0.0] * n,
              other_s=[0.0] * n)
    cluster = Cluster(gen_gpus=gen_gpus, train_gpus=1, gen_gpu="H100", train_gpu="H100", max_seqs=max_seqs)
    return Prepared(frame, [job], cluster, [])


# ---- rollpacker ----------------------------------------------------------------------------------------------

ROLLPACKER = {"eta": 1.5, "prompts": 2, "responses": 2}
#             step 0: A, B, C(long)          step 1: D, E, F(long)         step 2
WORKLOAD = [[[5, 5], [6, 6], [100, 100]], [[4, 4], [7, 7], [90, 90]], [[3, 3], [3, 3], [3, 3]]]


@pytest.fixture(scope="module")
def packed():
    return replay(grouped(WORKLOAD), "rollpacker", ReplayConfig(), ROLLPACKER)


def test_short_rounds_over_launch_and_end_when_p0_prompts_complete(packed) -> None:
    rounds = packed.timeline.filter(pl.col("resource") == "rollpacker").sort("start_s")
    assert rounds["kind"].to_list() == ["short_round", "short_round", "long_round"]
    # round 0 launches ceil(1.5 x 2) = 3 prompts x 3 responses and ends when B (6 tokens) completes: 6 x TAU
    assert rounds["end_s"][0] == pytest.approx(6 * TAU)
    first = packed.requests.filter(pl.col("step") == 0, pl.col("request") >= 18)  # spawned (the recorded 18 idle)
    assert first.height == 9
    assert first.filter(pl.col("output_tokens") == 100)["aborts"].to_list() == [1, 1, 1]  # C: aborted


def test_surplus_responses_are_discarded(packed) -> None:
    m = packed.metrics
    assert m["samples"] == 3 * 2 * 2  # three rounds of P0 x R0
    finished = packed.requests.filter(pl.col("finished"), pl.col("step") == 0)
    assert finished.height == 6  # A's and B's third responses finished too, but only 2 + 2 are trained on


def test_long_rounds_run_the_aborted_prompts_without_over_launch(packed) -> None:
    long = packed.requests.filter(pl.col("step") == 2, pl.col("request") >= 18)
    assert sorted(long["output_tokens"].to_list()) == [90, 90, 100, 100]  # C and F, R0 = 2 responses each
    assert long["finished"].all() and (long["aborts"] == 0).all()
    rounds = packed.timeline.filter(pl.col("kind") == "long_round")
    assert rounds["end_s"][0] - rounds["start_s"][0] == pytest.approx(100 * TAU)
    assert packed.metrics["staleness"]["max"] == 0  # on-policy throughout


def test_tp_planner_doubles_tp_after_preemptions_and_halves_it_after_four_calm_rounds() -> None:
    # 2 GPUs, KV for 300 tokens per GPU. Round 0 caches 4 x 110 tokens per TP-1 instance: preemptions. Rounds
    # 1-4 run on one TP-2 instance (8 x 30 tokens fit in 600) without any; round 5 is back on two TP-1 ones.
    work = [[[100, 100]] * 4] + [[[20, 20]] * 4] * 5
    result = replay(grouped(work, gen_gpus=2, kv_tokens=300), "rollpacker", ReplayConfig(),
                    {"eta": 1.0, "tp_planner": True})
    done = result.requests.filter(pl.col("finished")).group_by("step").agg(
        pl.col("instance").n_unique().alias("instances"), pl.col("preemptions").sum()).sort("step")
    assert done["instances"].to_list() == [2, 1, 1, 1, 1, 2]
    assert done["preemptions"][0] > 0 and done["preemptions"][1:].sum() == 0
    assert result.metrics["extra"]["tp_doublings"] == 1 and result.metrics["extra"]["tp_halvings"] == 1
    fixed = replay(grouped(work, gen_gpus=2, kv_tokens=300), "rollpacker", ReplayConfig(), {"eta": 1.0})
    assert fixed.requests.filter(pl.col("finished"))["instance"].n_unique() == 2 and "extra" not in fixed.metrics


def test_stream_trainer_lends_half_the_rollout_gpus_to_training_in_the_tail() -> None:
    # 2 TP-1 instances; prompts A-D finish within 0.4 s, E's two 1000-token responses at 10 s. At 20% done
    # (A, 0.1 s) instance 0 migrates its requests to instance 1 and, after a warm training switch (a 7B
    # model's weights and Adam state onto the one lent H100: 4.04 s), trains on A-D's samples (280 of 2,300
    # tokens: 1.22 of the step's 10 GPU-seconds) before E is in. The trainer then does the rest with both GPUs.
    work = [[[10, 10], [20, 20], [30, 30], [40, 40], [1000, 1000]]] * 2
    seven_b = SEVEN_B
    prepared = grouped(work, gen_gpus=2, train_s=10.0)
    prepared.jobs[0].extra.update(params=seven_b.params, weight_bytes=seven_b.weight_bytes)
    result = replay(prepared, "rollpacker", ReplayConfig(), {"eta": 1.0, "stream_trainer": True})
    tl = result.timeline
    train = tl.filter(pl.col("kind") == "train").sort("start_s")
    early = 10.0 * 280 / 2300
    assert (train["end_s"] - train["start_s"]).to_list() == pytest.approx([(10.0 - early) / 2] * 2)
    stream = tl.filter(pl.col("kind") == "stream_train").sort("start_s")
    assert stream["start_s"][0] == pytest.approx(0.1 + switch_seconds(seven_b, "training", "H100", gpus=1))
    assert stream["end_s"][0] == pytest.approx(stream["start_s"][0] + early)
    first = result.requests.filter(pl.col("finished"), pl.col("step") == 0)
    assert first.filter(pl.col("output_tokens") == 1000)["finish_s"].to_list() == pytest.approx([10.0, 10.0])
    # the lent GPU comes back for round 1 as a new instance after a warm rollout switch
    assert result.requests.filter(pl.col("finished"), pl.col("step") == 1)["instance"].n_unique() == 2
    switches = tl.filter(pl.col("kind") == "switch")
    assert (switches["end_s"] - switches["start_s"]).to_list() == pytest.approx(
        [switch_seconds(seven_b, "rollout", "H100")])
    plain = replay(grouped(work, gen_gpus=2, train_s=10.0), "rollpacker", ReplayConfig(), {"eta": 1.0})
    assert result.metrics["makespan_s"] < plain.metrics["makespan_s"]


# ---- orchestrrl ----------------------------------------------------------------------------------------------


def test_tail_instances_regroup_to_a_higher_tp() -> None:
    # two TP-1 instances; instance 0 holds the long sample. After 10 iterations only it is left: the pair
    # merges into one TP-2 instance (switch 0.5 s), which recomputes the sample and finishes it twice as fast.
    prepared = grouped([[[10, 10, 200], [10, 10, 10]]], gen_gpus=2)
    result = replay(prepared, "orchestrrl", ReplayConfig(), {"switch_s": 0.5, "max_tp": 2})
    long = result.requests.filter(pl.col("output_tokens") == 200)
    assert long["finish_s"][0] == pytest.approx(10 * TAU + 0.5 + 190 * TAU / 2)
    assert result.metrics["extra"]["regroups"] == 1
    switches = result.timeline.filter(pl.col("kind") == "switch")
    assert switches.height >= 1 and switches["end_s"][0] - switches["start_s"][0] == pytest.approx(0.5)
    sync = replay(grouped([[[10, 10, 200], [10, 10, 10]]], gen_gpus=2), "disagg-sync", ReplayConfig())
    assert result.metrics["makespan_s"] < sync.metrics["makespan_s"]


def test_an_idle_instance_takes_half_of_a_long_queue() -> None:
    # max_seqs 1: instance 0 queues 4 requests, instance 1 one short one; when 1 runs dry it takes two
    prepared = grouped([[[50, 50, 50, 50], [5]]], gen_gpus=2, max_seqs=1)
    result = replay(prepared, "orchestrrl", ReplayConfig(), {"merge_below": 0.01})
    assert result.requests["instance"].n_unique() == 2
    assert result.requests.filter(pl.col("instance") == 1).height == 3  # its own plus two moved
    # instance 1 runs its 5-token request, then two of the 50s; instance 0 the other two: 1.05 s, not 2.0 s
    assert result.metrics["makespan_s"] == pytest.approx(5 * TAU + 2 * 50 * TAU, rel=1e-9)


# ---- streamrl ------------------------------------------------------------------------------------------------

SKEWED = [[[1000]] * 4 + [[10]] * 16, [[900]] * 4 + [[20]] * 16]


def test_streamrl_puts_the_predicted_long_tail_on_its_own_instances_longest_first() -> None:
    # the oracle ranker (true lengths), so the mechanism is pinned without the ranker's misses
    result = replay(grouped(SKEWED, gen_gpus=4, train_s=0.05), "streamrl", ReplayConfig(),
                    {"mode": "sync", "oracle": True})
    req = result.requests.filter(pl.col("step") == 0)
    long_inst = set(req.filter(pl.col("output_tokens") == 1000)["instance"])
    short_inst = set(req.filter(pl.col("output_tokens") == 10)["instance"])
    assert len(long_inst) == result.metrics["extra"]["long_tail_instances"] == 1
    assert not long_inst & short_inst  # regular samples never queue behind the long tail
    marks = result.timeline.filter(pl.col("kind").is_in(["long_tail", "regular"]), pl.col("step") == 0)
    assert marks.filter(pl.col("kind") == "long_tail").height == 1 and marks.height == 4
    assert result.metrics["extra"]["oracle"] == 1 and any("oracle" in n for n in result.config["notes"])


def test_streamrl_noisy_ranker_with_zero_recall_misses_the_tail() -> None:
    config = {"mode": "sync", "recall": 0.0}
    result = replay(grouped(SKEWED, gen_gpus=4, train_s=0.05), "streamrl", ReplayConfig(), config)
    req = result.requests.filter(pl.col("step") == 0)
    first_instance = req.filter(pl.col("instance") == req["instance"].min())
    assert 1000 not in first_instance["output_tokens"].to_list()  # the "long-tail" instance got short samples
    assert result.metrics["extra"]["ranker_recall"] == 0.0 and "oracle" not in result.metrics["extra"]


def test_streamrl_ranks_at_the_papers_recall_unless_asked_for_the_oracle() -> None:
    # by default the ranker marks the true long tail at StreamRL's measured recall (87%), and says so
    result = replay(grouped(SKEWED * 4, gen_gpus=4, train_s=0.05), "streamrl", ReplayConfig(), {"mode": "sync"})
    assert result.metrics["extra"]["ranker_recall"] == pytest.approx(0.87) and "oracle" not in result.metrics["extra"]
    assert not any("oracle" in n for n in result.config["notes"])
    # with 4 long samples of 20 per step over 8 steps, a 87%-recall ranker misses some: a long sample shares
    # an instance with regular ones in some step (the oracle never lets that happen)
    req = result.requests
    mixed = req.group_by("step", "instance").agg((pl.col("output_tokens") >= 900).any().alias("long"),
                                                 (pl.col("output_tokens") < 900).any().alias("short"))
    assert mixed.filter(pl.col("long") & pl.col("short")).height > 0


def test_streamrl_trains_in_micro_batches_while_the_tail_generates() -> None:
    result = replay(grouped(SKEWED, gen_gpus=4, train_s=0.4), "streamrl", ReplayConfig(),
                    {"mode": "sync", "microbatches": 4})
    step0 = result.timeline.filter(pl.col("step") == 0)
    last_finish = step0.filter(pl.col("kind") == "request")["end_s"].max()
    train = step0.filter(pl.col("kind") == "train").sort("start_s")
    assert train["start_s"][0] < last_finish  # the first micro-batch trains before the long tail is done
    assert train.height == 4 + 1  # four micro-batches, then the optimizer step
    assert result.metrics["staleness"]["max"] == 0


def test_streamrl_async_hides_training_under_the_next_generation() -> None:
    lengths = [[[300]] * 2 + [[10]] * 8] * 6
    sync = replay(grouped(lengths, gen_gpus=2, train_s=2.0), "streamrl", ReplayConfig(), {"mode": "sync"})
    asyn = replay(grouped(lengths, gen_gpus=2, train_s=2.0), "streamrl", ReplayConfig(), {"mode": "async"})
    assert asyn.metrics["staleness"]["max"] == 1 and sync.metrics["staleness"]["max"] == 0
    # sync: generation (300 x TAU = 3 s), then the last micro-batch (the two long samples: 2/10 of 2 s);
    # async: generation back to back, the training hidden under the next step's generation
    assert sync.metrics["step_time_s"]["p50"] == pytest.approx(3.0 + 0.4)
    assert asyn.metrics["step_time_s"]["p50"] == pytest.approx(3.0)


def test_streamrl_stage_balancing_gives_generation_the_gpus_it_needs() -> None:
    # training is cheap and generation queues (max_seqs 8): the balanced split moves GPUs to generation
    def run(balance: bool):
        prepared = grouped([[[100]] * 64] * 2, train_s=0.01)
        cluster = Cluster(gen_gpus=2, train_gpus=6, gen_gpu="H100", train_gpu="H100", max_seqs=8)
        return replay(Prepared(prepared.requests_frame, prepared.jobs, cluster, []), "streamrl", ReplayConfig(),
                      {"mode": "sync", "balance": balance})

    balanced, fixed = run(True), run(False)
    gen = balanced.metrics["extra"]["gen_gpus"]
    assert gen > 2 and balanced.metrics["gpus"] == {"generation": gen, "training": 8 - gen}
    assert balanced.metrics["makespan_s"] < fixed.metrics["makespan_s"] / 2


# ---- every seed scheduler on every shipped sample ------------------------------------------------------------


@pytest.mark.parametrize("sample", ["rollpacker_qwen7b", "streamrl_qwen32b", "tiny_rl_cpu"])
@pytest.mark.parametrize(("scheduler", "settings"), [
    ("streamrl", {}), ("rollpacker", {}), ("orchestrrl", {}),
    ("rollpacker", {"tp_planner": True, "stream_trainer": True}), ("rollart", {}),
], ids=["streamrl", "rollpacker", "orchestrrl", "rollpacker-codesigns", "rollart"])
def test_every_seed_scheduler_replays_every_sample(scheduler: str, settings: dict[str, bool], sample: str) -> None:
    bundle = rltrace.open(sample_path(sample))
    prepared = from_bundle(bundle, Shape(), CostConfig())
    result = replay(prepared, scheduler, ReplayConfig(), settings)
    steps = prepared.jobs[0].steps
    assert result.metrics["steps"] == steps
    assert result.metrics["samples"] > 0 and result.metrics["makespan_s"] > 0
    assert (result.timeline["end_s"] >= result.timeline["start_s"]).all()
    assert "oracle" not in result.metrics.get("extra", {})  # through the view alone: no true length read


# ---- rollmux -------------------------------------------------------------------------------------------------


def jobs_of(*workloads: list[list[list[int]]], arrivals: list[float], slo: float = 10.0, gen_gpus: int = 2,
            train_s: float = 1.0, max_seqs: int = 1000, pools: list[Cluster] | None = None) -> Prepared:
    """Several jobs (each like ``grouped``, with a 7B model's state for their switches), arriving at
    ``arrivals``, on one cluster, or each on its own of ``pools``."""
    frames, jobs, offset = [], [], 0
    for i, (w, arrival) in enumerate(zip(workloads, arrivals)):
        p = grouped(w, gen_gpus=gen_gpus, train_s=train_s, max_seqs=max_seqs)
        job = p.jobs[0]
        job.id, job.name, job.arrival_s = i, f"job{i}", arrival
        job.cluster = pools[i] if pools is not None else None
        job.first = [f + offset for f in job.first]
        job.extra.update(slo=slo, params=SEVEN_B.params, weight_bytes=SEVEN_B.weight_bytes)
        frames.append(p.requests_frame.with_columns(pl.lit(i, pl.Int32).alias("job")))
        offset += p.requests_frame.height
        jobs.append(job)
    return Prepared(pl.concat(frames), jobs, p.cluster, [])


def test_rollmux_runs_one_jobs_rollout_while_the_other_trains() -> None:
    work = [[[50]] * 4] * 3  # training (60 s) outlasts generation (0.5 s): the pools overlap
    result = replay(jobs_of(work, work, arrivals=[0.0, 0.0], train_s=60.0), "rollmux", ReplayConfig())
    tl = result.timeline
    train_a = tl.filter(pl.col("kind") == "train", pl.col("resource") == "trainer").sort("start_s")
    req = result.requests
    b_gen = req.filter(pl.col("job") == 1, pl.col("step") == 0)
    first_train = train_a.row(0, named=True)
    # job 1 generates during job 0's first training phase: the pools are multiplexed, not idle
    assert b_gen["start_s"].min() < first_train["end_s"] and b_gen["finish_s"].max() > first_train["start_s"]
    assert result.metrics["extra"]["groups"] == 1 and result.metrics["samples"] == 2 * 3 * 4


def test_the_timeline_names_each_spans_job_and_rollmux_interleaves_them_on_the_trainer() -> None:
    work = [[[50]] * 4] * 3
    result = replay(jobs_of(work, work, arrivals=[0.0, 0.0], train_s=60.0), "rollmux", ReplayConfig())
    tl = result.timeline
    trained = tl.filter(pl.col("kind") == "train").sort("start_s")["job"].to_list()
    assert sorted(trained) == [0, 0, 0, 1, 1, 1] and all(a != b for a, b in itertools.pairwise(trained))
    for kind in ("weight_sync", "reward"):
        assert sorted(tl.filter(pl.col("kind") == kind)["job"].to_list()) == [0, 0, 0, 1, 1, 1]
    # a request's span is its job's; an instance switching to a job's rollout is that job's switch
    requests = tl.filter(pl.col("kind") == "request").join(
        result.requests.select(pl.col("request").alias("id"), pl.col("job").alias("owner")), on="id")
    assert requests.height == 24 and (requests["job"] == requests["owner"]).all()
    assert set(tl.filter(pl.col("kind") == "switch")["job"].to_list()) == {0, 1}
    # one job: every span is its own, busy spans and switches included
    alone = replay(grouped(work, gen_gpus=2, train_s=60.0), "disagg-sync", ReplayConfig()).timeline
    assert alone.columns[:6] == ["resource", "pool", "kind", "step", "job", "id"]
    assert alone["job"].unique().to_list() == [0]


@pytest.mark.parametrize(("resident", "cold"), [(2, 0), (1, 12)])
def test_rollmux_switches_are_warm_while_the_job_is_resident(resident: int, cold: int) -> None:
    work = [[[20]] * 4] * 3
    settings = {"resident_jobs": resident, "residency": False}  # one group even with one resident (loose SLO)
    result = replay(jobs_of(work, work, arrivals=[0.0, 0.0], slo=1000.0), "rollmux", ReplayConfig(), settings)
    extra = result.metrics["extra"]
    # 2 jobs x 3 steps load each pool 12 times: each job's first load per pool is its start-up (no switch), the
    # other 8 switch 2 instances (rollout) or the trainer: 12 switch spans, warm with both jobs resident
    switches = result.timeline.filter(pl.col("kind") == "switch")
    assert extra.get("cold_switches", 0) == cold and extra.get("cold_switches", 0) + extra.get("warm_switches", 0) == 12
    assert switches.height == 12 and switches.filter(pl.col("resource") == "trainer").height == 4
    c = result.config["cluster"]
    warm = {"rollout": switch_seconds(SEVEN_B, "rollout", c["gen_gpu"], warm=resident == 2),
            "training": switch_seconds(SEVEN_B, "training", c["train_gpu"], gpus=c["train_gpus"], warm=resident == 2)}
    lasted = switches.with_columns((pl.col("end_s") - pl.col("start_s")).alias("s"))
    assert lasted.filter(pl.col("resource") == "trainer")["s"].to_list() == pytest.approx([warm["training"]] * 4)
    assert lasted.filter(pl.col("resource") != "trainer")["s"].to_list() == pytest.approx([warm["rollout"]] * 8)


def test_rollmux_opens_a_new_group_when_the_slo_cannot_hold() -> None:
    work = [[[3000]] * 4] * 2  # generation (30 s) as long as training: sharing a group halves its idle time
    tight = replay(jobs_of(work, work, arrivals=[0.0, 0.0], slo=1.0, train_s=30.0), "rollmux", ReplayConfig())
    loose = replay(jobs_of(work, work, arrivals=[0.0, 0.0], slo=10.0, train_s=30.0), "rollmux", ReplayConfig())
    assert tight.metrics["extra"]["groups"] == 2 and loose.metrics["extra"]["groups"] == 1
    assert tight.metrics["cost_usd"] > loose.metrics["cost_usd"]  # a second group's pools are paid for


def _peak_running(requests: pl.DataFrame) -> int:
    """The most requests running at once (a finish frees its slot before a start at the same time takes one)."""
    events = sorted([(t, 1) for t in requests["start_s"]] + [(t, -1) for t in requests["finish_s"]])
    return int(np.cumsum([d for _, d in events]).max())


def test_a_rollmux_group_runs_its_opening_jobs_engine_limit(tmp_path: Path) -> None:
    """Each job of a list keeps its engine's max_num_seqs: a group's instances take the opening job's, not the
    first job's."""
    described = (REPO / "examples" / "papers" / "rollmux_a.toml").read_text().replace("steps = 8", "steps = 2")
    (tmp_path / "a.toml").write_text(described)
    (tmp_path / "b.toml").write_text(described.replace("[generation]\n", "[generation]\nmax_num_seqs = 4\n"))
    specs = [JobSpec(name="a", bundle=str(tmp_path / "a.toml"), slo=1.0),
             JobSpec(name="b", bundle=str(tmp_path / "b.toml"), arrival_s=1.0, slo=1.0)]
    prepared = prepare_jobs(specs, Shape(), CostConfig())
    framework_limit, capped = (job.cluster.max_seqs for job in prepared.jobs)
    assert capped == 4 < framework_limit
    result = replay(prepared, "rollmux", ReplayConfig())
    assert result.metrics["extra"]["groups"] == 2  # an SLO of 1x: no sharing, each job on its own group
    by_instance = result.requests.partition_by(["job", "instance"], as_dict=True)
    peaks = {key: _peak_running(g) for key, g in by_instance.items()}
    assert {peak for (job, _), peak in peaks.items() if job == 1} == {capped}
    assert all(capped < peak <= framework_limit for (job, _), peak in peaks.items() if job == 0)


def test_rollmux_consolidates_the_long_tail_and_starts_the_next_rollout_on_freed_instances() -> None:
    long_tail = [[[5]] * 9 + [[5000]]] * 2  # 90% done early, one long sample (50 s, beyond a cold switch) left
    result = replay(jobs_of(long_tail, long_tail, arrivals=[0.0, 0.0], gen_gpus=4), "rollmux", ReplayConfig())
    assert result.metrics["extra"]["tail_migrations"] >= 1
    req = result.requests
    a_long = req.filter(pl.col("job") == 0, pl.col("step") == 0, pl.col("output_tokens") == 5000)
    b_first = req.filter(pl.col("job") == 1, pl.col("step") == 0)
    assert b_first["start_s"].min() < a_long["finish_s"][0]  # job 1 did not wait for job 0's tail


def test_rollmux_consolidates_a_tail_to_its_groups_own_engine_limit() -> None:
    """Job 0's two long samples, left when job 1's rollout queues, keep two instances of a group whose engines run
    one sequence each: consolidated to the replay-wide limit (1000) they would run one after the other."""
    two_long = [[[5]] * 8 + [[5000]] * 2]
    one_seq = Cluster(gen_gpus=4, train_gpus=1, gen_gpu="H100", train_gpu="H100", max_seqs=1)
    result = replay(jobs_of(two_long, two_long, arrivals=[0.0, 0.0], slo=1000.0, gen_gpus=4, pools=[one_seq] * 2),
                    "rollmux", ReplayConfig())
    assert result.metrics["extra"]["groups"] == 1 and result.metrics["extra"]["tail_migrations"] >= 1
    long = result.requests.filter(pl.col("job") == 0, pl.col("output_tokens") == 5000).sort("start_s")
    assert long["finish_s"].max() - long["start_s"].min() < 1.5 * (long["finish_s"] - long["start_s"]).max()


def test_rollmux_starts_a_queued_rollout_once_the_running_one_is_consolidated() -> None:
    # Job 0's tail (one 5000-token sample) frees all but one instance for job 1. When job 0 queues its next
    # rollout, job 1 is past 80% with its own long sample (6000 tokens) running: job 1's tail is consolidated then,
    # and job 0's step 1 spreads over the freed instances instead of running whole on the one job 0's tail left free.
    long_tail, longer_tail = [[[5]] * 9 + [[5000]]] * 2, [[[5]] * 9 + [[6000]]] * 2
    result = replay(jobs_of(long_tail, longer_tail, arrivals=[0.0, 0.0], gen_gpus=4), "rollmux", ReplayConfig())
    req = result.requests
    assert result.metrics["extra"]["tail_migrations"] >= 2
    assert req.filter(pl.col("job") == 0, pl.col("step") == 1)["instance"].n_unique() >= 2
    b_long = req.filter(pl.col("job") == 1, pl.col("step") == 0, pl.col("output_tokens") == 6000)
    a_next = req.filter(pl.col("job") == 0, pl.col("step") == 1)
    assert a_next["start_s"].min() < b_long["finish_s"][0]


def test_rollmux_releases_a_groups_pools_when_its_last_job_is_done() -> None:
    long_job, short_job = [[[50]] * 4] * 4, [[[50]] * 4]
    result = replay(jobs_of(long_job, short_job, arrivals=[0.0, 0.0], slo=1.0), "rollmux", ReplayConfig())
    assert result.metrics["extra"]["groups"] == 2
    ends = result.steps.group_by("job").agg(pl.col("end_s").max()).sort("job")["end_s"].to_list()
    # each group (2 H100 generation + 1 training) is billed until its own job is done, not to the makespan
    rate = 3 * Cluster(gen_gpus=2, train_gpus=1, gen_gpu="H100", train_gpu="H100").usd_per_gpu_hour("H100") / 3600
    assert ends[1] < ends[0] == pytest.approx(result.metrics["makespan_s"])
    assert result.metrics["cost_usd"] == pytest.approx(rate * (ends[0] + ends[1]))
    assert result.metrics["gpus"] == {"generation": 2, "training": 1, "generation/g1": 2, "training/g1": 1}
    # utilisation divides by the GPU-seconds the pools were held: both trainers, each until its release
    train = result.timeline.filter(pl.col("kind") == "train")
    trained_s = float((train["end_s"] - train["start_s"]).sum())
    assert result.metrics["gpu_utilization"]["training"] == pytest.approx(trained_s / (ends[0] + ends[1]))


@pytest.mark.parametrize(("order", "gpus", "instances"), [
    # the large job first: the small one joins its group (training pool of 2 >= its 1): one group, its pools
    ((0, 1), {"generation": 4, "training": 2}, 4),
    # the small job first: the large one cannot train on 1 GPU (priced on 2), so it opens a group on its own pools
    ((1, 0), {"generation": 2, "training": 1, "generation/g1": 4, "training/g1": 2}, 6),
    # a job of another rollout TP (2) does not join a TP-1 group: its own, of one TP-2 instance
    ((0, 2), {"generation": 4, "training": 2, "generation/g1": 2, "training/g1": 1}, 5),
])
def test_rollmux_opens_each_group_on_the_pools_of_the_job_that_opens_it(order: tuple[int, int],
                                                                        gpus: dict[str, int], instances: int) -> None:
    work = [[[20]] * 4] * 2
    pools = [Cluster(gen_gpus=4, train_gpus=2, gen_gpu="H100", train_gpu="H100"),
             Cluster(gen_gpus=2, train_gpus=1, gen_gpu="H100", train_gpu="H100"),
             Cluster(gen_gpus=2, train_gpus=1, gen_gpu="H100", train_gpu="H100", tp=2)]
    prepared = jobs_of(work, work, arrivals=[0.0, 1.0], slo=1000.0, pools=[pools[i] for i in order])
    result = replay(prepared, "rollmux", ReplayConfig())
    assert result.metrics["gpus"] == gpus
    assert result.metrics["extra"]["groups"] == len(gpus) // 2
    assert result.requests["instance"].n_unique() == instances


def test_a_topology_routes_each_job_of_a_list_on_its_own_pools() -> None:
    spec = TopologySpec.parse("rail:nodes=4,gpu=H800")
    small, large = (Cluster(gen_gpus=g, train_gpus=t, gen_gpu="H800", train_gpu="H800") for g, t in ((2, 2), (8, 8)))

    def job(cluster: Cluster | None) -> Job:
        return Job(id=0, name="j", first=[0, 1], generation=FittedGeneration(model=IterationModel.fixed(0.01)),
                   train_s=[1.0], forward_s=[0.0], optimizer_s=[0.0], sync_s=[0.0], reward_s=[0.0], other_s=[0.0],
                   sync_bytes=[14e9], collective_bytes=[2e9], cluster=cluster)

    both = [job(small), job(large)]
    both[1].id = 1
    routed = route(both, 2, 2, NetworkConfig(topology=spec))  # the replay's cluster: the first job's
    for mine, (gen_gpus, train_gpus) in zip(both, ((2, 2), (8, 8))):
        alone = job(None)
        route([alone], gen_gpus, train_gpus, NetworkConfig(topology=spec))
        assert mine.sync_s == alone.sync_s and mine.train_s == alone.train_s
    assert routed.sync_s[(0, 0)] != routed.sync_s[(1, 0)]  # 2 trainers to 2 generators is not 8 to 8


@pytest.mark.parametrize(("cap", "settings", "groups"), [
    (5000, {}, 1), (None, {}, 1), (None, {"length_cap": 200}, 2), (5000, {"oracle": True}, 2)])
def test_rollmux_places_jobs_by_their_length_cap_not_by_the_lengths_to_come(cap: int | None, settings: dict,
                                                                            groups: int) -> None:
    # Responses are 200 tokens (2 s), training 10 s. Estimated at the cap (5000 tokens, 50 s) the pair is
    # rollout-bound: 2 x (50 + 0.54 warm) <= 2 x (50 + 10), so it shares a group; so it is without a cap (the
    # KV cache's bound, longer still). Estimated at 200 tokens (a stated length_cap, or the oracle's true
    # longest) the pair is training-bound, 2 x (10 + 4.04) > 2 x (2 + 10), and splits (warm 7B switches on
    # one H100: 14 GB, or 126 GB of weights and Adam state, at 32 GB/s, plus 0.1 s).
    work = [[[200]] * 4] * 2
    prepared = jobs_of(work, work, arrivals=[0.0, 0.0], slo=2.0, train_s=10.0)
    for job in prepared.jobs:
        job.max_new_tokens = cap
    result = replay(prepared, "rollmux", ReplayConfig(), settings)
    assert result.metrics["extra"]["groups"] == groups
    assert result.metrics["extra"].get("oracle", 0) == int(settings.get("oracle", False))
    assert result.requests["output_tokens"].max() == 200  # what is generated does not change


def test_rollmux_keeps_a_group_within_host_memory_residency() -> None:
    work = [[[20]] * 4] * 2
    result = replay(jobs_of(work, work, work, arrivals=[0.0, 0.0, 0.0], slo=1000.0), "rollmux", ReplayConfig())
    assert result.metrics["extra"]["groups"] == 2  # resident_jobs = 2: the third job opens a group
    # each job's first load per pool is its start-up, and no job is evicted: every switch is warm
    assert "cold_switches" not in result.metrics["extra"]


def test_rollmux_scales_a_rollout_pool_when_cheaper_than_a_new_group() -> None:
    # max_seqs 2: 8 responses on 2 instances take two rounds (2 x 1000 x TAU = 20 s each). Two jobs on 2
    # instances: rollout cycle 2 x (20 + 0.54 warm switch) = 41.1 s > 1.5 x solo (21 s). On 4 instances each
    # rollout is one round (10 s): 21.1 s fits. Two more H100s cost less than a new group's three.
    work = [[[1000, 1000]] * 4] * 3
    scaled = replay(jobs_of(work, work, arrivals=[0.0, 0.0], slo=1.5, max_seqs=2), "rollmux", ReplayConfig())
    assert scaled.metrics["extra"]["groups"] == 1 and scaled.metrics["extra"]["scaled_instances"] == 2
    assert scaled.requests.filter(pl.col("job") == 1)["instance"].n_unique() >= 2
    assert scaled.requests["instance"].n_unique() == 4
    fixed = replay(jobs_of(work, work, arrivals=[0.0, 0.0], slo=1.5, max_seqs=2), "rollmux", ReplayConfig(),
                   {"scale_rollout": False})
    assert fixed.metrics["extra"]["groups"] == 2 and "scaled_instances" not in fixed.metrics["extra"]
    # placement minimises the $/hour it adds: 2 more H100s instead of a new group's 3 (5 GPUs held, not 6). Total
    # cost of these short, finite jobs can still favour two groups, since each is released when its job is done.
    assert sum(scaled.metrics["gpus"].values()) == 5 and sum(fixed.metrics["gpus"].values()) == 6
