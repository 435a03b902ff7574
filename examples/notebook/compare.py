"""Compare schedulers on a recorded workload from Python, as in a notebook: the frames `rltrace replay` prints.

Run it as ``python examples/notebook/compare.py [OUT]``; it writes run folders and an HTML report under OUT (default:
a folder ``notebook-runs`` in the working directory).
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

import rltrace

out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("notebook-runs")

# The shipped RollPacker-like sample (a bundle folder works the same), three schedulers, two resampled steps.
cmp = rltrace.compare("rollpacker_qwen7b", ["disagg-sync", "one-step-async", "rollpacker"], steps=2)

# Every run on the same work: samples/s and $ per 1k samples of the recorded work, ratios to the first run,
# and whether the run trained other work.
table = cmp.table()
print(table.select("run", "samples_per_s", "samples_per_s_x", "usd_per_1k_samples", "changed"))

# The fixed metric keys of each run, flattened: bubbles, busy and used shares, staleness, cost.
metrics = cmp.metrics()
print(metrics.select("scheduler", "step_time_s.mean", "bubble_fraction.generation.skewness", "gpu_busy.generation",
                     "gpu_utilization.generation"))

# Which run keeps the recorded work and is fastest: the report's own choice.
keeps = table.filter(~pl.col("changed")).sort("samples_per_s", descending=True)
print(f"fastest on the recorded work: {keeps['run'][0]} ({keeps['samples_per_s'][0]:.3g} samples/s)")

cmp.write(out)  # one folder per scheduler, as `rltrace replay -o`
print(f"wrote {cmp.report(out / 'report.html')}")
