"""The serving engines' fused-MoE layer in aiconfigurator's tables: its compute rate against each rank's expert
width, and its fixed time and streaming rate when memory-bound.

The catalog's ``moe_compute_efficiency`` and ``moe_half_width`` (rltrace/catalog/fused_moe.toml) come from here: in each
GPU kind's table of ai-dynamo/aiconfigurator (@ 095f58a5, ``aic-core/src/aiconfigurator_core/systems/data/<gpu>/moe/
<engine>/<release>/moe_perf.parquet``, Apache-2.0), the rows with balanced routing, no expert parallelism inside the
kernel (moe_ep_size = 1, every tensor-parallel size the table has), at least 256 rows an expert (tokens x top-k /
experts: the compute-bound end, each expert's weights read once for 256 rows or more; a top-1 model of 128 experts
never gets there within the table's 16,384 tokens). Hopper and Blackwell: vLLM's newest table there, block FP8.
A100 has no FP8 cores and its one vLLM table (0.14.0) times only skewed (power-law) routing, so its figures come
from SGLang 0.5.10's table, the Triton fused-MoE kernel (``sglang_fused_moe_triton``, SGLang's port of vLLM's),
balanced, BF16; vLLM 0.14.0's power-law rows are printed beside them as a check (compute-bound only: skewed
routing touches fewer experts, so its memory-bound rows do not time the same bytes).
Each row's FLOPs are ``tokens x topk x 3 x hidden x inter / moe_tp x 2`` (gate, up and down on one rank's slice);
its share is FLOPs / latency / the datasheet's dense peak for the rows' type (FP8's; BF16's on A100). Tensor
parallelism splits each expert's intermediate width over the ranks, and the kernel's grouped GEMMs get slower as
that width ``w = inter / moe_tp`` narrows (a 0.28 of the FP8 peak at 2,048 on Hopper, 0.09 at 128), so the catalog
holds the curve

    share(w) = ceiling x w / (w + half_width)

fitted over the table's shapes and TP sizes (each shape and size's median share; least squares on log share, so a
share 20% low weighs as one 20% high). It prints the fit, the median share by width beside the curve's, and, on
FP8 parts, how fast the BF16 rows run against the block-FP8 rows of the same shape and TP size (the catalog applies
the curve to the FP8 peak whatever the experts' type: ``GPUSpec.flops_for(1)``, the BF16 peak on a part without FP8).

The same tables' memory-bound rows (balanced, the fit's type, moe_ep_size = 1, every TP size, at most one row an
expert: tokens x top-k <= experts, so each touched expert's weights are read for one row) give ``moe_fixed_us`` and
``moe_stream_efficiency``: latency = fixed + bytes / (efficiency x HBM), bytes the touched experts' weights on one
rank (min(experts, tokens x top-k) x 3 x hidden x inter / moe_tp x bytes an element), least squares on the relative
error. The tables time the FusedMoE module's forward from router logits under a CUDA graph (collector/vllm/
collect_moe.py, ``benchmark_with_power``; collector/sglang/ likewise), so the fixed part is GPU time: routing,
align, the activations' quantization, the two grouped GEMMs' fill and the weighted sum.

    python benchmarks/moe_kernel_efficiency.py AICONFIGURATOR_REPO

AICONFIGURATOR_REPO is a checkout (or `git worktree`) of ai-dynamo/aiconfigurator; this machine's mirror has it as a
bare repository under /work/.mirror, readable with `git show 095f58a5:<path> > file`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from _bench import existing_folder, run

from rltrace.catalog import get_gpu


@dataclass(frozen=True, kw_only=True, slots=True)
class Table:
    """One GPU kind's fused-MoE table: where it lies and which of its rows the fit reads."""

    folder: str  # aiconfigurator's system folder
    engine: str
    release: str
    dtype: str  # the rows' moe_dtype
    bytes_per_element: int
    kernel: str | None = None  # kernel_source, where the table holds more than one kernel


TABLES = {  # GPU kind -> its table (vLLM's newest where it has balanced-routing rows)
    "H100": Table(folder="h100_sxm", engine="vllm", release="0.24.0", dtype="fp8_block", bytes_per_element=1),
    "H200": Table(folder="h200_sxm", engine="vllm", release="0.24.0", dtype="fp8_block", bytes_per_element=1),
    "B200": Table(folder="b200_sxm", engine="vllm", release="0.24.0", dtype="fp8_block", bytes_per_element=1),
    "A100": Table(folder="a100_sxm", engine="sglang", release="0.5.10", dtype="bfloat16", bytes_per_element=2,
                  kernel="sglang_fused_moe_triton"),
}
# H20 and H800 have no table: the catalog gives H800 H100's figures (the same die and clocks) and leaves H20 at the
# dense compute efficiency
CHECKS = {  # GPU kind -> (a second table, its routing): printed beside the fit, not used
    "A100": (Table(folder="a100_sxm", engine="vllm", release="0.14.0", dtype="bfloat16", bytes_per_element=2),
             "power_law_1.01"),
}
MIN_ROWS_PER_EXPERT = 256
SHAPE = ("hidden_size", "inter_size", "num_experts", "topk", "moe_tp_size")


def shares(table: pl.DataFrame, dtype: str, peak_tflops: float, distribution: str = "balanced") -> pl.DataFrame:
    """Median share of ``peak_tflops`` per model shape and TP size (compute-bound rows), with the width per rank."""
    rows = table.filter(pl.col("distribution") == distribution, pl.col("moe_dtype") == dtype,
                        pl.col("moe_ep_size") == 1,
                        pl.col("num_tokens") * pl.col("topk") >= MIN_ROWS_PER_EXPERT * pl.col("num_experts"))
    flops = pl.col("num_tokens") * pl.col("topk") * 3 * pl.col("hidden_size") * pl.col("inter_size") * 2
    rows = rows.with_columns(
        (flops / pl.col("moe_tp_size") / (pl.col("latency") * 1e-3) / (peak_tflops * 1e12)).alias("share"),
        (pl.col("inter_size") / pl.col("moe_tp_size")).alias("width"))
    return rows.group_by(*SHAPE).agg(pl.col("width").first(), pl.col("share").median(), pl.len().alias("rows"))


def fit(points: pl.DataFrame) -> tuple[float, float]:
    """(ceiling, half_width) of ``share = ceiling x w / (w + half_width)``, least squares on log share: for each half
    width on a fine grid the best ceiling is closed-form (the mean log ratio), and the grid keeps the best pair."""
    width = points["width"].to_numpy()
    log_share = np.log(points["share"].to_numpy())
    best = (np.inf, 0.0, 0.0)
    for half in np.geomspace(8, 16384, 4000):
        shape = np.log(width / (width + half))
        log_ceiling = float(np.mean(log_share - shape))
        sse = float(np.sum((log_share - shape - log_ceiling) ** 2))
        best = min(best, (sse, float(np.exp(log_ceiling)), float(half)))
    return best[1], best[2]


def read(base: Path, table: Table) -> pl.DataFrame:
    """The rows of ``table`` (its kernel's, where the file holds several)."""
    rows = pl.read_parquet(base / table.folder / "moe" / table.engine / table.release / "moe_perf.parquet")
    return rows.filter(pl.col("kernel_source") == table.kernel) if table.kernel else rows


def memory_bound(table: pl.DataFrame, spec: Table, hbm_bytes_per_s: float) -> tuple[float, float, np.ndarray]:
    """(fixed seconds, streaming fraction of HBM) of the fused-MoE layer when memory-bound, and each row's relative
    error: least squares on (fixed + bytes x b) / latency - 1, linear in the two."""
    rows = table.filter(pl.col("distribution") == "balanced", pl.col("moe_dtype") == spec.dtype,
                        pl.col("moe_ep_size") == 1, pl.col("num_tokens") * pl.col("topk") <= pl.col("num_experts"))
    touched = pl.min_horizontal(pl.col("num_experts"), pl.col("num_tokens") * pl.col("topk"))
    nbytes = (touched * 3 * pl.col("hidden_size") * pl.col("inter_size") / pl.col("moe_tp_size")
              * spec.bytes_per_element).alias("bytes")
    rows = rows.with_columns(nbytes)
    x, y = rows["bytes"].to_numpy(), rows["latency"].to_numpy() * 1e-3
    (fixed, per_byte), *_ = np.linalg.lstsq(np.vstack([1 / y, x / y]).T, np.ones_like(y), rcond=None)
    return float(fixed), float(1 / (per_byte * hbm_bytes_per_s)), (fixed + x * per_byte) / y - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=existing_folder, help="a checkout of ai-dynamo/aiconfigurator")
    args = parser.parse_args()
    base = args.repo / "aic-core" / "src" / "aiconfigurator_core" / "systems" / "data"
    for kind, spec in TABLES.items():
        gpu = get_gpu(kind)
        peak = gpu.flops_for(1) / 1e12  # FP8's peak; BF16's on a part without FP8 cores
        table = read(base, spec)
        points = shares(table, spec.dtype, peak)
        ceiling, half = fit(points)
        model = ceiling * points["width"] / (points["width"] + half)
        error = (model / points["share"] - 1).abs()
        tp1 = points.filter(pl.col("moe_tp_size") == 1)["share"].median()
        peak_name = "FP8" if gpu.fp8_tflops else "BF16"
        line = (f"{kind}: ceiling {ceiling:.3f} of the {peak_name} peak ({peak:g} TFLOP/s), half width {half:.0f}; "
                f"{points.height} shape x TP points ({points['rows'].sum()} rows), |error| median "
                f"{error.median():.1%}, worst {error.max():.1%}; TP 1 median {tp1:.3f}")
        if spec.dtype != "bfloat16":
            bf16 = shares(table, "bfloat16", peak).join(points, on=list(SHAPE), suffix="_fp8")
            bf16_ratio = (bf16["share"] / bf16["share_fp8"]).median()
            line += f"; BF16 experts at {bf16_ratio:.2f}x the block-FP8 rate (median over {bf16.height} matched points)"
        print(f"{line}; {spec.engine} {spec.release}, {spec.dtype} rows")
        by_width = points.group_by("width").agg(pl.col("share").median()).sort("width")
        print("  width: " + ", ".join(f"{w:g} {s:.3f} ({ceiling * w / (w + half):.3f})"
                                      for w, s in by_width.iter_rows()))
        fixed, stream, rel = memory_bound(table, spec, gpu.hbm_bytes_per_s)
        print(f"  memory-bound: fixed {fixed * 1e6:.1f} us, weights at {stream:.3f} of HBM ({len(rel)} rows, |error| "
              f"median {np.median(np.abs(rel)):.1%}, 90th percentile {np.percentile(np.abs(rel), 90):.1%}, worst "
              f"{np.abs(rel).max():.1%})")
        if kind in CHECKS:  # e.g. vLLM's own A100 table, skewed routing only: its compute-bound rows
            other, routing = CHECKS[kind]
            check_points = shares(read(base, other), other.dtype, peak, routing)
            c_ceiling, c_half = fit(check_points)
            print(f"  check, {other.engine} {other.release}'s {routing} rows (compute-bound): ceiling "
                  f"{c_ceiling:.3f}, half width {c_half:.0f} ({check_points.height} shape x TP points)")


if __name__ == "__main__":
    run(main)
