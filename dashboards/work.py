"""What each run trained: its output-length distribution (CCDF, log-log) against its workload's."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from rltrace.dashboards.page import color, esc, layout


def figure(ccdf: pl.DataFrame, changed: dict[str, bool], origin: str = "recorded") -> go.Figure:
    """One line per run (P(trained length > x)); the workload black and thick, so a run whose line leaves it (a
    tail cut short: long samples aborted or never trained) shows at once. ``changed`` marks the runs that trained
    a different workload: dashed, and so named in the legend. ``origin`` words the workload ("recorded",
    "described": :func:`rltrace.analysis.work.origin`)."""
    fig = go.Figure()
    runs = ccdf["run"].unique(maintain_order=True).to_list()
    i = 0
    for run in runs:
        c = ccdf.filter(pl.col("run") == run)
        if run.startswith("recorded"):  # trained_ccdf's workload rows: "recorded" or "recorded (NAME)"
            line, name = {"color": "#111", "width": 4, "shape": "hv"}, esc(origin + run.removeprefix("recorded"))
        else:
            moved = changed.get(run, False)
            line = {"color": color("", i), "width": 2, "shape": "hv", "dash": "dash" if moved else "solid"}
            name = esc(run) + (" (changed)" if moved else "")
            i += 1
        fig.add_scatter(x=c["tokens"].to_numpy(), y=c["ccdf"].to_numpy(), mode="lines", name=name, line=line,
                        hovertemplate="P(> %{x:,.0f} tokens) = %{y:.2e}<extra>" + name + "</extra>")
    fig.update_xaxes(type="log", title_text="output tokens of a trained sample")
    fig.update_yaxes(type="log", title_text="share of trained samples longer")
    return layout(fig, f"Trained output lengths against the {origin}",
                  f"dashed: a run that trained a different workload (shorter or fewer samples) than the {origin} one",
                  height=max(420, 140 + 20 * len(runs)))
