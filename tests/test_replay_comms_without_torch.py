"""``rltrace replay-comms`` where torch is not installed: one clear line on stderr and exit 2, no traceback."""

from __future__ import annotations

from pathlib import Path

from helpers import run_cli


def test_replay_comms_without_torch_says_so_in_one_line(tmp_path: Path) -> None:
    # Python's own switch for an absent module: None in sys.modules makes `import torch` raise ImportError,
    # set for the real console script through a sitecustomize on its path
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    result = run_cli("replay-comms", "tiny_rl_cpu", cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs torch" in lines[0] and "Traceback" not in result.stderr
