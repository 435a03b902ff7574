"""Does a profile measured with ``rltrace calibrate --device cpu`` lower the replay's error on real recordings?

    python benchmarks/cpu_calibration.py [BUNDLE ...]   (default: the shipped tiny_rl_cpu sample)

Measures this CPU's peaks and the tiny model's kernels (examples/tiny_rl's model), then replays each
recording as recorded with generation costed three ways: the roofline of the measured peaks with the default
efficiencies (before), the same roofline with the fitted profile (after), and, for reference, the fit to the
recording's own request timings (the default for recordings). Prints the mean steady step-time error of each.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import polars as pl
from rltrace.replay.costmodels.generation import RooflineGeneration
from rltrace.replay.execute.calibrate_device import calibrate_device
from rltrace.replay.fidelity import as_recorded_error
from rltrace.replay.run import CostConfig
from rltrace.replay.run import model_spec as spec_of
from rltrace.sample_traces import sample_path

import rltrace

DEFAULTS = {"compute": RooflineGeneration.__dataclass_fields__["compute_efficiency"].default,
            "memory": RooflineGeneration.__dataclass_fields__["memory_efficiency"].default}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundles", nargs="*", type=Path)
    args = parser.parse_args()
    bundles = [rltrace.open(b) for b in args.bundles] or [rltrace.open(sample_path("tiny_rl_cpu"))]
    spec = spec_of(bundles[0].manifest.model)
    assert spec is not None
    profile, _ = calibrate_device(spec, "cpu")
    print(f"measured peaks: {profile['peak_flops'][0] / 1e9:.0f} GFLOP/s, {profile['peak_bytes_per_s'][0] / 1e9:.1f} GB/s; "
          f"fitted: " + ", ".join(f"{r['regime']} {r['efficiency']:.2f}" for r in profile.iter_rows(named=True)))
    with tempfile.TemporaryDirectory() as tmp:
        after = Path(tmp) / "after.parquet"
        before = Path(tmp) / "before.parquet"
        profile.write_parquet(after)
        profile.with_columns(pl.col("regime").replace_strict({**DEFAULTS, "attention": DEFAULTS["memory"]},
                                                             return_dtype=pl.Float64).alias("efficiency")).write_parquet(before)
        print(f"{'bundle':<28} {'measured s':>10} {'before':>8} {'after':>8} {'trace fit':>10}")
        for b in bundles:
            errors = [as_recorded_error(b, CostConfig(generation="roofline", profile=str(p))) for p in (before, after)]
            trace = as_recorded_error(b)
            print(f"{str(b.path)[-28:]:<28} {trace.measured_s:>10.3f} {errors[0].error:>+8.1%} {errors[1].error:>+8.1%} "
                  f"{trace.error:>+10.1%}")


if __name__ == "__main__":
    main()
