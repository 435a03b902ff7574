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
def open_page(path: Path, *, timeout_ms: int = 120_000) -> Iterator[Loaded]:
    """Load a local HTML file, wait for every report figure to render, and collect console errors and
    warnings, uncaught exceptions and dialogs (an alert from injected script would land there)."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            loaded = Loaded(page)
            page.on("console", lambda m: loaded.console.append(f"{m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: loaded.console.append(f"uncaught: {e}"))
            page.on("dialog", lambda d: (loaded.dialogs.append(d.message), d.dismiss()))
            page.goto(path.resolve().as_uri())
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
