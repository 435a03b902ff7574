"""Views of a recorded bundle: collectives by op and size, weight-sync flows, per-request latency parts."""

from __future__ import annotations

import polars as pl

from rltrace.bundle import Bundle


def collectives(bundle: Bundle) -> pl.DataFrame:
    """op, size (power-of-two bucket of bytes_in, e.g. "64 KiB"), bucket_bytes, calls, bytes, p50_us, p99_us."""
    c = bundle.collectives.select("op", "bytes_in", (pl.col("end_ns") - pl.col("start_ns")).alias("ns"))
    exponent = pl.when(pl.col("bytes_in") > 0).then(pl.col("bytes_in").log(2).floor().cast(pl.Int64)).otherwise(-1)
    grouped = (c.with_columns(exponent.alias("exp"))
               .group_by("op", "exp").agg(pl.len().alias("calls"), pl.col("bytes_in").sum().alias("bytes"),
                                          (pl.col("ns").median() / 1e3).alias("p50_us"),
                                          (pl.col("ns").quantile(0.99) / 1e3).alias("p99_us"))
               .sort("op", "exp").collect())
    # A power of two 2^k reads as 2^(k mod 10) in the unit 1024^(k div 10): "64 KiB", "2 GiB".
    k = pl.col("exp").clip(lower_bound=0)
    label = pl.format("{} {}", pl.lit(2, pl.Int64).pow(k % 10),
                      (k // 10).replace_strict(dict(enumerate(UNITS)), default="PiB", return_dtype=pl.String))
    return grouped.select(
        "op", pl.when(pl.col("exp") >= 0).then(label).otherwise(pl.lit("0 B")).alias("size"),
        pl.when(pl.col("exp") >= 0).then(pl.lit(2, pl.Int64).pow(k)).otherwise(0).alias("bucket_bytes"),
        "calls", "bytes", "p50_us", "p99_us")


UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def weight_syncs(bundle: Bundle) -> pl.DataFrame:
    """src, dst, version, step, bytes, start_s (since the bundle's first event), duration_s, gb_per_s."""
    origin = time_origin_ns(bundle)
    return (bundle.weight_syncs.select(
        "src", "dst", "version", "step", "bytes", ((pl.col("start_ns") - origin) / 1e9).alias("start_s"),
        ((pl.col("end_ns") - pl.col("start_ns")) / 1e9).alias("duration_s"))
        .with_columns((pl.col("bytes") / pl.col("duration_s").clip(lower_bound=1e-9) / 1e9).alias("gb_per_s"))
        .sort("start_s").collect())


def latency(bundle: Bundle) -> pl.DataFrame:
    """step, requests, queue_s, prefill_s, decode_s (means per step) and p50_s, p99_s of the whole latency.

    queue = scheduled - arrival, prefill = first token - scheduled, decode = finish - first token; a request
    without a recorded schedule time counts its wait as prefill, one without a first token as decode."""
    r = bundle.requests.filter(pl.col("finish_ns").is_not_null())
    scheduled = pl.coalesce("scheduled_ns", "arrival_ns")
    first = pl.coalesce("first_token_ns", scheduled)
    parts = r.select("step", ((scheduled - pl.col("arrival_ns")) / 1e9).alias("queue_s"),
                     ((first - scheduled) / 1e9).alias("prefill_s"),
                     ((pl.col("finish_ns") - first) / 1e9).alias("decode_s"),
                     ((pl.col("finish_ns") - pl.col("arrival_ns")) / 1e9).alias("total_s"))
    return (parts.group_by("step").agg(pl.len().alias("requests"), pl.col("queue_s", "prefill_s", "decode_s").mean(),
                                       pl.col("total_s").median().alias("p50_s"),
                                       pl.col("total_s").quantile(0.99).alias("p99_s"))
            .sort("step").collect())


def time_origin_ns(bundle: Bundle) -> int:
    """The bundle's first timestamp: requests' arrivals, spans, collectives and syncs' starts."""
    firsts = [bundle.requests.select(pl.col("arrival_ns").min()), bundle.spans.select(pl.col("start_ns").min()),
              bundle.collectives.select(pl.col("start_ns").min()), bundle.weight_syncs.select(pl.col("start_ns").min())]
    values = [v for f in pl.collect_all(firsts) for v in f.row(0) if v is not None]
    return int(min(values)) if values else 0


def overview(bundle: Bundle) -> dict[str, str]:
    """The bundle's identity for the report header: every value a plain string, as the trace wrote it."""
    m = bundle.manifest
    return {"bundle": str(bundle.path), "run id": m.run_id, "source": m.source, "command": " ".join(m.command),
            "hosts": ", ".join(m.hosts), "model": m.model.name if m.model else "",
            "pools": ", ".join(f"{name}: {p.count} x {p.device} (tp {p.tp})" for name, p in m.cluster.items()),
            "notes": " | ".join(m.notes)}
