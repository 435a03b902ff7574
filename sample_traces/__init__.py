"""Sample trace bundles shipped with rltrace (package data); see README.md in this folder."""

from __future__ import annotations

import os
from pathlib import Path

from rltrace.errors import BundleError, clean

SAMPLES_DIR = Path(__file__).parent
DEFAULT_SAMPLE = "rollpacker_qwen7b"


def list_samples() -> list[str]:
    """Names of the bundled sample traces."""
    return sorted(p.name for p in SAMPLES_DIR.iterdir() if (p / "manifest.json").is_file())


def sample_path(name: str = DEFAULT_SAMPLE) -> Path:
    """Path of a bundled sample (the default is the RollPacker-like trace)."""
    return SAMPLES_DIR / name


def resolve(path: str | os.PathLike[str] | None) -> Path:
    """A bundle as the CLI and :func:`rltrace.open` name one: None, the default sample; a shipped sample's name that
    is no path here, that sample; another string or path, that path; anything else is a BundleError."""
    if path is None:
        return sample_path()
    if not isinstance(path, str | os.PathLike):  # Path(5) would raise a TypeError from deep in pathlib
        raise BundleError(f"a bundle is a folder's path or a shipped sample's name, got {clean(repr(path), 60)}")
    where = Path(path)
    if not where.exists() and str(path) in list_samples():
        return sample_path(str(path))
    return where
