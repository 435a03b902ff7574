"""The docs stay readable: a short README, no page over 5,000 words, an index that lists every page, links that
resolve, and the present state only (no dated asides, no paths outside the repository).

Pure file reads, no subprocess: a rule broken by an edit fails here with the file and the offending text.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import REPO

DOCS = REPO / "docs"
README = REPO / "README.md"
INDEX = DOCS / "index.md"
PAGES = sorted(DOCS.rglob("*.md"))
MARKDOWN = [README, *PAGES]

README_MAX_LINES = 150
PAGE_MAX_WORDS = 5_000

# An inline markdown link's target: [text](target), the target up to its closing parenthesis.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
ISO_DATE = re.compile(r"20\d\d-\d\d-\d\d")

# Dates that identify data, not a dated aside: (file under the repository, date, why it stays).
ALLOWED_DATES: dict[tuple[str, str], str] = {
    ("docs/costmodels-sources.md", "2025-10-29"): "the source's measurement date: its only hint of the vLLM version",
    ("docs/costmodels-sources.md", "2026-05-17"): "the InferenceX baseline snapshot (H200) its API returned",
    ("docs/costmodels-sources.md", "2026-05-22"): "the InferenceX baseline snapshot (B200) its API returned",
    ("docs/costmodels-sources.md", "2024-08-04"): "which comment of vLLM pull request #7117 the figures come from",
    ("docs/fabrics-multinode.md", "2025-06-18"): "which comments of nccl-tests issue 309 the gj-aion rows come from",
    ("docs/fabrics-multinode.md", "2026-07-11"): "part of a source file's name in togethercomputer/together-nccl-tests",
    ("docs/synth.md", "2026-01-01"): "synth's default start_ns, a configuration value",
}


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _links(path: Path) -> list[str]:
    """Relative link targets of a markdown file, without their #anchor (web links and bare anchors left out)."""
    targets = (m.group(1) for m in LINK.finditer(path.read_text()))
    return [t.split("#", 1)[0] for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_the_readme_is_at_most_150_lines() -> None:
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail into docs/ (limit {README_MAX_LINES})"


def test_the_readme_keeps_the_test_command_ci_runs() -> None:
    assert "\nmake test\n" in README.read_text(), "README.md must show `make test` on a line of its own (CI runs it)"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_no_docs_page_is_over_5000_words(page: Path) -> None:
    words = len(page.read_text().split())
    assert words <= PAGE_MAX_WORDS, f"{_rel(page)} has {words} words; split it by topic (limit {PAGE_MAX_WORDS})"


def test_the_index_lists_every_docs_page() -> None:
    assert INDEX.is_file(), "docs/index.md is missing"
    listed = {(INDEX.parent / target).resolve() for target in _links(INDEX)}
    missing = [_rel(page) for page in PAGES if page != INDEX and page.resolve() not in listed]
    assert not missing, f"docs/index.md does not link: {missing}"


@pytest.mark.parametrize("doc", MARKDOWN, ids=_rel)
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = [target for target in _links(doc) if target and not (doc.parent / target).exists()]
    assert not broken, f"{_rel(doc)} links to files that do not exist: {broken}"


@pytest.mark.parametrize("doc", MARKDOWN, ids=_rel)
def test_no_paths_outside_the_repository(doc: Path) -> None:
    hits = [line for line in doc.read_text().splitlines() if "../shared" in line]
    assert not hits, f"{_rel(doc)} names ../shared; describe the data instead: {hits[:3]}"


@pytest.mark.parametrize("doc", MARKDOWN, ids=_rel)
def test_no_dated_asides(doc: Path) -> None:
    text = doc.read_text()
    dated = sorted({d for d in ISO_DATE.findall(text) if (_rel(doc), d) not in ALLOWED_DATES})
    assert not dated, (f"{_rel(doc)} carries dates {dated}: the docs describe the present (git has the history); "
                       "a date that identifies data goes in ALLOWED_DATES with its reason")


def test_every_allowed_date_is_still_used() -> None:
    stale = [key for key in ALLOWED_DATES if key[1] not in (REPO / key[0]).read_text()]
    assert not stale, f"allowed dates no longer in their file, drop them from ALLOWED_DATES: {stale}"
