"""Recorded per-request latency: queue, prefill and decode time per step."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from rltrace.dashboards.page import color, layout


def figure(latency: pl.DataFrame) -> go.Figure:
    """Stacked mean parts per step, with the p50 and p99 of the whole latency as markers."""
    fig = go.Figure()
    for part in ("queue", "prefill", "decode"):
        fig.add_bar(x=latency["step"].to_numpy(), y=latency[f"{part}_s"].to_numpy(), name=f"{part} (mean)",
                    marker_color=color(part))
    for q, symbol in (("p50", "circle"), ("p99", "diamond")):
        fig.add_scatter(x=latency["step"].to_numpy(), y=latency[f"{q}_s"].to_numpy(), mode="markers",
                        name=f"{q} latency", marker={"symbol": symbol, "size": 9, "color": "#222"})
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="step", dtick=1)
    fig.update_yaxes(title_text="seconds per request")
    return layout(fig, "Request latency per step", "queue: arrival to scheduled; prefill: to the first token; "
                  "decode: to the last token")
