"""The commands that need torch where it is not installed: one clear line on stderr and exit 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run_cli


@pytest.mark.parametrize(("args", "what"), [
    (["replay-comms", "tiny_rl_cpu"], "replay-comms needs torch"),
    # a ModuleNotFoundError traceback, exit 1, before
    (["replay", "tiny_rl_cpu", "-s", "as-recorded", "--execute", "--replicates", "0"], "--execute needs torch"),
    (["calibrate", "--device", "cpu", "-o", "p.toml"], "calibrate --device needs torch"),
])
def test_a_command_that_needs_torch_says_so_in_one_line(tmp_path: Path, args: list[str], what: str) -> None:
    # Python's own switch for an absent module: None in sys.modules makes `import torch` raise ImportError,
    # set for the real console script through a sitecustomize on its path
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    result = run_cli(*args, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and what in lines[0] and "Traceback" not in result.stderr
