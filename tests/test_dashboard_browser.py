"""The report in a real headless Chromium: every section and figure rendered, no console errors, and
hostile strings from a bundle shown as text with no script run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import polars as pl
import pytest
from browser import open_page, screenshot
from helpers import run_cli
from rltrace.sample_traces import sample_path

import rltrace

SECTIONS = ["Runs compared", "Bubbles", "Timelines", "Output lengths", "Load per instance", "Network",
            "Recorded bundle"]
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
        "requests": src.requests.collect().with_columns(pl.lit(HOSTILE[0]).alias("engine"),
                                                        (pl.lit(HOSTILE[1]) + pl.col("request_id")).alias("request_id")),
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
        rows = loaded.page.locator("table tbody tr").count()
        assert rows == 10  # every registered scheduler
