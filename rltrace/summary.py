"""What ``rltrace inspect`` reports: a bundle summarised as DataFrames and numbers (no rendering here).

All aggregation is lazy polars over the Parquet files, so large bundles are scanned by row group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from rltrace.bundle import Bundle, has_page_checksums
from rltrace.errors import ConfigError
from rltrace.manifest import Manifest
from rltrace.schema import TABLES

QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}


@dataclass(frozen=True, slots=True)
class Summary:
    """A bundle at a glance. ``to_json()`` gives the stable machine-readable form (docs/inspect.md)."""

    path: str
    manifest: Manifest
    table_rows: dict[str, int]
    per_step: pl.DataFrame
    """step, requests, output_tokens, max_output_tokens, truncated, generate_s (first arrival to last finish)"""
    output_tokens: dict[str, float | None]
    """mean, p50, p90, p99, max and max_over_median of output tokens per sample"""
    collectives_by_op: pl.DataFrame
    """op, count, bytes (message size max(bytes_in, bytes_out) summed over rows, as nccl-tests sizes; Int128,
    so no sum wraps)"""
    weight_syncs: dict[str, int]
    """count and bytes of weight-sync flows"""
    weight_syncs_by_method: pl.DataFrame
    """method, count, bytes (Int128) of the weight-sync flows per transport, most bytes first: a generator's
    reload of the copy it received (``disk``) is a flow of its own beside the transfer (``nccl``, ``gloo``)"""
    spans_by_phase: pl.DataFrame
    """phase, spans, seconds (span durations summed over actors)"""
    unchecked: tuple[str, ...] = ()
    """the bundle's Parquet files whose pages carry no checksum (written before rltrace wrote them): a flipped byte
    in them can change a value unseen"""

    def to_json(self) -> dict[str, Any]:
        """The documented JSON form; scripts rely on these keys."""
        return {
            "path": self.path,
            "run_id": self.manifest.run_id,
            "source": self.manifest.source,
            "format_version": self.manifest.format_version,
            "tables": {name: {"rows": rows} for name, rows in self.table_rows.items()},
            "requests": {
                "steps": self.per_step.height,
                "per_step": self.per_step.to_dicts(),
                "output_tokens": self.output_tokens,
            },
            "collectives": {
                "by_op": {
                    r["op"]: {"count": r["count"], "bytes": r["bytes"]} for r in self.collectives_by_op.to_dicts()
                }
            },
            "weight_syncs": {**self.weight_syncs, "by_method": {
                r["method"]: {"count": r["count"], "bytes": r["bytes"]} for r in self.weight_syncs_by_method.to_dicts()
            }},
            "page_checksums": {"missing": list(self.unchecked)},
            "spans": {
                "by_phase": {
                    r["phase"]: {"count": r["spans"], "seconds": r["seconds"]} for r in self.spans_by_phase.to_dicts()
                }
            },
        }


def summarize(bundle: Bundle) -> Summary:
    """Summarise an opened bundle (``rltrace.open(path)``)."""
    if not isinstance(bundle, Bundle):
        raise ConfigError(f"summarize takes an opened bundle (rltrace.open(path or sample name)), got "
                          f"{type(bundle).__name__}")
    names = tuple(TABLES)  # every table of the format, iterations included
    rows = pl.collect_all([bundle.table(n).select(pl.len()) for n in names])
    table_rows = {n: int(f.item()) for n, f in zip(names, rows)}

    per_step = (
        bundle.requests.group_by("step")
        .agg(
            pl.len().alias("requests"),
            pl.col("output_tokens").cast(pl.Int64).sum().alias("output_tokens"),  # int32 would wrap
            pl.col("output_tokens").max().alias("max_output_tokens"),
            (pl.col("finish_reason") == "length").sum().alias("truncated"),
            ((pl.col("finish_ns").max() - pl.col("arrival_ns").min()) / 1e9).alias("generate_s"),
        )
        .sort("step")
    )
    out = pl.col("output_tokens")
    stats = bundle.requests.select(
        out.mean().alias("mean"),
        *[out.quantile(q, interpolation="linear").alias(k) for k, q in QUANTILES.items()],
        out.max().cast(pl.Float64).alias("max"),
    )
    by_op = (
        bundle.collectives.group_by("op")
        .agg(pl.len().alias("count"), pl.max_horizontal("bytes_in", "bytes_out").cast(pl.Int128).sum().alias("bytes"))
        .sort("bytes", descending=True)
    )
    # Int128: int64 rows may sum past 2^63
    syncs = (bundle.weight_syncs.group_by("method")
             .agg(pl.len().alias("count"), pl.col("bytes").cast(pl.Int128).sum().alias("bytes"))
             .sort("bytes", "method", descending=[True, False]))
    by_phase = (
        bundle.spans.group_by("phase")
        .agg(
            pl.len().alias("spans"),
            ((pl.col("end_ns") - pl.col("start_ns")).cast(pl.Float64).sum() / 1e9).alias("seconds"),
        )
        .sort("seconds", descending=True)
    )
    per_step_df, stats_df, by_op_df, syncs_df, by_phase_df = pl.collect_all([per_step, stats, by_op, syncs, by_phase])

    output_tokens: dict[str, float | None] = {k: _num(v) for k, v in stats_df.row(0, named=True).items()}
    p50, mx = output_tokens["p50"], output_tokens["max"]
    output_tokens["max_over_median"] = mx / p50 if p50 and mx is not None else None
    return Summary(
        path=str(bundle.path),
        manifest=bundle.manifest,
        table_rows=table_rows,
        per_step=per_step_df,
        output_tokens=output_tokens,
        collectives_by_op=by_op_df,
        weight_syncs={"count": int(syncs_df["count"].sum()), "bytes": int(syncs_df["bytes"].sum() or 0)},
        weight_syncs_by_method=syncs_df,
        spans_by_phase=by_phase_df,
        unchecked=tuple(schema.file for schema in TABLES.values()
                        if has_page_checksums(bundle.path / schema.file) is False),
    )


def _num(v: Any) -> float | None:
    return None if v is None else float(v)
