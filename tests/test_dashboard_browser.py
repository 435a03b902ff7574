"""The report in a real headless Chromium: every section and figure rendered, no console errors, and
hostile strings from a bundle shown as text with no script run."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import polars as pl
import pytest
from browser import ARTIFACTS, layout_problems, open_page, screenshot, section_shots
from helpers import run_cli
from rltrace.replay.schedulers.base import SCHEDULERS
from rltrace.sample_traces import sample_path

import rltrace

pytestmark = pytest.mark.browser  # headless Chromium: not in `make test-fast`

SECTIONS = ["Which run to choose", "Bubbles", "Phases", "Timelines", "Output lengths", "Load per instance",
            "Request latency", "Network", "Recorded bundle"]
HOSTILE = ['<script>window.__pwned=1;alert(1)</script>', '"><img src=x onerror="window.__pwned=2;alert(2)">',
           "<a href='javascript:window.__pwned=3'>click</a>", "<b onmouseover=alert(4)>bold</b>"]


def test_report_of_several_runs_renders_every_section(tmp_path: Path):
    runs = tmp_path / "runs"
    done = run_cli("replay", "tiny_rl_cpu", "-s", "as-recorded,disagg-sync,fully-async,streamrl", "-o", str(runs))
    assert done.returncode == 0, done.stderr
    topo = run_cli("replay", "-s", "rollpacker", "--steps", "4", "--topology", "fat-tree:k=8,gpu=H800",
                   "-o", str(runs))
    assert topo.returncode == 0, topo.stderr
    report = tmp_path / "report.html"
    done = run_cli("dashboard", str(runs), "--bundle", "tiny_rl_cpu", "--baseline", "as-recorded", "-o", str(report))
    assert done.returncode == 0, done.stderr
    with open_page(report) as loaded:
        page = loaded.page
        shot = screenshot(loaded, "report.png")
        assert loaded.console == [] and loaded.dialogs == []
        headings = page.eval_on_selector_all("h2", "hs => hs.map(h => h.textContent)")
        assert headings == SECTIONS
        figures = page.eval_on_selector_all("div.fig", "ds => ds.map(d => d.querySelectorAll('.main-svg').length)")
        assert len(figures) >= 14 and all(n >= 1 for n in figures)
        # Plotly drew real marks: bars, timeline lines, a heatmap (the topology run), collective markers
        assert page.locator("g.barlayer .point").count() > 20
        assert page.locator(".scatterlayer .trace path.js-line").count() >= 5
        assert page.locator(".heatmaplayer image, .hm image").count() >= 1
        titles = " ".join(page.eval_on_selector_all(".gtitle", "ts => ts.map(t => t.textContent)"))
        for title in ("Timeline: rollpacker", "Link utilisation: rollpacker", "Recorded collectives by op and size",
                      "Recorded weight-sync flows", "Request latency per step", "Output-length distribution"):
            assert title in titles
    assert shot.stat().st_size > 50_000


def _hostile_bundle(folder: Path) -> Path:
    """The recorded tiny RL bundle with hostile strings in every free-text field a report or export shows."""
    src = rltrace.open(sample_path("tiny_rl_cpu"))
    m = src.manifest
    manifest = dataclasses.replace(
        m, run_id=HOSTILE[0], command=[HOSTILE[1], "train.py"], hosts=[HOSTILE[2]], notes=[HOSTILE[3]],
        model=dataclasses.replace(m.model, name=HOSTILE[1]), tables={})
    tables = {
        "requests": src.requests.collect().with_columns(
            pl.lit(HOSTILE[0]).alias("engine"), (pl.lit(HOSTILE[1]) + pl.col("request_id")).alias("request_id")),
        "collectives": src.collectives.collect().with_columns(pl.lit(HOSTILE[2]).alias("pg")),
        "weight_syncs": src.weight_syncs.collect().with_columns(pl.lit(HOSTILE[0]).alias("src"),
                                                                pl.lit(HOSTILE[3]).alias("dst")),
        "spans": src.spans.collect().with_columns(pl.lit(HOSTILE[1]).alias("name")),
    }
    return rltrace.write_bundle(folder, manifest, tables)


def test_hostile_strings_render_as_text_and_never_run(tmp_path: Path):
    bundle = _hostile_bundle(tmp_path / "hostile")
    runs = tmp_path / "runs"
    done = run_cli("replay", str(bundle), "-s", "as-recorded,disagg-sync", "-o", str(runs))
    assert done.returncode == 0, done.stderr
    (runs / "disagg-sync").rename(runs / HOSTILE[1])  # a run folder's name is shown too
    report = tmp_path / "report.html"
    done = run_cli("dashboard", str(runs), "--bundle", str(bundle), "--title", HOSTILE[3], "-o", str(report))
    assert done.returncode == 0, done.stderr
    with open_page(report) as loaded:
        page = loaded.page
        screenshot(loaded, "hostile.png")
        page.mouse.move(600, 400)
        page.hover("h1")
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert loaded.dialogs == [] and loaded.console == []
        # no element came from a trace string: the page's own markup has no img, a, b or extra script tags
        assert page.locator("body img").count() == 0
        assert page.locator("body a[href^='javascript']").count() == 0
        assert page.locator("body b").count() == 0
        assert page.locator("body script").count() == page.locator("div.fig").count() + 1
        text = page.inner_text("body")
        for hostile in HOSTILE:  # shown, character for character, in the header or the notes
            assert hostile in text, hostile
        svg_text = " ".join(page.eval_on_selector_all("svg text", "ts => ts.map(t => t.textContent)"))
        assert HOSTILE[0] in svg_text and HOSTILE[3] in svg_text  # weight-sync flow legend: src -> dst
    trace = tmp_path / "trace.json"
    done = run_cli("export", "perfetto", str(bundle), "-o", str(trace))
    assert done.returncode == 0, done.stderr
    names = {e["args"]["name"] for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "M"
             and e["name"] == "process_name"}
    assert HOSTILE[0] in names  # the engine: kept as data, JSON-escaped


@pytest.mark.parametrize("flag", ["--dashboard"])
def test_replay_dashboard_opens_in_chromium(flag: str, tmp_path: Path):
    report = tmp_path / "r.html"
    done = run_cli("replay", "-s", "all", "--steps", "2", flag, str(report))
    assert done.returncode == 0, done.stderr
    with open_page(report) as loaded:
        assert loaded.console == []
        table = loaded.page.locator("section#s0 div.table").first
        shipped = SCHEDULERS.shipped()  # the CLI's process holds no test's schedulers
        assert table.locator("tbody tr").count() == len(shipped)
        text = table.inner_text()
        for name in shipped:  # every registered scheduler, one row each
            assert name in text, name


@pytest.fixture(scope="module")
def default_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The issue's command, as a new user runs it: every scheduler on the default sample, one report."""
    report = tmp_path_factory.mktemp("default") / "report.html"
    done = run_cli("replay", "-s", "all", "--dashboard", str(report), cwd=report.parent)
    assert done.returncode == 0, done.stderr
    return report


@pytest.mark.parametrize("width", [1280, 1920])
def test_report_layout_at_common_widths(default_report: Path, width: int):
    """No element overlaps another, nothing leaves its figure (legends, titles, axis labels), no labels collide,
    the main column never scrolls sideways; the first screen answers the question. A screenshot of each
    section is kept (test-artifacts/, and RLTRACE_REPORT_SHOTS when set) to be looked at."""
    with open_page(default_report, width=width) as loaded:
        page = loaded.page
        assert loaded.console == []
        assert layout_problems(loaded) == []
        headings = page.eval_on_selector_all("h2", "hs => hs.map(h => h.textContent)")
        assert headings == SECTIONS
        # the first screen (900 px tall) holds the answer and the table of every run
        pick = page.locator("div.verdict p.pick").bounding_box()
        rows = page.locator("section#s0 div.table").first.locator("tbody tr").all()
        assert page.locator("div.verdict p.pick").inner_text().startswith("Run ")
        assert pick is not None and pick["y"] < 300 and len(rows) == len(SCHEDULERS.shipped())
        last = rows[-1].bounding_box()
        assert last is not None and last["y"] + last["height"] < 900, last
        best = page.locator("tr.best td").first.inner_text()
        assert best.strip("✓ ") in page.locator("div.verdict p.pick").inner_text()
        folders = [ARTIFACTS / f"report-{width}"]
        if os.environ.get("RLTRACE_REPORT_SHOTS"):
            folders.append(Path(os.environ["RLTRACE_REPORT_SHOTS"]))
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
            page.evaluate("window.scrollTo(0, 0)")
            page.screenshot(path=str(folder / f"w{width}-first-screen.png"))
            shots = section_shots(loaded, folder, f"w{width}")
            assert len(shots) == len(SECTIONS) and all(s.stat().st_size > 5_000 for s in shots)


def test_the_layout_rules_catch_a_broken_page(tmp_path: Path):
    """The checker must fail a page that breaks each rule, or a clean result proves nothing."""
    import plotly.graph_objects as go
    from rltrace.dashboards.page import Page, layout

    page = Page("broken")
    page.section("One")
    covered = go.Figure([go.Scatter(x=[0, 1, 2], y=[0, 1, 2], name="a rather long legend entry"),
                         go.Scatter(x=[0, 1, 2], y=[2, 1, 0], name="another")])
    covered = layout(covered, "covered")
    covered.update_layout(legend={"x": 0.3, "y": 0.6, "xanchor": "left", "yanchor": "top"})  # on the plot
    page.figure(covered)
    crowded = go.Figure()
    for _ in range(40):  # forty grouped bars, labels wider than their bars: "1.00x0.99x1.00x"
        crowded.add_bar(x=["a", "b"], y=[1.0, 0.99], text=["1.00x", "0.99x"], textposition="outside",
                        constraintext="none", textangle=0, showlegend=False)
    page.figure(layout(crowded, "crowded", height=300))
    page.parts.append('<div style="width:2400px;height:20px;background:#eee">too wide</div>')
    page.section("Two")
    page.parts.append('<p style="margin-top:-80px;background:#fdd">pulled up over the figure above</p>')
    report = tmp_path / "broken.html"
    report.write_text(page.render())
    with open_page(report, width=1280) as loaded:
        problems = "\n".join(layout_problems(loaded))
    for rule in ("scrolls sideways", "runs past the main column", "overlaps", "the legend covers plot",
                 "bar labels collide"):
        assert rule in problems, (rule, problems)
