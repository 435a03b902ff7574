"""`rltrace estimate validate`: the shipped public measurements, the TPOT closed form, and bad input."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import subprocess
from pathlib import Path

import polars as pl
import pytest
from helpers import run_cli
from rltrace.replay.costmodels.benchmark import serving_benchmark
from rltrace.replay.costmodels.roofline import Roofline
from rltrace.replay.costmodels.track_record import track_record
from rltrace.replay.costmodels.validation import (
    GENERATION_CSV,
    HELD_OUT_CSV,
    KV_CACHE_CSV,
    OFFLINE_CSV,
    SHIPPED,
    TRAINING_CSV,
    TRAINING_HELD_OUT_CSV,
    load_points,
    summarize,
    validate,
)

from rltrace.catalog import get_gpu, get_model
from rltrace.errors import ConfigError

# owner/repo@commit, path; or a GitHub pull request of owner/repo, by number
SOURCE = re.compile(r"^[\w.-]+/[\w.-]+(@[0-9a-f]{40}, \S+| pull request #\d+ )")


def test_the_shipped_sets_meet_the_issue_bar_and_cite_every_row() -> None:
    kind, gen = load_points(GENERATION_CSV)
    assert kind == "generation" and gen.height >= 30
    # "not stated" where so
    assert gen["engine"].is_in(["vllm", "sglang"]).all() and gen["engine_version"].is_not_null().all()
    assert gen["gpu"].n_unique() >= 3
    assert all(SOURCE.match(s) for s in gen["source"]), "every point names repository@commit and path"
    moe = [m for m in gen["model"].unique() if getattr(get_model(m), "experts", 0) > 0]
    assert moe, "at least one mixture-of-experts model"
    big = gen.filter(pl.col("tp") > 1)["model"].unique()
    assert any(get_model(m).params >= 65e9 for m in big), "a 70B-class model at TP > 1"
    kind, train = load_points(TRAINING_CSV)
    assert kind == "training" and train.height >= 10
    kind, offline = load_points(OFFLINE_CSV)
    assert kind == "offline"
    assert all(SOURCE.match(s) for s in [*train["source"], *offline["source"]])
    # one measurement is one point: the source lists some runs twice (an R1 id and a V3 id, same figures)
    measured = [c for c in gen.columns if c not in ("source", "model_as_stated")]
    assert gen.select(measured).is_unique().all()


def test_a_point_is_predicted_through_the_models_public_api() -> None:
    """validate adds no formula of its own: a TPOT point is serving_benchmark's figure for that setup."""
    results = validate([GENERATION_CSV])
    tpot = results.filter(pl.col("set") == "generation TPOT").with_row_index()
    index = int(tpot.filter(pl.col("predicted").is_not_null())["index"][0])  # the first point the model prices
    first = pl.read_csv(GENERATION_CSV).row(index, named=True)
    model = get_model(first["model"])
    if first["weight_dtype"] == "fp8":
        model = dataclasses.replace(model, dtype_bytes=1)
    roof = Roofline(model=model, gpu=get_gpu(first["gpu"]), tp=first["tp"], ep=first["ep"] if model.is_moe else 1)
    expected = serving_benchmark(roof, concurrency=first["concurrency"], prompt_tokens=first["prompt_tokens"],
                                 output_tokens=first["output_tokens"], engine=first["engine"])
    row = tpot.row(index, named=True)
    assert math.isclose(row["predicted"], 1e3 * expected.tpot_s, rel_tol=1e-12)
    assert math.isclose(row["error"], (row["predicted"] - first["tpot_ms"]) / first["tpot_ms"], rel_tol=1e-12)


@pytest.mark.slow  # over 5 s on 2 cores
def test_validate_cli_reports_every_point_by_slice(tmp_path: Path) -> None:
    result = run_cli("estimate", "validate", "--by", "gpu,model", "--json", "--points", str(tmp_path / "p.csv"),
                     "--backend", "roofline", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    overall = {row["set"]: row for row in out["overall"]}
    gen, held_out, offline, offline_held_out, train, train_held_out, kv = (
        pl.read_csv(p, infer_schema_length=10_000) for p in SHIPPED)
    # DeepSeek-V3's FP8 weights on 4 B200s (SGLang ran them) leave no KV cache in vLLM's 0.9 share once its
    # activation peak and buffers are counted: listed with the reason, not priced (TPOT and TTFT of 4 points)
    assert {(s["gpu"], s["model"]) for s in out["skipped"]} == {("B200", "DeepSeek-V3")}
    assert len(out["skipped"]) == 8 and all("leave no KV cache" in s["skipped"] for s in out["skipped"])
    served = gen.height - 4
    assert overall["generation TPOT"]["points"] == overall["generation TTFT"]["points"] == served
    # the held-out points (collected after the model was set) are reported apart, every one priced
    assert overall["generation TPOT, held out"]["points"] == held_out.height
    assert overall["offline output tokens/s"]["points"] == offline.height
    assert overall["offline output tokens/s, held out"]["points"] == offline_held_out.height
    assert overall["training tokens/s/GPU"]["points"] == train.height
    assert overall["training tokens/s/GPU, held out"]["points"] == train_held_out.height
    for quantity in ("KV cache tokens", "weights GiB", "activation peak GiB", "non-torch GiB"):
        assert overall[f"vLLM {quantity}"]["points"] == kv.height
    assert overall["vLLM KV cache tokens"]["median_abs_error"] < 0.01  # the memory split, from vLLM's own logs
    assert all(0 <= row["median_abs_error"] <= row["worst_abs_error"] for row in out["slices"])
    total = (2 * (gen.height + held_out.height) + offline.height + offline_held_out.height + train.height
             + train_held_out.height + 4 * kv.height)
    assert sum(r["points"] for r in out["slices"]) == total - len(out["skipped"])
    points = pl.read_csv(tmp_path / "p.csv")
    assert points.height == total and points["predicted"].is_null().sum() == len(out["skipped"])
    # the same errors the library computes (the CLI adds nothing of its own)
    mine = summarize(validate(), [])
    assert math.isclose(mine.filter(pl.col("set") == "generation TPOT")["median_abs_error"][0],
                        overall["generation TPOT"]["median_abs_error"], rel_tol=1e-9)
    text = run_cli("estimate", "validate", "--backend", "roofline", cwd=tmp_path)
    assert text.returncode == 0 and "generation TPOT" in text.stdout and "By gpu, model, dtype" in text.stdout


def test_a_users_own_csv_is_checked_and_unknown_models_are_listed(tmp_path: Path) -> None:
    mine = tmp_path / "mine.csv"
    pl.DataFrame({
        "source": ["me@" + "0" * 40 + ", run.log"] * 2, "engine": ["vllm"] * 2, "model": ["Llama-2-7B", "NoSuchLM"],
        "gpu": ["H100"] * 2, "tp": [1, 1], "ep": [1, 1], "weight_dtype": ["bf16"] * 2, "concurrency": [16, 16],
        "prompt_tokens": [512, 512], "output_tokens": [256, 256], "tpot_ms": [9.0, 9.0], "ttft_ms": [50.0, 50.0],
    }).write_csv(mine)
    result = run_cli("estimate", "validate", "--backend", "roofline", "--data", str(mine), "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert [r["points"] for r in out["overall"]] == [1, 1]  # TPOT and TTFT of the known model
    assert [s["model"] for s in out["skipped"]] == ["NoSuchLM"] * 2 and "NoSuchLM" in out["skipped"][0]["skipped"]


def test_a_point_whose_weights_leave_no_kv_cache_is_listed_not_priced(tmp_path: Path) -> None:
    # DeepSeek-V3's 671 GB of FP8 weights over 2 B200s: 336 GB a GPU, above 0.9 of its 192 GB
    mine = tmp_path / "mine.csv"
    pl.DataFrame({
        "source": ["me@" + "0" * 40 + ", run.log"], "engine": ["sglang"], "model": ["DeepSeek-V3"], "gpu": ["B200"],
        "tp": [2], "ep": [1], "weight_dtype": ["fp8"], "concurrency": [4], "prompt_tokens": [1024],
        "output_tokens": [256], "tpot_ms": [20.0], "ttft_ms": [200.0],
    }).write_csv(mine)
    result = run_cli("estimate", "validate", "--backend", "roofline", "--data", str(mine), "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["overall"] == [] and len(out["skipped"]) == 2  # its TPOT and its TTFT
    why = "DeepSeek-V3 on 2 x B200: the weights, activations and buffers leave no KV cache within 0.9 of GPU memory"
    assert {s["skipped"] for s in out["skipped"]} == {why}


def _one_point(tmp_path: Path, **settings: object) -> dict:
    """One DeepSeek-V3 point on 8 B200 (SGLang, 8k in, 1k out, 16 running) with ``settings`` as extra columns: its
    TPOT and TTFT as the CLI prices them."""
    mine = tmp_path / "mine.csv"
    pl.DataFrame({
        "source": ["me@" + "0" * 40 + ", run.log"], "engine": ["sglang"], "model": ["DeepSeek-V3"], "gpu": ["B200"],
        "tp": [8], "ep": [1], "weight_dtype": ["fp8"], "concurrency": [16], "prompt_tokens": [8192],
        "output_tokens": [1024], "tpot_ms": [20.0], "ttft_ms": [500.0], **{k: [v] for k, v in settings.items()},
    }).write_csv(mine)
    result = run_cli("estimate", "validate", "--backend", "roofline", "--data", str(mine), "--json", "--by", "",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return {r["set"]: r for r in json.loads(result.stdout)["overall"]}


def test_a_points_stated_engine_settings_reach_the_model(tmp_path: Path) -> None:
    base = _one_point(tmp_path)
    tpot = base["generation TPOT"]["median_error"]
    # an FP8 cache reads half the KV bytes a decode step: faster
    assert _one_point(tmp_path, kv_dtype="fp8")["generation TPOT"]["median_error"] < tpot
    # a larger chunk (SGLang's chunked-prefill-size) prefills the wave in fewer, fuller steps: sooner
    assert _one_point(tmp_path, max_num_batched_tokens=32768)["generation TTFT"]["median_error"] < \
        base["generation TTFT"]["median_error"]
    # 4 running requests at most: the other 12 queue, and the running ones decode a smaller batch
    capped = _one_point(tmp_path, max_num_seqs=4)
    assert capped["generation TPOT"]["median_error"] < tpot
    assert capped["generation TTFT"]["median_error"] > base["generation TTFT"]["median_error"]
    # a split names the set the point is reported in
    assert set(_one_point(tmp_path, split="held out")) == {"generation TPOT, held out", "generation TTFT, held out"}


def test_a_larger_memory_fraction_lets_a_tight_point_fit(tmp_path: Path) -> None:
    # DeepSeek-V3 on 4 B200 (168 GB of FP8 weights a GPU): no KV cache within 0.9, some within SGLang's stated 0.95
    def four(util: float | None) -> subprocess.CompletedProcess[str]:
        mine = tmp_path / "four.csv"
        row = {"source": ["me"], "engine": ["sglang"], "model": ["DeepSeek-V3"], "gpu": ["B200"], "tp": [4], "ep": [1],
               "weight_dtype": ["fp8"], "concurrency": [1], "prompt_tokens": [7372], "output_tokens": [921],
               "tpot_ms": [8.0], "ttft_ms": [400.0], "kv_dtype": ["fp8"]}
        pl.DataFrame(row | ({"gpu_memory_utilization": [util]} if util else {})).write_csv(mine)
        return run_cli("estimate", "validate", "--backend", "roofline", "--data", str(mine), "--json", cwd=tmp_path)

    refused = json.loads(four(None).stdout)["skipped"]
    assert len(refused) == 2 and all(s["skipped"].endswith("within 0.9 of GPU memory") for s in refused)
    fits = json.loads(four(0.95).stdout)
    assert fits["skipped"] == [] and {r["points"] for r in fits["overall"]} == {1}


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    junk = tmp_path / "junk.csv"
    junk.write_text("a,b\n1,2\n")
    own_training = tmp_path / "dtype.csv"
    own_training.write_text("source,framework,model,gpu,gpus,tp,pp,ep,seq_len,global_batch,precision,tokens_per_s_per_gpu\n"
                         "x,y,Llama-2-7B,H100,8,1,1,1,4096,8,bf16,100\n")
    words = tmp_path / "words.csv"
    words.write_text(own_training.read_text().replace(",H100,8,", ",H100,eight,"))
    cases = {
        ("--data", str(junk)): "not a validation set",
        ("--data", str(words)): "line 2: gpus must be a number, got 'eight'",
        ("--data", str(tmp_path / "missing.csv")): "missing.csv: no such file",
        ("--data", str(tmp_path)): "a folder, expected a file",
        ("--by", "colour"): "cannot slice by colour",
        ("--points", str(tmp_path / "no" / "dir" / "p.csv")): "does not exist",  # before the validation runs
    }
    for args, message in cases.items():
        result = run_cli("estimate", "validate", *args, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert run_cli("estimate", "validate", "--backend", "roofline", "--data", str(own_training),
                   cwd=tmp_path).returncode == 0
    decode = run_cli("estimate", "decode", "--gpu", "H100", cwd=tmp_path)
    assert decode.returncode == 2 and "needs --model and --gpu" in decode.stderr


@pytest.mark.parametrize(("edit", "outcome"), [
    ((",8,1,1,1,4096,8,bf16,100", ",0,1,1,1,4096,8,bf16,100"), "gpus must be at least 1, got 0"),  # ZeroDivisionError
    ((",8,1,1,1,4096,8,bf16,100", ",8,1,1,1,-1,8,bf16,100"), "seq_len must be at least 1, got -1"),  # was scored
    ((",8,1,1,1,4096,8,bf16,100", ",8,1,1,1,4096,8,bf16,0"), ("line 2: tokens_per_s_per_gpu must be a positive "
                                                            "measurement, got 0")),  # was an infinite error
])
def test_a_training_point_without_work_or_measurement_is_refused(tmp_path: Path, edit: tuple[str, str],
                                                                 outcome: str) -> None:
    data = tmp_path / "mine.csv"
    data.write_text(("source,framework,model,gpu,gpus,tp,pp,ep,seq_len,global_batch,precision,tokens_per_s_per_gpu\n"
                     "x,y,Llama-2-7B,H100,8,1,1,1,4096,8,bf16,100\n").replace(*edit))
    result = run_cli("estimate", "validate", "--backend", "roofline", "--data", str(data), cwd=tmp_path)
    if "measurement" in outcome:  # the file's own data is wrong: refused, one line
        assert result.returncode == 2 and result.stderr.strip().splitlines() == [f"rltrace: error: {data}: {outcome}"]
    else:  # a point the model cannot price: skipped, with its reason
        assert result.returncode == 0 and "(no point predicted)" in result.stdout and outcome in result.stdout, \
            result.stdout + result.stderr


@pytest.mark.parametrize(("rate", "outcome"), [
    ("abc", "line 2: request_rate must be a number, got 'abc'"),  # not a number: the file is refused, one line
    ("0", "request_rate must be > 0"),  # a number the model refuses: that point is skipped, with its reason
])
def test_a_bad_offline_row_is_one_line_or_a_skipped_point(tmp_path: Path, rate: str, outcome: str) -> None:
    data = tmp_path / "mine.csv"
    data.write_text("source,engine,model,gpu,tp,ep,weight_dtype,prompt_tokens,output_tokens,requests,"
                    f"output_tokens_per_s,request_rate\nx,vllm,Llama-3-8B,H100,1,1,bf16,256,256,100,1000,{rate}\n")
    result = run_cli("estimate", "validate", "--backend", "roofline", "--data", str(data), cwd=tmp_path)
    if rate == "abc":
        assert result.returncode == 2 and result.stderr.strip().splitlines() == [f"rltrace: error: {data}: {outcome}"]
    else:
        assert result.returncode == 0 and "(no point predicted)" in result.stdout and outcome in result.stdout


@pytest.mark.parametrize(("column", "value", "message"), [
    ("tp", "0", "line 2: tp (0), max_num_batched_tokens (8192) and max_num_seqs (1024) must be >= 1"),
    ("gpu_memory_utilization", "95", "gpu_memory_utilization (95.0) in (0, 1]"),
    ("kv_dtype", "fp4", "line 2: unknown kv_dtype 'fp4'"),
    ("kv_tokens", "0", "line 2: kv_tokens must be > 0, got 0"),
    ("kv_tokens", "lots", "line 2: kv_tokens must be a number, got 'lots'"),
    ("max_num_seqs", None, "closest is the kv_cache layout, which also needs: max_num_seqs"),
])
def test_a_bad_memory_row_is_one_line_and_exit_2(tmp_path: Path, column: str, value: str | None,
                                                 message: str) -> None:
    row = pl.read_csv(KV_CACHE_CSV, infer_schema_length=0).head(1)  # every column as text
    row = row.drop(column) if value is None else row.with_columns(pl.lit(value).alias(column))
    data = tmp_path / "mine.csv"
    row.write_csv(data)
    result = run_cli("estimate", "validate", "--backend", "roofline", "--data", str(data), cwd=tmp_path)
    assert result.returncode == 2, result.stdout
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


@functools.cache
def _validated(kind: str) -> pl.DataFrame:
    """``estimate validate``'s rows for the decode or the training sets, once per test run."""
    return validate([GENERATION_CSV, HELD_OUT_CSV] if kind == "decode" else [TRAINING_CSV, TRAINING_HELD_OUT_CSV])


@pytest.mark.parametrize(("kind", "model", "gpu", "precision", "scope", "where"), [
    # the same model on the same GPU kind in the same precision
    ("decode", "Llama-3-70B", "H100", "fp8", "Llama-3-70B on H100, fp8",
     (pl.col("model") == "Llama-3-70B") & (pl.col("gpu") == "H100") & (pl.col("dtype") == "fp8")),
    # measured in FP8 only: the record says so
    ("decode", "Llama-3-8B", "H200", "bf16", "Llama-3-8B on H200, fp8",
     (pl.col("model") == "Llama-3-8B") & (pl.col("gpu") == "H200")),
    ("decode", "Qwen3-32B", "A100", "bf16", "Qwen3-32B on H100, bf16/fp8", pl.col("model") == "Qwen3-32B"),
    # the held-out points count too, and the record says how many of its points they are
    ("decode", "Qwen3-30B-A3B", "H100", "bf16",
     "other models on H100, Qwen3-30B-A3B unmeasured, bf16/fp8, 3 held out",
     (pl.col("gpu") == "H100") & (pl.col("model") != "Qwen3-30B-A3B")),
    ("decode", "Llama-2-7B", "A100", "bf16", "other models on A100, Llama-2-7B unmeasured, bf16, 6 held out",
     pl.col("gpu") == "A100"),
    ("decode", "Llama-2-7B", "H800", "bf16", "Llama-2-7B on any GPU, nor of any model on H800", pl.lit(False)),
    ("train", "Qwen3-30B-A3B", "H100", "bf16", "Qwen3-30B-A3B on H100, bf16, 1 held out",
     (pl.col("model") == "Qwen3-30B-A3B") & (pl.col("gpu") == "H100") & (pl.col("dtype") == "bf16")),
    ("train", "Qwen3-30B-A3B", "H100", "fp8", "Qwen3-30B-A3B on H100, fp8, 2 held out",
     (pl.col("model") == "Qwen3-30B-A3B") & (pl.col("gpu") == "H100") & (pl.col("dtype") == "fp8")),
])
def test_an_estimates_track_record_is_its_nearest_slice_of_the_validation(
        kind: str, model: str, gpu: str, precision: str, scope: str, where: pl.Expr) -> None:
    """The record an estimate prints is what `estimate validate` finds for the same points: the model on the GPU
    kind in its precision, else in any, else on other kinds, else other models on the kind."""
    record = track_record(kind, get_model(model), gpu, precision)
    assert record.scope == scope
    metric_set = {"decode": "generation TPOT", "train": "training tokens/s/GPU"}[kind]
    errors = _validated(kind).filter(
        pl.col("set").str.starts_with(metric_set), pl.col("error").is_not_null(), where)["error"]
    assert record.points == errors.len()
    if record.points:
        assert record.median_abs_error == pytest.approx(errors.abs().median())
        assert record.median_error == pytest.approx(errors.median())
        assert record.within_20pct == pytest.approx((errors.abs() <= 0.2).mean())
    with pytest.raises(ConfigError, match="no track record for 'prefill'"):
        track_record("prefill", get_model(model), gpu, precision)


def test_a_config_json_is_matched_to_the_catalog_by_architecture_not_by_its_folders_name(tmp_path: Path) -> None:
    qwen = {"hidden_size": 5120, "num_hidden_layers": 64, "num_attention_heads": 64, "num_key_value_heads": 8,
            "head_dim": 128, "intermediate_size": 25600, "vocab_size": 151936, "tie_word_embeddings": False}
    real = tmp_path / "some-checkpoint" / "config.json"
    real.parent.mkdir()
    real.write_text(json.dumps(qwen))
    assert track_record("decode", get_model(str(real)), "H100", "bf16").scope == "Qwen3-32B on H100, bf16"
    other = tmp_path / "Qwen3-32B" / "config.json"  # a folder named after a catalog model, holding another shape
    other.parent.mkdir()
    other.write_text(json.dumps({**qwen, "num_hidden_layers": 4, "hidden_size": 1024, "num_attention_heads": 8}))
    scope = track_record("decode", get_model(str(other)), "H100", "bf16").scope
    assert scope.startswith("other models on H100, ")
    assert scope.endswith("'s architecture unmeasured, bf16/fp8, 3 held out")


def test_estimate_prints_its_track_record_and_json_carries_it() -> None:
    done = run_cli("estimate", "train", "--model", "Qwen3-30B-A3B", "--gpu", "H100", "--gpus", "16", "--ep", "8",
                   "--precision", "fp8")
    assert done.returncode == 0, done.stderr
    line = done.stdout.splitlines()[-1]
    assert line.startswith("  track record (3 training tokens/s per GPU points of Qwen3-30B-A3B on H100, fp8, 2 held "
                           "out)"), line
    assert line.endswith("(+: the model faster)")
    as_json = run_cli("estimate", "decode", "--model", "Llama-2-7B", "--gpu", "H800", "--json")
    assert json.loads(as_json.stdout)["track_record"] == {
        "metric": "decode TPOT", "above": "slower", "scope": "Llama-2-7B on any GPU, nor of any model on H800",
        "points": 0, "median_abs_error": None, "within_20pct": None, "median_error": None}
    prefill = run_cli("estimate", "prefill", "--model", "Llama-3-8B", "--gpu", "H100")
    assert "no direct measurement of a prefill's time" in prefill.stdout
    shared = run_cli("estimate", "prefill", "--model", "Llama-3-8B", "--gpu", "H100", "--samples", "8")
    assert "in 1 prompt(s), 8 samples each sharing its prefix" in shared.stdout  # it moves the time: say why
    assert json.loads(run_cli("estimate", "prefill", "--model", "Llama-3-8B", "--gpu", "H100", "--json").stdout)[
        "track_record"] is None


def test_validate_slices_by_each_points_origin(tmp_path: Path) -> None:
    out = json.loads(run_cli("estimate", "validate", "--by", "origin", "--json", "--backend", "roofline",
                             cwd=tmp_path).stdout)
    origins = {(r["set"], r["origin"]) for r in out["slices"]}
    assert ("generation TPOT", "ai-dynamo/aiconfigurator") in origins
    assert {o for s, o in origins if s == "generation TPOT, held out"} == {"SemiAnalysisAI/InferenceX",
                                                                          "sgl-project/sgl-cookbook"}
    assert {o for s, o in origins if s == "training tokens/s/GPU"} == {"pytorch/torchtitan", "NVIDIA/Megatron-LM",
                                                                       "NVIDIA-NeMo/Megatron-Bridge"}


@pytest.mark.parametrize(("shipped", "name"), [(TRAINING_CSV, "training tokens/s/GPU"),
                                              (OFFLINE_CSV, "offline output tokens/s")])
def test_a_row_with_a_split_is_reported_in_its_own_set(tmp_path: Path, shipped: Path, name: str) -> None:
    rows = pl.read_csv(shipped, infer_schema_length=10_000).head(2).with_columns(pl.Series("split", ["held out", None]))
    rows.write_csv(tmp_path / "mine.csv")
    out = json.loads(run_cli("estimate", "validate", "--backend", "roofline", "--data", str(tmp_path / "mine.csv"),
                             "--json", cwd=tmp_path).stdout)
    assert {r["set"]: r["points"] for r in out["overall"]} == {name: 1, f"{name}, held out": 1}
