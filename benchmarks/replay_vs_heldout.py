"""The replay engine on the held-out set's varied-length runs: does pricing each request at its own length do better
than the closed form, which prices identical requests of the mean lengths?

sgl-project/sgl-cookbook's runs (`generation_heldout.csv`, the rows whose source is the cookbook) draw their prompt
and output lengths with `sglang.bench_serving --dataset-name random` at its defaults: uniform from 1 to L (range
ratio 0) with numpy seeded 1, `input_lens` drawn before `output_lens`. Drawn the same way here, the lengths come out
with the means the rows state (610.1, 495.85, 496.68, 499.66 for 1,000-token prompts at 10, 80, 320 and 500
prompts), so these are the runs' own request mixes. Each is written as a one-step bundle (every request at once,
`--max-seqs` the run's concurrency, so a finished request's slot goes to the next, as a closed loop of that many
clients does), replayed with the real CLI, and its mean TPOT taken as `bench_serving` takes it: per request
(finish - first token) / (output - 1) over requests of more than one output token, then the mean. Printed beside the
measured TPOT and the closed form's (`rltrace estimate validate`'s prediction for the row).

The replay runs vLLM's scheduling (decodes first, prompt chunks in the rest of the budget); SGLang runs a prefill
batch before the decodes. Neither side was fitted to these runs.

    python benchmarks/replay_vs_heldout.py [--work DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
from replay_vs_closed_form import write_requests
from rltrace.replay.costmodels.validation import HELD_OUT_CSV, validate

REPO = Path(__file__).resolve().parents[1]
RLTRACE = str(Path(sys.executable).parent / "rltrace")
PROMPTS = {1: 10, 16: 80, 64: 320, 100: 500}  # the cookbook's --num-prompts at each --max-concurrency


def lengths(prompts: int, prompt_len: int, output_len: int) -> tuple[np.ndarray, np.ndarray]:
    """`sglang.bench_serving`'s random lengths at its defaults: seed 1, uniform 1..L, inputs drawn first."""
    np.random.seed(1)  # the legacy global generator: what bench_serving seeds and draws from
    inputs = np.random.randint(1, prompt_len + 1, size=prompts)
    outputs = np.random.randint(1, output_len + 1, size=prompts)
    return inputs, outputs


def mean_tpot_ms(requests: pl.DataFrame) -> float:
    """`bench_serving`'s mean TPOT: the mean over requests of more than one output token of each one's decode time
    over its tokens after the first (the replay's per-request ``tpot_s``)."""
    return 1e3 * float(requests["tpot_s"].drop_nulls().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=REPO / ".replay_vs_heldout", help="scratch folder")
    args = parser.parse_args()
    points = pl.read_csv(HELD_OUT_CSV, infer_schema_length=10_000).with_row_index("i")
    cookbook = points.filter(pl.col("source").str.starts_with("sgl-project/sgl-cookbook"))
    closed = validate([HELD_OUT_CSV]).filter(pl.col("set") == "generation TPOT, held out")["predicted"]
    rows = []
    for row in cookbook.iter_rows(named=True):
        c = int(row["concurrency"])
        prompt_len = 1000 if row["prompt_tokens"] < 2000 else 8000
        output_len = 1000 if row["output_tokens"] < 2000 else 8000
        inputs, outputs = lengths(PROMPTS[c], prompt_len, output_len)
        folder, out = args.work / f"bundle{row['i']}", args.work / f"run{row['i']}"
        if not folder.exists():  # the run's requests, all at once
            write_requests(folder, row, folder.name,
                           pl.DataFrame({"prompt": inputs, "output": outputs, "arrival_ns": [0] * len(inputs)}))
        done = subprocess.run([RLTRACE, "replay", str(folder), "-s", "disagg-sync", "--max-seqs", str(c),
                               "--set", 'cost.generation="roofline"', "-o", str(out)],
                              capture_output=True, text=True, check=False)
        if done.returncode:
            raise SystemExit(f"row {row['i'] + 2}: rltrace replay failed: {done.stderr.strip()[-500:]}")
        replayed = mean_tpot_ms(pl.read_parquet(out / "disagg-sync" / "requests.parquet"))
        form = float(closed[row["i"]])
        rows.append({"line": row["i"] + 2, "gpu": row["gpu"], "model": row["model"], "c": c,
                     "in/out": f"{prompt_len}/{output_len}", "mean in/out": f"{inputs.mean():.0f}/{outputs.mean():.0f}",
                     "measured_ms": row["tpot_ms"], "closed_ms": round(form, 2), "replay_ms": round(replayed, 2),
                     "closed_err": round(form / row["tpot_ms"] - 1, 3),
                     "replay_err": round(replayed / row["tpot_ms"] - 1, 3)})
    table = pl.DataFrame(rows)
    with pl.Config(tbl_rows=len(rows), tbl_width_chars=170):
        print(table)
    for side in ("closed", "replay"):
        err = table[f"{side}_err"].abs()
        print(f"{side}: median |error| {err.median():.1%}, within 20% {int((err <= 0.2).sum())} of {err.len()}, "
              f"median signed {table[f'{side}_err'].median():+.1%}")


if __name__ == "__main__":
    main()
