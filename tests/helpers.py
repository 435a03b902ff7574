"""Test helpers: tiny synthetic configs, the real CLI as a subprocess, the shared data folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rltrace.synth import load_config

REPO = Path(__file__).resolve().parents[1]
COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")
"""the ring/tree collectives of the network validation sets (point-to-point: send/recv, all-to-all, own tests)"""


def shared_data() -> Path:
    """../shared/data beside the checkout (CI puts it there); RLTRACE_SHARED_DATA overrides."""
    return Path(os.environ.get("RLTRACE_SHARED_DATA", REPO.parent / "shared" / "data"))


def require_shared(relative: str) -> Path:
    """A file from the shared data folder; in CI its absence is a failure, elsewhere a skip with the reason."""
    path = shared_data() / relative
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"shared data file missing in CI: {path}")
        pytest.skip(f"shared data not present here: {path}")
    return path


SMALL = [
    "steps=3",
    "prompts_per_step=8",
    "samples_per_prompt=4",
    "max_new_tokens=2048",
    "generation.gpus=2",
    "training.gpus=2",
    "model=Qwen2.5-7B",
]


def small_config(*extra: str, seed: int = 0):
    """A tiny synthetic run (96 requests) for fast tests."""
    return load_config(sets=[*SMALL, *extra], seed=seed)


def tiny_model(folder: Path) -> Path:
    """The tiny random Llama of examples/tiny_rl (built once per folder)."""
    sys.path.insert(0, str(REPO / "examples" / "tiny_rl"))
    try:
        import tiny_llama
    finally:
        sys.path.pop(0)
    return tiny_llama.build(folder)


RLTRACE = str(Path(sys.executable).parent / "rltrace")


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``rltrace`` console script for real, in a subprocess."""
    return subprocess.run(
        [RLTRACE, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        # progress lines only where a test asks for them (RLTRACE_PROGRESS_EVERY_S): on a loaded machine a slow
        # first stage would otherwise print "... running" before the one-line error a test checks
        env={**os.environ, "COLUMNS": "120", "RLTRACE_PROGRESS_GRACE_S": "60", **(env or {})},
        check=False,  # callers assert on the exit code and stderr themselves
    )
