"""Weight-sync durations per step, one line per run."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from rltrace.dashboards.page import color, esc, layout


def figure(durations: pl.DataFrame) -> go.Figure:
    fig = go.Figure()
    for i, run in enumerate(durations["run"].unique(maintain_order=True).to_list()):
        mine = durations.filter(pl.col("run") == run)
        fig.add_scatter(x=mine["step"].to_numpy(), y=mine["duration_s"].to_numpy(), mode="lines+markers",
                        name=esc(run), line={"color": color("", i)})
    fig.update_xaxes(title_text="step", dtick=1 if durations["step"].n_unique() <= 30 else None)  # steps are whole
    fig.update_yaxes(title_text="weight sync (s)", rangemode="tozero")
    return layout(fig, "Weight-sync duration per step")
