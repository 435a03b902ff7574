"""What a replay starts from: a trace bundle (a recording, an import, a synthetic run) or a described job (a TOML
file, :mod:`rltrace.replay.described`), prepared the same way for every scheduler."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from rltrace.replay.described import from_description, is_description, load_description
from rltrace.replay.loading import Shape, check_replayable, from_bundle
from rltrace.replay.run import CostConfig, Prepared

from rltrace.bundle import Bundle, open_bundle
from rltrace.calibration import file_digest


def open_source(path: str | Path, shape: Shape, cost: CostConfig,
                prices: dict[str, float] | None = None) -> tuple[Prepared, Bundle | None]:
    """The prepared workload of ``path``, a bundle or a described job, with the opened bundle (None for a
    described job); its ``source`` names the input (:func:`source_of`)."""
    if is_description(path):
        prepared = from_description(load_description(path), shape, cost, prices)
        return replace(prepared, source={**source_of("description", path), **prepared.source}), None
    bundle = open_bundle(path)
    return replace(from_bundle(bundle, shape, cost, prices), source=source_of("bundle", path, bundle)), bundle


def prepare_source(path: str | Path, shape: Shape, cost: CostConfig,
                   prices: dict[str, float] | None = None) -> Prepared:
    """The prepared workload of ``path``, a bundle or a described job."""
    return open_source(path, shape, cost, prices)[0]


def source_of(kind: str, path: str | Path, bundle: Bundle | None = None) -> dict[str, Any]:
    """What a replay started from, as config.json's ``source`` records it: ``kind`` ("bundle", "description" or
    "job list"), the absolute path, and the bundle's run id or the file content's sha256 (so a run folder names
    the input it replayed even after the file changed)."""
    where = Path(path).resolve()
    ident = ({"run_id": bundle.manifest.run_id} if bundle is not None
             else {"sha256": file_digest(where)})
    return {"kind": kind, "path": str(where), **ident}


def source_devices(path: str | Path) -> set[str]:
    """The GPU kinds ``path`` records or describes (reading it now: one clear line if it is not a source, or a
    bundle with nothing to replay)."""
    if is_description(path):
        d = load_description(path)
        return {d.cluster.gpu, d.cluster.train_gpu or d.cluster.gpu}
    bundle = open_bundle(path)
    check_replayable(bundle)
    return {pool.device for pool in bundle.manifest.cluster.values()}
