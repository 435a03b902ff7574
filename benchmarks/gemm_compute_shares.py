"""The share of its peak a compute-bound GEMM reaches in every public GEMM table: FP8 against BF16, by part and engine.

The calibration's `fp8_gemm_share` (0.636) is the H100 table in ../shared/data (aiconfigurator's vLLM 0.19.0 sweep):
per-tensor FP8 GEMMs at 0.477 of the FP8 peak where BF16 GEMMs reach 0.750 of theirs (`profile.fit_gemm_compute`).
This prints the same statistic for each of aiconfigurator's GEMM tables (@ 095f58a5, ``aic-
core/src/aiconfigurator_core/systems/ data/<gpu>/gemm/<engine>/<release>/gemm_perf.parquet``, Apache-2.0) on the
parts the catalog holds, block-scaled FP8 beside per-tensor, so the one ratio the model takes can be read against
the others.

    python benchmarks/gemm_compute_shares.py AICONFIGURATOR_REPO

AICONFIGURATOR_REPO is a checkout of ai-dynamo/aiconfigurator (this machine's mirror is a bare repository under
/work/.mirror: ``git archive 095f58a5 aic-core/src/aiconfigurator_core/systems/data | tar -x -C DIR``).
"""

from __future__ import annotations

import argparse

import polars as pl
from _bench import existing_folder, run
from rltrace.replay.costmodels.profile import fit_gemm_compute

from rltrace.catalog import get_gpu
from rltrace.errors import ConfigError

PARTS = {"h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200", "a100_sxm": "A100"}  # folder -> catalog kind
DTYPES = {"bfloat16": 2, "fp8": 1, "fp8_block": 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=existing_folder, help="a checkout of ai-dynamo/aiconfigurator")
    args = parser.parse_args()
    base = args.repo / "aic-core" / "src" / "aiconfigurator_core" / "systems" / "data"
    rows = []
    for folder, kind in PARTS.items():
        for table in sorted(base.glob(f"{folder}/gemm/*/*/gemm_perf.parquet")):
            # a part without FP8 cores has no FP8 peak to hold FP8 rows against
            dtypes = DTYPES if get_gpu(kind).fp8_tflops else {d: b for d, b in DTYPES.items() if b == 2}
            try:
                fit = {r["dtype"]: r["share"] for r in fit_gemm_compute(table, kind, dtypes).iter_rows(named=True)}
            except ConfigError as e:  # e.g. a dtype with no compute-bound kernel: say so, go on
                print(f"{kind} {table.parts[-3]} {table.parts[-2]}: {e}")
                continue
            bf16 = fit.get("bfloat16")
            rows.append({"gpu": kind, "table": f"{table.parts[-3]} {table.parts[-2]}", "bf16": bf16,
                         "fp8": fit.get("fp8"), "fp8_block": fit.get("fp8_block"),
                         "fp8 / bf16": fit["fp8"] / bf16 if bf16 and "fp8" in fit else None,
                         "block / bf16": fit["fp8_block"] / bf16 if bf16 and "fp8_block" in fit else None})
    with pl.Config(tbl_rows=len(rows), tbl_width_chars=160, float_precision=3):
        print(pl.DataFrame(rows))


if __name__ == "__main__":
    run(main)
