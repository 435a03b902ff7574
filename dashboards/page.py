"""The report page: one self-contained HTML file, plotly.js embedded once, figures as JSON data blocks.

Safety: every string that reaches the page from a trace or a run folder goes through :func:`esc`. In HTML
that makes it text; inside figures it makes Plotly (which reads a few tags such as ``<b>`` and ``<a>`` in
labels) show the characters instead of interpreting them. Figure JSON is written with ``<`` as ``\\u003c``
so no string can close its ``<script type="application/json">`` block.
"""

from __future__ import annotations

import html
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import polars as pl
from plotly.offline import get_plotlyjs

TEMPLATE = "plotly_white"
COLORS = {
    # span kinds (timelines): every kind a simulator or scheduler writes has its own colour
    "request": "#4e79a7", "busy": "#a0cbe8", "train": "#59a14f", "stream_train": "#8cd17d",
    "weight_sync": "#b07aa1", "reward": "#9d7660", "switch": "#bab0ac", "host": "#79706e",
    "environment": "#d7b5a6", "aborted": "#e15759", "stale_abort": "#d37295", "migrated": "#f28e2b",
    "preempted": "#f1ce63", "short_round": "#499894", "long_round": "#86bcb6", "long_tail": "#ff9d9a",
    "regular": "#ffbe7d", "dropped": "#d4a6c8",
    # parts of a pool's time (bubbles) and of a request's latency
    "used": "#a0cbe8", "dependency bubble": "#f28e2b", "skewness bubble": "#e15759",
    "queue": "#bab0ac", "prefill": "#86bcb6", "decode": "#4e79a7",
}
"""one colour per kind or part, the same in every figure (Tableau 20); no two span kinds share one"""
SPAN_KINDS = ("request", "busy", "train", "stream_train", "weight_sync", "reward", "switch", "host", "environment",
              "aborted", "stale_abort", "migrated", "preempted", "dropped", "short_round", "long_round", "long_tail",
              "regular")
"""every span kind replay writes to timeline.parquet (simulator and schedulers)"""
SPARE = ("#1b9e77", "#7570b3", "#66a61e", "#e6ab02", "#a6761d", "#666666", "#1f78b4", "#6a3d9a")
"""colours of kinds this page does not know (a newer scheduler's): none of COLORS"""
PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d", "#eeca3b",
           "#bab0ac")
"""one colour per run (or op, or source): runs are told apart by position, kinds by COLORS"""


def esc(value: object) -> str:
    """A trace- or user-supplied value as text for the page or a figure label. Only ``&``, ``<`` and ``>``
    are escaped: nothing here goes into an attribute, and Plotly decodes ``&amp;``, ``&lt;`` and ``&gt;`` in
    labels but shows ``&quot;`` as it is."""
    return html.escape(str(value), quote=False)


def esc_all(values: object) -> list[str]:
    """:func:`esc` of each value of a list or Series (labels: a few hundred at most)."""
    return [esc(v) for v in values]  # type: ignore[attr-defined]  # a list or Series: both iterate


def color(key: str, index: int = 0) -> str:
    """The colour of a kind or part, else the palette's ``index``-th."""
    return COLORS.get(key, PALETTE[index % len(PALETTE)])


def kind_color(kind: str) -> str:
    """The colour of a span kind: its own, or for a kind this page does not know, a spare one chosen by its
    name (the same in every figure, never a known kind's)."""
    return COLORS.get(kind) or SPARE[zlib.crc32(kind.encode()) % len(SPARE)]


def layout(fig: go.Figure, title: str, note: str = "", height: int = 420, right_axis: bool = False) -> go.Figure:
    """Apply the report's look; ``note`` (e.g. how the data were reduced) goes under the title. The legend is
    a column right of the plot, inside the figure (the right margin grows to hold it, a long one scrolls), so
    it never covers the plot, the title or another figure; axis labels get the margin they need. With a
    ``right_axis`` the legend stands further right, clear of that axis's labels."""
    subtitle = f"<br><sup>{note}</sup>" if note else ""
    fig.update_layout(template=TEMPLATE, title={"text": f"{title}{subtitle}", "x": 0.01, "xanchor": "left"},
                      height=height, margin={"l": 70, "r": 20, "t": 95 if note else 70, "b": 60},
                      legend={"orientation": "v", "x": 1.1 if right_axis else 1.02, "xanchor": "left", "y": 1.0,
                              "yanchor": "top"})
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    pad_flat_axes(fig)
    return fig


def pad_flat_axes(fig: go.Figure) -> None:
    """Give an axis whose values are all equal a readable range (zero to 1.25x the value) instead of Plotly's
    autorange around one number (8,749.667 to 8,749.668)."""
    values: dict[str, list[np.ndarray]] = {}
    for trace in fig.data:
        if trace.type not in ("scatter", "scattergl") or trace.y is None:
            continue
        y = np.asarray(trace.y)
        if y.dtype.kind not in "fiu":  # categories (run names on a horizontal chart): no range to pad
            continue
        y = y.astype(np.float64)
        values.setdefault(trace.yaxis or "y", []).append(y[np.isfinite(y)])
    for ref, parts in values.items():
        y = np.concatenate(parts)
        if not len(y):
            continue
        lo, hi = float(y.min()), float(y.max())
        if hi - lo > 1e-6 * max(abs(hi), 1e-12):
            continue
        axis = fig.layout["yaxis" + ref[1:]]
        if axis.type == "log" and hi > 0:  # one value on a log axis: a crowd of minor labels; linear reads
            axis.update(type="linear", range=[0.0, 1.25 * hi])
        else:
            axis.update(range=[min(0.0, 1.25 * lo), max(1.25 * hi, 0.0)] if hi or lo else [-1.0, 1.0])


@dataclass(frozen=True, slots=True)
class Column:
    """A table column: the frame's column, its header in words with its unit, and a format spec (or a function
    that formats a number)."""

    name: str
    header: str
    spec: str | Callable[[float], str] = ""


@dataclass
class Page:
    """Sections of HTML and figures, rendered in order; each section is a ``<section>`` element."""

    title: str
    parts: list[str] = field(default_factory=list)
    nav: list[tuple[str, str]] = field(default_factory=list)
    figures: int = 0

    def section(self, title: str, intro: str = "") -> None:
        """Start a section; ``intro`` is plain text (escaped)."""
        anchor = f"s{len(self.nav)}"
        if self.nav:
            self.parts.append("</section>")
        self.nav.append((anchor, title))
        self.parts.append(f'<section id="{anchor}"><h2>{esc(title)}</h2>' + (f"<p>{esc(intro)}</p>" if intro else ""))

    def text(self, message: str) -> None:
        self.parts.append(f'<p class="note">{esc(message)}</p>')

    def verdict(self, headline: str, objective: str, reasons: list[str], others: list[tuple[str, str]]) -> None:
        """The first screen's answer: the run to choose, for which objective, why, and the choice under the
        other objectives (all plain text, escaped)."""
        items = "".join(f"<li>{esc(r)}</li>" for r in reasons)
        alts = "".join(f"<li><span>{esc(k)}:</span> {esc(v)}</li>" for k, v in others)
        self.parts.append(f'<div class="verdict"><p class="pick">{esc(headline)}</p><p class="goal">objective: '
                          f'{esc(objective)}</p><ul class="why">{items}</ul>'
                          + (f'<ul class="alts">{alts}</ul>' if alts else "") + "</div>")

    def figure(self, fig: go.Figure) -> None:
        """Embed a figure as a JSON block that the page's one loader draws."""
        name = f"fig{self.figures}"
        self.figures += 1
        spec = pio.to_json(fig, validate=False, engine="json").replace("<", "\\u003c")
        self.parts.append(f'<div class="fig" id="{name}"></div>'
                          f'<script type="application/json" id="{name}-data">{spec}</script>')

    def table(self, frame: pl.DataFrame, columns: list[Column] | dict[str, str] | None = None,
              classes: dict[str, str] | None = None) -> None:
        """An HTML table of ``frame``: ``columns`` picks and names the columns (a dict maps a column to a
        format spec, its name as header); ``classes`` maps a boolean column to a CSS class for its true rows
        (``base``: the baseline, ``best``: the chosen run)."""
        if columns is None or isinstance(columns, dict):
            specs = columns or {}
            columns = [Column(c, c, specs.get(c, "")) for c in frame.columns if c not in (classes or {})]
        head = "".join(f"<th>{esc(c.header)}</th>" for c in columns)
        rows = []
        for row in frame.iter_rows(named=True):  # a table of runs: a handful of rows
            cells = "".join(f"<td>{esc(_fmt(row[c.name], c.spec))}</td>" for c in columns)
            marks = " ".join(cls for col, cls in (classes or {}).items() if row.get(col))
            rows.append(f'<tr class="{marks}">{cells}</tr>' if marks else f"<tr>{cells}</tr>")
        self.parts.append(f'<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
                          "</tbody></table></div>")

    def details(self, summary: str) -> None:
        """Open a collapsed block (closed by :meth:`end_details`) for what the first screen does not need."""
        self.parts.append(f"<details><summary>{esc(summary)}</summary>")

    def end_details(self) -> None:
        self.parts.append("</details>")

    def definitions(self, items: dict[str, str]) -> None:
        body = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items.items())
        self.parts.append(f'<dl class="info">{body}</dl>')

    def render(self) -> str:
        """The whole page."""
        nav = " · ".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in self.nav)
        body = "".join(self.parts) + ("</section>" if self.nav else "")
        return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
                '<meta name="viewport" content="width=device-width, initial-scale=1">'
                f"<title>{esc(self.title)}</title><style>{CSS}</style><script>{get_plotlyjs()}</script></head><body>"
                f'<main><h1>{esc(self.title)}</h1><nav>{nav}</nav>{body}</main><script>{LOADER}</script></body></html>')


def _fmt(value: object, spec: str | Callable[[float], str]) -> str:
    if value is None:
        return "-"
    if spec and isinstance(value, (int, float)):
        return spec(float(value)) if callable(spec) else format(value, spec)
    return str(value)


CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#222}
main{max-width:1280px;margin:0 auto;padding:16px 20px}
h1{font-size:22px;margin:4px 0 6px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
nav{font-size:13px;margin-bottom:10px}nav a{color:#4c78a8}
div.table{max-width:100%}
table{border-collapse:collapse;font-size:13px;margin:8px 0;width:100%;table-layout:auto}
th{font-weight:600;vertical-align:bottom;white-space:normal;color:#333;min-width:5em}
th,td{padding:3px 6px;border-bottom:1px solid #eee;text-align:right}td{white-space:nowrap}
th:first-child,td:first-child{text-align:left}
tr.base td{background:#f1f3f6}tr.best td{background:#e6f2e6;font-weight:600}
tr.base td:first-child::after{content:" (baseline)";font-weight:400;color:#666}
tr.best td:first-child::before{content:"\\2713  ";color:#2e7d32}
div.verdict{border:1px solid #cfe3cf;background:#f6fbf6;border-radius:6px;padding:10px 16px;margin:8px 0}
div.verdict p.pick{font-size:18px;font-weight:600;margin:2px 0}
div.verdict p.goal{font-size:13px;color:#555;margin:2px 0}
div.verdict ul{margin:6px 0;padding-left:20px;font-size:14px}div.verdict ul.alts{font-size:13px;color:#333}
div.verdict ul.alts span{color:#555}
details{margin:8px 0}summary{cursor:pointer;font-size:14px;color:#4c78a8}
p.note{font-size:13px;color:#555}
dl.info{font-size:13px;display:grid;grid-template-columns:max-content auto;gap:2px 12px}
dt{color:#555}dd{margin:0;word-break:break-all}.fig{min-height:300px;width:100%}
"""

LOADER = """
document.querySelectorAll('div.fig').forEach(function (div) {
  var spec = JSON.parse(document.getElementById(div.id + '-data').textContent);
  Plotly.newPlot(div, spec.data, spec.layout, {responsive: true, displaylogo: false})
    .then(function () { div.setAttribute('data-rendered', '1'); });
});
"""
