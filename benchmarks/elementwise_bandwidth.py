"""The elementwise kernels of a transformer layer on H100, from Vidur's public profile: the fraction of HBM each
reaches once it streams.

The roofline prices every norm, rotary embedding and activation of an iteration as its activation bytes over
the calibration's ``elementwise_stream`` x HBM, or its floor where longer (replay/costmodels/kernels.py
``_elementwise``).
That fraction is the median over the ops this prints, from microsoft/vidur @ 7d475133 ``data/profiling/compute/h100/
meta-llama/Llama-2-7b-hf/mlp.csv`` (MIT; ../shared/data/kernels/h100/vidur_llama-2-7b_mlp.csv), each op's bytes as
its kernel moves them (``rltrace.replay.costmodels.profile.fit_elementwise_stream``). The residual add runs above
the datasheet's bandwidth where L2 (50 MB) still holds its inputs from the op before; vLLM and SGLang fuse it into
the RMSNorm.

    python benchmarks/elementwise_bandwidth.py [PATH_TO_MLP_CSV]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from rltrace.replay.costmodels.profile import ELEMENTWISE_MIN_TOKENS, fit_elementwise_stream

from rltrace.calibration import CALIBRATION

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "kernels" / "h100" / "vidur_llama-2-7b_mlp.csv"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT,
                        help="a Vidur MLP profile CSV (default: Vidur's H100 Llama-2-7B one in the shared data)")
    path = parser.parse_args(argv).path
    if not path.is_file():
        print(f"elementwise_bandwidth: no such file: {path}", file=sys.stderr)
        return 2
    fit = fit_elementwise_stream(path)
    print(f"{path}: elementwise ops at >= {ELEMENTWISE_MIN_TOKENS} tokens, TP 1-8: fraction of HBM")
    for row in fit.iter_rows(named=True):
        spread = f"{row['min']:.2f}-{row['max']:.2f}"
        print(f"  {row['op']:<26} {row['rows']:>4} rows  median {row['median']:.2f}  ({spread})")
    median = statistics.median(fit["median"].to_list())
    shipped = CALIBRATION["elementwise_stream"]
    print(f"median over the ops: {median:.2f} (the calibration's elementwise_stream: {shipped})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
