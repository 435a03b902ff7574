"""Output lengths per step: a box per step (quartiles, p90/p99/max marked), so a step's long tail shows."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from rltrace.dashboards.page import esc, layout


def figure(per_step: pl.DataFrame, label: str) -> go.Figure:
    """Boxes drawn from precomputed quantiles (whiskers: min to max), p99 as a marker."""
    fig = go.Figure()
    steps = per_step["step"].to_numpy()
    fig.add_box(x=steps, q1=per_step["q1"].to_numpy(), median=per_step["p50"].to_numpy(),
                q3=per_step["q3"].to_numpy(), lowerfence=per_step["min"].to_numpy(),
                upperfence=per_step["max"].to_numpy(), name="quartiles, min-max", marker_color="#4c78a8")
    fig.add_scatter(x=steps, y=per_step["p99"].to_numpy(), mode="markers", name="p99",
                    marker={"symbol": "line-ew-open", "size": 12, "color": "#e45756"})
    fig.add_scatter(x=steps, y=per_step["max_over_median"].to_numpy(), mode="lines+markers", name="max / median",
                    yaxis="y2", line={"color": "#f58518", "dash": "dot"})
    fig.update_layout(yaxis={"type": "log", "title": {"text": "output tokens"}},
                      yaxis2={"overlaying": "y", "side": "right", "title": {"text": "max / median"}, "showgrid": False,
                              "type": "linear", "rangemode": "tozero", "tickmode": "auto", "automargin": True},
                      xaxis={"title": {"text": "step"}, "dtick": 1 if len(steps) <= 30 else None})
    return layout(fig, f"Output lengths per step ({esc(label)})", right_axis=True)
