"""The figures the docs print are what the commands and data give now, not a figure from an older model.

ci/docs_figures.py makes each one (the fenced output after a ``$ rltrace ...`` line, or a table's rows) and
rewrites the page; a model change that moves a validated figure reruns it in the same commit, and these tests
fail until it has.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from helpers import REPO, load_script


def _script() -> ModuleType:
    return load_script(REPO / "ci" / "docs_figures.py")


FIGURES = _script().FIGURES
SLOW = {"estimate-validate", "reproduction-table", "same-work-table", "moe-fabric-table"}  # over 4 s on 2 cores


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in FIGURES])
def test_the_docs_show_the_current_figure(name: str) -> None:
    figure = FIGURES[name]
    assert not figure.stale(), f"{figure.page}: {name} is out of date: run python ci/docs_figures.py {name}"


def test_the_script_rewrites_a_stale_figure_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script()
    page = tmp_path / "docs" / "fabrics.md"
    page.parent.mkdir()
    source = (REPO / "docs" / "fabrics.md").read_text()
    at = source.index(script.FIGURES["bench-example"].anchor)
    end = source.index("```", at)
    page.write_text(source[:at] + script.FIGURES["bench-example"].anchor + "\nan old figure\n" + source[end:])
    monkeypatch.setattr(script, "REPO", tmp_path)
    assert script.main(["--check", "bench-example"]) == 1
    assert script.main(["bench-example"]) == 0
    assert page.read_text() == source and script.main(["--check", "bench-example"]) == 0
