"""Network: per-link utilisation over time as a heatmap."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from rltrace.dashboards.page import esc, esc_all, layout


def figure(utilization: pl.DataFrame, run_name: str, method: str) -> go.Figure:
    """Rows: links (busiest first); columns: time bins; colour: peak utilisation in the bin (hover: mean)."""
    links = utilization["link"].unique(maintain_order=True).to_list()
    bins = utilization.filter(pl.col("link") == links[0])
    z = utilization["peak"].to_numpy().reshape(len(links), bins.height).astype("float32")
    mean = utilization["utilization"].to_numpy().reshape(len(links), bins.height).astype("float32")
    centre = ((bins["start_s"] + bins["end_s"]) / 2).to_numpy()
    fig = go.Figure(go.Heatmap(z=z, customdata=mean, x=centre, y=esc_all(links), colorscale="Viridis", zmin=0, zmax=1,
                               colorbar={"title": {"text": "peak"}, "tickformat": ".0%"},
                               hovertemplate="%{y}<br>%{x:.2f} s: peak %{z:.1%}, "
                                             "mean %{customdata:.1%}<extra></extra>"))
    fig.update_xaxes(title_text="time (s)")
    fig.update_yaxes(autorange="reversed")
    return layout(fig, f"Link utilisation: {esc(run_name)}", f"{esc(method)}; colour: the busiest transfer in each bin",
                  height=max(320, 110 + 12 * len(links)))
