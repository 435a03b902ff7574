"""Header figure: each run's same-work samples/s and cost per sample as ratios to the baseline run."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots
from rltrace.dashboards.page import esc, esc_all, layout

from rltrace.analysis.verdict import workload_origin

PANELS = (("samples_per_s_x", "samples/s, same work (higher is better)"),
          ("usd_per_1k_samples_x", "$ per 1k samples, same work (lower is better)"))


def figure(table: pl.DataFrame, winner: str | None = None) -> go.Figure:
    """Two panels of horizontal bars, one row per run (so each bar's label has its own line and none
    collide): the ratio to the baseline of samples/s and of $ per 1k samples on the same work. The chosen run
    is drawn dark, a run that changed the trained work hatched."""
    base = table.filter(pl.col("baseline"))["run"][0]
    names = esc_all(table["run"])
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=[title for _, title in PANELS])
    colours = ["#2e7d32" if r == winner else "#9ea7b3" if r == base else "#4e79a7" for r in table["run"]]
    hatches = ["/" if changed else "" for changed in table["changed"]]
    for col, (column, title) in enumerate(PANELS, start=1):
        ratios = table[column].to_list()
        fig.add_bar(x=[r if r is not None else 0.0 for r in ratios], y=names, orientation="h",
                    text=[f"{r:.2f}x" if r is not None else "-" for r in ratios], textposition="outside",
                    cliponaxis=False, marker={"color": colours, "pattern": {"shape": hatches, "solidity": 0.3}},
                    showlegend=False, hovertemplate="%{y}: %{x:.2f}x " + esc(base) + "<extra>" + title + "</extra>",
                    row=1, col=col)
        top = max((r for r in ratios if r is not None), default=1.0)
        fig.update_xaxes(range=[0, top * 1.18], title_text=f"x {esc(base)}", row=1, col=col)
        fig.add_vline(x=1.0, line_dash="dot", line_color="#888", row=1, col=col)
    fig.update_yaxes(autorange="reversed")
    fig.update_annotations(font_size=13)
    return layout(fig, "Against the baseline, on the same work",
                  f"hatched: the run trained a different workload than the {workload_origin(table)} one (see the "
                  "work columns)",
                  height=130 + 26 * table.height)
