"""The fraction of a GPU's peak vLLM's fused-MoE kernel reaches when compute-bound, from aiconfigurator's tables.

The catalog's ``moe_compute_efficiency`` (rltrace/catalog/gpus.toml) comes from here: in each GPU kind's newest vLLM
``moe_perf.parquet`` of ai-dynamo/aiconfigurator (@ 095f58a5, ``aic-core/src/aiconfigurator_core/systems/data/
<gpu>/moe/vllm/<release>/moe_perf.parquet``, Apache-2.0), the rows with balanced routing, no tensor or expert
parallelism inside the kernel (moe_tp_size = moe_ep_size = 1), at least 4,096 tokens (the compute-bound end: the
weights are read once for every 4,096 x top-k rows), in block FP8. Each row's FLOPs are ``tokens x topk x 3 x
hidden x inter x 2`` (gate, up and down); the figure is the median over the table's model shapes of FLOPs / latency
/ the datasheet's dense FP8 peak. It prints the BF16 rows' rate beside it, as a share of the same FP8 peak: the
catalog applies the figure to the FP8 peak whatever the experts' type.

    python benchmarks/moe_kernel_efficiency.py AICONFIGURATOR_REPO

AICONFIGURATOR_REPO is a checkout (or `git worktree`) of ai-dynamo/aiconfigurator; this machine's mirror has it as a
bare repository under /work/.mirror, readable with `git show 095f58a5:<path> > file`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl

from rltrace.catalog import get_gpu

TABLES = {  # GPU kind -> (aiconfigurator system folder, newest vLLM release with a table there, its dtype rows)
    "H100": ("h100_sxm", "0.24.0", "fp8_block"),
    "H200": ("h200_sxm", "0.24.0", "fp8_block"),
    "B200": ("b200_sxm", "0.24.0", "fp8_block"),
}
# A100's only vLLM table (0.14.0) has no balanced-routing rows; H20 and H800 have none: the catalog gives H800 H100's
# figure (the same die and clocks) and leaves A100 and H20 at the dense compute efficiency
MIN_TOKENS = 4096


def efficiency(table: pl.DataFrame, dtype: str, peak_tflops: float) -> tuple[float, int]:
    """Median fraction of ``peak_tflops`` over the table's ``dtype`` model shapes (compute-bound rows), and the row
    count."""
    rows = table.filter(pl.col("distribution") == "balanced", pl.col("moe_dtype") == dtype,
                        pl.col("moe_tp_size") == 1, pl.col("moe_ep_size") == 1,
                        pl.col("num_tokens") >= MIN_TOKENS)
    flops = pl.col("num_tokens") * pl.col("topk") * 3 * pl.col("hidden_size") * pl.col("inter_size") * 2
    rows = rows.with_columns((flops / (pl.col("latency") * 1e-3) / (peak_tflops * 1e12)).alias("share"))
    shapes = rows.group_by("hidden_size", "inter_size", "num_experts", "topk").agg(pl.col("share").median())
    return float(shapes["share"].median()), rows.height


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path, help="a checkout of ai-dynamo/aiconfigurator")
    args = parser.parse_args()
    base = args.repo / "aic-core" / "src" / "aiconfigurator_core" / "systems" / "data"
    for kind, (folder, release, dtype) in TABLES.items():
        gpu = get_gpu(kind)
        peak = gpu.fp8_tflops
        path = base / folder / "moe" / "vllm" / release / "moe_perf.parquet"
        table = pl.read_parquet(path)
        share, n = efficiency(table, dtype, peak)
        bf16, m = efficiency(table, "bfloat16", peak)  # BF16 experts, as a share of the same FP8 peak
        print(f"{kind}: {share:.3f} of the FP8 peak ({peak:g} TFLOP/s, {n} {dtype} rows; BF16 experts {bf16:.3f}, "
              f"{m} rows), vLLM {release}")


if __name__ == "__main__":
    main()
