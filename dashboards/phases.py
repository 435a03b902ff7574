"""Time per step by phase: each run's mean step as stacked bars (generation, reward, log-probs, update, refit...)."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from rltrace.dashboards.page import color, esc, esc_all, layout


def figure(phases: pl.DataFrame) -> go.Figure:
    """Horizontal stacked bars, one per run, one colour per phase (``compare.phases``)."""
    fig = go.Figure()
    runs = phases["run"].unique(maintain_order=True)
    for i, phase in enumerate(phases["phase"].unique(maintain_order=True).to_list()):
        values = pl.DataFrame({"run": runs}).join(phases.filter(pl.col("phase") == phase), on="run", how="left")
        fig.add_bar(name=esc(phase), y=esc_all(runs), x=values["seconds"].fill_null(0.0).to_list(), orientation="h",
                    marker_color=color(phase, i), hovertemplate="%{y}<br>" + esc(phase) + ": %{x:.3g} s<extra></extra>")
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="seconds per step (mean)")
    return layout(fig, "Time per step by phase", "phases overlap under asynchronous schedulers, so a bar can be "
                  "longer than the step", height=max(340, 120 + 40 * len(runs)))
