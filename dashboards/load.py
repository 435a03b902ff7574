"""Per-instance load: requests and busy time per generation instance, per run."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots
from rltrace.dashboards.page import color, esc, esc_all, layout


def figure(load: pl.DataFrame) -> go.Figure:
    """Two panels sharing x: output tokens served, and busy seconds, per instance; one colour per run."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("output tokens served", "busy time (s)"))
    for i, run in enumerate(load["run"].unique(maintain_order=True).to_list()):
        mine = load.filter(pl.col("run") == run)
        names = esc_all(mine["instance"])
        fig.add_bar(x=names, y=mine["output_tokens"].to_numpy(), name=esc(run), legendgroup=esc(run),
                    marker_color=color("", i), row=1, col=1)
        fig.add_bar(x=names, y=mine["busy_s"].to_numpy(), name=esc(run), legendgroup=esc(run), showlegend=False,
                    marker_color=color("", i), row=2, col=1)
    fig.update_layout(barmode="group")
    return layout(fig, "Load per generation instance", "uneven bars: skewed dispatch or a long tail on few instances",
                  height=520, legend_below=True)
