"""Recorded weight-sync flows: when each flow ran, how long, how fast."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from rltrace.dashboards.page import color, esc, layout

MAX_PAIRS = 8
"""more source -> destination pairs than this are drawn one trace per source"""


def figure(flows: pl.DataFrame) -> go.Figure:
    """One marker per flow: x = start, y = duration, one colour per source -> destination pair."""
    fig = go.Figure()
    pairs = flows.select("src", "dst").unique(maintain_order=True)
    if pairs.height > MAX_PAIRS:  # a broadcast to many generators: one trace per source, not a legend of 16
        counts = pairs.group_by("src", maintain_order=True).agg(pl.len().alias("n"))
        pairs = counts.select("src", pl.lit(None, pl.String).alias("dst"))
        fanout = dict(counts.iter_rows())
    for i, (src, dst) in enumerate(pairs.iter_rows()):  # one trace per endpoint pair (or source): a handful
        if dst is None:
            mine = flows.filter(pl.col("src") == src)
            name = f"{esc(src)} → {fanout[src]} destinations"
        else:
            mine = flows.filter(pl.col("src") == src, pl.col("dst") == dst)
            name = f"{esc(src)} → {esc(dst)}"
        fig.add_scatter(x=mine["start_s"].to_numpy(), y=mine["duration_s"].to_numpy(), mode="markers", name=name,
                        marker={"color": color("", i), "size": 9},
                        customdata=mine.select("version", "bytes", "gb_per_s").to_numpy(),
                        hovertemplate="v%{customdata[0]}: %{customdata[1]:,} B in %{y:.4f} s "
                                      "(%{customdata[2]:.2f} GB/s)<extra>" + name + "</extra>")
    fig.update_layout(showlegend=True)  # even for one pair: the legend names its endpoints
    fig.update_xaxes(title_text="start (s since the bundle's first event)")
    fig.update_yaxes(title_text="duration (s)", rangemode="tozero")
    return layout(fig, "Recorded weight-sync flows")
