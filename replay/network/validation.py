"""Hold the collective model against measured NCCL timings: the public H100 tables in ../shared/data.

- aiconfigurator's NCCL sweep (ai-dynamo/aiconfigurator, Apache-2.0; NCCL on 2/4/8 H100 SXM of one node):
  all_gather, reduce_scatter, all_reduce; ``message_size`` counts elements (half: 2 bytes, int8: 1), latency
  in ms;
- Vidur's h100_dgx all-reduce profile (microsoft/vidur, MIT): ``size`` in bytes, time in ms, 2/4/8 GPUs; its
  dtype is not in the table; Vidur's profiler allocates float16 (GraphedCollective's default dtype in
  vidur/profiling/collectives/collectives_impl.py), so it is taken as half.

The model uses only spec-sheet figures (the GPU catalog's NVLink and HBM bandwidth), NCCL's own latencies and
NVLS efficiency, and two efficiency constants (NVLink and local copy, rltrace.replay.topologies.base), nothing
fitted per size.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from rltrace.replay.network.collectives import collective
from rltrace.replay.topologies import parse

from rltrace.errors import ConfigError

DTYPE_BYTES = {"half": 2, "int8": 1, "float": 4, "bfloat16": 2}


def measured(directory: str | Path) -> pl.DataFrame:
    """source, op, dtype, gpus, bytes, measured_s from whichever tables ``directory`` holds."""
    root, parts = Path(directory), []
    aic = root / "aic_nccl_perf.parquet"
    if aic.exists():
        frame = pl.read_parquet(aic).filter(pl.col("nccl_dtype").is_in(list(DTYPE_BYTES)),
                                            pl.col("op_name").is_in(["all_gather", "reduce_scatter", "all_reduce"]))
        parts.append(frame.select(
            pl.lit("aiconfigurator").alias("source"), pl.col("op_name").alias("op"),
            pl.col("nccl_dtype").alias("dtype"), pl.col("num_gpus").alias("gpus"),
            (pl.col("message_size") * pl.col("nccl_dtype").replace_strict(DTYPE_BYTES, return_dtype=pl.Int64)).alias("bytes"),
            (pl.col("latency") / 1e3).alias("measured_s")))
    vidur = root / "vidur_h100_dgx_all_reduce.csv"
    if vidur.exists():
        parts.append(pl.read_csv(vidur).select(
            pl.lit("vidur").alias("source"), pl.lit("all_reduce").alias("op"), pl.lit("half").alias("dtype"),
            pl.col("num_workers").alias("gpus"),
            pl.col("size").alias("bytes"), (pl.col("time_stats.all_reduce.median") / 1e3).alias("measured_s")))
    if not parts:
        raise ConfigError(f"{root}: no NCCL tables (aic_nccl_perf.parquet, vidur_h100_dgx_all_reduce.csv)")
    return pl.concat(parts).group_by("source", "op", "dtype", "gpus", "bytes").agg(pl.col("measured_s").median())


def compare(directory: str | Path, gpu: str = "H100") -> pl.DataFrame:
    """Every measured point beside the model's time (and the algorithm it picked) on an NVSwitch node of ``gpu``;
    error = model / measured - 1."""
    rows = measured(directory)
    keys = rows.select("op", "dtype", "gpus", "bytes").unique()
    topos = {g: parse(f"nvswitch:gpus={g},gpu={gpu}") for g in keys["gpus"].unique().to_list()}
    modelled = [collective(topos[g], op, g, b, dtype=dtype) for op, dtype, g, b in keys.iter_rows()]
    keys = keys.with_columns(pl.Series("model_s", [m.seconds for m in modelled]),
                             pl.Series("algorithm", [m.algorithm for m in modelled]))
    return rows.join(keys, on=["op", "dtype", "gpus", "bytes"]).with_columns(
        (pl.col("model_s") / pl.col("measured_s") - 1).alias("error")).sort("source", "op", "dtype", "gpus", "bytes")


def summary(compared: pl.DataFrame, min_bytes: int = 64 << 20) -> pl.DataFrame:
    """Per source, op, dtype, GPU count and modelled algorithm: median and worst |error| at messages >= ``min_bytes``."""
    big = compared.filter(pl.col("bytes") >= min_bytes)
    return big.group_by("source", "op", "dtype", "gpus", "algorithm").agg(
        pl.len().alias("points"), pl.col("error").abs().median().alias("median_abs_error"),
        pl.col("error").abs().max().alias("max_abs_error")).sort("source", "op", "dtype", "gpus", "algorithm")
