"""Sample trace bundles shipped with rltrace (package data); see README.md in this folder."""

from __future__ import annotations

from pathlib import Path

SAMPLES_DIR = Path(__file__).parent
DEFAULT_SAMPLE = "rollpacker_qwen7b"


def list_samples() -> list[str]:
    """Names of the bundled sample traces."""
    return sorted(p.name for p in SAMPLES_DIR.iterdir() if (p / "manifest.json").is_file())


def sample_path(name: str = DEFAULT_SAMPLE) -> Path:
    """Path of a bundled sample (the default is the RollPacker-like trace)."""
    return SAMPLES_DIR / name
