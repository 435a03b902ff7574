"""The cost models held against public real measurements: serving engines' TPOT and training frameworks' throughput.

Two CSV sets ship in ``data/`` (docs/costmodels.md lists every source; each row names its own):

- ``generation_validation.csv``: vLLM and SGLang time per output token (TPOT) at a fixed concurrency, prompt
  and output length, measured by NVIDIA's aiconfigurator team on H100, H200 and B200 (their
  ``silicon_sample.csv``);
- ``training_validation.csv``: tokens per second per GPU of a stated model, parallelism and GPU count from
  torchtitan, Megatron-LM and Megatron-Bridge tables.

Each point is predicted from the GPU and model catalogs (spec sheets, Hugging Face configs) and the cost model's
own constants: one parameter set per GPU kind, nothing fitted to these points. A user's own CSV in either
layout is checked the same way (``rltrace estimate validate --data FILE``).

TPOT at concurrency ``c`` with prompt ``P`` and output ``O`` tokens is one steady-state engine iteration: ``c``
decodes at the mean context ``P + O/2`` plus the prefill of the ``c / O`` prompts admitted per iteration
(requests finish and are replaced at that rate; vLLM and SGLang chunk those prefills into the decode
iterations). The iteration is a roofline: the larger of its memory time (the decode's weight and KV reads)
and its compute time (the decode's and the prefill share's FLOPs), plus the decode's fixed terms (TP
all-reduces, engine overhead) and the prefill share's all-reduces.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from rltrace.catalog import GPUSpec, ModelSpec, get_gpu, get_model
from rltrace.errors import ConfigError, RltraceError
from rltrace.replay.costmodels.roofline import Roofline

DATA = Path(__file__).parent / "data"
GENERATION_CSV = DATA / "generation_validation.csv"
TRAINING_CSV = DATA / "training_validation.csv"

GENERATION_COLUMNS = ("source", "engine", "model", "gpu", "tp", "ep", "weight_dtype", "concurrency",
                      "prompt_tokens", "output_tokens", "tpot_ms")
TRAINING_COLUMNS = ("source", "framework", "model", "gpu", "gpus", "tp", "pp", "ep", "seq_len", "global_batch",
                    "precision", "tokens_per_s_per_gpu")
SLICES = ("set", "gpu", "model", "engine", "dtype", "regime")
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}


@dataclass(frozen=True, kw_only=True, slots=True)
class Setup:
    """One model on one GPU kind as a point runs it (catalog specs, TP and EP degree, weight dtype)."""

    model: ModelSpec
    gpu: GPUSpec
    tp: int
    ep: int = 1

    def roofline(self) -> Roofline:
        # Expert parallelism is passed only to a cost model that prices it; the roofline of today splits
        # every weight over TP ranks, which for the weight bytes read per GPU is the same split as EP.
        fields = {f.name for f in dataclasses.fields(Roofline)}
        extra = {"ep": self.ep} if "ep" in fields and self.ep > 1 else {}
        return Roofline(model=self.model, gpu=self.gpu, tp=self.tp, **extra)


def _with_dtype(model: ModelSpec, dtype: str) -> ModelSpec:
    """``model`` with its weights in ``dtype`` (a point states the precision it served or trained in)."""
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPE_BYTES)}")
    wanted = DTYPE_BYTES[dtype]
    return model if model.dtype_bytes == wanted else dataclasses.replace(model, dtype_bytes=wanted)


def tpot_seconds(setup: Setup, concurrency: int, prompt_tokens: int, output_tokens: int) -> float:
    """Predicted time per output token of ``concurrency`` requests in steady state (see the module docstring)."""
    roof = setup.roofline()
    decode = roof.decode(concurrency, prompt_tokens + output_tokens / 2)
    prefill = roof.prefill(prompt_tokens, 1)
    share = concurrency / output_tokens  # prompts admitted per iteration
    fixed = decode.seconds - max(decode.compute_s, decode.memory_s)  # all-reduces, engine overhead, floors
    return max(decode.memory_s, decode.compute_s + share * prefill.compute_s) + fixed + share * prefill.comm_s


def train_tokens_per_s_per_gpu(model: ModelSpec, gpu: GPUSpec, gpus: int, tokens_per_step: int) -> float:
    """Predicted training throughput per GPU for one optimizer step of ``tokens_per_step`` tokens."""
    step = Roofline(model=model, gpu=gpu, tp=1).train(tokens_per_step, gpus)
    return tokens_per_step / step.seconds / gpus


def load_points(path: Path) -> tuple[str, pl.DataFrame]:
    """A validation CSV and which set it is ("generation" or "training", told apart by its columns)."""
    try:
        frame = pl.read_csv(path, infer_schema_length=None)
    except (OSError, pl.exceptions.PolarsError) as e:
        raise ConfigError(f"cannot read validation data {path}: {str(e).splitlines()[0]}") from None
    for kind, needed in (("generation", GENERATION_COLUMNS), ("training", TRAINING_COLUMNS)):
        if set(needed) <= set(frame.columns):
            if frame.is_empty():
                raise ConfigError(f"{path}: no points")
            return kind, frame
    raise ConfigError(f"{path}: not a validation set; a generation set needs columns {', '.join(GENERATION_COLUMNS)}; "
                      f"a training set {', '.join(TRAINING_COLUMNS)}")


def _regime_generation(concurrency: pl.Expr) -> pl.Expr:
    return (pl.when(concurrency <= 8).then(pl.lit("batch 1-8")).when(concurrency <= 32).then(pl.lit("batch 9-32"))
            .when(concurrency <= 128).then(pl.lit("batch 33-128")).otherwise(pl.lit("batch > 128")))


def _spec(cache: dict, name: str, gpu: str, dtype: str) -> tuple[ModelSpec, GPUSpec]:
    key = (name, gpu, dtype)
    if key not in cache:
        cache[key] = (_with_dtype(get_model(name), dtype), get_gpu(gpu))
    return cache[key]


def predict_generation(points: pl.DataFrame) -> pl.DataFrame:
    """Each generation point with the model's TPOT beside the measured one (``predicted``, ``measured`` in ms)."""
    cache: dict = {}
    predicted: list[float | None] = []
    why: list[str] = []
    for row in points.select("model", "gpu", "tp", "ep", "weight_dtype", "concurrency", "prompt_tokens",
                             "output_tokens").iter_rows(named=True):  # one cost-model call per point: ~600 rows
        try:
            model, gpu = _spec(cache, row["model"], row["gpu"], row["weight_dtype"])
            setup = Setup(model=model, gpu=gpu, tp=int(row["tp"]), ep=int(row["ep"] or 1))
            predicted.append(1e3 * tpot_seconds(setup, int(row["concurrency"]), int(row["prompt_tokens"]),
                                                int(row["output_tokens"])))
            why.append("")
        except RltraceError as e:  # a model the catalog lacks, a TP that does not split it: listed, not fatal
            predicted.append(None)
            why.append(str(e).splitlines()[0])
    return points.with_columns(
        pl.lit("generation TPOT").alias("set"), pl.col("weight_dtype").alias("dtype"),
        pl.col("engine").alias("engine"), _regime_generation(pl.col("concurrency")).alias("regime"),
        pl.col("tpot_ms").cast(pl.Float64).alias("measured"), pl.Series("predicted", predicted, dtype=pl.Float64),
        pl.Series("skipped", why, dtype=pl.Utf8),
    )


def predict_training(points: pl.DataFrame) -> pl.DataFrame:
    """Each training point with the model's tokens/s/GPU beside the measured one."""
    cache: dict = {}
    predicted: list[float | None] = []
    why: list[str] = []
    for row in points.select("model", "gpu", "gpus", "seq_len", "global_batch", "precision").iter_rows(named=True):
        try:
            model, gpu = _spec(cache, row["model"], row["gpu"], "bf16")  # MFU is quoted against the BF16 peak
            predicted.append(train_tokens_per_s_per_gpu(model, gpu, int(row["gpus"]),
                                                        int(row["seq_len"]) * int(row["global_batch"])))
            why.append("")
        except RltraceError as e:
            predicted.append(None)
            why.append(str(e).splitlines()[0])
    regime = pl.when(pl.col("gpus") <= 8).then(pl.lit("1 node")).otherwise(pl.lit("multi-node"))
    return points.with_columns(
        pl.lit("training tokens/s/GPU").alias("set"), pl.col("precision").alias("dtype"),
        pl.col("framework").alias("engine"), regime.alias("regime"),
        pl.col("tokens_per_s_per_gpu").cast(pl.Float64).alias("measured"),
        pl.Series("predicted", predicted, dtype=pl.Float64), pl.Series("skipped", why, dtype=pl.Utf8),
    )


def validate(paths: list[Path] | None = None) -> pl.DataFrame:
    """Every point of the given CSVs (default: both shipped sets) with ``predicted``, ``measured`` and
    ``error`` ((predicted - measured) / measured; null where the point was skipped, ``skipped`` says why)."""
    frames = []
    for path in paths or [GENERATION_CSV, TRAINING_CSV]:
        kind, points = load_points(path)
        out = predict_generation(points) if kind == "generation" else predict_training(points)
        frames.append(out.select("source", *SLICES, "measured", "predicted", "skipped"))
    result = pl.concat(frames, how="vertical")
    return result.with_columns(((pl.col("predicted") - pl.col("measured")) / pl.col("measured")).alias("error"))


def summarize(results: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Error statistics per slice: points, median and 90th-percentile |error|, worst, share within 10% and 20%,
    and the median signed error (the model's bias: > 0 predicts slower than measured)."""
    unknown = sorted(set(by) - set(SLICES))
    if unknown:
        raise ConfigError(f"cannot slice by {', '.join(unknown)}; choose from {', '.join(SLICES)}")
    scored = results.filter(pl.col("error").is_not_null()).with_columns(pl.col("error").abs().alias("abs_error"))
    keys = ["set", *[k for k in by if k != "set"]]
    return (scored.group_by(keys).agg(
        pl.len().alias("points"),
        pl.col("abs_error").median().alias("median_abs_error"),
        pl.col("abs_error").quantile(0.9, "higher").alias("p90_abs_error"),
        pl.col("abs_error").max().alias("worst_abs_error"),
        (pl.col("abs_error") <= 0.10).mean().alias("within_10pct"),
        (pl.col("abs_error") <= 0.20).mean().alias("within_20pct"),
        pl.col("error").median().alias("median_error"),
    ).sort(keys))
