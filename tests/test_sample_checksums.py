"""The shipped samples carry page checksums: a damaged byte in any of their Parquet files is an error or changes
nothing, never a silent change of values (issue 55); ``inspect`` names the files of an older bundle without them."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from rltrace.sample_traces import list_samples, sample_path

import rltrace
from rltrace.bundle import has_page_checksums
from rltrace.cli import main
from rltrace.errors import RltraceError
from rltrace.schema import TABLES

FLIPS = 100  # per file


@pytest.mark.parametrize("sample", list_samples())
def test_every_shipped_parquet_file_carries_page_checksums(sample: str) -> None:
    files = [sample_path(sample) / t.file for t in TABLES.values() if (sample_path(sample) / t.file).is_file()]
    assert files and all(has_page_checksums(f) is not False for f in files), sample


@pytest.mark.slow  # 100+ flips per shipped file, each read back: 3-10 s a sample on 2 cores
@pytest.mark.parametrize("sample", list_samples())
def test_byte_flips_in_a_shipped_sample_are_refused_or_change_nothing(sample: str, tmp_path: Path) -> None:
    """Each flip is read as ``rltrace.open`` reads its table (schema, pages and their CRCs, row counts, value rules);
    a flip that passes must leave every value as it was."""
    source = sample_path(sample)
    rng = random.Random(55)
    work = tmp_path / sample
    shutil.copytree(source, work)
    rejected = 0
    for name, schema in TABLES.items():
        path = work / schema.file
        if not path.is_file():
            continue
        expect, data = rltrace.open(source).table(name).collect(), path.read_bytes()
        for position in rng.sample(range(len(data)), min(FLIPS, len(data))):
            flipped = bytearray(data)
            flipped[position] ^= 1 << rng.randrange(8)
            path.write_bytes(bytes(flipped))
            try:
                bundle = rltrace.open(work, validate=False)
                bundle.validate_table(name)
                got = bundle.table(name).collect()
            except RltraceError:
                rejected += 1
                continue
            assert got.equals(expect), f"{schema.file} byte {position}: values changed without an error"
        path.write_bytes(data)
    assert rejected > 0  # most flips land in checksummed pages


def test_inspect_names_the_files_without_checksums(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "old"
    shutil.copytree(sample_path("rollpacker_qwen7b"), work)
    table = pq.read_table(work / "spans.parquet")
    pq.write_table(table, work / "spans.parquet", compression="zstd")  # an older writer: no page CRCs
    assert main(["inspect", str(work), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["page_checksums"]["missing"] == ["spans.parquet"]
    assert main(["inspect", str(work)]) == 0
    assert "spans.parquet carry no page checksums" in capsys.readouterr().out
    assert main(["inspect", "rollpacker_qwen7b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["page_checksums"]["missing"] == []
    assert pl.read_parquet(work / "spans.parquet").height == table.num_rows
