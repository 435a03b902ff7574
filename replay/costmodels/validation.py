"""The cost models held against public real measurements: serving engines' TPOT, TTFT and offline throughput, and
training frameworks' tokens per second.

Seven CSV sets ship in ``data/`` (docs/costmodels-sources.md lists every source; each row names its own):

- ``generation_validation.csv``: vLLM and SGLang TPOT and TTFT at a fixed concurrency, prompt and output length,
  measured by NVIDIA's aiconfigurator team on H100, H200 and B200 (their ``silicon_sample.csv``);
- ``generation_heldout.csv``: the same layout from other sources (InferenceX, SGLang's cookbook), collected after
  the model's constants were set and reported as their own sets (its ``split`` column);
- ``offline_validation.csv``: output tokens/s of an offline run of identical requests (vLLM
  ``benchmark_throughput.py``);
- ``offline_heldout.csv``: the same layout from other sources (DataCrunch's H200 runs, a vLLM pull request),
  collected after the model was set (held out);
- ``training_validation.csv``: tokens/s per GPU of a stated model, parallelism and GPU count (torchtitan,
  Megatron-LM and Megatron-Bridge tables);
- ``training_heldout.csv``: the same layout from NVIDIA's DGX Cloud benchmarking recipes, NeMo, NeMo AutoModel,
  Megatron-Bridge and torchtitan tables the model was not checked on, collected after it was set (held out);
- ``kv_cache_validation.csv``: how vLLM split one GPU's memory at start-up, from its own logs (weights, the
  profiling run's activation peak, memory outside torch, the KV cache in tokens): :mod:`.memory` against it.

Each point is predicted from the GPU and model catalogs (datasheets, Hugging Face configs) through the model's
public API (:func:`.benchmark.serving_benchmark`, :func:`.benchmark.offline_throughput`,
:func:`.training.step_seconds`, :func:`.memory.rank_memory`): one parameter set per GPU kind, nothing fitted to
these points, except that :mod:`.memory`'s two constants are read off two runs of the memory set (Llama-3.1-8B at
tp 1 and 2), which stay in it. A user's own CSV in any of the four layouts is checked the same way (``rltrace
estimate validate --data FILE``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
from rltrace.replay.costmodels import aiconfigurator, memory, serving
from rltrace.replay.costmodels.benchmark import ServingCosts, offline_throughput, serving_benchmark
from rltrace.replay.costmodels.roofline import Roofline
from rltrace.replay.costmodels.training import step_seconds

from rltrace import units
from rltrace.calibration.defaults import GPU_MEMORY_UTILIZATION
from rltrace.catalog import GPUSpec, ModelSpec, get_gpu, get_model
from rltrace.errors import ConfigError, RltraceError
from rltrace.limits import check_input
from rltrace.scalars import first_not_positive

DATA = Path(__file__).parent / "data"
GENERATION_CSV = DATA / "generation_validation.csv"
HELD_OUT_CSV = DATA / "generation_heldout.csv"
OFFLINE_CSV = DATA / "offline_validation.csv"
OFFLINE_HELD_OUT_CSV = DATA / "offline_heldout.csv"
TRAINING_CSV = DATA / "training_validation.csv"
TRAINING_HELD_OUT_CSV = DATA / "training_heldout.csv"
KV_CACHE_CSV = DATA / "kv_cache_validation.csv"
SHIPPED = (GENERATION_CSV, HELD_OUT_CSV, OFFLINE_CSV, OFFLINE_HELD_OUT_CSV, TRAINING_CSV, TRAINING_HELD_OUT_CSV,
           KV_CACHE_CSV)

_SERVING = ("source", "engine", "model", "gpu", "tp", "ep", "weight_dtype", "prompt_tokens", "output_tokens")
LAYOUTS: dict[str, tuple[str, ...]] = {
    "generation": (*_SERVING, "concurrency", "tpot_ms", "ttft_ms"),
    "offline": (*_SERVING, "requests", "output_tokens_per_s"),
    "training": ("source", "framework", "model", "gpu", "gpus", "ep", "seq_len", "global_batch", "precision",
                 "tokens_per_s_per_gpu"),
    "kv_cache": ("source", "engine", "engine_version", "model", "gpu", "tp", "weight_dtype", "kv_dtype",
                 "gpu_memory_utilization", "max_num_batched_tokens", "max_num_seqs", "weights_gib",
                 "activation_peak_gib", "non_torch_gib", "kv_tokens"),
}
MEASURED: dict[str, tuple[str, ...]] = {"generation": ("tpot_ms", "ttft_ms"), "offline": ("output_tokens_per_s",),
                                        "training": ("tokens_per_s_per_gpu",), "kv_cache": ()}
"""each layout's measured columns (the kv_cache quantities are checked per point, each named)"""
SLICES = ("set", "backend", "gpu", "model", "engine", "dtype", "regime", "origin")
# a point's origin: the GitHub repository its source opens with (owner/name, as a bare name or a github.com URL; an
# owner has no dots, so a host/path is not one), else the source's opening words
_ORIGIN = pl.col("source").str.extract(r"^(?:https?://)?(?:github\.com/)?([\w-]+/[\w.-]+)(?:[@\s/,]|$)").fill_null(
    pl.col("source").str.slice(0, 40))
DTYPE_BYTES = {name: units.DTYPE_BYTES[name] for name in ("bf16", "fp16", "fp8", "int8")}  # the weights a point states


def _with_dtype(model: ModelSpec, dtype: str) -> ModelSpec:
    """``model`` with its weights in ``dtype`` (a point states the precision it served in)."""
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPE_BYTES)}")
    wanted = DTYPE_BYTES[dtype]
    return model if model.dtype_bytes == wanted else dataclasses.replace(model, dtype_bytes=wanted)


class _Specs:
    """Catalog look-ups, once per (model, GPU, dtype)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str, str], tuple[ModelSpec, GPUSpec]] = {}

    def __call__(self, model: str, gpu: str, dtype: str) -> tuple[ModelSpec, GPUSpec]:
        key = (model, gpu, dtype)
        if key not in self._cache:
            self._cache[key] = (_with_dtype(get_model(model), dtype), get_gpu(gpu))
        return self._cache[key]


def _with_kv(model: ModelSpec, row: dict[str, Any]) -> ModelSpec:
    """``model`` with the KV cache in the row's ``kv_dtype`` (empty or absent: the weights', BF16 for FP8 weights)."""
    kv = str(row.get("kv_dtype") or "").lower()
    if not kv:
        return model
    if kv not in DTYPE_BYTES:  # a value the set cannot hold is bad input (exit 2), not a point the model declines
        raise ValueError(f"unknown kv_dtype {kv!r}; expected one of {', '.join(DTYPE_BYTES)} or empty")
    return dataclasses.replace(model, kv_dtype_bytes=DTYPE_BYTES[kv])


def _roofline(specs: _Specs, row: dict[str, Any]) -> Roofline:
    model, gpu = specs(row["model"], row["gpu"], row["weight_dtype"])
    model = _with_kv(model, row)
    # a dense model has no experts to spread: its ep column (1 in the shipped sets) is not passed on
    ep = int(row["ep"] or 1) if model.is_moe else 1
    return Roofline(model=model, gpu=gpu, tp=int(row["tp"]), ep=ep, batched_tokens=_budget(row))


def _budget(row: dict[str, Any]) -> int:
    """The engine's token budget as the point ran it (vLLM's API server on an A100: 2,048), else the default."""
    return int(_given(row.get("max_num_batched_tokens"), serving.MAX_BATCHED_TOKENS))


def _costs(specs: _Specs, row: dict[str, Any], backend: str) -> tuple[ServingCosts, str]:
    """The point's serving costs from ``backend`` ("roofline" or "kernels": the measured-kernel database, which
    refuses a point it does not cover), and which one priced it."""
    if backend == "roofline":
        return _roofline(specs, row), "roofline"
    model, gpu = specs(row["model"], row["gpu"], row["weight_dtype"])
    model = _with_kv(model, row)
    ep = int(row["ep"] or 1) if model.is_moe else 1
    tp = int(row["tp"])
    db = aiconfigurator.KernelDatabase(model=model, gpu=gpu, tp=tp, ep=ep if tp % ep == 0 else 1,
                                       engine=str(row["engine"]), batched_tokens=_budget(row))
    return db, db.name


Predictor = Callable[[dict[str, Any]], tuple[tuple[float, ...], str]]


def _each(points: pl.DataFrame, columns: tuple[str, ...], predict: Predictor, names: tuple[str, ...]) -> pl.DataFrame:
    """``predict`` per point (one cost-model call each, a few hundred rows): its values and the backend that priced
    them, or nulls and the reason (an unknown model, a TP that does not split it) where the model refuses the
    point."""
    values: list[tuple[float | None, ...]] = []
    why: list[str] = []
    priced: list[str] = []
    for number, row in enumerate(points.select(columns).iter_rows(named=True), start=2):  # line 1: the header
        try:
            got, backend = predict(row)
            values.append(got)
            why.append("")
            priced.append(backend)
        except RltraceError as e:
            values.append((None,) * len(names))
            why.append(str(e).splitlines()[0])
            priced.append("")
        except (ValueError, TypeError) as e:  # a value that is not a number where one is needed: name its column
            column = None
            if str(e).startswith(("could not convert string to float", "invalid literal for int()")):
                column = next((k for k, v in row.items() if isinstance(v, str) and repr(v) in str(e)), None)
            said = f"{column} must be a number, got {row[column]!r}" if column else str(e)
            raise ConfigError(f"line {number}: {said}") from None
    series = [pl.Series(n, [v[i] for v in values], dtype=pl.Float64) for i, n in enumerate(names)]
    return pl.DataFrame([*series, pl.Series("skipped", why, dtype=pl.Utf8),
                         pl.Series("backend", priced, dtype=pl.Utf8)])


def _batch_regime(concurrency: pl.Expr) -> pl.Expr:
    return (pl.when(concurrency <= 8).then(pl.lit("batch 1-8")).when(concurrency <= 32).then(pl.lit("batch 9-32"))
            .when(concurrency <= 128).then(pl.lit("batch 33-128")).otherwise(pl.lit("batch > 128")))


# optional columns of a serving point: the engine's settings as the run stated them (max_num_seqs: vLLM's, SGLang's
# max-running-requests; max_num_batched_tokens: vLLM's token budget, SGLang's chunked-prefill-size; kv_dtype: an FP8
# cache; gpu_memory_utilization: vLLM's, SGLang's mem-fraction-static); and ``split`` (:func:`_set_name`)
_ENGINE_SETTINGS = ("max_num_seqs", "max_num_batched_tokens", "kv_dtype", "gpu_memory_utilization")


def _set_name(points: pl.DataFrame, name: str) -> pl.Expr:
    """``name``, or ``name, <split>`` on the rows whose optional ``split`` column names the set they belong to (a
    held-out set is reported apart from the points the model was checked on), in any layout that has a split."""
    split = pl.col("split").cast(pl.Utf8).fill_null("") if "split" in points.columns else pl.lit("")
    return pl.when(split == "").then(pl.lit(name)).otherwise(pl.format(f"{name}, {{}}", split)).alias("set")


def predict_generation(points: pl.DataFrame, backend: str = "roofline") -> pl.DataFrame:
    """TPOT and TTFT points: one row per point and metric, ``measured`` and ``predicted`` in ms, priced by
    ``backend`` (:func:`_costs`)."""
    specs = _Specs()
    optional = tuple(c for c in _ENGINE_SETTINGS if c in points.columns)

    def one(row: dict[str, Any]) -> tuple[tuple[float, float], str]:
        costs, used = _costs(specs, row, backend)
        s = serving_benchmark(costs, concurrency=int(row["concurrency"]),
                              prompt_tokens=int(row["prompt_tokens"]), output_tokens=int(row["output_tokens"]),
                              engine=str(row["engine"]),
                              max_num_seqs=int(_given(row.get("max_num_seqs"), serving.MAX_NUM_SEQS)),
                              gpu_memory_utilization=float(_given(row.get("gpu_memory_utilization"),
                                                                  GPU_MEMORY_UTILIZATION)))
        return (1e3 * s.tpot_s, 1e3 * s.ttft_s), used

    got = _each(points, (*_SERVING, "concurrency", *optional), one, ("tpot", "ttft"))
    base = points.with_columns(pl.col("weight_dtype").alias("dtype"),
                               _batch_regime(pl.col("concurrency")).alias("regime"), got["skipped"], got["backend"])
    return pl.concat([
        base.with_columns(_set_name(points, f"generation {m.upper()}"),
                          pl.col(f"{m}_ms").cast(pl.Float64).alias("measured"), got[m].alias("predicted"))
        for m in ("tpot", "ttft")
    ])


def _given(value: Any, default: float) -> Any:
    """An optional column's value, or ``default`` where the row leaves it empty (0 is a value, not a blank)."""
    return default if value is None or value == "" else value


def predict_offline(points: pl.DataFrame, backend: str = "roofline") -> pl.DataFrame:
    """Offline-throughput points, output tokens/s, priced by ``backend`` (:func:`_costs`)."""
    specs = _Specs()

    # optional: the engine's caps as the point ran them (max_num_seqs: vLLM <= 0.6 256, now 1,024; its token budget,
    # max_num_batched_tokens), and the arrival rate of a serving benchmark's requests (requests/s; empty: all at once)
    optional = tuple(c for c in ("max_num_seqs", "max_num_batched_tokens", "request_rate") if c in points.columns)

    def one(row: dict[str, Any]) -> tuple[tuple[float], str]:
        costs, used = _costs(specs, row, backend)
        return (offline_throughput(costs, requests=int(row["requests"]),
                                   prompt_tokens=int(row["prompt_tokens"]), output_tokens=int(row["output_tokens"]),
                                   engine=str(row["engine"]),
                                   max_num_seqs=int(_given(row.get("max_num_seqs"), serving.MAX_NUM_SEQS)),
                                   request_rate=float(_given(row.get("request_rate"), math.inf))),), used

    got = _each(points, (*_SERVING, "requests", *optional), one, ("predicted",))
    regime = pl.lit("offline")
    if "request_rate" in points.columns:
        rate = pl.col("request_rate").cast(pl.Float64)
        regime = pl.when(rate.is_null()).then(regime).otherwise(pl.format("{} requests/s", rate))
    return points.with_columns(
        _set_name(points, "offline output tokens/s"), pl.col("weight_dtype").alias("dtype"),
        regime.alias("regime"), pl.col("output_tokens_per_s").cast(pl.Float64).alias("measured"),
        got["predicted"], got["skipped"], got["backend"])


def predict_training(points: pl.DataFrame, backend: str = "roofline") -> pl.DataFrame:
    """Training points, tokens/s per GPU: causal attention at the point's sequence length, and an FP8 run's linear
    layers at the FP8 peak (:func:`.training.step_seconds`)."""
    specs = _Specs()

    def one(row: dict[str, Any]) -> tuple[tuple[float], str]:
        model, gpu = specs(row["model"], row["gpu"], "bf16")
        seq = int(row["seq_len"])
        tokens, gpus = seq * int(row["global_batch"]), int(row["gpus"])
        for column, value in (("seq_len", seq), ("global_batch", int(row["global_batch"])), ("gpus", gpus)):
            if value < 1:  # a step of no work, or on no GPU, has no rate to predict
                raise ConfigError(f"{column} must be at least 1, got {value}")
        ep = int(row["ep"] or 1) if model.is_moe else 1
        step = step_seconds(model, gpu, tokens=tokens, gpus=gpus, ep=ep, seq_len=seq,
                            precision=str(row["precision"]).lower())
        return (tokens / step.seconds / gpus,), "roofline"

    got = _each(points, ("model", "gpu", "gpus", "ep", "seq_len", "global_batch", "precision"), one, ("predicted",))
    regime = pl.when(pl.col("gpus") <= 8).then(pl.lit("1 node")).otherwise(pl.lit("multi-node"))
    return points.with_columns(
        _set_name(points, "training tokens/s/GPU"), pl.col("precision").alias("dtype"),
        pl.col("framework").alias("engine"), regime.alias("regime"),
        pl.col("tokens_per_s_per_gpu").cast(pl.Float64).alias("measured"), got["predicted"], got["skipped"],
        got["backend"])


# what each kv_cache point is checked on: (set, measured column, RankMemory field or "kv_tokens", scale to the column)
_MEMORY = (("vLLM KV cache tokens", "kv_tokens", "kv_tokens", 1.0),
           ("vLLM weights GiB", "weights_gib", "weights", 1 / memory.GIB),
           ("vLLM activation peak GiB", "activation_peak_gib", "activation_peak", 1 / memory.GIB),
           ("vLLM non-torch GiB", "non_torch_gib", "non_torch", 1 / memory.GIB))


def predict_kv_cache(points: pl.DataFrame, backend: str = "roofline") -> pl.DataFrame:
    """vLLM's start-up memory split: one row per point and quantity (KV-cache tokens, weights, activation peak,
    memory outside torch), each as vLLM logged it and as :mod:`.memory` predicts it."""
    specs = _Specs()

    def one(row: dict[str, Any]) -> tuple[tuple[float, ...], str]:
        model, gpu = specs(row["model"], row["gpu"], row["weight_dtype"])
        model = _with_kv(model, row)
        for _, column, _, _ in _MEMORY:
            if not float(row[column]) > 0:
                raise ValueError(f"{column} must be > 0, got {row[column]}")
        tp = int(row["tp"])
        mem = memory.rank_memory(model, gpu, tp, gpu_memory_utilization=float(row["gpu_memory_utilization"]),
                                 batched_tokens=int(row["max_num_batched_tokens"]),
                                 max_num_seqs=int(row["max_num_seqs"]))
        return (mem.kv_tokens(model.kv_bytes_per_token_rank(tp)), mem.weights, mem.activation_peak,
                mem.non_torch), "memory"

    got = _each(points, LAYOUTS["kv_cache"], one, tuple(field for _, _, field, _ in _MEMORY))
    dtype = pl.when(pl.col("kv_dtype").fill_null("") == "").then(pl.col("weight_dtype")).otherwise(
        pl.format("{}, kv {}", pl.col("weight_dtype"), pl.col("kv_dtype").str.to_lowercase()))
    base = points.with_columns(dtype.alias("dtype"), pl.format("tp {}", pl.col("tp")).alias("regime"),
                               pl.format("{} {}", pl.col("engine"), pl.col("engine_version")).alias("engine"),
                               got["skipped"], got["backend"])
    return pl.concat([base.with_columns(pl.lit(name).alias("set"), pl.col(column).cast(pl.Float64).alias("measured"),
                                        (got[field] * scale).alias("predicted"))
                      for name, column, field, scale in _MEMORY])


PREDICT = {"generation": predict_generation, "offline": predict_offline, "training": predict_training,
           "kv_cache": predict_kv_cache}


def load_points(path: Path) -> tuple[str, pl.DataFrame]:
    """A validation CSV and which layout it has ("generation", "offline", "training" or "kv_cache", told apart by
    columns)."""
    check_input(path)
    try:
        frame = pl.read_csv(path, infer_schema_length=None)
    except (OSError, pl.exceptions.PolarsError) as e:
        raise ConfigError(f"cannot read validation data {path}: {str(e).splitlines()[0]}") from None
    for kind, needed in LAYOUTS.items():
        if set(needed) <= set(frame.columns):
            if frame.is_empty():
                raise ConfigError(f"{path}: no points")
            _check_measured(path, frame, MEASURED[kind])
            return kind, frame
    # the layout it comes closest to, and what that one still needs
    kind, needed = max(LAYOUTS.items(), key=lambda item: len(set(item[1]) & set(frame.columns)))
    missing = ", ".join(c for c in needed if c not in frame.columns)
    raise ConfigError(f"{path}: not a validation set; closest is the {kind} layout, which also needs: {missing} "
                      f"(layouts: {', '.join(LAYOUTS)}; replay/costmodels/validation.py lists their columns)")


def _check_measured(path: Path, frame: pl.DataFrame, columns: tuple[str, ...]) -> None:
    """A measurement is a positive finite number (or blank): 0 was scored as an infinite error."""
    for column in columns:
        bad = first_not_positive(frame[column].cast(pl.Float64, strict=False))
        if bad is not None:
            raise ConfigError(f"{path}: line {bad + 2}: {column} must be a positive measurement, got "
                              f"{frame[column][bad]}")


BACKENDS = ("roofline", "kernels")
"""generation backends a serving or offline point can be priced by (:func:`_costs`); the training and memory sets
have one model each, priced once whatever is asked"""
_PER_BACKEND = ("generation", "offline")


def validate(paths: list[Path] | None = None, backends: tuple[str, ...] = ("roofline",)) -> pl.DataFrame:
    """Every point of the given CSVs (default: the shipped sets) with ``predicted``, ``measured`` and ``error``
    ((predicted - measured) / measured; null where the model refused the point, ``skipped`` says why), once per
    generation backend asked for (``backend``: the one asked for; ``priced_by``: the one that priced the point,
    with the kernel database's version and layout)."""
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or not backends:
        raise ConfigError(f"unknown backend {', '.join(unknown) or '(none)'}; choose from {', '.join(BACKENDS)}")
    frames = []
    loaded = [(path, *load_points(path)) for path in paths or SHIPPED]  # every file read before any prediction
    for path, kind, points in loaded:
        for backend in backends if kind in _PER_BACKEND else backends[:1]:
            try:
                got = PREDICT[kind](points, backend)
            except ConfigError as e:
                raise ConfigError(f"{path}: {e}") from None
            except pl.exceptions.PolarsError as e:  # a measured column that is not a number
                raise ConfigError(f"{path}: {str(e).splitlines()[0]}") from None
            asked = pl.lit(backend) if kind in _PER_BACKEND else pl.col("priced_by")
            frames.append(got.rename({"backend": "priced_by"}).with_columns(_ORIGIN.alias("origin"),
                                                                            asked.alias("backend"))
                          .select("source", *SLICES, "priced_by", "measured", "predicted", "skipped"))
    result = pl.concat(frames, how="vertical")
    return result.with_columns(((pl.col("predicted") - pl.col("measured")) / pl.col("measured")).alias("error"))


def check_slices(by: list[str]) -> None:
    """Refuse slice names that are not columns of the results (before any prediction runs)."""
    unknown = sorted(set(by) - set(SLICES))
    if unknown:
        raise ConfigError(f"cannot slice by {', '.join(unknown)}; choose from {', '.join(SLICES)}")


def summarize(results: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Error statistics per slice: points, median and 90th-percentile |error|, worst, share within 10% and 20%,
    and the median signed error (the model's bias; for times > 0 is slower than measured, for throughputs faster)."""
    check_slices(by)
    scored = results.filter(pl.col("error").is_not_null()).with_columns(pl.col("error").abs().alias("abs_error"))
    keys = ["set", "backend", *[k for k in by if k not in ("set", "backend")]]
    return (scored.group_by(keys).agg(
        pl.len().alias("points"),
        pl.col("abs_error").median().alias("median_abs_error"),
        pl.col("abs_error").quantile(0.9, "higher").alias("p90_abs_error"),
        pl.col("abs_error").max().alias("worst_abs_error"),
        (pl.col("abs_error") <= 0.10).mean().alias("within_10pct"),
        (pl.col("abs_error") <= 0.20).mean().alias("within_20pct"),
        pl.col("error").median().alias("median_error"),
    ).with_columns(pl.col("regime").str.extract(r"(\d+(?:\.\d+)?)").cast(pl.Float64).alias("_first")
                   if "regime" in keys else pl.lit(0.0).alias("_first"))
        # regimes by their first number ("batch 9-32" before "batch 33-128"; those without one last), then by name
        .sort([k if k != "regime" else "_first" for k in keys] + (["regime"] if "regime" in keys else []),
              nulls_last=True)
        .drop("_first"))
