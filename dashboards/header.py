"""Header figure: each run's headline figures as a ratio to the baseline run."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from rltrace.dashboards.page import esc, layout

LABELS = {"samples_per_s": "samples/s", "tokens_per_s": "tokens/s", "step_time_s": "step time",
          "usd_per_1k_samples": "$ per 1k samples"}


def figure(summary: pl.DataFrame) -> go.Figure:
    """Grouped bars: one group per headline figure, one bar per run, height = ratio to the baseline."""
    base = summary.filter(pl.col("baseline"))["run"][0]
    fig = go.Figure()
    for i, row in enumerate(summary.iter_rows(named=True)):  # one bar trace per run
        ratios = [row[f"{c}_x"] for c in LABELS]
        fig.add_bar(name=esc(row["run"]), x=list(LABELS.values()), y=ratios,
                    text=[f"{r:.2f}x" if r is not None else "-" for r in ratios], textposition="outside",
                    marker_color=None if i else "#9ea7b3")
    fig.add_hline(y=1.0, line_dash="dot", line_color="#888")
    fig.update_yaxes(title_text=f"ratio to {esc(base)}")
    return layout(fig, "Against the baseline", "above 1: more than the baseline (better for samples/s and "
                  "tokens/s, worse for step time and cost)", height=380)
