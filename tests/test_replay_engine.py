"""The replay engine on hand-made workloads: closed forms, determinism, KV preemption, the scheduler verbs."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import pytest
from replay_helpers import TAU, agentic, make
from rltrace.replay.cluster import Cluster
from rltrace.replay.costmodels.generation import FittedGeneration
from rltrace.replay.costmodels.iteration import IterationModel, Linear
from rltrace.replay.entities.requests import Requests
from rltrace.replay.events import Notice, NoticeKind, Tag
from rltrace.replay.metrics import MetricsConfig, compute_metrics, timeline_frame
from rltrace.replay.record import RunRecord
from rltrace.replay.run import ReplayConfig, replay
from rltrace.replay.schedulers import create, lookup, names, register
from rltrace.replay.schedulers.base import ONE_JOB, Capabilities, capabilities
from rltrace.replay.schedulers.view import View
from rltrace.replay.simulator import Simulator

from rltrace.errors import ConfigError

# ---- the iteration model -----------------------------------------------------------------------------------

MODELS = {
    "fixed": IterationModel.fixed(0.02),
    "memory then compute": IterationModel(compute=Linear(0.0, 1e-4, 2e-7), memory=Linear(5e-3, 0.0, 1e-8)),
    "compute then memory": IterationModel(compute=Linear(4e-3, 1e-5, 0.0), memory=Linear(1e-3, 0.0, 3e-7),
                                          extra=Linear(1e-4, 1e-6, 1e-9)),
}


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize(("batch", "context", "n"), [(1, 0, 1), (7, 1000, 50), (64, 5000, 3000), (300, 12, 999)])
def test_closed_form_sum_equals_the_iteration_by_iteration_sum(name: str, batch: int, context: int, n: int) -> None:
    model = MODELS[name]
    brute = math.fsum(model.iteration(batch, context + j * batch) for j in range(n))
    assert model.seconds(batch, context, n) == pytest.approx(brute, rel=1e-11)
    budget = brute * 0.37
    k = model.iterations_within(batch, context, budget, n)
    assert model.seconds(batch, context, k) <= budget < model.seconds(batch, context, k + 1)


# ---- closed-form replays -------------------------------------------------------------------------------------

LENGTHS = [[5, 40, 17, 300, 2, 99], [12, 250, 7, 31, 64, 8]]


def test_unbounded_batch_generation_takes_the_longest_sample_times_the_token_time() -> None:
    result = replay(make(LENGTHS[:1]), "disagg-sync", ReplayConfig())
    gen = result.timeline.filter(pl.col("kind") == "request")
    assert gen["end_s"].max() == pytest.approx(max(LENGTHS[0]) * TAU, rel=1e-12)
    # every sample finishes at its own length x the token time: continuous batching, no waiting
    req = result.requests.sort("request")
    assert np.allclose(req["finish_s"].to_numpy(), np.array(LENGTHS[0]) * TAU, rtol=1e-12)


def test_a_disagg_sync_step_is_generation_plus_train_plus_sync() -> None:
    train, sync = 1.25, 0.5
    result = replay(make(LENGTHS, train_s=train, sync_s=sync), "disagg-sync", ReplayConfig())
    expected = [max(x) * TAU + train + sync for x in LENGTHS]
    assert result.metrics["step_time_s"]["mean"] == pytest.approx(np.mean(expected), rel=1e-12)
    assert result.metrics["makespan_s"] == pytest.approx(sum(expected), rel=1e-12)
    assert result.metrics["weight_sync_s"] == pytest.approx(sync, rel=1e-12)
    assert result.metrics["staleness"] == {"mean": 0.0, "max": 0}


@pytest.mark.parametrize(("gen_len", "train"), [(100, 0.4), (100, 2.5)])
def test_one_step_async_runs_one_step_per_max_of_generation_and_training(gen_len: int, train: float) -> None:
    steps = 8
    result = replay(make([[gen_len, gen_len // 2]] * steps, train_s=train), "one-step-async", ReplayConfig())
    gen = gen_len * TAU
    ends = np.array(sorted(result.timeline.filter(pl.col("kind") == "train")["end_s"].to_list()))
    # steady state: one step per max(gen, train); throughput = samples per step / max(gen, train)
    assert np.allclose(np.diff(ends)[2:], max(gen, train), rtol=1e-12)
    assert result.metrics["staleness"]["max"] == 1
    sync = replay(make([[gen_len, gen_len // 2]] * steps, train_s=train), "disagg-sync", ReplayConfig())
    assert result.metrics["throughput_samples_per_s"] > sync.metrics["throughput_samples_per_s"]


def test_colocated_sync_pays_both_switches_every_step() -> None:
    result = replay(make(LENGTHS, train_s=1.0), "colocated-sync", ReplayConfig(),
                    {"to_train_s": 2.0, "to_generate_s": 0.5})
    # the 1 s the training pool's one GPU takes, on both GPUs: every split of the same GPUs gives one answer
    expected = [max(x) * TAU + 2.0 + 0.5 + 0.5 for x in LENGTHS]
    assert result.metrics["makespan_s"] == pytest.approx(sum(expected), rel=1e-12)
    assert result.metrics["gpus"] == {"generation": 2, "training": 2}  # one pool, both roles


def test_fully_async_never_admits_past_the_staleness_bound() -> None:
    lengths = [[400, 3, 3, 3]] + [[3, 3, 3, 3]] * 7
    for eta in (0, 1, 2):
        result = replay(make(lengths, train_s=0.05), "fully-async", ReplayConfig(), {"eta": eta, "interruptible": True})
        assert result.metrics["samples"] == 32
        assert result.metrics["staleness"]["max"] <= eta, eta



def test_what_fully_async_still_generates_when_training_ends_is_dropped_at_the_end() -> None:
    """The last weight update used to interrupt the running requests as for a next step (spans "migrated", each
    ending at its instance's own clock, past the run's end); no step runs under those weights: the run ends and
    what was generating is dropped there."""
    lengths = [[40, 3, 3, 3]] * 4
    result = replay(make(lengths, train_s=0.05, sync_s=0.01), "fully-async", ReplayConfig(),
                    {"eta": 1, "interruptible": True})
    end = result.metrics["makespan_s"]
    t = result.timeline
    dropped = t.filter(pl.col("kind") == "dropped")
    assert dropped.height > 0 and (dropped["end_s"] == end).all()
    assert t["end_s"].max() == pytest.approx(end, abs=1e-12)
    assert t.filter(pl.col("kind") == "migrated", pl.col("end_s") >= end).height == 0


def test_the_event_log_is_identical_across_runs() -> None:
    logs = []
    for _ in range(2):
        prepared = make(LENGTHS * 3, train_s=0.3, sync_s=0.1, gen_gpus=2, max_seqs=2)
        logs.append(replay(prepared, "one-step-async", ReplayConfig(), keep_log=True).event_log)
    assert logs[0] is not None and len(logs[0]) > 40
    assert logs[0] == logs[1]
    keys = [(t, p, s) for t, p, s, *_ in logs[0]]
    assert keys == sorted(keys)  # fired in (time, priority, seq) order
    # the workload has events at the same time and priority, so the identical logs above show that the push
    # order (seq), not chance, broke those ties
    assert len({(t, p) for t, p, _ in keys}) < len(keys)


def test_a_full_kv_cache_preempts_by_recompute_and_every_token_is_still_generated() -> None:
    lengths = [[200] * 8]
    tight = replay(make(lengths, kv_tokens=900, prompt=10), "disagg-sync", ReplayConfig())
    loose = replay(make(lengths, prompt=10), "disagg-sync", ReplayConfig())
    assert tight.metrics["preemptions"] > 0 and loose.metrics["preemptions"] == 0
    assert tight.metrics["output_tokens"] == loose.metrics["output_tokens"] == 1600
    assert tight.metrics["makespan_s"] > loose.metrics["makespan_s"]
    assert tight.timeline.filter(pl.col("kind") == "preempted").height == tight.metrics["preemptions"]


def test_max_seqs_queues_the_rest_in_order() -> None:
    result = replay(make([[10, 10, 10, 10, 10]], max_seqs=2), "disagg-sync", ReplayConfig())
    finish = result.requests.sort("request")["finish_s"].to_list()
    assert finish == pytest.approx([0.1, 0.1, 0.2, 0.2, 0.3], rel=1e-12)


# ---- registry ------------------------------------------------------------------------------------------------


def test_the_five_baselines_are_registered_and_unknown_names_are_clear() -> None:
    assert {"colocated-sync", "disagg-sync", "one-step-async", "fully-async", "as-recorded"} <= set(names())
    with pytest.raises(ConfigError, match="unknown scheduler 'nope'"):
        create("nope")
    with pytest.raises(ConfigError, match="unknown key 'bogus'"):
        create("fully-async", {"bogus": 1})


def test_a_duplicate_name_is_an_error() -> None:
    with pytest.raises(ValueError, match="registered twice"):

        @register("disagg-sync")
        class Again:
            Config = Cluster


# ---- the verbs a seed scheduler needs --------------------------------------------------------------------


def train_when_three_finished(self: Any, sim: View, notice: Notice) -> None:
    """``on_event`` of the one-step test schedulers below: their timer calls ``on_timer``; once requests 0-2
    have finished, one training step."""
    if notice.kind is NoticeKind.TIMER:
        self.on_timer(sim)
    elif notice.kind is NoticeKind.FINISHED:
        self.left -= len(notice.requests)
        if not self.left:
            sim.consume(0, 0, [0, 1, 2], 0)
            sim.work("trainer", 1.0, Tag("train"), kind="train", step=0)
    else:
        sim.end_step(0, 0)


@dataclass(frozen=True, kw_only=True, slots=True)
class VerbsConfig:
    abort_at_s: float = 0.5


@register("test-verbs")
class Verbs:
    """Two instances; at abort_at_s, abort the long request and resubmit it on an instance regrouped to TP 2,
    retire the other instance, then train."""

    Config = VerbsConfig

    def __init__(self, config: VerbsConfig) -> None:
        self.config = config

    def start(self, sim: View) -> None:
        job = sim.jobs[0]
        sim.allocate("generation", 2, "H100")
        sim.allocate("training", 1, "H100")
        sim.add_resource("trainer", "training", gpus=1)
        self.a = sim.add_instance("generation", 1, job.generation)
        self.b = sim.add_instance("generation", 1, job.generation)
        sim.submit(self.a, [0, 1])
        sim.submit(self.b, [2])
        sim.timer(self.config.abort_at_s, Tag("regroup"))
        self.left = 3

    def on_timer(self, sim: View) -> None:
        back = sim.abort([0])
        assert back == [0]
        sim.retire(self.b)  # request 2 already finished
        sim.reconfigure(self.a, tp=2, switch_s=0.25)
        sim.submit(self.a, back, front=True)

    on_event = train_when_three_finished


def test_abort_resubmit_retire_and_regroup_to_a_higher_tp() -> None:
    # lengths: 0 is long, 1 and 2 short; TP 2 halves the iteration time (tp_speedup 1)
    prepared = make([[100, 20, 30]])
    job = prepared.jobs[0]
    job.generation = FittedGeneration(model=IterationModel.fixed(TAU), tp_speedup=1.0)
    result = replay(prepared, "test-verbs", ReplayConfig())
    req = result.requests.sort("request")
    assert req["aborts"].to_list() == [1, 0, 0]
    # request 0 restarts at 0.5 + 0.25 s on TP 2 from scratch: 100 tokens x TAU / 2
    assert req["finish_s"][0] == pytest.approx(0.5 + 0.25 + 100 * TAU / 2, rel=1e-12)
    assert req["finish_s"][2] == pytest.approx(30 * TAU, rel=1e-12)
    kinds = set(result.timeline["kind"])
    assert {"aborted", "switch", "request", "train"} <= kinds
    assert result.metrics["aborted_attempts"] == 1


@dataclass(frozen=True, kw_only=True, slots=True)
class LookConfig:
    action: str = "look"


@register("test-look")
class Look:
    """One instance runs three requests; mid-run the scheduler only looks at its queue ("look") or aborts a
    request that already finished there ("abort-finished"). Neither changes the instance, so neither may
    delay the requests still running (both once left it without a next event)."""

    Config = LookConfig

    def __init__(self, config: LookConfig) -> None:
        self.config = config

    def start(self, sim: View) -> None:
        sim.allocate("generation", 1, "H100")
        sim.allocate("training", 1, "H100")
        sim.add_resource("trainer", "training", gpus=1)
        self.inst = sim.add_instance("generation", 1, sim.jobs[0].generation)
        sim.submit(self.inst, [0, 1, 2])
        sim.timer(0.255, Tag("look"))  # mid-iteration, after request 0 finished at 0.1 s
        self.left = 3

    def on_timer(self, sim: View) -> None:
        if self.config.action == "look":
            assert sorted(sim.requests_on(self.inst)) == [1, 2]
        else:
            assert sim.abort([0]) == []

    on_event = train_when_three_finished


@pytest.mark.parametrize("action", ["look", "abort-finished"])
def test_looking_at_or_aborting_finished_requests_does_not_stall_an_instance(action: str) -> None:
    result = replay(make([[10, 50, 100]]), "test-look", ReplayConfig(), {"action": action})
    assert result.requests.sort("request")["finish_s"].to_list() == pytest.approx([10 * TAU, 50 * TAU, 100 * TAU])
    assert result.metrics["steps"] == 1


# ---- the fast path (whole queues planned at once) equals the per-event path ---------------------------------

SLOW = ReplayConfig(fast_path=False)


def random_lengths(seed: int, steps: int, per_step: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [np.minimum(rng.lognormal(4, 1.2, per_step).astype(int) + 1, 3000).tolist() for _ in range(steps)]


ROOF = IterationModel(compute=Linear(0.0, 3e-5, 2e-8), memory=Linear(4e-3, 0.0, 5e-9), extra=Linear(1e-4, 1e-6))


@pytest.mark.parametrize("scheduler", ["disagg-sync", "one-step-async", "colocated-sync", "as-recorded"])
@pytest.mark.parametrize(("seed", "max_seqs", "gpus"), [(0, 1_000_000, 1), (1, 32, 3), (2, 7, 2)])
def test_fast_path_gives_the_per_event_results(scheduler: str, seed: int, max_seqs: int, gpus: int) -> None:
    def run(config: ReplayConfig):
        prepared = make(random_lengths(seed, 4, 300), model=ROOF, max_seqs=max_seqs, gen_gpus=gpus, train_s=0.7,
                        sync_s=0.2)
        prepared.jobs[0].generation = FittedGeneration(model=ROOF, prefill_base_s=0.01, prefill_per_token_s=1e-5)
        return replay(prepared, scheduler, config)

    fast, slow = run(ReplayConfig()), run(SLOW)
    assert fast.events < slow.events / 10  # one event per queue, not per request
    cols = ["start_s", "admitted_s", "first_token_s", "finish_s"]
    assert np.allclose(fast.requests.select(cols).to_numpy(), slow.requests.select(cols).to_numpy(),
                       rtol=1e-9, atol=1e-12, equal_nan=True)
    placed = ["instance", "version", "preemptions"]
    assert fast.requests.select(placed).equals(slow.requests.select(placed))
    busy = [r.timeline.filter(pl.col("kind") == "busy").sort("resource", "start_s") for r in (fast, slow)]
    assert busy[0]["resource"].equals(busy[1]["resource"]) and np.allclose(
        busy[0].select("start_s", "end_s").to_numpy(), busy[1].select("start_s", "end_s").to_numpy(), rtol=1e-9)
    for key in ("makespan_s", "throughput_samples_per_s", "gpu_utilization", "bubble_fraction"):
        assert json_close(fast.metrics[key], slow.metrics[key]), key


def json_close(a: object, b: object) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(json_close(a[k], b[k]) for k in a)  # type: ignore[union-attr]
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True, slots=True)
class MidDrainConfig:
    at_s: float = 0.8


@register("test-mid-drain")
class MidDrain:
    """Quiet mode, but at ``at_s`` it aborts a third of step 0's requests, resubmits them to the other
    instance, and submits step 1 on top of step 0's tail: every drain gets cut."""

    Config = MidDrainConfig

    def __init__(self, config: MidDrainConfig) -> None:
        self.config = config
        self.generated: list[Tag] = []

    def start(self, sim: View) -> None:
        sim.quiet = True
        sim.allocate("generation", 2, "H100")
        self.a = sim.add_instance("generation", 1, sim.jobs[0].generation, max_seqs=40)
        self.b = sim.add_instance("generation", 1, sim.jobs[0].generation, max_seqs=40)
        rids = list(sim.jobs[0].requests(0))
        sim.submit(self.a, rids[: len(rids) // 2])
        sim.submit(self.b, rids[len(rids) // 2 :])
        sim.timer(self.config.at_s, Tag("meddle"))

    def on_event(self, sim: View, notice: Notice) -> None:
        job = sim.jobs[0]
        if notice.kind is NoticeKind.TIMER:
            back = sim.abort(list(job.requests(0))[::3])
            sim.submit(self.b, back, front=True)
            sim.submit(self.a, job.requests(1))
        elif notice.kind is NoticeKind.GENERATED:
            self.generated.append(notice.tag)
            sim.end_step(0, notice.tag.step)
            sim.consume(0, notice.tag.step, job.requests(notice.tag.step), 0)
        elif notice.kind is NoticeKind.FINISHED:
            for rid in notice.requests:  # per-event path: count steps by hand
                self.left = getattr(self, "left", {0: len(job.requests(0)), 1: len(job.requests(1))})
                step = sim.requests.step[rid]
                self.left[step] -= 1
                if not self.left[step]:
                    self.on_event(sim, Notice(notice.time_s, NoticeKind.GENERATED, Tag("generated", 0, step)))


def test_cutting_a_drain_short_matches_the_per_event_path() -> None:
    def run(config: ReplayConfig):
        prepared = make(random_lengths(5, 2, 200), model=ROOF)
        prepared.jobs[0].generation = FittedGeneration(model=ROOF, prefill_base_s=0.01)
        return replay(prepared, "test-mid-drain", config)

    fast, slow = run(ReplayConfig()), run(SLOW)
    cols = ["start_s", "admitted_s", "first_token_s", "finish_s"]
    assert fast.requests["aborts"].sum() > 0
    assert np.allclose(fast.requests.select(cols).to_numpy(), slow.requests.select(cols).to_numpy(), rtol=1e-9,
                       equal_nan=True)
    assert fast.requests.select("instance", "aborts").equals(slow.requests.select("instance", "aborts"))
    assert fast.steps["end_s"].to_list() == pytest.approx(slow.steps["end_s"].to_list(), rel=1e-9)


@register("test-look-at-one")
class LookAtOne:
    """Quiet mode on two instances; at 5 iterations it only looks at the first one's requests (cutting its drain
    short) and notes when the step's "generated" notice comes."""

    Config = MidDrainConfig

    last: LookAtOne

    def __init__(self, config: MidDrainConfig) -> None:
        self.generated_s: list[float] = []
        LookAtOne.last = self

    def start(self, sim: View) -> None:
        sim.quiet = True
        sim.allocate("generation", 2, "H100")
        self.a = sim.add_instance("generation", 1, sim.jobs[0].generation)
        b = sim.add_instance("generation", 1, sim.jobs[0].generation)
        rids = list(sim.jobs[0].requests(0))
        sim.submit(self.a, rids[:20])
        sim.submit(b, rids[20:])
        sim.timer(5 * TAU, Tag("look"))

    def on_event(self, sim: View, notice: Notice) -> None:
        if notice.kind is NoticeKind.TIMER:
            sim.requests_on(self.a)
        elif notice.kind is NoticeKind.GENERATED:
            self.generated_s.append(notice.time_s)
            sim.end_step(0, 0)


def test_a_step_is_generated_when_its_last_request_finishes_though_another_drain_was_cut() -> None:
    """Cutting the first instance's drain forgot the second one's planned finishes: the step was "generated" at
    0.2 s, while the second instance's 20 requests ran to 1.0 s."""
    result = replay(make([[20] * 20 + [100] * 20]), "test-look-at-one", ReplayConfig())
    assert LookAtOne.last.generated_s == [pytest.approx(1.0)] == [result.requests["finish_s"].max()]


# ---- typed events, declared capabilities, the run record ---------------------------------------------------

EVENT_KINDS = ("Planned(", "Generated(", "Done(", "Timer(", "TurnReady(")


@pytest.mark.parametrize(("scheduler", "prepared"), [
    ("disagg-sync", lambda: make(LENGTHS, train_s=0.3, sync_s=0.1)),  # quiet mode: a "generated" event per step
    ("test-verbs", lambda: make([[100, 20, 30]])),  # timers, work, finishes one by one
    ("one-step-async", lambda: agentic([[[(10, 0.0), (5, 1.0)], [(20, 0.0)]]] * 2, train_s=0.2)),  # next turns
])
def test_every_event_is_a_typed_object_fired_in_key_order(scheduler: str, prepared: Any) -> None:
    log = replay(prepared(), scheduler, ReplayConfig(), keep_log=True).event_log
    assert log
    assert {data[: data.index("(") + 1] for *_, data in log} <= set(EVENT_KINDS)
    assert all(target for _, _, _, target, data in log if data.startswith("Planned("))  # an instance's name
    keys = [(t, p, s) for t, p, s, *_ in log]
    assert keys == sorted(keys)
    if scheduler == "one-step-async":
        assert any(data.startswith("TurnReady(") for *_, data in log)


def two_jobs() -> Any:
    """Two identical one-step jobs of two requests each (requests 0-1 and 2-3)."""
    one = make([[10, 20]])
    frame = pl.concat([one.requests_frame, one.requests_frame.with_columns(pl.lit(1, pl.Int32).alias("job"))])
    second = dataclasses.replace(one.jobs[0], id=1, name="job1", first=[2, 4])
    return dataclasses.replace(one, requests_frame=frame, jobs=[one.jobs[0], second])


SEEN_JOBS: list[int] = []


@register("test-all-jobs")
class AllJobs:
    """Declares several jobs: runs every job's step 0 on one instance, then trains once."""

    Config = VerbsConfig
    capabilities = Capabilities(several_jobs=True)

    def __init__(self, config: VerbsConfig) -> None:
        self.left = 0

    def start(self, sim: View) -> None:
        SEEN_JOBS.append(len(sim.jobs))
        sim.allocate("generation", 1, "H100")
        self.inst = sim.add_instance("generation", 1, sim.jobs[0].generation)
        for job in sim.jobs:
            sim.submit(self.inst, job.requests(0))
            self.left += len(job.requests(0))

    def on_event(self, sim: View, notice: Notice) -> None:
        self.left -= len(notice.requests)
        if not self.left:
            for job in sim.jobs:
                sim.end_step(job.id, 0)


@register("test-first-job")
class FirstJob(AllJobs):
    """The same policy with nothing declared: it sees (and so replays) the first job only."""

    capabilities = ONE_JOB


def test_a_scheduler_sees_several_jobs_only_when_it_declares_it() -> None:
    SEEN_JOBS.clear()
    both = replay(two_jobs(), "test-all-jobs", ReplayConfig())
    first = replay(two_jobs(), "test-first-job", ReplayConfig())
    assert SEEN_JOBS == [2, 1]
    assert both.requests["finished"].to_list() == [True] * 4
    assert first.requests["finished"].to_list() == [True, True, False, False]
    assert both.steps["job"].to_list() == [0, 1] and first.steps["job"].to_list() == [0]
    assert capabilities(lookup("rollmux")).several_jobs and not capabilities(lookup("disagg-sync")).several_jobs
    assert capabilities(lookup("rollart")).places_turns and not capabilities(lookup("streamrl")).places_turns


def test_a_wrong_capabilities_declaration_fails_at_registration() -> None:
    with pytest.raises(TypeError, match="must be a Capabilities"):

        @register("test-bad-capabilities")
        class Bad(AllJobs):
            capabilities = ("several_jobs",)  # type: ignore[assignment]


def test_metrics_read_the_run_record_the_simulator_returns() -> None:
    prepared = make(LENGTHS, train_s=0.3, sync_s=0.1, gen_gpus=2)
    f = prepared.requests_frame
    requests = Requests(f["job"].to_numpy(), f["step"].to_numpy(), f["group"].to_numpy(),
                        f["prompt_tokens"].to_numpy(), f["output_tokens"].to_numpy())
    policy, _ = create("one-step-async")
    record = Simulator(requests, prepared.jobs, prepared.cluster).run(policy)
    assert isinstance(record, RunRecord)
    assert sorted(record.step_end_s) == [(0, 0), (0, 1)] and len(record.consumed) == 2
    assert {p.pool for p in record.pools} == {"generation", "training"} and record.events > 0
    frame = requests.to_frame()
    timeline = timeline_frame(record, frame)
    metrics = compute_metrics(record, frame, timeline, MetricsConfig())
    via_replay = replay(make(LENGTHS, train_s=0.3, sync_s=0.1, gen_gpus=2), "one-step-async", ReplayConfig())
    assert metrics["makespan_s"] == via_replay.metrics["makespan_s"]
    assert metrics["events"] == via_replay.events == record.events


def test_busy_means_a_non_empty_batch_and_use_weighs_its_size() -> None:
    # one instance, two requests of 100 and 1 tokens: a non-empty batch the whole generation (busy ~1), but after the
    # first iteration at batch 1 of a peak of 2 (used about half)
    result = replay(make([[100, 1]]), "disagg-sync", ReplayConfig())
    m = result.metrics
    generation_s = float(result.requests["finish_s"].max())
    share = generation_s / m["makespan_s"]
    assert m["gpu_busy"]["generation"] == pytest.approx(share, rel=1e-6)
    assert m["gpu_utilization"]["generation"] == pytest.approx(share * (2 + 99) / 200, rel=1e-6)
    assert m["gpu_busy"]["training"] == m["gpu_utilization"]["training"]
