"""Per-instance load: how evenly each run spread output tokens and busy time over its generation instances."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots
from rltrace.dashboards.page import color, esc, esc_all, layout


def figure(load: pl.DataFrame) -> go.Figure:
    """Two panels, one row per run: a box of its instances' output tokens served and of their busy seconds,
    every instance a point (hover names it). A row per run keeps 10 runs x 150 instances readable, where a
    bar per instance and run was not; a wide box is a skewed dispatch or a long tail on a few instances."""
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=("output tokens served per instance", "busy seconds per instance"))
    runs = load["run"].unique(maintain_order=True).to_list()
    for i, run in enumerate(runs):
        mine = load.filter(pl.col("run") == run)
        names = esc_all(mine["instance"])
        for col, column, unit in ((1, "output_tokens", "tokens"), (2, "busy_s", "s")):
            fig.add_box(x=mine[column].to_numpy(), y=[esc(run)] * mine.height, orientation="h", name=esc(run),
                        text=names, boxpoints="all", jitter=0.5, pointpos=0, marker={"size": 4, "color": color("", i)},
                        line={"color": color("", i)}, fillcolor="rgba(0,0,0,0)", showlegend=False,
                        hovertemplate="%{text}: %{x:,.0f} " + unit + "<extra>" + esc(run) + "</extra>", row=1, col=col)
    fig.update_xaxes(title_text="output tokens", rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title_text="seconds", rangemode="tozero", row=1, col=2)
    fig.update_yaxes(autorange="reversed", type="category")
    return layout(fig, "Load per generation instance", "one point per instance; a wide box: skewed dispatch or a long "
                  "tail on a few instances", height=140 + 34 * len(runs))
