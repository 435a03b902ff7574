"""Every Python block in the README and docs/ runs as written, pasted into a file in an empty folder: a reader
who copies one gets no NameError (a missing import, a placeholder name) and no error from the API it shows.

Each block runs in a process of its own, since some start a recorder or write files as a reader's script would.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
BLOCKS = {f"{page.relative_to(REPO).as_posix()}#{i + 1}": block
          for page in PAGES for i, block in enumerate(BLOCK.findall(page.read_text()))}


def test_the_docs_have_python_blocks() -> None:
    assert len(BLOCKS) >= 7, sorted(BLOCKS)


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_every_python_block_runs_as_written(name: str, tmp_path: Path) -> None:
    (tmp_path / "snippet.py").write_text(BLOCKS[name])
    done = subprocess.run([sys.executable, "snippet.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, f"{name}:\n{done.stderr[-3000:]}"
