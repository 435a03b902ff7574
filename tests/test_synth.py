"""Synthetic workloads: determinism, length distributions, and the timing model's invariants."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers import require_shared, small_config

import rltrace
from rltrace.catalog import get_model
from rltrace.errors import ConfigError
from rltrace.files import sha256_of
from rltrace.synth import LengthConfig, length_dist, load_config, memory_notes, presets, synthesize, unused
from rltrace.synth.config import AgenticConfig, SynthConfig
from rltrace.synth.distributions import Empirical


def test_same_seed_same_bytes_other_seed_other_lengths(tmp_path: Path) -> None:
    paths = [
        rltrace.write_bundle(tmp_path / name, r.manifest, r.tables)
        for name, r in (("a", synthesize(small_config(seed=5))), ("b", synthesize(small_config(seed=5))))
    ]
    files = sorted(p.name for p in paths[0].iterdir())
    for name in files:
        assert (paths[0] / name).read_bytes() == (paths[1] / name).read_bytes(), name
    other = synthesize(small_config(seed=6)).tables["requests"]["output_tokens"]
    assert other.to_list() != rltrace.open(paths[0]).requests.collect()["output_tokens"].to_list()


BIG = ["steps=1", "prompts_per_step=5000", "samples_per_prompt=4", "max_new_tokens=100000000", "generation.gpus=8"]

DIST_CASES = [
    # output distribution settings; tolerance on p10/p50/p90 and on p99 (relative)
    (["output.kind=lognormal", "output.median=600.0", "output.sigma=1.0"], 0.04, 0.08),
    (["output.kind=lognormal", "output.median=300.0", "output.sigma=0.5"], 0.03, 0.05),
    (["output.kind=lognormal_pareto", "output.median=575.0", "output.sigma=1.0", "output.tail_fraction=0.03",
      "output.tail_alpha=1.0"], 0.04, 0.10),
    (["output.kind=lognormal_pareto", "output.median=1200.0", "output.sigma=0.9", "output.tail_fraction=0.1",
      "output.tail_alpha=1.5"], 0.04, 0.10),
]


@pytest.mark.parametrize(("settings", "tol", "tol_p99"), DIST_CASES)
def test_percentiles_match_the_requested_distribution(settings: list[str], tol: float, tol_p99: float) -> None:
    cfg = load_config(sets=[*BIG, *settings], seed=1)
    lengths = synthesize(cfg).tables["requests"]["output_tokens"].to_numpy()
    dist = length_dist(cfg.output)
    qs = np.array([0.1, 0.5, 0.9, 0.99])
    expected, got = dist.quantile(qs), np.quantile(lengths, qs)
    rel = np.abs(got / expected - 1)
    assert (rel[:3] < tol).all(), (expected, got)
    assert rel[3] < tol_p99, (expected, got)
    if cfg.output.kind == "lognormal":
        assert abs(np.median(lengths) / cfg.output.median - 1) < tol


def test_truncation_at_max_new_tokens_matches_the_tail_mass() -> None:
    cfg = load_config(
        sets=[*BIG[:-2], "max_new_tokens=4096", "output.kind=lognormal_pareto", "output.median=600.0",
              "output.tail_fraction=0.05", "output.tail_alpha=1.0"],
        seed=2,
    )
    req = synthesize(cfg).tables["requests"]
    capped = req.filter(pl.col("output_tokens") == 4096)
    assert set(capped["finish_reason"]) == {"length"}
    assert req["output_tokens"].max() == 4096
    expected = 1 - float(length_dist(cfg.output).cdf(np.array([4096.0]))[0])
    assert abs(capped.height / req.height - expected) < 0.25 * expected


def test_samples_of_one_prompt_are_correlated_as_requested() -> None:
    cfg = load_config(sets=[*BIG[:-1], "samples_per_prompt=2", "output.group_correlation=0.6"], seed=3)
    logs = np.log(synthesize(cfg).tables["requests"]["output_tokens"].to_numpy()).reshape(-1, 2)
    r = np.corrcoef(logs[:, 0], logs[:, 1])[0, 1]
    assert abs(r - 0.6) < 0.05


def test_empirical_lengths_follow_the_azure_code_trace() -> None:
    # Azure LLM inference trace 2023, code (Azure/AzurePublicDataset, CC-BY-4.0): see ../shared/data/README.md
    csv = require_shared("requests/azure_llm_2023_code.csv")
    observed = pl.read_csv(csv)["GeneratedTokens"].to_numpy()
    cfg = load_config(
        sets=[*BIG, "output.kind=empirical", f"output.path='{csv}'", "output.column=GeneratedTokens"], seed=4
    )
    lengths = synthesize(cfg).tables["requests"]["output_tokens"].to_numpy()
    for q in (0.5, 0.9):
        assert abs(np.quantile(lengths, q) / np.quantile(np.maximum(observed, 1), q) - 1) < 0.06
    assert lengths.max() <= observed.max()


def test_empirical_source_errors_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        Empirical.from_file(tmp_path / "none.csv", "x")
    (tmp_path / "t.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="no column 'x'"):
        Empirical.from_file(tmp_path / "t.csv", "x")
    (tmp_path / "neg.csv").write_text("x\n-1\n")
    with pytest.raises(ConfigError, match="non-negative"):
        Empirical.from_file(tmp_path / "neg.csv", "x")
    (tmp_path / "empty.csv").write_text("x\n")  # it said "must hold non-negative numbers"
    with pytest.raises(ConfigError, match="column 'x' holds no values"):
        Empirical.from_file(tmp_path / "empty.csv", "x")


def test_a_config_files_relative_paths_are_read_from_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # as a described job's are: "ok.csv" beside the file was looked for in the working directory
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "lengths.csv").write_text("len\n100\n200\n")
    (tmp_path / "job" / "synth.toml").write_text(
        'steps = 1\n[output]\nkind = "empirical"\npath = "lengths.csv"\ncolumn = "len"\n')
    monkeypatch.chdir(tmp_path)
    config = load_config(path="job/synth.toml")
    assert Path(config.output.path).resolve() == (tmp_path / "job" / "lengths.csv").resolve()
    result = synthesize(config)
    assert set(result.tables["requests"]["output_tokens"].to_list()) <= {100, 200}
    # the same file from its own folder, or a copy of both elsewhere: the same manifest and run id (they held
    # "job/lengths.csv", then "lengths.csv", and so two run ids); the file by name and the digest of its bytes
    monkeypatch.chdir(tmp_path / "job")
    again = synthesize(load_config(path="synth.toml"))
    assert again.manifest == result.manifest and again.manifest.run_id == result.manifest.run_id
    shutil.copytree(tmp_path / "job", tmp_path / "elsewhere")
    moved = synthesize(load_config(path=str(tmp_path / "elsewhere" / "synth.toml")))
    assert moved.manifest == result.manifest
    output = result.manifest.extra["synth"]["output"]
    assert output["path"] == "lengths.csv" and output["path_sha256"] == sha256_of(tmp_path / "job" / "lengths.csv")


@pytest.mark.parametrize("sets, notes", [
    (["output.tail_fraction=0.5", "output.tail_alpha=0.5"],
     [("output.tail_fraction, output.tail_alpha unused: read by output.kind = 'lognormal_pareto' only (output.kind is "
      "'lognormal')")]),
    (["prompt.path='x.csv'"], [("prompt.path unused: read by prompt.kind = 'empirical' only (prompt.kind is "
                               "'lognormal')")]),
    (["output.kind='lognormal_pareto'", "output.tail_fraction=0.05"], []),
    (["output.scale=2"], ["output.scale unused: read by output.kind = 'empirical' only (output.kind is 'lognormal')"]),
    (["output.kind='empirical'", "output.path='x.csv'", "output.column='n'", "output.median=900"],
     [("output.median unused: read by output.kind = 'lognormal' or 'lognormal_pareto' only (output.kind is "
      "'empirical')")]),
    (["training.tp=2"], [("training.tp = 2 is kept in the manifest only: the synthetic trainer is one FSDP rank per "
                         "GPU (its collectives and times are those of tp = 1)")]),
    ([], []),
])
def test_length_keys_the_kind_does_not_read_are_noted(sets: list[str], notes: list[str]) -> None:
    # the output was byte-identical with and without them, and nothing said so
    assert unused(load_config(sets=sets)) == notes


def test_engine_slots_are_never_oversubscribed() -> None:
    cfg = small_config("timing.max_num_seqs=4", "prompts_per_step=16")
    req = synthesize(cfg).tables["requests"]
    waited = req.filter(pl.col("scheduled_ns") > pl.col("arrival_ns")).height
    assert waited > 0
    for (_, _), group in req.group_by("step", "engine"):
        start = np.sort(group["scheduled_ns"].to_numpy())
        end = np.sort(group["finish_ns"].to_numpy())
        running = np.searchsorted(start, start, side="right") - np.searchsorted(end, start, side="right")
        assert running.max() <= 4


def test_phases_follow_each_other_within_and_across_steps() -> None:
    cfg = small_config()
    result = synthesize(cfg)
    spans = result.tables["spans"]
    order = ["generate", "reward", "reference", "train", "optimizer", "weight_sync"]
    bounds = (
        spans.group_by("step", "phase")
        .agg(pl.col("start_ns").min().alias("start"), pl.col("end_ns").max().alias("end"))
        .sort("step")
    )
    previous_end = 0
    for step in range(cfg.steps):
        rows = {r["phase"]: r for r in bounds.filter(pl.col("step") == step).iter_rows(named=True)}
        assert set(rows) == set(order)
        assert rows["generate"]["start"] >= previous_end
        for a, b in itertools.pairwise(order):
            assert rows[a]["end"] <= rows[b]["start"], (step, a, b)
        previous_end = rows["weight_sync"]["end"]


def test_weight_syncs_move_the_whole_model_to_every_engine_each_step() -> None:
    cfg = small_config()
    result = synthesize(cfg)
    syncs = result.tables["weight_syncs"]
    model = get_model(cfg.model)
    engines = cfg.generation.gpus // cfg.generation.tp
    assert syncs.height == cfg.steps * engines
    assert set(syncs["bytes"]) == {model.params * 2}
    assert set(syncs["tensors"]) == {model.tensors}
    assert sorted(set(syncs["version"])) == list(range(1, cfg.steps + 1))


def test_fsdp_collectives_sit_inside_the_train_span() -> None:
    cfg = small_config()
    result = synthesize(cfg)
    model = get_model(cfg.model)
    coll = result.tables["collectives"]
    assert coll.height == cfg.steps * cfg.training.gpus * 3 * model.layers
    train = result.tables["spans"].filter(pl.col("phase") == "train")
    joined = coll.with_columns(pl.format("trainer/rank{}", "rank").alias("actor")).join(
        train.select("step", "actor", pl.col("start_ns").alias("t0"), pl.col("end_ns").alias("t1")),
        on=["step", "actor"],
    )
    assert joined.height == coll.height
    assert joined.filter((pl.col("start_ns") < pl.col("t0")) | (pl.col("end_ns") > pl.col("t1"))).height == 0
    seqs = coll.filter(pl.col("rank") == 0)["seq"].to_numpy()
    assert (np.diff(seqs) > 0).all()
    gathers = coll.filter(pl.col("op") == "all_gather")
    assert (gathers["bytes_out"] == gathers["bytes_in"] * cfg.training.gpus).all()


BAD_CONFIGS = [
    (["steps=0"], "steps must be >= 1"),
    (["output.kind=weird"], "output.kind 'weird' is unknown"),
    (["generation.gpus=3", "generation.tp=2"], "generation: gpus (3) must be a positive multiple of tp (2)"),
    (["timing.train_mfu=1.5"], "efficiencies and MFUs must be in (0, 1]"),
    (["output.group_correlation=1.0"], "group_correlation must be in [0, 1)"),
    (["steps='many'"], "synth.steps: expected an integer"),
    (["output.median=-5"], "output: median and sigma must be > 0"),
    (["output.kind=empirical"], "output: empirical lengths need path and column"),
    (["nosuch=1"], "unknown key 'nosuch'"),
    (["model=GPT-9"], "unknown model 'GPT-9'"),
    (["agentic.turns=0"], "agentic: turns must be >= 1"),
    (["agentic.env_median_s=-1"], "agentic: turns must be >= 1"),
    # a quantile outside (0, 1) was clipped: 1.5 started the tail near 2.2M tokens, every tail draw at the cap
    (["output.tail_fraction=0.2", "output.tail_start_quantile=1.5"], "tail_start_quantile must be in (0, 1), got 1.5"),
    (["prompt.tail_start_quantile=0"], "prompt: tail_start_quantile must be in (0, 1)"),
    # times past int64 nanoseconds: a RuntimeWarning of numpy's cast, then a negative arrival_ns blamed on the table
    (["timing.reward_s_per_sample=1e9", "steps=2"], "synthetic times reach 1.02e+12 s from the run's start"),
    (["timing.sync_gbps=1e-12", "steps=2"], "or a rate (timing.sync_gbps, network_gbps, an MFU or efficiency) too"),
    (["timing.train_mfu=1e-300", "steps=2"], "synthetic times reach 9.99e+300 s"),
    (["timing.start_ns=-5"], "timing.start_ns must be >= 0, got -5"),
    # it passed the check and the bundle's validator refused its reward span: "end_ns=... is before start_ns"
    (["timing.reward_s_per_sample=-1"], "step_gap_s and reward_s_per_sample >= 0"),
    (["timing.start_ns=9223372036854775000"], "timing.start_ns=9,223,372,036,854,775,000 is above the limit"),
]


@pytest.mark.filterwarnings("error")  # one clear error, not a numpy warning before it
@pytest.mark.parametrize(("sets", "fragment"), BAD_CONFIGS)
def test_impossible_configs_are_refused(sets: list[str], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        synthesize(load_config(sets=sets))
    assert fragment in str(info.value)


def test_presets_load_and_preset_or_config_not_both(tmp_path: Path) -> None:
    assert presets() == ["rollart", "rollpacker", "streamrl"]
    for name in presets():
        assert load_config(preset=name).check()
    with pytest.raises(ConfigError, match="either --preset or --config"):
        load_config(preset="rollpacker", path=tmp_path / "x.toml")


def test_length_config_defaults_are_a_valid_lognormal() -> None:
    dist = length_dist(LengthConfig())
    assert abs(float(dist.quantile(np.array([0.5]))[0]) - 600.0) < 1e-6


@pytest.mark.filterwarnings("error")  # numpy's overflow warnings went to stderr before a valid bundle
@pytest.mark.parametrize("sets", [["output.tail_fraction=0.5", "output.tail_alpha=0.01"], ["output.tail_alpha=1e-300"],
                                  ["output.tail_start_quantile=1e-300"]])
def test_an_extreme_pareto_tail_draws_lengths_at_the_cap_without_a_warning(sets: list[str]) -> None:
    cfg = load_config(sets=["steps=1", "prompts_per_step=8", "output.kind='lognormal_pareto'", *sets])
    out = synthesize(cfg).tables["requests"]["output_tokens"].to_numpy()
    assert out.min() >= 1 and out.max() <= cfg.max_new_tokens
    if "output.tail_fraction=0.5" in sets:  # half the draws from a tail that heavy: at the cap
        assert (out == cfg.max_new_tokens).mean() > 0.3
    else:  # no tail (tail_fraction 0): the lognormal body alone, whatever the tail's shape (every draw went to
        # the cap when alpha 1e-300 made the search's bound infinite)
        body = load_config(sets=["steps=1", "prompts_per_step=8", "output.kind='lognormal'"])
        plain = synthesize(body).tables["requests"]["output_tokens"].to_numpy()
        assert np.abs(out - plain).max() <= 1


@pytest.mark.parametrize(("tail", "alpha"), [(0.03, 1.0), (0.1, 1.5), (0.01, 0.8)])
def test_mixture_quantile_inverts_its_cdf(tail: float, alpha: float) -> None:
    from rltrace.synth.distributions import LognormalPareto

    dist = LognormalPareto(610.0, 1.0, tail, alpha)
    u = np.concatenate([np.random.default_rng(0).random(20_000), [1e-9, 1e-6, 1 - 1e-6, 1 - 1e-10]])
    err = np.abs(dist.cdf(dist.quantile(u)) - u) / np.minimum(u, 1 - u)
    assert err.max() < 1e-3


def test_an_moe_trains_and_prefills_at_its_active_parameters() -> None:
    """A token runs through top-k of an MoE's routed experts: prefill and training FLOPs count the active
    parameters (Qwen3-30B-A3B: 3.3B of 30.5B), the optimizer and the weight sync all of them."""
    from rltrace.catalog import get_gpu
    from rltrace.synth.timing import costs

    moe, dense = get_model("Qwen3-30B-A3B"), get_model("Qwen2.5-7B")
    cfg = small_config("model=\"Qwen3-30B-A3B\"")
    gpu, gen = get_gpu(cfg.training.device), get_gpu(cfg.generation.device)
    c = costs(cfg, moe, gen, gpu)
    flops = cfg.training.gpus * gpu.flops * cfg.timing.train_mfu
    assert c.train_s_per_token == pytest.approx(6 * moe.active_params / flops)
    assert c.forward_s_per_token == pytest.approx(2 * moe.active_params / flops)
    assert moe.active_params < moe.params / 8
    # FSDP gathers a whole block, experts and all: 48 blocks of 30.5B less the embeddings
    block = (moe.params - moe.embedding_params - moe.hidden) // moe.layers
    assert c.shard_elems == -(-block // cfg.training.gpus) and block > 10 * moe.layer_params
    assert c.prefill_s_per_token == pytest.approx(
        2 * moe.active_params / (cfg.generation.tp * gen.flops * cfg.timing.prefill_mfu))
    assert costs(cfg, dense, gen, gpu).train_s_per_token == pytest.approx(
        6 * dense.params / flops)  # a dense model's every parameter is active


def test_the_largest_environment_spread_keeps_every_timestamp_in_range() -> None:
    """env_median_s just under a day at sigma 4: an uncapped tail draw overflowed the int64 nanoseconds."""
    cfg = SynthConfig(steps=1, prompts_per_step=32, samples_per_prompt=16,
                      agentic=AgenticConfig(turns=3, env_median_s=86_000.0, env_sigma=4.0, observation_sigma=4.0))
    requests = synthesize(cfg.check()).tables["requests"]
    assert requests["finish_ns"].min() >= 0 and requests["prompt_tokens"].max() < 2**31


@pytest.mark.parametrize("slots", [4, 1000])  # fewer slots than an engine's trajectories, and more
def test_agentic_turns_share_an_engines_running_slots(slots: int) -> None:
    """Each turn was queued as its own wave: 64 trajectories of 4 turns on an engine of 4 slots ran 15 at once
    (406 at the default 256 with 512 trajectories)."""
    cfg = small_config("steps=1", "prompts_per_step=32", f"timing.max_num_seqs={slots}", "agentic.turns=4")
    requests = synthesize(cfg).tables["requests"].sort("request_id")
    for (engine,), rows in requests.group_by("engine"):
        start, end = rows["scheduled_ns"].to_numpy(), rows["finish_ns"].to_numpy()
        events = np.concatenate([np.stack([start, np.ones_like(start)], 1), np.stack([end, -np.ones_like(end)], 1)])
        running = np.cumsum(events[np.lexsort((events[:, 1], events[:, 0]))][:, 1])
        assert running.max() <= slots, engine
        assert (rows["scheduled_ns"] >= rows["arrival_ns"]).all()
    turns = requests.with_columns(pl.col("request_id").str.replace(r":\d+$", "").alias("trajectory"))
    steps = turns.sort("trajectory", "turn").group_by("trajectory", maintain_order=True).agg(
        (pl.col("arrival_ns").slice(1) >= pl.col("finish_ns").slice(0, pl.len() - 1)).all().alias("after"))
    assert steps["after"].all()  # a turn arrives after the one it follows finished
    waited = (requests["scheduled_ns"] > requests["arrival_ns"]).sum()
    assert (waited > 0) == (slots < 64)


@pytest.mark.parametrize("sets, said", [
    (["model=Llama-3-70B"], [("Llama-3-70B's weights take 141 GB per generation GPU at tp 1, more than one H100 "
                              "holds (85 GB)"), "weights and Adam state take 159 GB per training GPU over 8 FSDP"]),
    # 90.7 GB a rank, as estimate counts it (weights too, not Adam's 16 bytes a parameter alone)
    (["model=Llama-3-70B", "generation.tp=2", "training.gpus=14"], ["take 91 GB per training GPU over 14 FSDP"]),
    (["model=Llama-3-70B", "generation.tp=2", "training.gpus=16"], []),
    ([], []),
])
def test_a_model_no_pool_can_hold_is_noted(sets: list[str], said: list[str]) -> None:
    """A 70B model on one H100 per engine was synthesized with plausible times and no word (estimate says it
    does not fit)."""
    notes = memory_notes(load_config(sets=sets))
    assert len(notes) == len(said) and all(s in n for s, n in zip(said, notes)), notes
