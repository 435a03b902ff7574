"""Where Vidur and rltrace disagree: one decode iteration of Llama-2-7B on one H100, against the measured kernels.

    python benchmarks/vidur_iteration.py [--work DIR]

For each (batch B, prompt P, output O): B identical requests arrive at t = 0 with the batch cap at B, so after the
prefills every iteration decodes the same B requests at contexts P..P+O (mean P + O/2). Three figures per case:

- Vidur 0.0.26 (same inputs as benchmarks/vidur_compare.py: its authors' measured H100 MLP profile, the attention
  profile derived from aiconfigurator's tables): (e2e - TTFT) / (O - 1) of the request admitted last, which
  decodes only after every prefill, i.e. Vidur's mean decode iteration;
- rltrace: ``Roofline.decode(B, P + O/2)`` (the per-kernel model of docs/costmodels-roofline.md);
- the measured-kernel floor: what the public measured H100 kernels of that iteration add up to, with nothing
  for the LM head, the sampler, launches or the scheduler: per layer the medians of Vidur's own MLP-profile ops
  at B tokens (vidur_llama-2-7b_mlp.csv: norms, QKV and output projections, rotary, MLP up/act/down, two adds)
  plus decode attention at (B, P + O/2) from the same derived attention table Vidur is given. A real vLLM
  iteration runs at least these kernels back to back, so a prediction below the floor is too fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rltrace.replay.costmodels.roofline import Roofline
from vidur_compare import KERNELS, REPO, run_vidur, vidur_attention

from rltrace.catalog import get_gpu, get_model

CASES = [(8, 1024, 256), (16, 1024, 256), (32, 1024, 512), (64, 1024, 256), (64, 2048, 256), (128, 512, 256)]
LAYERS = 32  # Llama-2-7B config.json num_hidden_layers
OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
       "mlp_up_proj", "mlp_act", "mlp_down_proj", "add", "add")  # "add" twice: the two residual adds


def kernel_floor_s(batch: int, context: float) -> float:
    """Measured per-layer kernels of one decode iteration, summed over the layers (seconds)."""
    mlp = pl.read_csv(KERNELS / "vidur_llama-2-7b_mlp.csv").filter(pl.col("num_tensor_parallel_workers") == 1)
    tokens = mlp.filter(pl.col("num_tokens") >= batch)["num_tokens"].min()
    row = mlp.filter(pl.col("num_tokens") == tokens).row(0, named=True)
    dense_ms = sum(row[f"time_stats.{op}.median"] for op in OPS)
    attention = vidur_attention().filter(pl.col("prefill_chunk_size") == 0, pl.col("batch_size") >= batch)
    attention = attention.filter(pl.col("batch_size") == attention["batch_size"].min())
    # the table's context steps are powers of two: interpolate linearly in the context (decode attention streams
    # the KV cache, so its time is affine in the context)
    steps = attention.sort("kv_cache_size")
    x, y = steps["kv_cache_size"].to_numpy(), steps["time_stats.attn_decode.median"].to_numpy()
    attention_ms = float(np.interp(context, x, y))
    return LAYERS * (dense_ms + attention_ms) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=REPO / ".vidur_iteration", help="scratch folder (kept: caches)")
    args = parser.parse_args()
    roof = Roofline(model=get_model("Llama-2-7B"), gpu=get_gpu("H100"), tp=1)
    rows = []
    for batch, prompt, output in CASES:
        work = args.work / f"b{batch}_p{prompt}_o{output}"
        work.mkdir(parents=True, exist_ok=True)
        requests = pl.DataFrame({"prompt_tokens": [prompt] * batch, "output_tokens": [output] * batch})
        try:
            vidur, *_ = run_vidur(work, requests, batch)
        except SystemExit as e:  # Vidur 0.0.26 asserts on some shapes (batch 128 x 768 tokens at one stage)
            print(f"batch {batch}, prompt {prompt}, output {output}: {str(e).strip().splitlines()[-1]}", flush=True)
            continue
        last = vidur.sort("ttft_s").row(-1, named=True)
        vidur_s = (last["e2e_s"] - last["ttft_s"]) / (output - 1)
        context = prompt + output / 2
        rows.append({"batch": batch, "prompt": prompt, "output": output, "vidur_ms": 1e3 * vidur_s,
                     "rltrace_ms": 1e3 * roof.decode(batch, context).seconds,
                     "kernel_floor_ms": 1e3 * kernel_floor_s(batch, context)})
    table = pl.DataFrame(rows).with_columns(
        (pl.col("vidur_ms") / pl.col("kernel_floor_ms")).alias("vidur_over_floor"),
        (pl.col("rltrace_ms") / pl.col("kernel_floor_ms")).alias("rltrace_over_floor"))
    print("| batch | prompt | output | Vidur (ms) | rltrace (ms) | measured-kernel floor (ms) | Vidur / floor | "
          "rltrace / floor |")
    print("|---|---|---|---|---|---|---|---|")
    for r in table.iter_rows(named=True):
        print(f"| {r['batch']} | {r['prompt']:,} | {r['output']} | {r['vidur_ms']:.2f} | {r['rltrace_ms']:.2f} | "
              f"{r['kernel_floor_ms']:.2f} | {r['vidur_over_floor']:.2f} | {r['rltrace_over_floor']:.2f} |")
    print(json.dumps(table.to_dicts()))


if __name__ == "__main__":
    main()
