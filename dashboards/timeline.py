"""Gantt timeline of one run: a row per resource (generation instances, trainers, network, links), its
requests in lanes (a request's slot in the running batch) and its phases as bars; zoomable."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import polars as pl
from rltrace.dashboards.page import PALETTE, esc, esc_all, kind_color, layout

from rltrace.analysis.timeline import Gantt, several_jobs


def _segments(starts: np.ndarray, ends: np.ndarray, ys: np.ndarray, extra: np.ndarray) -> tuple[np.ndarray, ...]:
    """Line segments as one path: x = s0, e0, NaN, s1, e1, NaN, ... (NaN breaks the line)."""
    n = len(starts)
    # float32 halves the file; at 1e4 s it still resolves a millisecond
    x, y, c = (np.full(3 * n, np.nan, dtype=np.float32) for _ in range(3))
    x[0::3], x[1::3] = starts, ends
    y[0::3] = y[1::3] = ys
    c[0::3] = c[1::3] = extra
    return x, y, c


BY_JOB = ("request", "train", "weight_sync", "reward")
"""kinds drawn in their job's colour in a run of several jobs (switches, preemptions... keep their kind's)"""
OVERLAYS = ("aborted", "migrated", "preempted", "dropped", "stale_abort", "long_tail", "regular")
"""what happened to requests (and a scheduler's marks): drawn as a thin strip along the top of the row, over
the busy work but never hiding it (an instance that aborts or migrates all run long still shows its work)"""
WIDTHS = {"request": 2, "busy": 9}
"""line width (px) of a kind; phases 14, overlays 3"""


def figure(run_name: str, gantt: Gantt) -> go.Figure:
    """One line trace per kind (a single SVG path each, cheap to draw at 20k segments); in a run of several
    jobs, one per kind and job, its requests and phases coloured by job, so their interleaving on the shared
    pools shows. Busy work and phases first, overlays (aborts, migrations...) last, on a strip of their own."""
    row = {name: i for i, name in enumerate(gantt.resources)}
    f = gantt.frame.with_columns(pl.col("resource").replace_strict(row, return_dtype=pl.Float64).alias("y"))
    multi = several_jobs(f)
    parts = f.partition_by(["kind", "job"] if multi else ["kind"], as_dict=True)
    fig = go.Figure()
    for key in sorted(parts, key=lambda k: (str(k[0]) in OVERLAYS, str(k[0]), k[1:])):
        k, kind = parts[key], str(key[0])
        job = int(key[1]) if multi else -1
        name = f"{kind}, job {job}" if job >= 0 else kind
        colour = PALETTE[job % len(PALETTE)] if job >= 0 and kind in BY_JOB else kind_color(kind)
        y = k["y"].to_numpy()
        if kind == "request":  # lanes spread over the row's height
            y = y - 0.4 + 0.8 * (k["lane"].to_numpy() + 0.5) / k["lanes"].to_numpy()
        elif kind in OVERLAYS:
            y = y - 0.42
        x, ys, step = _segments(k["start_s"].to_numpy(), k["end_s"].to_numpy(), y,
                                k["step"].to_numpy().astype(np.float64))
        # Phases and overlays can be far shorter than a pixel (a 0.3 s sync in a 30 min run, an abort at an
        # instant): markers at their ends keep them visible; requests and busy spans are long enough as lines.
        marked = kind not in ("request", "busy") and k.height <= 5_000
        overlay = kind in OVERLAYS
        fig.add_scatter(x=x, y=ys, customdata=step, mode="lines+markers" if marked else "lines", name=esc(name),
                        connectgaps=False, line={"width": 3 if overlay else WIDTHS.get(kind, 14), "color": colour},
                        marker={"symbol": "triangle-down" if overlay else "square", "size": 7 if overlay else 8,
                                "color": colour},
                        hovertemplate=esc(name) + " %{x:.3f} s, step %{customdata}<extra></extra>")
    fig.update_yaxes(tickvals=list(range(len(gantt.resources))), ticktext=esc_all(gantt.resources),
                     range=[len(gantt.resources) - 0.5, -0.5], zeroline=False, showgrid=False)
    fig.update_xaxes(title_text="time (s)", rangeslider={"visible": False})
    shown = f"{gantt.frame.height:,} of {gantt.total:,} intervals" if gantt.method != "all intervals" \
        else f"{gantt.total:,} intervals"
    legend_rows = len(parts)
    return layout(fig, f"Timeline: {esc(run_name)}",
                  f"{shown}; {esc(gantt.method)}; drag to zoom, double-click to reset",
                  height=max(320, 110 + 24 * len(gantt.resources), 130 + 20 * legend_rows))
