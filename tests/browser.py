"""A real headless Chromium (Debian's package, installed by `make test`) driven by Playwright."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers import REPO
from playwright.sync_api import Page, sync_playwright

ARTIFACTS = REPO / "test-artifacts"
# The machine has no internet: without these, Chromium retries Google's services at every start.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_path() -> str:
    path = os.environ.get("RLTRACE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("no chromium on PATH: `make test` installs Debian's chromium package (apt-get install chromium)")
    return path


@dataclass
class Loaded:
    """A page after load, with everything it reported."""

    page: Page
    console: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)


@contextmanager
def open_page(path: Path, *, timeout_ms: int = 120_000, width: int = 1300) -> Iterator[Loaded]:
    """Load a local HTML file, wait for every report figure to render, and collect console errors and
    warnings, uncaught exceptions and dialogs (an alert from injected script would land there)."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            loaded = Loaded(page)
            page.on("console", lambda m: loaded.console.append(f"{m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: loaded.console.append(f"uncaught: {e}"))
            page.on("dialog", lambda d: (loaded.dialogs.append(d.message), d.dismiss()))
            page.goto(path.resolve().as_uri(), timeout=timeout_ms)
            page.wait_for_function("document.querySelectorAll('div.fig').length > 0 && "
                                   "document.querySelectorAll('div.fig').length === "
                                   "document.querySelectorAll('div.fig[data-rendered]').length", timeout=timeout_ms)
            yield loaded
        finally:
            browser.close()


def screenshot(loaded: Loaded, name: str) -> Path:
    """Keep a full-page screenshot under test-artifacts/ (CI collects it)."""
    ARTIFACTS.mkdir(exist_ok=True)
    out = ARTIFACTS / name
    loaded.page.screenshot(path=str(out), full_page=True)
    return out


# Every rule the report's layout must keep, checked on bounding boxes in the page as drawn. Each problem is a
# line naming the element; an empty list is a clean page.
LAYOUT_RULES = r"""
() => {
  const out = [];
  const r = e => e.getBoundingClientRect();
  const name = e => (e.id ? '#' + e.id : e.tagName.toLowerCase() + (e.className && e.className.baseVal === undefined
                     ? '.' + String(e.className).split(' ')[0] : ''))
                    + ' "' + (e.textContent || '').trim().slice(0, 40) + '"';
  const overlap = (a, b, slack) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > slack &&
                                   Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > slack;
  const inside = (a, b, slack) => a.left >= b.left - slack && a.right <= b.right + slack &&
                                  a.top >= b.top - slack && a.bottom <= b.bottom + slack;
  const doc = document.documentElement, main = document.querySelector('main');
  if (doc.scrollWidth > doc.clientWidth) out.push(`page scrolls sideways: ${doc.scrollWidth} > ${doc.clientWidth} px`);
  if (main.scrollWidth > main.clientWidth)
    out.push(`main column scrolls sideways: ${main.scrollWidth} > ${main.clientWidth} px`);
  const box = r(main);
  // blocks of the page (headings, text, tables, figures, the verdict) never overlap one another
  const blocks = [...document.querySelectorAll('main > h1, main > nav, section > *, details > *')]
    .filter(e => r(e).height > 0 && e.checkVisibility() && e.tagName !== 'SCRIPT' && e.tagName !== 'SUMMARY');
  for (let i = 0; i < blocks.length; i++) {
    const a = r(blocks[i]);
    if (a.right > box.right + 1) out.push(`${name(blocks[i])} runs past the main column (${a.right} > ${box.right})`);
    for (let j = i + 1; j < blocks.length; j++) {
      if (blocks[i].contains(blocks[j]) || blocks[j].contains(blocks[i])) continue;
      if (overlap(a, r(blocks[j]), 1)) out.push(`${name(blocks[i])} overlaps ${name(blocks[j])}`);
    }
  }
  document.querySelectorAll('div.fig').forEach(div => {
    const d = r(div);
    // nothing a figure draws leaves its box: legends, titles, tick and axis labels (cut or covering the next)
    div.querySelectorAll('.main-svg text, g.legend').forEach(t => {
      const b = r(t);
      if (b.width && !inside(b, d, 1)) out.push(`${div.id}: ${name(t)} leaves its figure`);
    });
    const plots = [...div.querySelectorAll('.draglayer .nsewdrag')].map(r);
    const legend = div.querySelector('g.legend'), title = div.querySelector('.gtitle');
    if (legend) {
      const l = r(legend);
      plots.forEach((p, k) => { if (overlap(l, p, 2)) out.push(`${div.id}: the legend covers plot ${k}`); });
      if (title && overlap(l, r(title), 1)) out.push(`${div.id}: the legend covers the title`);
      div.querySelectorAll('.main-svg text').forEach(t => {  // tick labels, axis titles, annotations
        const b = r(t);
        if (b.width && !legend.contains(t) && overlap(l, b, 1)) out.push(`${div.id}: the legend covers ${name(t)}`);
      });
    }
    const groups = [['bar labels', '.barlayer text.bartext'], ['x ticks', '.xaxislayer-above .xtick text'],
                    ['y ticks', '.yaxislayer-above .ytick text'], ['subplot titles', '.annotation-text']];
    groups.forEach(([what, sel]) => {
      div.querySelectorAll('.main-svg').forEach(svg => {
        const layers = what.endsWith('ticks') ? svg.querySelectorAll(sel.split(' ')[0]) : [svg];
        layers.forEach(layer => {
          const ts = [...layer.querySelectorAll(what.endsWith('ticks') ? sel.split(' ').slice(1).join(' ') : sel)]
            .map(t => [t, r(t)]).filter(([, b]) => b.width > 0);
          for (let i = 0; i < ts.length; i++) for (let j = i + 1; j < ts.length; j++)
            if (overlap(ts[i][1], ts[j][1], 1))
              out.push(`${div.id}: ${what} collide: ${name(ts[i][0])} / ${name(ts[j][0])}`);
        });
      });
    });
  });
  return out;
}
"""


def layout_problems(loaded: Loaded) -> list[str]:
    """Every layout rule the page breaks at its current width (see LAYOUT_RULES)."""
    return loaded.page.evaluate(LAYOUT_RULES)


def section_shots(loaded: Loaded, folder: Path, prefix: str) -> list[Path]:
    """A screenshot of each ``<section>`` of the report, PREFIX-NN-TITLE.png under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    shots = []
    for i, section in enumerate(loaded.page.locator("section").all()):
        title = section.locator("h2").first.inner_text().lower().replace(" ", "_")[:30]
        out = folder / f"{prefix}-{i:02d}-{''.join(c for c in title if c.isalnum() or c == '_')}.png"
        section.screenshot(path=str(out))
        shots.append(out)
    return shots
