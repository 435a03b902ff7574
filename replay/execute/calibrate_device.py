"""``rltrace calibrate --device cpu|cuda``: measure a grid of the model's kernels here and fit a profile.

The grid: the model's four projection GEMMs at 1 to 1,024 tokens (4,096 on CUDA), and decode attention by
batch and context (shapes whose KV read would take under 20 us at the roofline are left out, as the public
tables' fit leaves them out: they measure the launch floor). Each kernel is held against the device's roofline at 100% efficiency (compute or memory
bound names its regime) and goes through the same fit as the public H100 tables (``profile.fit_rows``), so a
profile from this machine and one from the tables load the same way (``--profile``).

Peaks: a CUDA device is matched to the GPU catalog by name (its datasheet peaks); a CPU has no datasheet
here, so its peaks are measured (the best of a large float32 matrix product, and of a large copy counting
bytes read and written) and stored in the profile (``peak_flops``, ``peak_bytes_per_s``), which lets the
roofline model a ``cpu`` device.
"""

from __future__ import annotations

import polars as pl
import torch
from rltrace.replay.costmodels.profile import ATTENTION_MIN_S, fit_rows
from rltrace.replay.execute.kernels import ModelKernels
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


def measure_grid(model: ModelSpec, device: str, spec: GPUSpec) -> pl.DataFrame:
    """tp, regime, bound_s (roofline at 100%), measured_s, kind and shape of every measured kernel."""
    k = ModelKernels(model, device, layers=1)
    dtype_bytes = 2 if device.startswith("cuda") else 4
    hd = k.hd
    gemms = [("qkv", model.hidden, (model.heads + 2 * model.kv_heads) * hd), ("o", model.heads * hd, model.hidden),
             ("gate_up", model.hidden, 2 * model.intermediate), ("down", model.intermediate, model.hidden)]
    tokens = [1, 4, 16, 64, 256, 1024] + ([4096] if device.startswith("cuda") else [])
    rows = []
    for name, kk, n in gemms:
        w = torch.randn(kk, n, device=device, dtype=k.dtype)
        for m in tokens:
            x = torch.randn(m, kk, device=device, dtype=k.dtype)
            seconds = measure(lambda x=x, w=w: x @ w, device)
            compute = 2 * m * n * kk / spec.flops
            memory = dtype_bytes * (m * kk + kk * n + m * n) / spec.hbm_bytes_per_s
            rows.append((1, "compute" if compute >= memory else "memory", max(compute, memory), seconds, "gemm",
                         f"{name}:m={m},k={kk},n={n}"))
    for batch in (1, 8, 32, 128, 256):
        for context in (128, 1024, 4096, 8192):
            kv = batch * context * 2 * model.kv_heads * hd * dtype_bytes
            if kv / spec.hbm_bytes_per_s < ATTENTION_MIN_S:
                continue  # a launch floor, not a KV read: left out as the public tables' fit leaves it out
            t = k.attention_only(batch, context)
            rows.append((1, "attention", kv / spec.hbm_bytes_per_s, t, "decode_attention", f"batch={batch},context={context}"))
    return pl.DataFrame(rows, schema={"tp": pl.Int32, "regime": pl.String, "bound_s": pl.Float64,
                                      "measured_s": pl.Float64, "kind": pl.String, "shape": pl.String}, orient="row")


def calibrate_device(model: ModelSpec, device: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(profile, measured kernel table) for ``model``'s kernels on ``device``."""
    spec = device_spec(device)
    kernels = measure_grid(model, device, spec)
    profile = fit_rows(kernels, f"measured on {device} ({model.name})", spec.name).with_columns(
        # Kernels whose data stays in a CPU's caches beat the DRAM roofline; a profile's factors stop at 1.
        pl.col("efficiency").clip(upper_bound=1.0),
        pl.lit(spec.flops).alias("peak_flops"), pl.lit(spec.hbm_bytes_per_s).alias("peak_bytes_per_s"))
    return profile, kernels
