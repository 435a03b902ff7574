"""The report's "What to fix" section: a diagnosis's findings (rltrace.analysis.diagnose), most seconds per step
first, each with its replayed gain and that gain's 5%-95% range."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from rltrace.dashboards.page import Column, color, esc, layout

COLUMNS = [
    Column("n", "#"), Column("kind", "kind"), Column("phase", "phase"), Column("where", "rank / instance"),
    Column("lost_s_per_step", "lost (s per step)", ".3f"), Column("gain", "replayed gain (s per step, 5% to 95%)"),
    Column("gain_replay", "replayed change"),
]
"""the findings table: one row per finding, in rank order (evidence and fix follow it, see :func:`details`)"""


def rows(findings: pl.DataFrame) -> pl.DataFrame:
    """The findings as the table shows them: a rank, where (rank and instance) and the gain as text."""
    where = pl.concat_str([pl.when(pl.col("rank").is_not_null()).then(pl.format("rank {}", "rank")),
                           pl.col("instance")], separator=", ", ignore_nulls=True)
    text = [pl.col(c).map_elements(lambda v: f"{v:.3f}", return_dtype=pl.String)
            for c in ("gain_s_per_step", "gain_p05_s_per_step", "gain_p95_s_per_step")]
    gain = pl.when(pl.col("gain_s_per_step").is_not_null()).then(pl.format("{} ({} to {})", *text))
    return findings.with_columns(pl.int_range(1, pl.len() + 1).alias("n"), where.alias("where"), gain.alias("gain"))


def figure(findings: pl.DataFrame) -> go.Figure:
    """One bar per finding (seconds per step lost), with its replayed gain and range as a marker."""
    shown = rows(findings)
    labels = [esc(f"{n}. {kind} {phase}" + (f" ({where})" if where else ""))
              for n, kind, phase, where in shown.select("n", "kind", "phase", "where").iter_rows()]
    fig = go.Figure()
    fig.add_bar(y=labels, x=shown["lost_s_per_step"].to_numpy(), orientation="h", name="lost per step",
                marker={"color": color("lost", 0)})
    priced = shown.filter(pl.col("gain_s_per_step").is_not_null())
    if priced.height:
        mid = priced["gain_s_per_step"].to_numpy()
        fig.add_scatter(y=[labels[n - 1] for n in priced["n"].to_list()], x=mid, mode="markers",
                        name="replayed gain (5% to 95%)", marker={"color": color("gain", 1), "size": 10},
                        error_x={"type": "data", "symmetric": False,
                                 "array": priced["gain_p95_s_per_step"].to_numpy() - mid,
                                 "arrayminus": mid - priced["gain_p05_s_per_step"].to_numpy()})
    fig.update_yaxes(autorange="reversed", title_text="")
    fig.update_xaxes(title_text="seconds per step", rangemode="tozero")
    return layout(fig, "What each finding costs a step", height=max(260, 60 + 40 * shown.height))


def details(findings: pl.DataFrame) -> dict[str, str]:
    """Each finding's evidence and fix, keyed by its rank and name, for the section's definition list."""
    shown = rows(findings)
    out = {}
    for n, kind, phase, where, evidence, fix in shown.select("n", "kind", "phase", "where", "evidence",
                                                             "fix").iter_rows():
        out[f"{n}. {kind} ({phase}{', ' + where if where else ''})"] = f"{evidence} What to change: {fix}"
    return out
