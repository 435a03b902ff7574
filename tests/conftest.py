"""Shared fixtures: small real bundles on disk."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import small_config

import rltrace
from rltrace.synth import synthesize


@pytest.fixture
def small_bundle(tmp_path: Path) -> Path:
    """A valid tiny bundle written through the public API."""
    result = synthesize(small_config())
    return rltrace.write_bundle(tmp_path / "small", result.manifest, result.tables)
