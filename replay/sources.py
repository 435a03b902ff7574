"""What a replay starts from: a trace bundle (a recording, an import, a synthetic run) or a described job (a TOML
file, :mod:`rltrace.replay.described`), prepared the same way for every scheduler."""

from __future__ import annotations

from pathlib import Path

from rltrace.replay.described import from_description, is_description, load_description
from rltrace.replay.run import CostConfig, Prepared, Shape, from_bundle

from rltrace.bundle import open_bundle


def prepare_source(path: str | Path, shape: Shape, cost: CostConfig,
                   prices: dict[str, float] | None = None) -> Prepared:
    """The prepared workload of ``path``, a bundle or a described job."""
    if is_description(path):
        return from_description(load_description(path), shape, cost, prices)
    return from_bundle(open_bundle(path), shape, cost, prices)


def source_devices(path: str | Path) -> set[str]:
    """The GPU kinds ``path`` records or describes (reading it now: one clear line if it is not a source)."""
    if is_description(path):
        d = load_description(path)
        return {d.cluster.gpu, d.cluster.train_gpu or d.cluster.gpu}
    return {pool.device for pool in open_bundle(path).manifest.cluster.values()}
