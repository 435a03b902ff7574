"""Replayed per-request latency: queueing, time to first token, time per output token and end to end, each
run's p50 with its p90 and p99."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots
from rltrace.dashboards.page import esc_all, layout

from rltrace.analysis.compare import LATENCY

MARKS = (("p50", "#4e79a7", "line-ns-open"), ("p90", "#f28e2b", "diamond"), ("p99", "#e15759", "x"))


def figure(latency: pl.DataFrame) -> go.Figure:
    """One panel per part, one row per run: a bar to the p50, markers at the p90 and p99 (hover: mean and
    max too). Rows keep ten runs' labels apart; each panel has its own scale (TPOT is milliseconds where
    end to end is minutes)."""
    runs = latency["run"].unique(maintain_order=True).to_list()
    fig = make_subplots(rows=1, cols=len(LATENCY), shared_yaxes=True, horizontal_spacing=0.03,
                        subplot_titles=[f"{label} (s)" for _, label in LATENCY])
    for col, (part, _) in enumerate(LATENCY, start=1):
        mine = pl.DataFrame({"run": runs}).join(latency.filter(pl.col("part") == part), on="run", how="left")
        names = esc_all(mine["run"])
        extra = mine.select("mean", "max").fill_null(0.0).to_numpy()
        fig.add_bar(x=mine["p50"].fill_null(0.0).to_numpy(), y=names, orientation="h", marker_color="#a0cbe8",
                    name="p50", legendgroup="p50", showlegend=col == 1, customdata=extra,
                    hovertemplate="%{y}: p50 %{x:.4g} s, mean %{customdata[0]:.4g} s, max %{customdata[1]:.4g} s"
                                  "<extra></extra>", row=1, col=col)
        for q, colour, symbol in MARKS[1:]:
            fig.add_scatter(x=mine[q].fill_null(0.0).to_numpy(), y=names, mode="markers", name=q, legendgroup=q,
                            showlegend=col == 1, marker={"color": colour, "symbol": symbol, "size": 9},
                            hovertemplate="%{y}: " + q + " %{x:.4g} s<extra></extra>", row=1, col=col)
        fig.update_xaxes(rangemode="tozero", row=1, col=col)
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_annotations(font_size=12)
    return layout(fig, "Replayed request latency", "queueing: first queued to admitted; time to first token and end "
                  "to end from the first time it was queued", height=140 + 26 * len(runs))


def note(latency: pl.DataFrame, runs: list[str]) -> str:
    """The line for runs without latency (older run folders), or empty."""
    missing = [r for r in runs if r not in set(latency["run"].to_list())]
    return f"no replayed latency in {', '.join(missing)} (run folders written before replay " \
           "recorded it)" if missing else ""
