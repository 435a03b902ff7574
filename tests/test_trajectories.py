"""Multi-turn trajectories: the engine's turn continuation, the agentic synth mode, and rollart's rules."""

from __future__ import annotations

import dataclasses
import json

import polars as pl
import pytest
from helpers import run_cli
from replay_helpers import TAU, agentic
from rltrace.replay.costmodels.generation import RooflineGeneration
from rltrace.replay.entities.requests import Requests, State
from rltrace.replay.events import NoticeKind, Tag
from rltrace.replay.run import ReplayConfig, replay
from rltrace.replay.simulator import Simulator
from rltrace.replay.workload import extract, retarget
from rltrace.sample_traces import sample_path

import rltrace
from rltrace.bundle import write_bundle
from rltrace.catalog import get_gpu, get_model
from rltrace.schema import TABLES
from rltrace.synth import load_config, synthesize


def _requests(result) -> pl.DataFrame:
    return result.requests.sort("request")


# ---- the engine ------------------------------------------------------------------------------------------------

def test_a_next_turn_starts_after_its_environment_and_the_step_waits_for_the_last_turn() -> None:
    # one trajectory: 10 tokens, 1.5 s of environment, 5 tokens
    result = replay(agentic([[[(10, 0.0), (5, 1.5)]]]), "disagg-sync", ReplayConfig())
    r = _requests(result)
    assert r["finish_s"].to_list() == pytest.approx([10 * TAU, 10 * TAU + 1.5 + 5 * TAU], rel=1e-12)
    assert r["start_s"][1] == pytest.approx(10 * TAU + 1.5, rel=1e-12)
    env = result.timeline.filter(pl.col("kind") == "environment")
    assert env.select("start_s", "end_s").rows() == [pytest.approx((10 * TAU, 10 * TAU + 1.5))]
    assert result.metrics["step_time_s"]["mean"] == pytest.approx(10 * TAU + 1.5 + 5 * TAU, rel=1e-12)


@pytest.mark.parametrize("scheduler", ["disagg-sync", "fully-async", "one-step-async", "colocated-sync"])
def test_every_turn_of_a_trajectory_runs_on_the_instance_of_its_first(scheduler: str) -> None:
    work = agentic([[[(10, 0.0), (20, 0.5), (5, 0.1)], [(30, 0.0), (5, 2.0)], [(7, 0.0), (7, 0.3)]]] * 2, gen_gpus=2,
                   gen_gpu="H800")  # one GPU kind for both pools: colocated-sync runs both roles on each GPU
    result = replay(work, scheduler, ReplayConfig())
    r = _requests(result)
    assert result.metrics["samples"] == work.requests_frame.height  # every step trained on a full batch
    # fully-async goes on generating past the record until training ends: what is still running is dropped
    assert r["finished"].sum() >= work.requests_frame.height
    nxt = work.requests_frame["next_turn"].to_list()  # the recorded trajectories' turns
    inst = r["instance"].to_list()
    pairs = [(i, k) for i, k in enumerate(nxt) if k >= 0 and inst[k] >= 0]
    assert pairs and all(inst[k] == inst[i] for i, k in pairs)


# ---- synth's agentic mode ------------------------------------------------------------------------------------------

def test_agentic_turns_grow_their_context_and_wait_for_the_environment() -> None:
    cfg = load_config(preset="rollart", sets=["steps=2", "prompts_per_step=4", "samples_per_prompt=2"])
    tables = synthesize(cfg).tables
    req = tables["requests"].sort("trajectory_id", "turn")
    assert req.group_by("trajectory_id").len()["len"].unique().to_list() == [cfg.agentic.turns]
    grown = req.with_columns(
        (pl.col("prompt_tokens") - pl.col("prompt_tokens").shift(1) - pl.col("output_tokens").shift(1))
        .over("trajectory_id").alias("observation"),
        (pl.col("arrival_ns") - pl.col("finish_ns").shift(1)).over("trajectory_id").alias("gap_ns"))
    later = grown.filter(pl.col("turn") > 0)
    assert (later["observation"] >= 0).all() and later["observation"].mean() > 100  # observations join the context
    assert (later["gap_ns"] > 0).all()
    env = tables["spans"].filter(pl.col("phase") == "environment")
    assert env.height == later.height
    assert sorted((env["end_ns"] - env["start_ns"]).to_list()) == sorted(later["gap_ns"].to_list())
    # replay reads the same environment time per turn
    workload = extract(rltrace.open(sample_path("rollart_qwen3_8b")))
    assert workload.samples["turn"].max() == 3
    assert workload.samples.filter(pl.col("turn") == 0)["env_s"].max() == 0.0
    assert workload.samples.filter(pl.col("turn") > 0)["env_s"].min() > 0.0


def test_a_trajectory_belongs_to_its_first_turns_prompt_group(tmp_path) -> None:
    """The vLLM collector names a request's group by its prompt's tokens, and a later turn's prompt holds the
    conversation so far: every turn of a recorded trajectory gets its own group_id. Extraction groups each
    trajectory by its first turn's."""
    sample = rltrace.open(sample_path("rollart_qwen3_8b"))
    tables = {name: sample.table(name).collect() for name in TABLES}
    tables["requests"] = tables["requests"].with_columns(
        pl.when(pl.col("turn") > 0).then(pl.concat_str(pl.lit("grown-"), "request_id"))
        .otherwise("group_id").alias("group_id"))
    write_bundle(tmp_path / "recorded", sample.manifest, tables)
    assert extract(rltrace.open(tmp_path / "recorded")).samples.equals(extract(sample).samples)


def _trajectories(samples: pl.DataFrame) -> pl.DataFrame:
    """One row per trajectory: its group and its turns' (prompt tokens, output tokens, environment seconds)."""
    return (samples.sort("step", "trajectory", "turn")
            .group_by("step", "trajectory", maintain_order=True)
            .agg("group", "turn", "prompt_tokens", "output_tokens", "truncated", "env_s"))


def test_retargeting_a_multi_turn_bundle_draws_whole_trajectories_of_recorded_prompts() -> None:
    recorded = extract(rltrace.open(sample_path("rollart_qwen3_8b")))
    out = retarget(recorded, steps=3, prompts_per_step=5, samples_per_prompt=3, max_new_tokens=1000, seed=7)
    assert out.samples.equals(retarget(recorded, steps=3, prompts_per_step=5, samples_per_prompt=3,
                                       max_new_tokens=1000, seed=7).samples)  # same seed, same workload
    new, old = _trajectories(out.samples), _trajectories(recorded.samples)
    assert new.group_by("step").len().sort("step").rows() == [(0, 15), (1, 15), (2, 15)]
    assert all(t == list(range(len(t))) for t in new["turn"].to_list())  # every trajectory whole, in order
    # each new trajectory is a recorded one (lengths capped per turn at 1,000), and a new prompt's three are
    # trajectories of one recorded prompt
    capped = old.with_columns(pl.col("output_tokens").list.eval(pl.element().clip(upper_bound=1000)))
    sources: dict[tuple, set[tuple[int, int]]] = {}
    for step, group, prompt, output, env in capped.select("step", pl.col("group").list.first(), "prompt_tokens",
                                                          "output_tokens", "env_s").rows():
        sources.setdefault((tuple(prompt), tuple(output), tuple(env)), set()).add((step, group))
    drawn = new.select("step", pl.col("group").list.first(), "prompt_tokens", "output_tokens", "env_s").rows()
    assert all((tuple(p), tuple(o), tuple(e)) in sources for _, _, p, o, e in drawn)
    for (step, group), rows in pl.DataFrame(drawn, schema=["step", "group", "p", "o", "e"], orient="row") \
            .group_by("step", "group").agg("p", "o", "e").rows_by_key(["step", "group"]).items():
        (prompts, outputs, envs), = rows
        assert set.intersection(*(sources[(tuple(p), tuple(o), tuple(e))]
                                  for p, o, e in zip(prompts, outputs, envs, strict=True)))
    lengths = out.samples["output_tokens"]
    assert lengths.max() == 1000 and (out.samples["truncated"] == (lengths >= 1000)).all()
    # arrival order: a step's first turns before its later ones
    assert out.samples.select(pl.col("turn").diff().over("step").fill_null(0).min()).item() >= 0


def test_a_retargeted_multi_turn_bundle_replays_from_the_cli(tmp_path) -> None:
    result = run_cli("replay", str(sample_path("rollart_qwen3_8b")), "-s", "disagg-sync,rollart", "--steps", "2",
                     "--prompts", "4", "--samples", "2", "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    # 2 steps x 4 prompts x 2 trajectories, 4 turns each as recorded: 64 turns, 3 environment steps each
    requests = pl.read_parquet(tmp_path / "disagg-sync" / "requests.parquet")
    timeline = pl.read_parquet(tmp_path / "disagg-sync" / "timeline.parquet")
    assert requests.height == requests["finished"].sum() == 64
    assert timeline.filter(pl.col("kind") == "environment").height == 48
    metrics = json.loads((tmp_path / "rollart" / "metrics.json").read_text())
    assert metrics["steps"] == 2 and metrics["samples"] == 64  # two batches of 8 trajectories (32 turns) trained


# ---- rollart -----------------------------------------------------------------------------------------------------

ONE_POOL = {"prefill_gpus": 0}


def test_rollart_with_alpha_0_is_synchronous() -> None:
    work = agentic([[[(50, 0.0), (50, 0.2)], [(10, 0.0), (10, 0.1)]]] * 3, train_s=1.0)
    result = replay(work, "rollart", ReplayConfig(), {**ONE_POOL, "alpha": 0})
    assert result.metrics["staleness"]["max"] == 0
    t = result.timeline
    train = t.filter(pl.col("kind") == "train").sort("start_s")
    requests = t.filter(pl.col("kind") == "request")
    for start, end in train.select("start_s", "end_s").rows():  # nothing generates while the trainer trains
        assert requests.filter((pl.col("start_s") < end) & (pl.col("end_s") > start)).height == 0


def test_rollart_overlaps_generation_with_training_within_the_version_gap() -> None:
    work = agentic([[[(50, 0.0), (50, 0.2)], [(10, 0.0), (10, 0.1)]]] * 3, train_s=1.0)
    sync = replay(work, "rollart", ReplayConfig(), {**ONE_POOL, "alpha": 0})
    overlapped = replay(work, "rollart", ReplayConfig(), {**ONE_POOL, "alpha": 1})
    assert overlapped.metrics["makespan_s"] < sync.metrics["makespan_s"]
    assert overlapped.metrics["staleness"]["max"] == 1


def test_rollart_aborts_a_trajectory_that_falls_more_than_alpha_versions_behind() -> None:
    # A (step 0) is long; B..F are short. The trainer takes the first two finished trajectories: (B, C), then
    # (D, E); after the second update A's first turn is two versions old (> alpha = 1): it runs again.
    short = [(5, 0.0), (5, 0.1)]
    work = agentic([[[(1000, 0.0), (5, 0.1)], short], [short, short], [short, short]])
    result = replay(work, "rollart", ReplayConfig(), {**ONE_POOL, "alpha": 1})
    assert result.metrics["extra"]["stale_aborts"] == 1
    assert result.timeline.filter(pl.col("kind") == "stale_abort").height == 1
    assert result.metrics["staleness"]["max"] <= 1
    r = _requests(result)
    assert r.filter(pl.col("output_tokens") == 1000)["aborts"].to_list()[0] == 1  # the first run was stopped


def test_rollart_runs_a_stale_trajectory_again_as_a_new_response_to_its_prompt() -> None:
    # As above, but A shares its prompt with a short sibling S: the rerun is a new response to that prompt, so
    # it takes the next recorded trajectory's turns (S's), not A's 1000 tokens again.
    short = [(5, 0.0), (5, 0.1)]
    work = agentic([[[(1000, 0.0), (5, 0.1)], short], [short, short], [short, short]])
    recorded = work.requests_frame.height
    frame = work.requests_frame.with_columns(  # step 0's two trajectories answer one prompt
        pl.when(pl.col("step") == 0).then(0).otherwise(pl.col("group")).alias("group"))
    result = replay(dataclasses.replace(work, requests_frame=frame), "rollart", ReplayConfig(),
                    {**ONE_POOL, "alpha": 1})
    assert result.metrics["extra"]["stale_aborts"] == 1
    r = _requests(result)
    assert r.filter(pl.col("request") < recorded, pl.col("output_tokens") == 1000)["aborts"].to_list() == [1]
    # the rerun is the first trajectory spawned (before any drawn past the record, which the abort precedes)
    assert r.filter(pl.col("request") >= recorded)["output_tokens"].head(2).to_list() == [5, 5]


@pytest.mark.parametrize(("scheduler", "settings"), [("rollart", ONE_POOL), ("fully-async", {})])
def test_async_training_ends_on_the_first_to_finish_not_on_the_records_last_straggler(scheduler: str,
                                                                                       settings: dict) -> None:
    # Step 1 holds a 1,000-token straggler. A real run keeps generating until training ends, so the last step
    # takes the first trajectories to finish and the straggler is dropped unfinished.
    short = [(5, 0.0)]
    work = agentic([[short, short], [[(1000, 0.0)], short]])
    result = replay(work, scheduler, ReplayConfig(), settings)
    assert result.metrics["samples"] == 4
    assert result.metrics["makespan_s"] < 100 * TAU
    r = _requests(result)
    assert not r.filter(pl.col("output_tokens") == 1000)["finished"].any()


def test_rollart_sends_prefill_heavy_turns_to_compute_rich_gpus_and_decode_heavy_to_bandwidth_rich() -> None:
    cost = RooflineGeneration(model=get_model("Qwen3-8B"), gpu=get_gpu("H20"))
    # one trajectory whose second turn carries a 32k-token context and decodes little; one that decodes long
    work = agentic([[[(10, 0.0), (8, 0.5)], [(2000, 0.0)]]], generation=cost, gen_gpus=2, gen_gpu="H20",
                   prompt=100)
    frame = work.requests_frame.with_columns(
        pl.when(pl.col("next_turn") < 0).then(pl.col("prompt_tokens") + 32_000 * (pl.col("output_tokens") == 8))
        .otherwise(pl.col("prompt_tokens")).alias("prompt_tokens"))
    work = type(work)(frame, work.jobs, work.cluster, [])
    # alpha = 0: one step, nothing drawn past it (alpha = 1 would start the next step's trajectories at once)
    result = replay(work, "rollart", ReplayConfig(), {"prefill_gpus": 1, "prefill_gpu": "H800", "alpha": 0})
    placed = result.timeline.filter(pl.col("kind") == "request").join(
        result.requests.select(pl.col("request").alias("id"), "output_tokens", "prompt_tokens"), on="id")
    where = dict(zip(placed["output_tokens"].to_list(), placed["pool"].to_list()))
    assert where[8] == "generation/prefill"  # 32k-token context: prefill on H800 is ~7x faster
    assert where[2000] == "generation"  # long decode: H20's 4.0 TB/s beats H800's 3.35 TB/s
    assert result.metrics["gpus"] == {"generation": 1, "generation/prefill": 1, "training": 1}


def test_serverless_reward_scores_every_trajectory_at_once_and_bills_per_second() -> None:
    work = agentic([[[(10, 0.0)], [(10, 0.0)], [(10, 0.0)]]])
    work.jobs[0].reward_s[0] = 3.0  # 1 s per trajectory
    one = {**ONE_POOL, "alpha": 0}  # one step, nothing drawn past it
    serverless = replay(work, "rollart", ReplayConfig(), one)
    worker = replay(work, "rollart", ReplayConfig(), {**one, "serverless_reward": False})
    def starts(run) -> list[float]:
        return sorted(run.timeline.filter(pl.col("kind") == "reward")["start_s"].to_list())

    assert starts(serverless) == pytest.approx([10 * TAU] * 3)
    assert starts(worker) == pytest.approx([10 * TAU, 10 * TAU + 1, 10 * TAU + 2])
    free = replay(work, "rollart", ReplayConfig(), {**one, "reward_usd_per_s": 0.0})
    priced = replay(work, "rollart", ReplayConfig(), {**one, "reward_usd_per_s": 1.0})
    assert priced.metrics["cost_usd"] - free.metrics["cost_usd"] == pytest.approx(3.0, rel=1e-9)



class AbortDuringEnvironment:
    """A quiet-mode policy for the test below: both trajectories start; trajectory 0's second turn is
    aborted while its environment works."""

    def __init__(self, second_turn: int) -> None:
        self.second_turn, self.generated_at = second_turn, None

    def start(self, sim: Simulator) -> None:
        sim.quiet = True
        inst = sim.add_instance("generation", 1, sim.jobs[0].generation)
        sim.submit(inst, sim.jobs[0].starts(0))
        sim.timer(10 * TAU + 0.5, Tag("abort"))  # trajectory 0's first turn ended at 10 tau; its environment takes 1 s

    def on_event(self, sim: Simulator, notice) -> None:
        if notice.kind is NoticeKind.TIMER:
            sim.abort([self.second_turn])
        elif notice.kind is NoticeKind.GENERATED:
            self.generated_at = notice.time_s


def test_aborting_a_turn_during_its_environment_stops_the_trajectory_and_the_step_still_ends() -> None:
    work = agentic([[[(10, 0.0), (5, 1.0)], [(20, 0.0)]]])
    f = work.requests_frame
    requests = Requests(f["job"].to_numpy(), f["step"].to_numpy(), f["group"].to_numpy(), f["prompt_tokens"].to_numpy(),
                        f["output_tokens"].to_numpy(), f["next_turn"].to_numpy(), f["env_s"].to_numpy())
    second_turn = int(f["next_turn"][0])
    sim = Simulator(requests, work.jobs, work.cluster)
    policy = AbortDuringEnvironment(second_turn)
    sim.run(policy)
    assert requests.state[second_turn] == State.PENDING  # never queued after its environment ended
    # trajectory 1 ended at 20 tau; the step is complete once trajectory 0 is stopped (at the abort)
    assert policy.generated_at == pytest.approx(10 * TAU + 0.5)
