"""Bubble breakdown: each run's GPU-time per pool as used / dependency bubble / skewness bubble."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from rltrace.dashboards.page import color, esc_all, layout

PARTS = ("used", "dependency bubble", "skewness bubble")


def figure(bubbles: pl.DataFrame) -> go.Figure:
    """Stacked bars, x = (pool, run), one colour per part; the three parts of a bar sum to 1."""
    fig = go.Figure()
    keys = bubbles.select("pool", "run").unique(maintain_order=True)
    x = [esc_all(keys["pool"]), esc_all(keys["run"])]
    for part in PARTS:
        values = keys.join(bubbles.filter(pl.col("part") == part), on=["pool", "run"], how="left")["fraction"]
        fig.add_bar(name=part, x=x, y=values.fill_null(0.0).to_list(), marker_color=color(part),
                    hovertemplate="%{x}<br>" + part + ": %{y:.1%}<extra></extra>")
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title_text="share of the pool's GPU-time", tickformat=".0%", range=[0, 1])
    return layout(fig, "Bubbles per run and pool", "skewness: idle inside a step's long tail (after 80% of its "
                  "samples finished); dependency: idle outside it, waiting for the other pool or a weight sync")
