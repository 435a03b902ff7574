"""Fit the described-job calibration (framework slowdowns and refit rates) to the fit split of the published RL
runs and write replay/described/data/framework_calibration.csv (the file the replay reads; a test re-fits it).

Usage: python benchmarks/fit_rl_calibration.py [--check]
    --check: fit, compare with the shipped file, exit 1 when they differ (nothing written)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl
from rltrace.replay.described.fit import fit_calibration

TARGET = Path(__file__).resolve().parents[1] / "replay" / "described" / "data" / "framework_calibration.csv"


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--check", action="store_true",
                        help="fit, compare with the shipped file, exit 1 when they differ (nothing written)")
    args = parser.parse_args()
    fitted = fit_calibration(progress=lambda done, total: print(f"\rreplayed {done}/{total} runs", end="",
                                                                 file=sys.stderr))
    print(file=sys.stderr)
    with pl.Config(tbl_rows=100, tbl_width_chars=160, fmt_str_lengths=60):
        print(fitted)
    if args.check:
        shipped = pl.read_csv(TARGET)
        same = shipped.select("framework", "quantity", "value").equals(fitted.select("framework", "quantity", "value"))
        print("the shipped calibration matches the fit" if same else "the shipped calibration differs from the fit")
        return 0 if same else 1
    fitted.write_csv(TARGET)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
