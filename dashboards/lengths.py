"""Rollout output lengths: histogram and CCDF on log axes (the long tail), overall."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots
from rltrace.dashboards.page import color, esc, layout


def figure(histogram: pl.DataFrame, ccdf: pl.DataFrame, labels: dict[str, str] | None = None) -> go.Figure:
    """Left: counts per log-spaced bin; right: P(length > x). ``labels`` renames a run's distribution (to
    the runs that share it)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("histogram (log bins)", "CCDF: P(output > x)"))
    for i, run in enumerate(histogram["run"].unique(maintain_order=True).to_list()):
        name = esc((labels or {}).get(run, run))
        h = histogram.filter(pl.col("run") == run)
        lo, hi = h["lo"].to_numpy(), h["hi"].to_numpy()
        centre = np.sqrt(np.maximum(lo, 0.5) * hi)
        fig.add_bar(x=centre, y=h["count"].to_numpy(), width=hi - lo, name=name, legendgroup=name,
                    marker_color=color("", i), opacity=0.75, row=1, col=1,
                    customdata=np.stack([lo, hi], axis=1),
                    hovertemplate="%{customdata[0]:.0f}-%{customdata[1]:.0f} tokens: %{y}<extra>" + name + "</extra>")
        c = ccdf.filter(pl.col("run") == run)
        fig.add_scatter(x=c["tokens"].to_numpy(), y=c["ccdf"].to_numpy(), mode="lines", name=name, legendgroup=name,
                        showlegend=False, line={"color": color("", i), "shape": "hv"}, row=1, col=2,
                        hovertemplate="P(> %{x:.0f}) = %{y:.2e}<extra>" + name + "</extra>")
    fig.update_layout(barmode="overlay")
    fig.update_xaxes(type="log", title_text="output tokens")
    fig.update_yaxes(title_text="requests", row=1, col=1)
    fig.update_yaxes(type="log", title_text="share of requests", row=1, col=2)
    return layout(fig, "Output-length distribution", "the longest rollouts set the step time of synchronous schedulers")
