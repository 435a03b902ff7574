"""Efficiency profiles: the roofline's factors fitted to measured kernel tables, stored as calibration files
(TOML) or Parquet.

``fit_kernel_tables`` reads the public H100 tables (../shared/data/kernels/h100, see its README):

- Vidur's per-layer projection GEMMs of Llama-2-7B at TP 1-8 (microsoft/vidur, MIT);
- aiconfigurator's bf16 GEMM sweep (m, n, k) and decode-attention sweep (ai-dynamo/aiconfigurator, Apache-2.0).

Each kernel is held against the roofline at 100% efficiency; the bound it hits (compute or memory) names
its regime, and the median achieved fraction per (tp, regime) is the fitted factor. The fit error is the
median |predicted - measured| / measured latency with that factor. A profile is a table with one row per
(gpu, tp, regime, source), stored as a calibration file (TOML, the shipped calibration's format: one entry per
figure, :func:`profile_entries`) or as Parquet; ``load_profile`` reads either, and ``factors`` turns it into the
factors a :class:`Roofline` takes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
from rltrace.replay.costmodels.iteration import Linear

from rltrace import calibration
from rltrace.catalog import GPUSpec, ModelSpec, get_gpu, get_model
from rltrace.errors import ConfigError
from rltrace.limits import check_input
from rltrace.units import DTYPE_BYTES

PROFILE_COLUMNS = {"gpu": pl.String, "tp": pl.Int32, "regime": pl.String, "efficiency": pl.Float64,
                   "kernels": pl.Int64, "median_abs_error": pl.Float64, "source": pl.String}
PROFILE_UNITS = {"efficiency": "fraction of the roofline bound", "peak_flops": "FLOP/s", "peak_bytes_per_s": "B/s",
                 "overhead_base_s": "s", "overhead_per_seq_s": "s per sequence", "bytes_per_s": "B/s"}
"""a profile's figures: each one a calibration entry"""
PROFILE_RATES = ("peak_flops", "peak_bytes_per_s", "bytes_per_s")
"""figures that must be above 0 (the times, ``overhead_*_s``, at or above 0)"""
PROFILE_KINDS = {"peak_flops": "measured", "peak_bytes_per_s": "measured"}
"""figures read off a measurement; every other one is fitted"""
ATTENTION_MIN_S = 20e-6  # below this the decode-attention kernels sit at their launch floor, not HBM


STREAM_MAX_M = 16  # rows of a decode-sized GEMM: <= 16 FLOP per byte, far below either dtype's ridge


def gemm_regime(rows: pl.Expr, compute_s: pl.Expr, memory_s: pl.Expr) -> pl.Expr:
    """A GEMM's regime from its ``rows`` (tokens: a TP rank splits the weights, not the rows) and its roofline bounds
    at 100%: ``compute`` where its FLOPs outlast its bytes; ``memory`` for a decode-sized GEMM (<=
    :data:`STREAM_MAX_M` rows) whose bytes outlast its FLOPs; ``ridge`` between the two, where a kernel reaches
    neither bound (on the H100 tables its achieved fraction falls from about 0.8 at 16 rows to under 0.5 near the
    ridge), so it prices neither factor (:func:`fit_rows`)."""
    return (pl.when(compute_s >= memory_s).then(pl.lit("compute"))
            .when(rows <= STREAM_MAX_M).then(pl.lit("memory")).otherwise(pl.lit("ridge")))


def fit_rows(frame: pl.DataFrame, source: str, gpu: str, *, cap: bool = False) -> pl.DataFrame:
    """``frame`` has tp, regime, bound_s (roofline at 100%) and measured_s; one profile row per (tp, regime). Ridge
    GEMMs (:func:`gemm_regime`) are left out: the profile's GEMM form prices each kernel at one bound, which a kernel
    between the bounds does not reach (a median over decode-sized and ridge kernels together puts Vidur's H100
    decode-sized projections 35-45% too slow). A measured time that is not a positive number, or a factor above 1
    (the kernels ran faster than ``gpu``'s datasheet allows: timed on another part), is a ConfigError; with ``cap``
    a factor stops at 1 instead (a device's own kernels whose data stays in its caches beat its DRAM bound)."""
    bad = frame.filter(~pl.col("measured_s").is_finite() | (pl.col("measured_s") <= 0))
    if bad.height:
        raise ConfigError(f"{source}: {bad.height:,} kernel time(s) are not positive numbers (first: "
                          f"{bad['measured_s'][0]} s)")
    achieved = (frame.filter(pl.col("regime") != "ridge")
                .with_columns((pl.col("bound_s") / pl.col("measured_s")).alias("eff")))
    if not achieved.height:
        raise ConfigError(f"{source}: no kernel at either bound (every GEMM between the two, no attention)")
    per = achieved.group_by("tp", "regime").agg(pl.col("eff").median().alias("efficiency"), pl.len().alias("kernels"))
    fast = per.filter(pl.col("efficiency") > 1)
    if cap:
        per = per.with_columns(pl.col("efficiency").clip(upper_bound=1.0))
    elif fast.height:
        row = fast.row(0, named=True)
        raise ConfigError(f"{source}: {row['regime']} kernels at tp {row['tp']} run at {row['efficiency']:.2f}x "
                          f"{gpu}'s datasheet bound: timed on another part (give the GPU they ran on)")
    # the error of the factor the profile keeps (capped, where it is)
    errors = achieved.join(per, on=["tp", "regime"]).group_by("tp", "regime").agg(
        ((pl.col("bound_s") / pl.col("efficiency") - pl.col("measured_s")).abs() / pl.col("measured_s"))
        .median().alias("median_abs_error"))
    return per.join(errors, on=["tp", "regime"]).select(
        pl.lit(gpu).alias("gpu"), pl.col("tp").cast(pl.Int32), "regime", "efficiency",
        pl.col("kernels").cast(pl.Int64), "median_abs_error", pl.lit(source).alias("source"))


_VIDUR_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")


def _vidur(path: Path, model: ModelSpec, gpu: GPUSpec) -> pl.DataFrame:
    ops = _VIDUR_OPS
    linear = model.layer_params - 2 * model.hidden  # the four projections; norms are not GEMMs
    frame = pl.read_csv(path).select(
        pl.col("num_tokens").alias("tokens"), pl.col("num_tensor_parallel_workers").alias("tp"),
        (pl.sum_horizontal(*[pl.col(f"time_stats.{op}.median") for op in ops]) / 1e3).alias("measured_s"),
    ).drop_nulls()
    compute = 2 * linear * pl.col("tokens") / (pl.col("tp") * gpu.flops)
    memory = linear * model.dtype_bytes / (pl.col("tp") * gpu.hbm_bytes_per_s)
    return frame.with_columns(pl.max_horizontal(compute, memory).alias("bound_s"),
                              gemm_regime(pl.col("tokens"), compute, memory).alias("regime"))


def _aic_gemm(path: Path, gpu: GPUSpec) -> pl.DataFrame:
    m, n, k = pl.col("m"), pl.col("n"), pl.col("k")
    compute = 2 * m * n * k / gpu.flops
    memory = 2 * (m * k + k * n + m * n) / gpu.hbm_bytes_per_s
    return (
        pl.scan_parquet(path).filter(pl.col("gemm_dtype") == "bfloat16")
        .select((pl.col("latency") / 1e3).alias("measured_s"), pl.lit(1).alias("tp"),
                pl.max_horizontal(compute, memory).alias("bound_s"), gemm_regime(m, compute, memory).alias("regime"))
        .collect()
    )


def _aic_attention(path: Path, gpu: GPUSpec) -> pl.DataFrame:
    # decode attention reads K and V of every context token: batch x context x 2 x kv_heads x head_dim x 2 B
    kv_bytes = pl.col("batch_size") * pl.col("step") * 2 * pl.col("num_key_value_heads") * pl.col("head_dim") * 2
    return (
        pl.scan_parquet(path).filter(pl.col("kv_cache_dtype") == "bfloat16", pl.col("window_size") == 0)
        .select((pl.col("latency") / 1e3).alias("measured_s"), pl.lit(1).alias("tp"),
                (kv_bytes / gpu.hbm_bytes_per_s).alias("bound_s"), pl.lit("attention").alias("regime"))
        .filter(pl.col("bound_s") >= ATTENTION_MIN_S)
        .collect()
    )


POSITIVE_COLUMNS = {
    "vidur_llama-2-7b_mlp.csv": ("num_tokens", "num_tensor_parallel_workers",
                                 *(f"time_stats.{op}.median" for op in _VIDUR_OPS)),
    "aic_gemm_perf.parquet": ("m", "n", "k", "latency"),
    "aic_generation_attention_perf.parquet": ("batch_size", "step", "num_key_value_heads", "head_dim", "latency"),
}
"""each kernel table's shapes and times, which must be positive numbers where given (a null row is skipped)"""


def _not_positive(column: str) -> pl.Expr:
    """A given value of ``column`` that is not a finite positive number (text that is no number, NaN, inf, <= 0)."""
    x = pl.col(column).cast(pl.Float64, strict=False)
    return pl.col(column).is_not_null() & ~((x > 0) & x.is_finite()).fill_null(False)


def _check_positive(path: Path, columns: tuple[str, ...]) -> None:
    """A ConfigError naming the first shape or time in ``columns`` of ``path`` that is not a positive number (rows
    counted from 1): a negative token count or TP, or one negative op time among four, would otherwise be fitted
    without a word. A table with no rows, or numbers stored as text, is refused too: the fit's arithmetic would
    fail on it with the reader's words, which name no column."""
    frame = (pl.scan_csv(path) if path.suffix == ".csv" else pl.scan_parquet(path))
    schema = frame.collect_schema()
    present = [c for c in columns if c in schema]  # a missing one: the conversion names it
    if not present:
        return
    if not frame.select(pl.len()).collect().item():
        raise ConfigError(f"{path}: no data rows")
    bad = (frame.select(present).with_row_index("row", offset=1)
           .filter(pl.any_horizontal(_not_positive(c) for c in present)).head(1).collect())
    if bad.height:
        first = next(c for c in present if bad.select(_not_positive(c)).item())
        raise ConfigError(f"{path}, column {first!r}, data row {bad['row'][0]:,}: {bad[first][0]} is not a positive "
                          "number")
    empty = next((c for c in present if not frame.select(pl.col(c).is_not_null().any()).collect().item()), None)
    if empty is not None:
        raise ConfigError(f"{path}, column {empty!r}: has no values")
    text = next((c for c in present if not schema[c].is_numeric()), None)
    if text is not None:
        raise ConfigError(f"{path}, column {text!r}: numbers stored as {schema[text]} values; write them as numbers")


def kernel_tables(directory: str | Path, gpu: str = "H100") -> pl.DataFrame:
    """The public kernel tables in ``directory`` converted to measured-kernel rows (source, tp, regime,
    bound_s, measured_s): the same rows ``rltrace calibrate --device`` measures, so both fit the same way."""
    root = Path(directory)
    spec = get_gpu(gpu)
    parts = []
    tables: tuple[tuple[str, str, Callable[[Path], pl.DataFrame]], ...] = (
        ("vidur_llama-2-7b_mlp.csv", "vidur_llama-2-7b_mlp.csv", lambda p: _vidur(p, get_model("Llama-2-7B"), spec)),
        ("aic_gemm_perf.parquet", "aic_gemm_perf.parquet (bf16)", lambda p: _aic_gemm(p, spec)),
        ("aic_generation_attention_perf.parquet", "aic_generation_attention_perf.parquet (bf16 KV)",
         lambda p: _aic_attention(p, spec)),
    )
    if not root.is_dir():
        what = "a file" if root.exists() else "no such folder"
        raise ConfigError(f"{root}: {what} (--tables is a folder of kernel tables)")
    for name, label, convert in tables:
        if (root / name).exists():
            _check_device(root / name, spec)
            try:
                _check_positive(root / name, POSITIVE_COLUMNS[name])
                rows = convert(root / name)
            except (OSError, pl.exceptions.PolarsError) as e:  # the reader's words: what is wrong with the table
                raise ConfigError(f"{root / name}: not a readable kernel table "
                                  f"({str(e).splitlines()[0] or type(e).__name__})") from None
            if not rows.height:
                raise ConfigError(f"{root / name}: no kernels the fit reads (bf16 GEMMs, bf16-KV decode attention "
                                  "or Vidur projection rows)")
            parts.append(rows.select(pl.lit(label).alias("source"), pl.col("tp").cast(pl.Int32), "regime", "bound_s",
                                     "measured_s"))
    if not parts:
        raise ConfigError(f"{root}: no kernel tables found (vidur_llama-2-7b_mlp.csv, aic_gemm_perf.parquet, "
                          "aic_generation_attention_perf.parquet)")
    return pl.concat(parts)


def _check_device(path: Path, spec: GPUSpec) -> None:
    """Refuse an aiconfigurator table whose ``device`` column names another part than ``spec``."""
    if path.suffix != ".parquet":
        return
    try:
        devices = pl.read_parquet(path, columns=["device"])["device"].unique().to_list()
    except (OSError, pl.exceptions.PolarsError):
        return  # no device column: the conversion says what is wrong, if anything
    part = re.compile(rf"(?<![a-z0-9]){re.escape(spec.name.lower())}(?![a-z0-9])")  # H20 is not in H200's name
    other = [d for d in devices if d and not part.search(str(d).lower())]
    if other:
        raise ConfigError(f"{path}: measured on {other[0]}, not {spec.name} (give --gpu the part the table ran on)")


def fit_kernel_tables(directory: str | Path, gpu: str = "H100") -> pl.DataFrame:
    """A profile fitted to the public kernel tables in ``directory`` (whichever of them it holds)."""
    rows = kernel_tables(directory, gpu)
    parts = [fit_rows(group, source, get_gpu(gpu).name)
             for (source,), group in rows.group_by("source", maintain_order=True)]
    return pl.concat(parts).sort("source", "tp", "regime")


# aiconfigurator's gemm_dtype -> weight bytes (fp8: per-tensor scaled)
_AIC_DTYPES = {name: DTYPE_BYTES[name] for name in ("bfloat16", "fp8")}


def _gemms_by_dtype(table: pl.DataFrame, dtypes: Mapping[str, int] = _AIC_DTYPES,
                    ) -> Iterator[tuple[str, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Per GEMM dtype of ``dtypes`` the table holds: (dtype, weight bytes, m, n, k, seconds) of its kernels."""
    for dtype, wb in dtypes.items():
        one = table.filter(pl.col("gemm_dtype") == dtype)
        if one.height:
            m, n, k = (one[c].to_numpy().astype(float) for c in ("m", "n", "k"))
            yield dtype, wb, m, n, k, one["latency"].to_numpy() * 1e-3


def fit_gemm_stream(path: str | Path, gpu: str = "H100") -> pl.DataFrame:
    """A memory-bound GEMM's time as ``ramp + bytes / (efficiency x HBM)``, fitted per weight dtype to the m <=
    :data:`STREAM_MAX_M` kernels of aiconfigurator's GEMM table at ``path`` (least squares in relative error,
    so small and large kernels weigh alike); one row per dtype: weight_bytes, ramp_s, efficiency, kernels and
    the fit's median |error|. The calibration's ``gemm_stream_*`` entries hold this fit of the H100 table."""
    hbm = get_gpu(gpu).hbm_bytes_per_s
    rows = []
    for _, wb, m, n, k, seconds in _gemms_by_dtype(pl.read_parquet(path).filter(pl.col("m") <= STREAM_MAX_M)):
        nbytes = n * k * wb + m * (k + n) * 2  # weights, plus BF16 activations in and out
        (ramp, per_byte), *_ = np.linalg.lstsq(np.stack([1 / seconds, nbytes / seconds], 1), np.ones_like(seconds),
                                               rcond=None)
        error = np.abs((ramp + per_byte * nbytes) / seconds - 1)
        rows.append({"weight_bytes": wb, "ramp_s": float(ramp), "efficiency": float(1 / (per_byte * hbm)),
                     "kernels": len(seconds), "median_abs_error": float(np.median(error))})
    if not rows:
        raise ConfigError(f"{path}: no bfloat16 or fp8 GEMMs with m <= {STREAM_MAX_M}")
    return pl.DataFrame(rows)


def fit_gemm_compute(path: str | Path, gpu: str = "H100", dtypes: Mapping[str, int] = _AIC_DTYPES) -> pl.DataFrame:
    """The share of its own peak a compute-bound GEMM reaches, per GEMM dtype, in aiconfigurator's GEMM table at
    ``path`` timed on ``gpu``: the median of ``2 m n k / peak / latency`` over the kernels whose FLOPs at the peak
    outlast their bytes (weights at the dtype's width, BF16 activations in and out) at full HBM bandwidth; a 2-byte
    dtype against the BF16 peak, a 1-byte one (``dtypes`` maps aiconfigurator's ``gemm_dtype`` to weight bytes:
    per-tensor ``fp8`` by default, ``fp8_block`` on request) against the FP8 peak. One row per dtype the table
    holds: dtype, weight_bytes, share, kernels. The calibration's ``fp8_gemm_share`` is the fp8 row over the bfloat16
    row of the H100 table. A 1-byte dtype on a part without FP8 cores, a dtype without a compute-bound kernel, or a
    share above 1 (the table was timed on another part) is a ConfigError."""
    part = get_gpu(gpu)
    one_byte = [dtype for dtype, wb in dtypes.items() if wb == 1]
    if one_byte and not part.fp8_tflops:
        raise ConfigError(f"{part.name} has no FP8 peak to hold {', '.join(one_byte)} GEMMs against")
    rows = []
    for dtype, wb, m, n, k, seconds in _gemms_by_dtype(pl.read_parquet(path), dtypes):
        compute = 2 * m * n * k / part.flops_for(wb)
        bound = compute >= (n * k * wb + m * (k + n) * 2) / part.hbm_bytes_per_s
        if not bound.any():
            raise ConfigError(f"{path}: no compute-bound {dtype} GEMM on {part.name}")
        share = float(np.median(compute[bound] / seconds[bound]))
        if share > 1:
            raise ConfigError(f"{path}: {dtype} GEMMs run at {share:.2f}x {part.name}'s peak: timed on another part")
        rows.append({"dtype": dtype, "weight_bytes": wb, "share": share, "kernels": int(bound.sum())})
    if not rows:
        raise ConfigError(f"{path}: no GEMMs of {', '.join(dtypes)}")
    return pl.DataFrame(rows)


ELEMENTWISE_MIN_TOKENS = 512  # below this Vidur's elementwise ops sit on their launch floor (4 us), not HBM


def fit_elementwise_stream(path: str | Path, gpu: str = "H100") -> pl.DataFrame:
    """The fraction of HBM the elementwise ops of a layer reach in Vidur's per-op table at ``path`` (its
    ``mlp.csv``: median ms by token count and TP size) once they stream (>= :data:`ELEMENTWISE_MIN_TOKENS` tokens),
    each op's bytes as its kernel moves them in BF16: RMSNorm reads and writes ``tokens x hidden``; rotary, in place,
    reads and writes q and k (``tokens x (heads + kv heads) x head_dim / tp``); SiLU-and-mul reads ``2 x tokens x
    intermediate / tp`` and writes half; the residual add reads two ``tokens x hidden`` and writes one. One row per
    op: op, rows, median, min, max. The calibration's ``elementwise_stream`` is the median over the ops of the H100
    table."""
    hbm = get_gpu(gpu).hbm_bytes_per_s
    t = pl.read_csv(path).filter(pl.col("num_tokens") >= ELEMENTWISE_MIN_TOKENS)
    if not t.height:
        raise ConfigError(f"{path}: no rows of {ELEMENTWISE_MIN_TOKENS} tokens or more")
    tokens, tp, hidden = pl.col("num_tokens"), pl.col("num_tensor_parallel_workers"), pl.col("n_embd")
    qk = (pl.col("n_head") + pl.col("n_kv_head")) * hidden / pl.col("n_head") / tp
    moved = {"input_layernorm": 2 * tokens * hidden, "post_attention_layernorm": 2 * tokens * hidden,
             "attn_rope": 2 * tokens * qk, "mlp_act": 3 * tokens * pl.col("n_expanded_embd") / tp,
             "add": 3 * tokens * hidden}
    share = [(2 * values / (pl.col(f"time_stats.{op}.median") * 1e-3) / hbm).alias(op) for op, values in moved.items()]
    long = t.select(share).unpivot(variable_name="op", value_name="fraction")
    return (long.group_by("op", maintain_order=True)
            .agg(pl.len().alias("rows"), pl.col("fraction").median().alias("median"),
                 pl.col("fraction").min().alias("min"), pl.col("fraction").max().alias("max")))


@dataclass(frozen=True, slots=True)
class Factors:
    """Roofline factors for one GPU kind and TP degree, from a profile."""

    compute_efficiency: float
    memory_efficiency: float
    attention_efficiency: float | None
    engine_overhead: Linear = field(default_factory=Linear)
    """per-iteration serving-engine time (an "engine" row: ``overhead_base_s + overhead_per_seq_s x batch``)"""


def device_from_profile(profile: pl.DataFrame, name: str) -> GPUSpec | None:
    """The peaks a profile measured for a device the catalog lacks (``rltrace calibrate --device cpu``)."""
    if "peak_flops" not in profile.columns:
        return None
    rows = profile.filter(pl.col("gpu").str.to_lowercase() == name.lower(), pl.col("peak_flops").is_not_null())
    if not rows.height:
        return None
    return GPUSpec(name=name, bf16_tflops=float(rows["peak_flops"][0]) / 1e12,
                   hbm_gbps=float(rows["peak_bytes_per_s"][0]) / 1e9, memory_gb=1.0, nvlink_gbps=1.0,
                   source="peaks measured by rltrace calibrate --device")


def broadcast_bytes_per_s(profile: pl.DataFrame) -> float | None:
    """The broadcast bandwidth a profile measured (``calibrate --device ... --ranks N``), if any."""
    if "bytes_per_s" not in profile.columns:
        return None
    rows = profile.filter(pl.col("regime") == "collective:broadcast")
    return float(rows["bytes_per_s"][0]) if rows.height else None


def profile_entries(profile: pl.DataFrame, fit: str, data: str) -> list[calibration.Constant]:
    """A profile as calibration entries: one per figure of each row, named ``<gpu>.tp<tp>.<regime>.<figure>``,
    each scoped by the row's gpu, tp and regime (and its kernel count and fit error); ``fit`` is the command
    that fitted it, ``data`` what it was fitted on."""
    entries: list[calibration.Constant] = []
    taken: set[str] = set()
    for index, row in enumerate(profile.iter_rows(named=True)):
        scope = {"gpu": row["gpu"], "tp": row["tp"], "regime": row["regime"], "row": index,
                 "kernels": row["kernels"], "median_abs_error": row["median_abs_error"]}
        for figure, unit in PROFILE_UNITS.items():
            if row.get(figure) is None:
                continue
            name = base = f"{row['gpu']}.tp{row['tp']}.{row['regime']}.{figure}"
            while name in taken:  # two sources for one (gpu, tp, regime): the later one gets the row number
                name = f"{base}.row{index}"
            taken.add(name)
            entries.append(calibration.Constant(
                name, float(row[figure]), unit, PROFILE_KINDS.get(figure, "fitted"), row["source"], fit, data, "",
                {**scope, "figure": figure}))
    return entries


SCOPE_TYPES: dict[str, type | tuple[type, ...]] = {"gpu": str, "tp": int, "regime": str, "row": int, "figure": str,
                                                   "kernels": int, "median_abs_error": (int, float)}
"""the keys that scope a profile figure, and their TOML types (kernels and median_abs_error may be left out)"""


def _scope(path: Path, c: calibration.Constant) -> dict[str, str | int | float]:
    """A profile entry's scope, checked: every key of the right type, the figure one of :data:`PROFILE_UNITS`."""
    missing = [key for key in ("gpu", "tp", "regime", "row", "figure") if key not in c.extra]
    if missing or c.extra["figure"] not in PROFILE_UNITS:
        raise ConfigError(f"{path}: constant {c.name} is not a profile figure (it needs gpu, tp, regime, row and "
                          f"figure, one of {', '.join(PROFILE_UNITS)})")
    for key, kind in SCOPE_TYPES.items():
        value = c.extra.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
            raise ConfigError(f"{path}: constant {c.name}: {key} must be {'a number' if kind != str else 'a string'}"
                              f"{' (an integer)' if kind is int else ''}, got {value!r}")
    return dict(c.extra)


def _profile_from_calibration(path: Path) -> pl.DataFrame:
    rows: dict[int, dict[str, str | int | float]] = {}
    for c in calibration.load([path]).constants.values():
        scope = _scope(path, c)
        own = {"gpu": scope["gpu"], "tp": scope["tp"], "regime": scope["regime"],
               "kernels": scope.get("kernels", 0), "median_abs_error": float(scope.get("median_abs_error", 0.0)),
               "source": c.source}
        row = rows.setdefault(int(scope["row"]), own)
        if any(row[key] != own[key] for key in ("gpu", "tp", "regime", "source")):
            raise ConfigError(f"{path}: constant {c.name} is in row {scope['row']} with another gpu, tp, regime or "
                              "source than that row's other figures")
        if scope["figure"] in row:
            raise ConfigError(f"{path}: row {scope['row']} gives {scope['figure']} twice (constant {c.name})")
        row[str(scope["figure"])] = c.value
    if not rows:
        raise ConfigError(f"{path}: a profile needs at least one constant")
    lacking = next((r for r in rows.values() if "efficiency" not in r), None)
    if lacking is not None:
        raise ConfigError(f"{path}: the row of {lacking['gpu']} tp {lacking['tp']} {lacking['regime']} has no "
                          "efficiency figure")
    frame = pl.DataFrame([rows[k] for k in sorted(rows)], schema_overrides=PROFILE_COLUMNS, infer_schema_length=None)
    figures = [f for f in PROFILE_UNITS if f in frame.columns and f not in PROFILE_COLUMNS]
    return frame.select(*PROFILE_COLUMNS, *figures)


def profile_files(path: str | Path) -> Mapping[str, Mapping[str, int | str | None]]:
    """What a run records of the profile it used: its path with its version (TOML; Parquet has none) and digest."""
    p = Path(path)
    if p.suffix == ".toml":
        return {str(path): described for described in calibration.load([p]).describe().values()}
    return {str(path): {"version": None, "sha256": calibration.file_digest(p)}}


def load_profile(path: str | Path) -> pl.DataFrame:
    """Read and check a profile: a calibration file (TOML) from ``rltrace calibrate``, or Parquet."""
    check_input(path)
    if Path(path).suffix == ".toml":
        frame = _profile_from_calibration(Path(path))
    else:
        try:
            frame = pl.read_parquet(path)
        except (OSError, pl.exceptions.PolarsError) as e:  # the reader's own words: what is wrong with the file
            raise ConfigError(f"{path}: not a readable profile ({str(e).splitlines()[0] or type(e).__name__})") \
                from None
    missing = [c for c in PROFILE_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(f"{path}: not a profile, missing column {missing[0]!r}")
    bad = frame.filter(pl.col("efficiency").is_null() | ~pl.col("efficiency").is_between(0, 1, closed="right"))
    if bad.height:
        raise ConfigError(f"{path}, column 'efficiency', row {bad.row(0, named=True)}: must be in (0, 1]")
    for figure in (f for f in PROFILE_UNITS if f != "efficiency" and f in frame.columns):
        value = pl.col(figure).cast(pl.Float64, strict=False)  # null where a row lacks the figure, or not a number
        low = value > 0 if figure in PROFILE_RATES else value >= 0
        wrong = frame.filter(pl.col(figure).is_not_null() & ~(value.is_finite() & low).fill_null(False))
        if wrong.height:
            row = wrong.row(0, named=True)
            raise ConfigError(f"{path}, {figure} of the {row['gpu']} tp {row['tp']} {row['regime']} row: must be a "
                              f"finite number {'above' if figure in PROFILE_RATES else 'at or above'} 0, got "
                              f"{row[figure]}")
    return frame


def factors(profile: pl.DataFrame, gpu: str, tp: int) -> Factors:
    """The factors for ``gpu`` at ``tp``: GEMM rows at that TP (Vidur's, which cover TP > 1, first), else at
    TP 1; attention at TP 1 (a TP rank's attention kernel is the same kernel on fewer heads)."""
    rows = profile.filter(pl.col("gpu").str.to_lowercase() == gpu.lower())
    if not rows.height:
        raise ConfigError(f"the profile has no rows for GPU {gpu!r} (it has: {', '.join(sorted(set(profile['gpu'])))})")

    def pick(regime: str) -> float | None:
        for want in (tp, 1):
            hit = rows.filter(pl.col("regime") == regime, pl.col("tp") == want).sort("source", descending=True)
            if hit.height:
                return float(hit["efficiency"][0])
        return None

    compute, memory = pick("compute"), pick("memory")
    if compute is None or memory is None:
        raise ConfigError(f"the profile lacks compute or memory GEMM rows for {gpu}")
    engine = rows.filter(pl.col("regime") == "engine")
    overhead = Linear()
    if engine.height and "overhead_base_s" in engine.columns:
        overhead = Linear(base=float(engine["overhead_base_s"][0]), per_seq=float(engine["overhead_per_seq_s"][0]))
    return Factors(compute, memory, pick("attention"), overhead)
