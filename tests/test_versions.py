"""Older minor versions read with defaults; newer minors read; other majors are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import rltrace
from rltrace.schema import TABLES


def _as_version(bundle: Path, version: str, drop: dict[str, list[str]]) -> None:
    for table, columns in drop.items():
        path = bundle / f"{table}.parquet"
        pq.write_table(pq.read_table(path).drop_columns(columns), path)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["format_version"] = version
    (bundle / "manifest.json").write_text(json.dumps(manifest))


def test_a_1_0_bundle_reads_with_the_1_1_columns_defaulted(small_bundle: Path) -> None:
    added_in_1_1 = [c.name for c in TABLES["requests"].columns if c.since == (1, 1)]
    assert sorted(added_in_1_1) == ["cached_tokens", "num_preemptions", "turn"]
    _as_version(small_bundle, "1.0", {"requests": added_in_1_1})
    assert pq.read_schema(small_bundle / "requests.parquet").names.count("turn") == 0
    frame = rltrace.open(small_bundle).requests.collect()
    assert frame.columns == list(TABLES["requests"].names)
    assert set(frame["turn"].to_list()) == {0}
    assert set(frame["num_preemptions"].to_list()) == {0}
    assert frame["cached_tokens"].null_count() == frame.height


def test_a_1_1_bundle_reads_with_single_turn_trajectories(small_bundle: Path) -> None:
    added_in_1_2 = [c.name for c in TABLES["requests"].columns if c.since == (1, 2)]
    assert added_in_1_2 == ["trajectory_id"]
    _as_version(small_bundle, "1.1", {"requests": added_in_1_2})
    frame = rltrace.open(small_bundle).requests.collect()
    assert frame.columns == list(TABLES["requests"].names)
    assert frame["trajectory_id"].null_count() == frame.height


@pytest.mark.parametrize("version, readable", [("1.2", True), ("1.3", False)])
def test_a_bundle_from_before_the_iterations_table_reads_it_as_empty(small_bundle: Path, version: str,
                                                                     readable: bool) -> None:
    assert TABLES["iterations"].since == (1, 3)
    _as_version(small_bundle, version, {})
    (small_bundle / "iterations.parquet").unlink()
    if readable:
        frame = rltrace.open(small_bundle).iterations.collect()
        assert frame.height == 0 and frame.columns == list(TABLES["iterations"].names)
    else:  # written at 1.3 or later: the file is part of the bundle
        with pytest.raises(rltrace.BundleError, match="iterations.parquet: missing"):
            rltrace.open(small_bundle)


def test_a_newer_minor_reads_and_keeps_unknown_manifest_fields(small_bundle: Path) -> None:
    path = small_bundle / "spans.parquet"
    table = pq.read_table(path)
    pq.write_table(table.append_column("gpu_util", [[0.5] * table.num_rows]), path)
    manifest = json.loads((small_bundle / "manifest.json").read_text())
    manifest["format_version"] = "1.7"
    manifest["energy_joules"] = 123
    (small_bundle / "manifest.json").write_text(json.dumps(manifest))
    bundle = rltrace.open(small_bundle)
    assert bundle.spans.collect().columns == list(TABLES["spans"].names)
    assert bundle.manifest.extra["energy_joules"] == 123
    assert json.loads(bundle.manifest.to_json())["extra"]["energy_joules"] == 123


@pytest.mark.parametrize("version", ["0.9", "2.0", "10.1"])
def test_other_majors_are_refused(small_bundle: Path, version: str) -> None:
    _as_version(small_bundle, version, {})
    with pytest.raises(rltrace.BundleError, match=f"format version {version} is not readable"):
        rltrace.open(small_bundle)
