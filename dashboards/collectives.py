"""Recorded collectives: calls and median latency by op and size bucket."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots
from rltrace.dashboards.page import color, esc, esc_all, layout


def figure(by_op: pl.DataFrame) -> go.Figure:
    """Top: calls per size bucket, one colour per op; bottom: median (and p99) latency per bucket."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("calls (all ranks)", "latency per call (us)"))
    order = by_op.select("size", "bucket_bytes").unique().sort("bucket_bytes")["size"].to_list()
    for i, op in enumerate(by_op["op"].unique().sort().to_list()):
        mine = by_op.filter(pl.col("op") == op)
        name = esc(op)
        fig.add_bar(x=esc_all(mine["size"]), y=mine["calls"].to_numpy(), name=name, legendgroup=name,
                    marker_color=color("", i), row=1, col=1)
        fig.add_scatter(x=esc_all(mine["size"]), y=mine["p50_us"].to_numpy(), name=name, legendgroup=name,
                        showlegend=False, mode="markers", marker={"color": color("", i), "size": 9},
                        error_y={"type": "data", "symmetric": False,
                                 "array": (mine["p99_us"] - mine["p50_us"]).to_numpy(),
                                 "arrayminus": [0] * mine.height},
                        hovertemplate="%{x}: p50 %{y:.1f} us<extra>" + name + "</extra>", row=2, col=1)
    fig.update_xaxes(categoryorder="array", categoryarray=esc_all(order), title_text="bytes in (power-of-two bucket)",
                     row=2, col=1)
    fig.update_yaxes(type="log", row=2, col=1)
    fig.update_layout(barmode="group")
    return layout(fig, "Recorded collectives by op and size", "markers: median; whiskers up to p99", height=560)
