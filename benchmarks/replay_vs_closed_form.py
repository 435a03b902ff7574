"""The replay engine against the closed form `rltrace estimate validate` checks, on the offline validation set.

`rltrace estimate validate` holds `offline_throughput` (a closed form over the per-iteration model) against public
measurements; `rltrace replay` runs the discrete engine (replay/entities/instance.py) over the same per-iteration
model. This script writes each offline point as a one-step bundle (its requests, prompt and output lengths,
arrivals all at once or at the point's request rate), replays it with the real CLI and prints the engine's output
tokens/s beside the closed form's: how far what users run is from what is validated.

Both sides take the catalog's model with the row's weight type (`weight_dtype`; the bundle's manifest records it and
the replay rebuilds the model from it), so each row is compared with itself here, not with its measurement.

    python benchmarks/replay_vs_closed_form.py [--work DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import polars as pl
from rltrace.collectors.importers.base import ImportOptions, requests_table
from rltrace.replay.costmodels.benchmark import offline_throughput
from rltrace.replay.costmodels.roofline import Roofline
from rltrace.replay.costmodels.validation import DTYPE_BYTES

import rltrace
from rltrace.catalog import ModelSpec, get_gpu, get_model
from rltrace.manifest import Manifest, Pool

REPO = Path(__file__).resolve().parents[1]
OFFLINE = REPO / "replay" / "costmodels" / "data" / "offline_validation.csv"
RLTRACE = str(Path(sys.executable).parent / "rltrace")


def served(row: dict) -> ModelSpec:
    """The catalog's model of ``row`` with the weights it served (an FP8 checkpoint: one byte a weight)."""
    return dataclasses.replace(get_model(row["model"]), dtype_bytes=DTYPE_BYTES[row["weight_dtype"]])


def write_requests(folder: Path, row: dict, run_id: str, source: pl.DataFrame) -> None:
    """A one-step bundle of ``source``'s requests (columns prompt, output, arrival_ns) served by ``row``'s model, with
    its weights' type, on its GPUs."""
    table = requests_table(pl.col("prompt"), pl.col("output"), pl.col("arrival_ns"), source,
                           ImportOptions()).with_columns(pl.lit("length").alias("finish_reason"))
    manifest = Manifest(run_id=run_id, source="import", model=served(row).info(),
                        cluster={"rollout": Pool(device=row["gpu"], count=row["tp"], tp=row["tp"]),
                                 "trainer": Pool(device=row["gpu"], count=1, tp=1)})
    rltrace.write_bundle(folder, manifest, {"requests": table})


def bundle(folder: Path, row: dict, index: int) -> None:
    """One step of ``row``'s requests: identical lengths, sent at once or ``request_rate`` a second."""
    n, rate = int(row["requests"]), row["request_rate"]
    write_requests(folder, row, f"offline-{index}", pl.DataFrame({
        "prompt": [row["prompt_tokens"]] * n, "output": [row["output_tokens"]] * n,
        "arrival_ns": [int(k / rate * 1e9) if rate else 0 for k in range(n)]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=REPO / ".replay_vs_closed_form", help="scratch folder")
    args = parser.parse_args()
    rows = []
    for i, row in enumerate(pl.read_csv(OFFLINE, infer_schema_length=10_000).iter_rows(named=True)):
        spec = served(row)
        folder, out = args.work / f"bundle{i}", args.work / f"run{i}"
        if not folder.exists():
            bundle(folder, row, i)
        seqs = int(row["max_num_seqs"] or 1024)
        done = subprocess.run([RLTRACE, "replay", str(folder), "-s", "disagg-sync", "--max-seqs", str(seqs),
                               "--set", 'cost.generation="roofline"', "-o", str(out)],
                              capture_output=True, text=True, check=False)
        if done.returncode:
            raise SystemExit(f"row {i}: rltrace replay failed: {done.stderr.strip()[-500:]}")
        finish = pl.read_parquet(out / "disagg-sync" / "requests.parquet")["finish_s"].max()
        replayed = row["requests"] * row["output_tokens"] / finish
        roof = Roofline(model=spec, gpu=get_gpu(row["gpu"]), tp=int(row["tp"]))
        closed = offline_throughput(roof, requests=int(row["requests"]), prompt_tokens=int(row["prompt_tokens"]),
                                    output_tokens=int(row["output_tokens"]), engine=str(row["engine"]),
                                    max_num_seqs=seqs, request_rate=row["request_rate"] or math.inf)
        rows.append({"row": i + 2, "engine": row["engine"], "gpu": row["gpu"], "model": row["model"],
                     "in/out": f"{row['prompt_tokens']}/{row['output_tokens']}",
                     "arrivals": f"{row['request_rate']}/s" if row["request_rate"] else "at once",
                     "closed_tok_s": round(closed, 1), "replay_tok_s": round(replayed, 1),
                     "replay/closed": round(replayed / closed, 3)})
    table = pl.DataFrame(rows)
    ratio = table["replay/closed"]
    with pl.Config(tbl_rows=len(rows), tbl_width_chars=160):
        print(table)
    print(f"{len(rows)} offline points: replay / closed form median {ratio.median():.3f}, "
          f"range {ratio.min():.3f}-{ratio.max():.3f}")


if __name__ == "__main__":
    main()
