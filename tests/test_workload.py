"""Workload extraction from bundles, and seeded retargeting to other shapes."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from rltrace.replay.loading import Shape, from_bundle
from rltrace.replay.run import CostConfig, ReplayConfig, replay
from rltrace.replay.workload import _whole_steps, extract, retarget, select_steps
from rltrace.sample_traces import sample_path

import rltrace
from rltrace.bundle import write_bundle
from rltrace.catalog import from_info, get_model
from rltrace.errors import ConfigError
from rltrace.schema import TABLES


@pytest.fixture(scope="module")
def rollpacker():
    return extract(rltrace.open(sample_path("rollpacker_qwen7b")))


def test_extract_the_synthetic_sample(rollpacker) -> None:
    w = rollpacker
    assert w.samples.height == 12 * 1024 and w.steps.height == 12
    assert set(w.samples.group_by("step", "group").len()["len"]) == {8}
    assert w.max_new_tokens == 16384 and w.model is not None and w.model.name == "Qwen2.5-7B"
    spans = rltrace.open(sample_path("rollpacker_qwen7b")).spans.collect()
    train0 = spans.filter((pl.col("step") == 0) & (pl.col("phase") == "train") & (pl.col("actor") == "trainer/rank0"))
    assert w.steps["train_s"][0] == pytest.approx((train0["end_ns"] - train0["start_ns"]).item() / 1e9)
    engines = w.cluster["rollout"].count // w.cluster["rollout"].tp
    assert set(w.steps["sync_bytes"]) == {engines * w.model.params * w.model.dtype_bytes}
    assert (w.steps["collective_bytes"] > 0).all()


def test_extract_the_recorded_tiny_rl_sample_counts_each_sync_once() -> None:
    bundle = rltrace.open(sample_path("tiny_rl_cpu"))
    w = extract(bundle)
    model = bundle.manifest.model
    assert set(w.steps["sync_bytes"]) == {model.params * model.dtype_bytes}  # not also the disk reload
    assert (w.steps["train_s"] > 0).all() and (w.steps["optimizer_s"] > 0).all()


def test_retarget_is_seeded_and_shaped(rollpacker) -> None:
    a = retarget(rollpacker, steps=3, prompts_per_step=16, samples_per_prompt=4, seed=5)
    b = retarget(rollpacker, steps=3, prompts_per_step=16, samples_per_prompt=4, seed=5)
    assert_frame_equal(a.samples, b.samples)
    assert a.samples.height == 3 * 16 * 4
    assert retarget(rollpacker, steps=3, seed=6).samples["output_tokens"].to_list() != \
        retarget(rollpacker, steps=3, seed=5).samples["output_tokens"].to_list()
    # samples of one new prompt come from one recorded prompt: their prompt length is shared
    assert a.samples.group_by("step", "group").agg(pl.col("prompt_tokens").n_unique())["prompt_tokens"].max() == 1


def test_retarget_keeps_the_length_distribution_and_scales_training(rollpacker) -> None:
    big = retarget(rollpacker, steps=20, prompts_per_step=512, samples_per_prompt=8, seed=1)
    for q in (0.5, 0.9):
        got = np.quantile(big.samples["output_tokens"].to_numpy(), q)
        want = np.quantile(rollpacker.samples["output_tokens"].to_numpy(), q)
        assert abs(got / want - 1) < 0.06
    rec = rollpacker.steps.slice(1)  # the first step (start-up in a real recording) is left out
    rate = rec["train_s"].sum() / (rec["prompt_tokens"] + rec["output_tokens"]).sum()
    tokens = big.steps["prompt_tokens"] + big.steps["output_tokens"]
    assert (big.steps["train_s"] - tokens * rate).abs().max() < 1e-9


@pytest.mark.parametrize("per", [4, 8, 11])
def test_retarget_with_the_recorded_prompt_count_keeps_whole_steps(rollpacker, per: int) -> None:
    """Fewer (or more) samples per prompt, same prompts per step: each new step is one recorded step's prompts,
    each recorded step used once before any twice, and a prompt's samples distinct while it has enough."""
    recorded = rollpacker.samples.with_columns(
        pl.int_range(pl.len()).over("step", "group").alias("k"))  # a sample's place in its recorded group
    keyed = recorded.with_columns((pl.col("output_tokens") * 1_000_003 + pl.col("prompt_tokens")).alias("key"))
    new = retarget(rollpacker, samples_per_prompt=per, seed=3)
    steps, prompts = rollpacker.steps.height, 1024 // 8
    assert new.samples.height == steps * prompts * per
    by_step = {s: set(g["key"].to_list()) for (s,), g in keyed.group_by(["step"])}
    used = []
    for (step,), g in new.samples.with_columns(
            (pl.col("output_tokens") * 1_000_003 + pl.col("prompt_tokens")).alias("key")).group_by(["step"]):
        source = [s for s, keys in by_step.items() if set(g["key"].to_list()) <= keys]
        assert source, f"new step {step} is not one recorded step"
        used.append(source[0])
    assert sorted(used) == sorted(by_step)  # as many new steps as recorded: each recorded step once
    # The draw itself: trajectory indices per new group, distinct while the group has enough samples.
    sizes = np.full(steps * prompts, 8)
    drawn = _whole_steps(np.random.default_rng(3), np.full(steps, prompts), sizes,
                         np.arange(steps * prompts) * 8, steps, per).reshape(steps * prompts, per)
    distinct = np.array([len(set(row)) for row in drawn])
    assert (distinct == min(per, 8)).all() if per <= 8 else (distinct <= 8).all()
    assert ((drawn // 8) == drawn[:, :1] // 8).all()  # every sample from its own group


def test_retarget_caps_lengths_and_refuses_impossible_shapes(rollpacker) -> None:
    capped = retarget(rollpacker, max_new_tokens=2048, seed=2)
    assert capped.samples["output_tokens"].max() == 2048
    assert capped.samples.filter(pl.col("output_tokens") == 2048)["truncated"].all()
    assert capped.max_new_tokens == 2048
    with pytest.raises(ConfigError, match="prompts_per_step must be >= 1"):
        retarget(rollpacker, prompts_per_step=-1)
    with pytest.raises(ConfigError, match="max_new_tokens must be >= 1"):
        retarget(rollpacker, max_new_tokens=0)


def test_training_time_counts_only_after_the_steps_samples_are_in() -> None:
    """The tiny RL trainers open their train span during generation (a forward pass after the previous sync):
    only the part after the step's last finish is on the critical path."""
    bundle = rltrace.open(sample_path("tiny_rl_cpu"))
    w = extract(bundle)
    spans = bundle.spans.collect().filter(pl.col("phase") == "train", pl.col("step") == 1)
    last_finish = bundle.requests.collect().filter(pl.col("step") == 1)["finish_ns"].max()
    expected = ((spans["end_ns"] - spans["start_ns"].clip(lower_bound=last_finish)) / 1e9).max()
    assert w.steps["train_s"][1] == pytest.approx(expected)
    assert spans["start_ns"].min() < last_finish  # the span did open during generation
    # every step's measured time is accounted for: phases plus the unexplained remainder
    parts = w.steps.select(pl.sum_horizontal("generation_s", "reward_s", "train_s", "optimizer_s", "weight_sync_s",
                                             "other_s"))
    assert (parts.to_series() >= w.steps["wall_s"] - 1e-9).all()


def test_the_real_recording_groups_each_prompts_samples() -> None:
    # the tiny RL example sends each prompt's 4 samples as 4 requests: the vLLM collector groups them by prompt
    w = extract(rltrace.open(sample_path("tiny_rl_cpu")))
    sizes = w.samples.group_by("step", "group").len().group_by("step").agg(pl.col("len").sort()).sort("step")
    assert sizes.rows() == [(s, [4, 4, 4, 4]) for s in range(4)]


def test_retarget_of_an_ungrouped_recording_draws_each_sample_independently(tmp_path) -> None:
    # a recording made before the collector grouped by prompt: every request its own group
    sample = rltrace.open(sample_path("tiny_rl_cpu"))
    tables = {name: sample.table(name).collect() for name in TABLES}
    tables["requests"] = tables["requests"].with_columns(pl.col("request_id").alias("group_id"))
    write_bundle(tmp_path / "ungrouped", sample.manifest, tables)
    w = extract(rltrace.open(tmp_path / "ungrouped"))
    assert set(w.samples.group_by("step", "group").len()["len"]) == {1}
    new = retarget(w, steps=4, prompts_per_step=2, samples_per_prompt=8, seed=1)
    per_prompt = new.samples.group_by("step", "group").agg(pl.col("output_tokens").n_unique())
    assert (per_prompt["output_tokens"] > 1).any()  # not one recorded sample copied 8 times


def test_select_steps_keeps_those_steps_renumbered_with_their_measured_times() -> None:
    bundle = rltrace.open(sample_path("tiny_rl_cpu"))
    whole = extract(bundle)
    odd = tuple(s for s in whole.steps["step"].to_list() if s % 2)
    part = select_steps(whole, odd)
    assert part.steps["step"].to_list() == list(range(len(odd)))
    # each step keeps what the full recording measured, its wall time included
    assert_frame_equal(part.steps.drop("step"), whole.steps.filter(pl.col("step").is_in(odd)).drop("step"))
    assert_frame_equal(part.samples.drop("step"), whole.samples.filter(pl.col("step").is_in(odd)).drop("step"))
    with pytest.raises(ConfigError, match="recorded step 99 is not in the bundle, whose steps are 0..3"):
        select_steps(whole, (1, 99))
    # a hundred steps were a list cut off before the bundle's own steps (the reason) were named
    with pytest.raises(ConfigError, match="recorded steps 5, 6, 9, 100..199 are not in the bundle, whose steps are "
                       "0..3"):
        select_steps(whole, (1, 5, 6, 9, *range(100, 200)))


def test_replaying_some_recorded_steps_replays_exactly_those() -> None:
    bundle = rltrace.open(sample_path("tiny_rl_cpu"))
    steps = extract(bundle).steps
    chosen = tuple(steps["step"].to_list()[1::2])
    prepared = from_bundle(bundle, Shape(source_steps=chosen), CostConfig())
    assert prepared.requests_frame.height == steps.filter(pl.col("step").is_in(chosen))["samples"].sum()
    run = replay(prepared, "as-recorded", ReplayConfig())
    assert run.steps["step"].to_list() == list(range(len(chosen)))
    assert run.metrics["samples"] == prepared.requests_frame.height


@pytest.mark.parametrize(
    ("sample", "shape", "kinds"),
    [
        ("streamrl_qwen32b", Shape(), ("H20", "H800")),  # as recorded
        ("streamrl_qwen32b", Shape(gpu="H100"), ("H100", "H100")),
        ("streamrl_qwen32b", Shape(gen_gpu="H800"), ("H800", "H800")),
        ("streamrl_qwen32b", Shape(gpu="H100", train_gpu="B200"), ("H100", "B200")),  # a pool's kind overrides gpu
        ("tiny_rl_cpu", Shape(gpu="cpu"), ("cpu", "cpu")),  # the recorded device, though no catalog GPU
    ],
)
def test_each_pool_takes_its_own_gpu_kind(sample: str, shape: Shape, kinds: tuple[str, str]) -> None:
    cluster = from_bundle(rltrace.open(sample_path(sample)), shape, CostConfig()).cluster
    assert (cluster.gen_gpu, cluster.train_gpu) == kinds


def test_a_requested_gpu_kind_must_be_in_the_catalog() -> None:
    with pytest.raises(ConfigError, match="unknown GPU kind 'cpu'"):
        from_bundle(rltrace.open(sample_path("streamrl_qwen32b")), Shape(train_gpu="cpu"), CostConfig())


def test_another_model_brings_its_own_sync_and_collective_volumes() -> None:
    """``--model``: the recorded phase times and volumes belonged to the recorded model. A sync delivers a copy of the
    new model's weights, and the recorded training collectives scale by the parameters they carry."""
    bundle = rltrace.open(sample_path("tiny_rl_cpu"))
    recorded = from_bundle(bundle, Shape(gpu="H100"), CostConfig()).jobs[0]
    other = from_bundle(bundle, Shape(gpu="H100", model="Qwen2.5-7B"), CostConfig()).jobs[0]
    qwen, tiny = get_model("Qwen2.5-7B"), from_info(bundle.manifest.model)  # type: ignore[arg-type]
    assert recorded.sync_bytes is not None and recorded.sync_bytes[0] < 1e7  # the tiny Llama's 1.8 MB
    assert other.sync_bytes == [float(qwen.weight_bytes)] * len(other.sync_bytes)
    assert recorded.collective_bytes is not None and other.collective_bytes is not None
    ratio = qwen.params / tiny.params  # another model resamples the workload: each step keeps the recorded median
    median = float(np.median(recorded.collective_bytes))
    assert other.collective_bytes == pytest.approx([median * ratio] * len(other.collective_bytes), rel=1e-5)
