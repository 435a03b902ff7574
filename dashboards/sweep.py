"""Sweep figures: every point's throughput against its cost (the Pareto front marked), and how each varied
parameter moves throughput."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots
from rltrace.dashboards.page import color, esc, esc_all, layout


def pareto(frame: pl.DataFrame, x: str = "usd_per_1k_samples", y: str = "samples_per_s") -> pl.DataFrame:
    """The points no other point beats on both: cheaper (lower ``x``) and faster (higher ``y``)."""
    f = frame.drop_nulls([x, y]).sort([x, y], descending=[False, True])
    best = f[y].cum_max()
    keep = (f[y] >= best) & (f[y] > best.shift(1).fill_null(-np.inf))
    return f.filter(keep)


def _text(frame: pl.DataFrame, axis: str) -> pl.Expr:
    """A parameter's values as text (a list, such as source_steps [0, 1], as "0,1")."""
    if isinstance(frame.schema[axis], pl.List):
        return pl.col(axis).cast(pl.List(pl.String)).list.join(",")
    return pl.col(axis).cast(pl.String)


def frontier(frame: pl.DataFrame, axes: list[str]) -> go.Figure:
    """Scatter of throughput against cost per 1k samples, one colour per scheduler; hover lists the point."""
    fig = go.Figure()
    label = pl.concat_str([pl.format(f"{a}={{}}", _text(frame, a).fill_null("")) for a in axes],
                          separator=", ") if axes else pl.lit("")
    f = frame.with_columns(label.alias("_label"))
    for i, scheduler in enumerate(f["scheduler"].unique().sort().to_list()):
        mine = f.filter(pl.col("scheduler") == scheduler)
        fig.add_scatter(x=mine["usd_per_1k_samples"].to_numpy(), y=mine["samples_per_s"].to_numpy(), mode="markers",
                        name=esc(scheduler), marker={"size": 10, "color": color("", i), "opacity": 0.85},
                        text=esc_all(mine["_label"]), hovertemplate="%{text}<br>%{y:.3g} samples/s, "
                                                                   "$%{x:.3f} per 1k<extra></extra>")
    front = pareto(frame)
    fig.add_scatter(x=front["usd_per_1k_samples"].to_numpy(), y=front["samples_per_s"].to_numpy(), mode="lines",
                    name="Pareto front", line={"color": "#222", "dash": "dot", "shape": "hv"}, hoverinfo="skip")
    fig.update_xaxes(title_text="$ per 1k samples (lower is better)")
    fig.update_yaxes(title_text="samples/s (higher is better)")
    return layout(fig, "Throughput against cost, every point", f"{frame.height} points; dotted: the Pareto front",
                  height=480)


def effects(frame: pl.DataFrame, axes: list[str]) -> go.Figure:
    """Per varied parameter: samples/s of every point at each of its values (a strip per value)."""
    fig = make_subplots(rows=1, cols=max(len(axes), 1), subplot_titles=[esc(a) for a in axes], shared_yaxes=True)
    for col, axis in enumerate(axes, start=1):
        values = frame.select(_text(frame, axis)).to_series().fill_null("(none)").replace("", "(none)")
        fig.add_box(x=esc_all(values), y=frame["samples_per_s"].to_numpy(), boxpoints="all", jitter=0.4,
                    pointpos=0, name=esc(axis), marker_color=color("", col - 1), showlegend=False, row=1, col=col)
    fig.update_yaxes(title_text="samples/s", row=1, col=1)
    return layout(fig, "What each parameter does to throughput", height=420)
