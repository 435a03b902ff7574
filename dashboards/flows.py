"""Recorded weight-sync flows: when each flow ran, how long, how fast."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from rltrace.dashboards.page import color, esc, layout


def figure(flows: pl.DataFrame) -> go.Figure:
    """One marker per flow: x = start, y = duration, one colour per source -> destination pair."""
    fig = go.Figure()
    pairs = flows.select("src", "dst").unique(maintain_order=True)
    for i, (src, dst) in enumerate(pairs.iter_rows()):  # one trace per endpoint pair: a handful
        mine = flows.filter(pl.col("src") == src, pl.col("dst") == dst)
        name = f"{esc(src)} → {esc(dst)}"
        fig.add_scatter(x=mine["start_s"].to_numpy(), y=mine["duration_s"].to_numpy(), mode="markers", name=name,
                        marker={"color": color("", i), "size": 9}, customdata=mine.select("version", "bytes", "gb_per_s").to_numpy(),
                        hovertemplate="v%{customdata[0]}: %{customdata[1]:,} B in %{y:.4f} s "
                                      "(%{customdata[2]:.2f} GB/s)<extra>" + name + "</extra>")
    fig.update_layout(showlegend=True)  # even for one pair: the legend names its endpoints
    fig.update_xaxes(title_text="start (s since the bundle's first event)")
    fig.update_yaxes(title_text="duration (s)", rangemode="tozero")
    return layout(fig, "Recorded weight-sync flows")
