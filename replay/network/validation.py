"""Hold the collective model against measured NCCL timings: the public H100 tables in ../shared/data.

- aiconfigurator's NCCL sweep (ai-dynamo/aiconfigurator, Apache-2.0; NCCL on 2/4/8 H100 SXM of one node):
  all_gather, reduce_scatter, all_reduce; ``message_size`` counts elements (half: 2 bytes, int8: 1), latency
  in ms;
- Vidur's h100_dgx all-reduce profile (microsoft/vidur, MIT): ``size`` in bytes, time in ms, 2/4/8 GPUs.

The model uses only spec-sheet figures (the GPU catalog's NVLink bandwidth), nothing fitted per size.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from rltrace.replay.network.collectives import collective
from rltrace.replay.topologies import parse

from rltrace.errors import ConfigError

DTYPE_BYTES = {"half": 2, "int8": 1, "float": 4, "bfloat16": 2}


def measured(directory: str | Path) -> pl.DataFrame:
    """source, op, gpus, bytes, measured_s from whichever tables ``directory`` holds."""
    root, parts = Path(directory), []
    aic = root / "aic_nccl_perf.parquet"
    if aic.exists():
        frame = pl.read_parquet(aic).filter(pl.col("nccl_dtype").is_in(list(DTYPE_BYTES)),
                                            pl.col("op_name").is_in(["all_gather", "reduce_scatter", "all_reduce"]))
        # NCCL runs half-precision all-reduce on one H100 node as NVLS (NVLink SHARP: the NVSwitch reduces);
        # int8 cannot be reduced in the switch and runs the ring. The model has rings and trees, not NVLS.
        nvls = (pl.col("op_name") == "all_reduce") & (pl.col("nccl_dtype") != "int8")
        parts.append(frame.select(
            pl.when(nvls).then(pl.lit("aiconfigurator (NVLS, not modelled)")).otherwise(pl.lit("aiconfigurator"))
            .alias("source"), pl.col("op_name").alias("op"), pl.col("num_gpus").alias("gpus"),
            (pl.col("message_size") * pl.col("nccl_dtype").replace_strict(DTYPE_BYTES, return_dtype=pl.Int64)).alias("bytes"),
            (pl.col("latency") / 1e3).alias("measured_s")))
    vidur = root / "vidur_h100_dgx_all_reduce.csv"
    if vidur.exists():
        parts.append(pl.read_csv(vidur).select(
            pl.lit("vidur").alias("source"), pl.lit("all_reduce").alias("op"), pl.col("num_workers").alias("gpus"),
            pl.col("size").alias("bytes"), (pl.col("time_stats.all_reduce.median") / 1e3).alias("measured_s")))
    if not parts:
        raise ConfigError(f"{root}: no NCCL tables (aic_nccl_perf.parquet, vidur_h100_dgx_all_reduce.csv)")
    return pl.concat(parts).group_by("source", "op", "gpus", "bytes").agg(pl.col("measured_s").median())


def compare(directory: str | Path, gpu: str = "H100") -> pl.DataFrame:
    """Every measured point beside the model's time on an NVSwitch node of ``gpu``; error = model / measured - 1."""
    rows = measured(directory)
    keys = rows.select("op", "gpus", "bytes").unique()
    topos = {g: parse(f"nvswitch:gpus={g},gpu={gpu}") for g in keys["gpus"].unique().to_list()}
    modelled = [collective(topos[g], op, g, b).seconds for op, g, b in keys.iter_rows()]
    keys = keys.with_columns(pl.Series("model_s", modelled))
    return rows.join(keys, on=["op", "gpus", "bytes"]).with_columns(
        (pl.col("model_s") / pl.col("measured_s") - 1).alias("error")).sort("source", "op", "gpus", "bytes")


def summary(compared: pl.DataFrame, min_bytes: int = 64 << 20) -> pl.DataFrame:
    """Per source, op and GPU count: median and worst |error| at messages >= ``min_bytes``, and the median over all."""
    big = compared.filter(pl.col("bytes") >= min_bytes)
    return big.group_by("source", "op", "gpus").agg(
        pl.len().alias("points"), pl.col("error").abs().median().alias("median_abs_error"),
        pl.col("error").abs().max().alias("max_abs_error")).sort("source", "op", "gpus")
