"""Every kind of invalid bundle is caught with a message naming file, column and row (table-driven)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import run_cli

import rltrace


def set_cell(bundle: Path, table: str, column: str, row: int, value: Callable[[dict[str, Any]], Any]) -> None:
    """Rewrite one cell of a bundle table with pyarrow, bypassing rltrace's validating writer."""
    path = bundle / f"{table}.parquet"
    data = pq.read_table(path)
    rows = data.to_pylist()
    values = data.column(column).to_pylist()
    values[row] = value(rows[row])
    field = data.schema.field(column)
    data = data.set_column(data.schema.get_field_index(column), pa.field(column, field.type),
                           pa.array(values, field.type))
    pq.write_table(data, path)


VALUE_CASES = [
    # table, column, row, new value from the row, column named in the error, row named, message fragment
    ("requests", "finish_ns", 5, lambda r: r["first_token_ns"] - 1, "finish_ns", 5, "is before first_token_ns="),
    ("requests", "first_token_ns", 2, lambda r: r["scheduled_ns"] - 7, "first_token_ns", 2, "is before scheduled_ns="),
    ("requests", "output_tokens", 3, lambda r: -3, "output_tokens", 3, "output_tokens=-3 is below 0"),
    ("requests", "finish_reason", 7, lambda r: "timeout", "finish_reason", 7, "unknown finish_reason 'timeout'"),
    ("requests", "request_id", 9, lambda r: "0:0:1", "request_id", 1, "duplicate request_id '0:0:1'"),
    ("requests", "cached_tokens", 4, lambda r: r["prompt_tokens"] + 1, "prompt_tokens", 4,
     "is less than cached_tokens="),
    ("requests", "request_id", 6, lambda r: None, "request_id", 6, "null value"),
    ("requests", "turn", 8, lambda r: -1, "turn", 8, "turn=-1 is below 0"),
    ("collectives", "op", 11, lambda r: "allreduce", "op", 11, "unknown op 'allreduce'"),
    ("collectives", "end_ns", 12, lambda r: r["start_ns"] - 1, "end_ns", 12, "is before start_ns="),
    ("collectives", "rank", 13, lambda r: 99, "rank", 13, "rank=99 is not a member of pg_ranks=[0, 1]"),
    ("collectives", "pg_ranks", 0, lambda r: [], "pg_ranks", 0, "must be a non-empty list of ranks"),
    ("weight_syncs", "bytes", 1, lambda r: -1, "bytes", 1, "bytes=-1 is below 0"),
    ("weight_syncs", "method", 0, lambda r: "pigeon", "method", 0, "unknown method 'pigeon'"),
    ("spans", "end_ns", 2, lambda r: r["start_ns"] - 1, "end_ns", 2, "is before start_ns="),
]


@pytest.mark.parametrize(("table", "column", "row", "value", "named", "named_row", "fragment"), VALUE_CASES)
def test_invalid_values_are_located(
    small_bundle: Path, table: str, column: str, row: int, value: Callable, named: str, named_row: int, fragment: str
) -> None:
    set_cell(small_bundle, table, column, row, value)
    with pytest.raises(rltrace.ValidationError) as info:
        rltrace.open(small_bundle)
    err = info.value
    assert (err.file, err.column, err.row) == (str(small_bundle / f"{table}.parquet"), named, named_row)
    assert fragment in str(err)
    assert str(err).startswith(f"{small_bundle / table}.parquet, column '{named}', row {named_row}: ")


NULL_GAP_CASES = [
    # time set to null, time moved (from the row), column named in the error, message fragment
    ("scheduled_ns", "first_token_ns", lambda r: r["arrival_ns"] - 5, "first_token_ns", "is before arrival_ns="),
    ("first_token_ns", "scheduled_ns", lambda r: r["finish_ns"] + 5, "finish_ns", "is before scheduled_ns="),
]


@pytest.mark.parametrize(("null", "moved", "value", "named", "fragment"), NULL_GAP_CASES)
def test_a_null_time_does_not_hide_the_order_of_the_times_around_it(
    small_bundle: Path, null: str, moved: str, value: Callable, named: str, fragment: str
) -> None:
    """arrival <= scheduled <= first token <= finish holds between every two times that are set."""
    set_cell(small_bundle, "requests", null, 3, lambda r: None)
    rltrace.open(small_bundle)  # a null alone is allowed
    set_cell(small_bundle, "requests", moved, 3, value)
    with pytest.raises(rltrace.ValidationError) as info:
        rltrace.open(small_bundle)
    assert (info.value.column, info.value.row) == (named, 3)
    assert fragment in str(info.value)


def _rewrite(path: Path, change: Callable[[pa.Table], pa.Table]) -> None:
    pq.write_table(change(pq.read_table(path)), path)


def _manifest(bundle: Path, change: Callable[[dict], Any]) -> None:
    path = bundle / "manifest.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


STRUCTURE_CASES = [
    ("missing table file", lambda b: (b / "spans.parquet").unlink(), "spans.parquet: missing"),
    ("folder for a table", lambda b: (b / "spans.parquet").unlink() or (b / "spans.parquet").mkdir(),
     "spans.parquet: is a folder, not a Parquet table"),
    ("random bytes", lambda b: (b / "spans.parquet").write_bytes(b"\x00" * 100),
     "spans.parquet: not a valid Parquet file"),
    (
        "truncated file",
        lambda b: (b / "requests.parquet").write_bytes((b / "requests.parquet").read_bytes()[:500]),
        "requests.parquet: not a valid Parquet file",
    ),
    (
        "missing required column",
        lambda b: _rewrite(b / "requests.parquet", lambda t: t.drop_columns(["engine"])),
        "requests.parquet, column 'engine': missing required column",
    ),
    (
        "missing column added in this minor",
        lambda b: _rewrite(b / "requests.parquet", lambda t: t.drop_columns(["turn"])),
        "requests.parquet, column 'turn': missing required column",
    ),
    (
        "wrong type",
        lambda b: _rewrite(
            b / "requests.parquet",
            lambda t: t.set_column(
                t.schema.get_field_index("output_tokens"),
                "output_tokens",
                pa.array([str(x) for x in t.column("output_tokens").to_pylist()]),
            ),
        ),
        "requests.parquet, column 'output_tokens': has type string, expected integer",
    ),
    (
        "value does not fit the column type",
        lambda b: _rewrite(
            b / "requests.parquet",
            lambda t: t.set_column(
                t.schema.get_field_index("prompt_tokens"),
                "prompt_tokens",
                pa.array([2**40] * t.num_rows, pa.int64()),
            ),
        ),
        "requests.parquet: cannot be read",
    ),
    ("manifest not JSON", lambda b: (b / "manifest.json").write_text("{oops"), "manifest.json: not valid JSON"),
    (
        "manifest field of the wrong kind",
        lambda b: _manifest(b, lambda m: m["model"].update(layers=-3)),
        "manifest.json: field 'model.layers' must be >= 0, got -3",
    ),
    (
        "manifest missing run_id",
        lambda b: _manifest(b, lambda m: m.pop("run_id")),
        "manifest.json: missing field 'run_id'",
    ),
    (
        "newer major version",
        lambda b: _manifest(b, lambda m: m.update(format_version="2.0")),
        "manifest.json: format version 2.0 is not readable",
    ),
    (
        "unparseable version",
        lambda b: _manifest(b, lambda m: m.update(format_version="one")),
        "manifest.json: format_version 'one' is not 'major.minor'",
    ),
    (
        "manifest without a version",
        lambda b: _manifest(b, lambda m: m.pop("format_version")),
        "manifest.json: missing field 'format_version'",
    ),
    (
        "manifest of a run id alone",
        lambda b: (b / "manifest.json").write_text('{"run_id": "x"}'),
        "manifest.json: missing field 'format_version'",
    ),
    (
        "mistyped field in a manifest without a version",
        lambda b: _manifest(b, lambda m: (m.pop("format_version"), m.update(clustr=m.pop("cluster")))),
        "manifest.json: missing field 'format_version'",
    ),
    (
        "negative minor version",
        lambda b: _manifest(b, lambda m: m.update(format_version="1.-1")),
        "manifest.json: format_version '1.-1' is not 'major.minor'",
    ),
    (
        "version with a space",
        lambda b: _manifest(b, lambda m: m.update(format_version=" 1.2")),
        "manifest.json: format_version ' 1.2' is not 'major.minor'",
    ),
    ("no manifest", lambda b: (b / "manifest.json").unlink(), "not a trace bundle (no manifest.json)"),
]


@pytest.mark.parametrize(("case", "damage", "fragment"), STRUCTURE_CASES, ids=[c[0] for c in STRUCTURE_CASES])
def test_structural_problems_are_named(small_bundle: Path, case: str, damage: Callable, fragment: str) -> None:
    damage(small_bundle)
    with pytest.raises(rltrace.BundleError) as info:
        rltrace.open(small_bundle)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_not_a_directory_and_missing_path(tmp_path: Path) -> None:
    with pytest.raises(rltrace.BundleError, match="no such file or directory"):
        rltrace.open(tmp_path / "nothing")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(rltrace.BundleError, match="not a trace bundle"):
        rltrace.open(tmp_path / "file.txt")


def test_cli_reports_an_invalid_bundle_on_one_line(small_bundle: Path) -> None:
    set_cell(small_bundle, "requests", "finish_ns", 17, lambda r: r["first_token_ns"] - 5)
    result = run_cli("inspect", str(small_bundle))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"{small_bundle}/requests.parquet, column 'finish_ns', row 17: finish_ns=" in lines[0]
    assert "Traceback" not in result.stderr
