"""The report page: one self-contained HTML file, plotly.js embedded once, figures as JSON data blocks.

Safety: every string that reaches the page from a trace or a run folder goes through :func:`esc`. In HTML
that makes it text; inside figures it makes Plotly (which reads a few tags such as ``<b>`` and ``<a>`` in
labels) show the characters instead of interpreting them. Figure JSON is written with ``<`` as ``\\u003c``
so no string can close its ``<script type="application/json">`` block.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import plotly.graph_objects as go
import plotly.io as pio
import polars as pl
from plotly.offline import get_plotlyjs

TEMPLATE = "plotly_white"
COLORS = {
    "busy": "#4c78a8", "dependency bubble": "#f58518", "skewness bubble": "#e45756",
    "request": "#4c78a8", "train": "#54a24b", "weight_sync": "#b279a2", "reward": "#9d755d", "switch": "#bab0ac",
    "queue": "#bab0ac", "prefill": "#72b7b2", "decode": "#4c78a8", "migrated": "#ff9da6", "preempted": "#eeca3b",
    "aborted": "#e45756",
}
"""one colour per kind or part, the same in every figure"""
PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d", "#eeca3b",
           "#bab0ac")


def esc(value: object) -> str:
    """A trace- or user-supplied value as text for the page or a figure label. Only ``&``, ``<`` and ``>``
    are escaped: nothing here goes into an attribute, and Plotly decodes ``&amp;``, ``&lt;`` and ``&gt;`` in
    labels but shows ``&quot;`` as it is."""
    return html.escape(str(value), quote=False)


def esc_all(values: object) -> list[str]:
    """:func:`esc` of each value of a list or Series (labels: a few hundred at most)."""
    return [esc(v) for v in values]  # type: ignore[attr-defined]


def color(key: str, index: int = 0) -> str:
    """The colour of a kind or part, else the palette's ``index``-th."""
    return COLORS.get(key, PALETTE[index % len(PALETTE)])


def layout(fig: go.Figure, title: str, note: str = "", height: int = 420, legend_below: bool = False) -> go.Figure:
    """Apply the report's look; ``note`` (e.g. how the data were reduced) goes under the title. The legend
    sits above the plot, or below it where subplot titles take that place."""
    subtitle = f"<br><sup>{note}</sup>" if note else ""
    legend = ({"orientation": "h", "x": 0, "y": -0.2, "yanchor": "top"} if legend_below else
              {"orientation": "h", "x": 1, "xanchor": "right", "y": 1.0, "yanchor": "bottom"})
    fig.update_layout(template=TEMPLATE, title={"text": f"{title}{subtitle}", "x": 0.01}, height=height,
                      margin={"l": 70, "r": 20, "t": 95 if note else 70, "b": 90 if legend_below else 50},
                      legend=legend)
    return fig


@dataclass
class Page:
    """Sections of HTML and figures, rendered in order."""

    title: str
    parts: list[str] = field(default_factory=list)
    nav: list[tuple[str, str]] = field(default_factory=list)
    figures: int = 0

    def section(self, title: str, intro: str = "") -> None:
        """Start a section; ``intro`` is plain text (escaped)."""
        anchor = f"s{len(self.nav)}"
        self.nav.append((anchor, title))
        self.parts.append(f'<h2 id="{anchor}">{esc(title)}</h2>' + (f"<p>{esc(intro)}</p>" if intro else ""))

    def text(self, message: str) -> None:
        self.parts.append(f'<p class="note">{esc(message)}</p>')

    def figure(self, fig: go.Figure) -> None:
        """Embed a figure as a JSON block that the page's one loader draws."""
        name = f"fig{self.figures}"
        self.figures += 1
        spec = pio.to_json(fig, validate=False, engine="json").replace("<", "\\u003c")
        self.parts.append(f'<div class="fig" id="{name}"></div>'
                          f'<script type="application/json" id="{name}-data">{spec}</script>')

    def table(self, frame: pl.DataFrame, formats: dict[str, str] | None = None, highlight: str | None = None) -> None:
        """An HTML table of ``frame``; ``formats`` maps a column to a format spec, ``highlight`` names a
        boolean column marking rows to emphasise."""
        formats = formats or {}
        shown = [c for c in frame.columns if c != highlight]
        head = "".join(f"<th>{esc(c)}</th>" for c in shown)
        rows = []
        for row in frame.iter_rows(named=True):  # a table of runs: a handful of rows
            cells = "".join(f"<td>{esc(_fmt(row[c], formats.get(c, '')))}</td>" for c in shown)
            cls = ' class="base"' if highlight and row[highlight] else ""
            rows.append(f"<tr{cls}>{cells}</tr>")
        self.parts.append(f'<table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>')

    def definitions(self, items: dict[str, str]) -> None:
        body = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items.items())
        self.parts.append(f'<dl class="info">{body}</dl>')

    def render(self) -> str:
        """The whole page."""
        nav = " · ".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in self.nav)
        return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(self.title)}</title>'
                f"<style>{CSS}</style><script>{get_plotlyjs()}</script></head><body>"
                f"<h1>{esc(self.title)}</h1><nav>{nav}</nav>{''.join(self.parts)}<script>{LOADER}</script></body></html>")


def _fmt(value: object, spec: str) -> str:
    if value is None:
        return "-"
    if spec and isinstance(value, (int, float)):
        return format(value, spec)
    return str(value)


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1280px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
nav{font-size:13px;margin-bottom:12px}nav a{color:#4c78a8}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{padding:4px 10px;border-bottom:1px solid #eee;text-align:right}th:first-child,td:first-child{text-align:left}
tr.base{background:#eef3fa;font-weight:600}
p.note{font-size:13px;color:#555}dl.info{font-size:13px;display:grid;grid-template-columns:max-content auto;gap:2px 12px}
dt{color:#555}dd{margin:0;word-break:break-all}.fig{min-height:300px}
"""

LOADER = """
document.querySelectorAll('div.fig').forEach(function (div) {
  var spec = JSON.parse(document.getElementById(div.id + '-data').textContent);
  Plotly.newPlot(div, spec.data, spec.layout, {responsive: true, displaylogo: false})
    .then(function () { div.setAttribute('data-rendered', '1'); });
});
"""
