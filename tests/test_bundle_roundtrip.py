"""Write -> read round trips through real Parquet files, atomic writes, streaming row groups."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from helpers import small_config
from polars.testing import assert_frame_equal
from rltrace.sample_traces import sample_path

import rltrace
from rltrace.bundle import save_bundle, to_arrow
from rltrace.schema import TABLES
from rltrace.synth import synthesize


def test_round_trip_preserves_every_table_and_the_manifest(tmp_path: Path) -> None:
    result = synthesize(small_config())
    path = rltrace.write_bundle(tmp_path / "b", result.manifest, result.tables)
    bundle = rltrace.open(path)
    for name, schema in TABLES.items():
        written = pl.from_arrow(to_arrow(schema, result.tables.get(name)))
        assert_frame_equal(bundle.table(name).collect(), written)
        assert written.height == (result.tables[name].height if name in result.tables else 0)
    assert "iterations" not in result.tables  # a synthetic workload has no engine iterations: written empty
    assert bundle.manifest == dataclasses.replace(result.manifest, tables=bundle.manifest.tables)
    assert bundle.manifest.tables == {n: result.tables[n].height if n in result.tables else 0 for n in TABLES}


def test_writing_leaves_the_callers_manifest_unchanged(tmp_path: Path) -> None:
    """Writing part of an opened bundle with its manifest must not rewrite that bundle's row counts: the
    opened bundle still validates against its own files afterwards."""
    bundle = rltrace.open(sample_path("rollpacker_qwen7b"))
    before = copy.deepcopy(bundle.manifest)
    part = bundle.requests.filter(pl.col("step") < 3).collect()
    written = save_bundle(tmp_path / "part", bundle.manifest, {"requests": part})
    assert bundle.manifest == before
    bundle.validate()
    assert written.tables["requests"] == part.height < before.tables["requests"]
    assert rltrace.open(tmp_path / "part").manifest == written


def test_write_accepts_dicts_and_fills_optional_columns(tmp_path: Path) -> None:
    manifest = rltrace.Manifest(run_id="hand-made")
    requests = {
        "step": [0, 0],
        "request_id": ["a", "b"],
        "group_id": ["g", "g"],
        "engine": ["e0", "e0"],
        "prompt_tokens": [10, 10],
        "output_tokens": [5, 7],
        "arrival_ns": [100, 100],
        "scheduled_ns": [110, None],
        "first_token_ns": [120, None],
        "finish_ns": [200, None],
        "finish_reason": ["stop", "abort"],
        "policy_version": [0, None],
    }
    rltrace.write_bundle(tmp_path / "b", manifest, {"requests": requests})
    frame = rltrace.open(tmp_path / "b").requests.collect()
    assert frame["turn"].to_list() == [0, 0]
    assert frame["num_preemptions"].to_list() == [0, 0]
    assert frame["cached_tokens"].null_count() == 2
    assert rltrace.open(tmp_path / "b").collectives.collect().height == 0


def test_write_is_atomic_and_leaves_no_temporaries(tmp_path: Path) -> None:
    result = synthesize(small_config())
    rltrace.write_bundle(tmp_path / "b", result.manifest, result.tables)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == sorted(
        ["manifest.json", *(t.file for t in TABLES.values())]
    )


def test_invalid_data_never_reaches_disk(tmp_path: Path) -> None:
    result = synthesize(small_config())
    broken = dict(result.tables)
    broken["spans"] = result.tables["spans"].with_columns(pl.col("end_ns") - 10**15)
    with pytest.raises(rltrace.ValidationError, match="spans.parquet, column 'end_ns', row 0"):
        rltrace.write_bundle(tmp_path / "b", result.manifest, broken)
    assert list(tmp_path.iterdir()) == []


def test_overwrite_only_replaces_bundles(tmp_path: Path) -> None:
    result = synthesize(small_config())
    rltrace.write_bundle(tmp_path / "b", result.manifest, result.tables)
    with pytest.raises(rltrace.BundleError, match="already exists"):
        rltrace.write_bundle(tmp_path / "b", result.manifest, result.tables)
    rltrace.write_bundle(tmp_path / "b", result.manifest, result.tables, overwrite=True)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep me")
    with pytest.raises(rltrace.BundleError, match="not a trace bundle; refusing"):
        rltrace.write_bundle(tmp_path / "notes", result.manifest, result.tables, overwrite=True)
    assert (tmp_path / "notes" / "mine.txt").read_text() == "keep me"


def test_table_writer_streams_row_groups(tmp_path: Path) -> None:
    frame = synthesize(small_config()).tables["requests"]
    path = tmp_path / "requests.parquet"
    with rltrace.TableWriter(path, TABLES["requests"], row_group_rows=32) as writer:
        for chunk in frame.iter_slices(40):
            writer.write(chunk)
            assert not path.exists(), "the final name appears only when the file is complete"
    assert path.exists()
    meta = pq.ParquetFile(path).metadata
    assert meta.num_rows == frame.height
    assert meta.num_row_groups >= frame.height // 40
    assert list(tmp_path.iterdir()) == [path]


def test_unknown_table_or_column_is_refused(tmp_path: Path) -> None:
    manifest = rltrace.Manifest(run_id="x")
    with pytest.raises(rltrace.ValidationError, match="unknown table 'request'"):
        rltrace.write_bundle(tmp_path / "b", manifest, {"request": None})
    with pytest.raises(rltrace.ValidationError, match="column 'tokens': unknown column"):
        rltrace.write_bundle(tmp_path / "b", manifest, {"spans": {"tokens": [1]}})
