"""Does a profile measured with ``rltrace calibrate --device cpu`` lower the replay's error on real recordings?

    python benchmarks/cpu_calibration.py [BUNDLE ...]   (default: the shipped tiny_rl_cpu sample)

Builds examples/tiny_rl's model, measures this CPU's peaks, the model's kernels and a real vLLM engine's
per-iteration overhead (``calibrate --device cpu --engine vllm``), then replays each recording as recorded
with generation costed four ways: the roofline of the measured peaks with the default efficiencies (before),
with the fitted kernel efficiencies, with those plus the engine overhead (after: the whole profile), and, for
reference, the fit to the recording's own request timings (the default for recordings). Prints the mean
steady step-time error of each.
"""

from __future__ import annotations

import argparse
import sys
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "tiny_rl"))
import tiny_llama

DEFAULTS = {"compute": RooflineGeneration.__dataclass_fields__["compute_efficiency"].default,
            "memory": RooflineGeneration.__dataclass_fields__["memory_efficiency"].default}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundles", nargs="*", type=Path)
    args = parser.parse_args()
    bundles = [rltrace.open(b) for b in args.bundles] or [rltrace.open(sample_path("tiny_rl_cpu"))]
    spec = spec_of(bundles[0].manifest.model)
    assert spec is not None
    model_dir = tiny_llama.build(Path(tempfile.mkdtemp()) / "model")
    profile, _ = calibrate_device(spec, "cpu", model_dir)
    print(f"measured peaks: {profile['peak_flops'][0] / 1e9:.0f} GFLOP/s, "
          f"{profile['peak_bytes_per_s'][0] / 1e9:.1f} GB/s; "
          f"fitted: " + ", ".join(f"{r['regime']} {r['efficiency']:.2f}" for r in profile.iter_rows(named=True)))
    kernels_only = profile.filter(pl.col("regime") != "engine")
    with tempfile.TemporaryDirectory() as tmp:
        paths = {name: Path(tmp) / f"{name}.parquet" for name in ("before", "kernels", "after")}
        kernels_only.with_columns(pl.col("regime").replace_strict(
            {**DEFAULTS, "attention": DEFAULTS["memory"]}, return_dtype=pl.Float64).alias("efficiency")
        ).write_parquet(paths["before"])
        kernels_only.write_parquet(paths["kernels"])
        profile.write_parquet(paths["after"])
        print(f"{'bundle':<28} {'measured s':>10} {'before':>8} {'kernels':>8} {'after':>8} {'trace fit':>10}")
        for b in bundles:
            errors = [as_recorded_error(b, CostConfig(generation="roofline", profile=str(p))).error
                      for p in paths.values()]
            trace = as_recorded_error(b)
            print(f"{str(b.path)[-28:]:<28} {trace.measured_s:>10.3f} " + " ".join(f"{e:>+8.1%}" for e in errors)
                  + f" {trace.error:>+10.1%}")


if __name__ == "__main__":
    main()
