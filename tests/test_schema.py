"""The single schema declaration and everything derived from it stay consistent."""

from __future__ import annotations

import pyarrow as pa
import pytest
from helpers import REPO, run_cli
from rltrace.replay.described import markdown_reference as described_reference

from rltrace.bundle import polars_dtype, polars_schema
from rltrace.schema import FORMAT_VERSION, TABLES, markdown_reference, parse_version


def test_every_table_has_units_in_time_and_size_names() -> None:
    for table in TABLES.values():
        for col in table.columns:
            if col.type == pa.int64() and ("time" in col.doc or col.name.endswith("_ns")):
                assert col.name.endswith("_ns"), col.name


def test_arrow_and_polars_schemas_follow_the_declaration() -> None:
    for table in TABLES.values():
        arrow = table.arrow_schema()
        assert arrow.names == list(table.names)
        for col in table.columns:
            assert arrow.field(col.name).type == col.type
            assert arrow.field(col.name).nullable == col.nullable
            assert polars_schema(table)[col.name] == polars_dtype(col.type)


def test_orders_and_memberships_name_real_columns() -> None:
    for table in TABLES.values():
        for order in table.orders:
            assert {order.earlier, order.later} <= set(table.names)
        for scalar, lst in table.member_of:
            assert {scalar, lst} <= set(table.names)


def test_docs_format_md_is_generated_from_the_schema() -> None:
    text = (REPO / "docs" / "format.md").read_text()
    assert markdown_reference() in text, "docs/format.md is stale: regenerate with `rltrace schema`"


def test_schema_command_prints_the_reference() -> None:
    result = run_cli("schema")
    assert result.returncode == 0
    assert result.stdout == markdown_reference() + "\n" + described_reference()
    for table in TABLES.values():
        assert f"`{table.file}`" in result.stdout


@pytest.mark.parametrize(("text", "parsed"), [(FORMAT_VERSION, (1, 4)), ("1.0", (1, 0)), ("2.15", (2, 15))])
def test_version_parsing(text: str, parsed: tuple[int, int]) -> None:
    assert parse_version(text) == parsed


@pytest.mark.parametrize("text", ["1", "1.-1", "-1.2", " 1.2", "1.2 ", "1.2\n", "1.2.3", "1.+2", "1_0.2", "\u0661.2",
                                  "", "1.", ".2", "one"])
def test_only_major_dot_minor_is_a_version(text: str) -> None:
    with pytest.raises(ValueError, match="is not 'major.minor'"):
        parse_version(text)
