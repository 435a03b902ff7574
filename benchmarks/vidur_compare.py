"""Peer comparison: Vidur and rltrace replay the same request trace (generation only) on the same hardware.

    python benchmarks/vidur_compare.py [--requests 2048] [--batch 32]

Workload: the first N requests of the Azure LLM inference trace 2023, conversation
(../shared/data/requests/azure_llm_2023_conv.csv; Azure/AzurePublicDataset, CC-BY-4.0), all arriving at
t = 0 (an RL rollout batch: rltrace replays steps, not arrival processes), prompts cut so prompt + output
<= 4,096 tokens (Vidur's trace generator does the same). Llama-2-7B on one H100, TP 1, at most --batch
running requests (vLLM's max_num_seqs; Vidur's batch_size_cap), 16-token KV blocks, vLLM-style scheduling.

Kernels, the same measured H100 data for both, as far as each tool takes it:

- Vidur: its own H100 profile of Llama-2-7B's MLP and norms (vidur_llama-2-7b_mlp.csv, measured by the Vidur
  authors) and its DGX H100 all-reduce / send-recv tables. Its attention profile is not public in our copy,
  so one is derived from aiconfigurator's vLLM H100 attention tables: prefill rows straight from the
  32-head, 32-KV-head, head-dim-128 bf16 context-attention kernels; decode rows from the 32-head, 8-KV-head
  bf16 generation kernels (the tables have no 32-KV-head decode), their KV-dependent part scaled by 4 for
  Llama-2-7B's 32 KV heads (decode attention reads KV: time = launch floor + KV bytes / bandwidth);
  KV-cache save time 0 (not in the tables).
- rltrace: the roofline with efficiency factors fitted to the same aiconfigurator GEMM and attention tables
  (`rltrace calibrate --tables`).

Vidur 0.0.26 downloads its profiles from the Hugging Face hub, which this machine cannot reach:
benchmarks/vidur/driver.py points its input-file lookup at the CSVs written here. Its random-forest
predictor is trained with a reduced grid (250 trees, depth 16, 2-fold) so training fits in minutes on 2
cores; training is timed apart from the simulation (the second run loads the cached models).

Vidur lives in its own virtual environment (.venv-vidur, created on first use with `pip install
vidur==0.0.26`): its dependencies (pandas, scikit-learn, wandb, streamlit...) are not rltrace's.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

import rltrace
from rltrace.catalog import get_model
from rltrace.manifest import Manifest, Pool

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
KERNELS = DATA / "kernels" / "h100"
VIDUR_VENV = REPO / ".venv-vidur"
VIDUR_VERSION = "0.0.26"
MAX_TOKENS = 4096
# Llama-2-7B (Hugging Face meta-llama/Llama-2-7b-hf config.json): hidden 4096, 32 heads, 32 KV heads.
N_EMBD, N_HEAD, N_KV_HEAD, BLOCK = 4096, 32, 32, 16


def workload(n: int) -> pl.DataFrame:
    """prompt_tokens, output_tokens of the first n Azure conversation requests, cut to MAX_TOKENS."""
    trace = pl.read_csv(DATA / "requests" / "azure_llm_2023_conv.csv").head(n)
    output = trace["GeneratedTokens"].clip(lower_bound=1)
    prompt = trace["ContextTokens"].clip(lower_bound=1)
    prompt = (prompt - (prompt + output - MAX_TOKENS).clip(lower_bound=0)).clip(lower_bound=1)
    return pl.DataFrame({"prompt_tokens": prompt, "output_tokens": output})


def vidur_attention() -> pl.DataFrame:
    """Vidur's attention profile (one row per kernel shape, times in ms per layer), derived as the module
    docstring says."""
    common = {"n_embd": N_EMBD, "n_q_head": N_HEAD, "n_kv_head": N_KV_HEAD, "block_size": BLOCK,
              "num_tensor_parallel_workers": 1}
    ctx = pl.read_parquet(KERNELS / "aic_context_attention_perf.parquet").filter(
        pl.col("num_heads") == N_HEAD, pl.col("num_key_value_heads") == N_KV_HEAD, pl.col("head_dim") == 128,
        pl.col("kv_cache_dtype") == "bfloat16", pl.col("batch_size") == 1, pl.col("isl") <= MAX_TOKENS)
    ctx = ctx.group_by("isl").agg(pl.col("latency").median())
    prefill = ctx.select(pl.lit(1).alias("batch_size"), pl.col("isl").alias("prefill_chunk_size"),
                         pl.lit(0).alias("kv_cache_size"), pl.col("latency").alias("time_stats.attn_prefill.median"),
                         pl.lit(None, pl.Float64).alias("time_stats.attn_decode.median"))
    gen = pl.read_parquet(KERNELS / "aic_generation_attention_perf.parquet").filter(
        pl.col("num_heads") == N_HEAD, pl.col("num_key_value_heads") == 8, pl.col("head_dim") == 128,
        pl.col("kv_cache_dtype") == "bfloat16", pl.col("window_size") == 0, pl.col("batch_size") <= 128,
        pl.col("step") < MAX_TOKENS)
    gen = gen.group_by("batch_size", "step").agg(pl.col("latency").median())
    floor = pl.col("latency").min().over("batch_size")  # the launch floor: the shortest context of that batch
    decode = gen.select("batch_size", pl.lit(0).alias("prefill_chunk_size"),
                        (pl.col("step") + 1).alias("kv_cache_size"),
                        pl.lit(None, pl.Float64).alias("time_stats.attn_prefill.median"),
                        (floor + (N_KV_HEAD / 8) * (pl.col("latency") - floor)).alias("time_stats.attn_decode.median"))
    rows = pl.concat([prefill.cast(decode.schema), decode])
    return rows.with_columns(*(pl.lit(v).alias(k) for k, v in common.items()),
                             pl.lit(0.0).alias("time_stats.attn_kv_cache_save.median"))


def ensure_vidur() -> Path:
    python = VIDUR_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {VIDUR_VENV} with vidur=={VIDUR_VERSION} (once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VIDUR_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"vidur=={VIDUR_VERSION}"], check=True)
    return python


def run_vidur(work: Path, requests: pl.DataFrame, batch: int) -> tuple[pl.DataFrame, float, float, bool]:
    """Vidur's per-request (ttft_s, e2e_s), its first and second wall times, and whether the first trained
    its predictor (a kept --work folder has it cached)."""
    trains = not (work / "vidur_cache").exists()
    profile = work / "vidur_profile"
    profile.mkdir(parents=True, exist_ok=True)
    shutil.copy(KERNELS / "vidur_llama-2-7b_mlp.csv", profile / "mlp.csv")
    shutil.copy(KERNELS / "vidur_h100_dgx_all_reduce.csv", profile / "all_reduce.csv")
    shutil.copy(KERNELS / "vidur_h100_dgx_send_recv.csv", profile / "send_recv.csv")
    vidur_attention().write_csv(profile / "attention.csv")
    trace = work / "vidur_trace.csv"
    requests.select(pl.lit("2023-11-16").alias("Date"), pl.lit(0.0).alias("Time"),
                    pl.col("prompt_tokens").alias("PromptTokenCount"),
                    pl.col("output_tokens").alias("CompletionTokenCount")).write_csv(trace)
    rf = "--random_forrest_execution_time_predictor_config_"
    args = ["--replica_config_device", "h100", "--replica_config_network_device", "h100_dgx",
            "--replica_config_model_name", "meta-llama/Llama-2-7b-hf", "--replica_config_tensor_parallel_size", "1",
            # Vidur 0.0.26 defaults to 2 pipeline stages (two GPUs) and 80% of GPU memory for weights and KV
            # (vidur/config/config.py ReplicaConfig): one GPU at vLLM's 90%, as rltrace runs it
            "--replica_config_num_pipeline_stages", "1", "--replica_config_gpu_memory_utilization", "0.9",
            "--cluster_config_num_replicas", "1", "--replica_scheduler_config_type", "vllm",
            "--vllm_scheduler_config_batch_size_cap", str(batch), "--vllm_scheduler_config_max_tokens_in_batch",
            str(MAX_TOKENS), "--cache_config_block_size", str(BLOCK),
            "--request_generator_config_type", "trace_replay",
            "--trace_request_generator_config_trace_file", str(trace),
            "--trace_request_generator_config_date", "2023-11-16", "--trace_request_generator_config_max_tokens",
            str(MAX_TOKENS),
            # Vidur's trace generator scales prompts by 0.3 and arrival times by 0.04 unless told otherwise
            # (vidur/config/config.py TraceRequestGeneratorConfig): replay the trace as it is
            "--trace_request_generator_config_prefill_scale_factor", "1",
            "--trace_request_generator_config_decode_scale_factor", "1",
            "--trace_request_generator_config_time_scale_factor", "1",
            "--execution_time_predictor_config_type", "random_forrest",
            f"{rf}num_estimators", "250", f"{rf}max_depth", "16", f"{rf}min_samples_split", "2",
            f"{rf}k_fold_cv_splits", "2", f"{rf}prediction_max_batch_size", str(batch),
            f"{rf}prediction_max_tokens_per_request", str(MAX_TOKENS), f"{rf}cache_dir", str(work / "vidur_cache"),
            "--no-metrics_config_store_plots", "--no-metrics_config_enable_chrome_trace",
            "--metrics_config_output_dir", str(work / "vidur_out")]
    python = ensure_vidur()
    driver = [str(python), str(REPO / "benchmarks" / "vidur" / "driver.py"), str(profile), "--", *args]
    env = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "PATH": "/usr/bin:/bin"}
    walls = []
    for _ in range(2):  # the first trains Vidur's predictor, the second loads it from the cache
        shutil.rmtree(work / "vidur_out", ignore_errors=True)
        started = time.perf_counter()
        done = subprocess.run(driver, capture_output=True, text=True, env=env, cwd=work, check=False)
        walls.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit(f"vidur failed:\n{done.stderr[-3000:]}")
    metrics = next((work / "vidur_out").rglob("request_metrics.csv"))
    m = pl.read_csv(metrics)
    return (m.select(pl.col("prefill_e2e_time").alias("ttft_s"), pl.col("request_e2e_time").alias("e2e_s")),
            walls[0], walls[1], trains)


def run_rltrace(work: Path, requests: pl.DataFrame, batch: int, profile: Path | None) -> tuple[pl.DataFrame, float]:
    """rltrace's per-request (ttft_s, e2e_s) from the real CLI, and its wall time."""
    bundle = work / f"rltrace_bundle_{requests.height}"  # by its size: a --work reused for another count
    if not bundle.exists():
        spec = get_model("Llama-2-7B")
        n = requests.height
        table = requests.with_columns(
            pl.lit(0, pl.Int32).alias("step"), pl.format("r{}", pl.int_range(n)).alias("request_id"),
            pl.format("g{}", pl.int_range(n)).alias("group_id"), pl.lit("rollout/engine0").alias("engine"),
            pl.lit(0, pl.Int64).alias("arrival_ns"), pl.lit("stop").alias("finish_reason"),
            *(pl.lit(None, pl.Int64).alias(c) for c in ("scheduled_ns", "first_token_ns", "finish_ns")),
            pl.lit(None, pl.Int32).alias("policy_version"), pl.lit(0, pl.Int32).alias("turn"),
            pl.lit(0, pl.Int32).alias("num_preemptions"))
        manifest = Manifest(run_id="azure-conv-llama2-7b", source="import",
                            cluster={"rollout": Pool(device="H100", count=1, tp=1),
                                     "trainer": Pool(device="H100", count=1, tp=1)},
                            model=spec.info())
        rltrace.write_bundle(bundle, manifest, {"requests": table})
    out = work / ("rltrace_profiled" if profile else "rltrace_default")
    cmd = [str(Path(sys.executable).parent / "rltrace"), "replay", str(bundle), "-s", "disagg-sync",
           "--max-seqs", str(batch), "--set", "cost.generation=\"roofline\"", "-o", str(out)]
    if profile:
        cmd += ["--set", f'cost.profile="{profile}"']
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"rltrace failed: {done.stderr}")
    r = pl.read_parquet(out / "disagg-sync" / "requests.parquet")
    return r.select(pl.col("first_token_s").alias("ttft_s"), pl.col("finish_s").alias("e2e_s")), wall


def row(tool: str, frame: pl.DataFrame, wall: str) -> str:
    q = {k: np.percentile(frame[c].to_numpy(), p) for k, (c, p) in {
        "ttft50": ("ttft_s", 50), "ttft99": ("ttft_s", 99), "e2e50": ("e2e_s", 50), "e2e90": ("e2e_s", 90),
        "e2e99": ("e2e_s", 99)}.items()}
    makespan = float(frame["e2e_s"].max())
    return (f"| {tool} | {wall} | {makespan:.1f} | {q['ttft50']:.2f} | {q['ttft99']:.2f} | {q['e2e50']:.1f} | "
            f"{q['e2e90']:.1f} | {q['e2e99']:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=32,
                        help="batch cap (Vidur 0.0.26 at one stage fails once it must preempt: "
                             "keep the KV cache from overflowing)")
    parser.add_argument("--work", type=Path, default=REPO / ".vidur_compare", help="scratch folder (kept: caches)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    requests = workload(args.requests)
    profile = args.work / "h100_profile.parquet"
    subprocess.run([str(Path(sys.executable).parent / "rltrace"), "calibrate", "--tables", str(KERNELS), "-o",
                    str(profile)], check=True, capture_output=True)
    vidur, first_s, second_s, trained = run_vidur(args.work, requests, args.batch)
    ours, ours_s = run_rltrace(args.work, requests, args.batch, profile)
    default, default_s = run_rltrace(args.work, requests, args.batch, None)
    tokens = int(requests["output_tokens"].sum())
    print(f"{requests.height} Azure conv requests ({tokens:,} output tokens, prompt p50 "
          f"{requests['prompt_tokens'].median():.0f}), Llama-2-7B, 1 x H100, batch <= {args.batch}; "
          f"{platform.machine()} {platform.system()}, Python {sys.version.split()[0]}")
    print("| tool | wall time (s) | makespan (s) | TTFT p50 (s) | TTFT p99 (s) | latency p50 (s) | p90 | p99 |")
    print("|---|---|---|---|---|---|---|---|")
    first = f"{first_s:.0f} with predictor training" if trained else f"first run {first_s:.1f}, predictor cached"
    print(row(f"Vidur {VIDUR_VERSION}", vidur, f"{second_s:.1f} ({first})"))
    print(row("rltrace, efficiencies fitted to the H100 tables", ours, f"{ours_s:.1f}"))
    print(row("rltrace, default efficiencies", default, f"{default_s:.1f}"))
    print(json.dumps({"vidur_makespan_s": float(vidur["e2e_s"].max()),
                      "rltrace_makespan_s": float(ours["e2e_s"].max())}))


if __name__ == "__main__":
    main()
