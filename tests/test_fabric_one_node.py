"""The packaged one-node validation: aiconfigurator's NCCL sweeps of H100, H200, B200 and A100, through the model
and the CLI (replay/network/data/one_node_nccl.parquet; docs/fabrics-validation.md)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from helpers import COLLECTIVES, run_cli
from rltrace.replay.network.validation import ONE_NODE_PARQUET, one_node_compare, one_node_summary

from rltrace.errors import ConfigError


@pytest.fixture(scope="module")
def compared() -> pl.DataFrame:
    return one_node_compare()


def test_every_row_names_its_source_and_the_set_covers_four_gpu_kinds(compared: pl.DataFrame) -> None:
    rows = pl.read_parquet(ONE_NODE_PARQUET)
    assert rows.height == compared.height == 2016  # 4 GPU kinds x 4 ops x 2 dtypes x 3 GPU counts x 21 sizes
    assert rows["source"].str.starts_with("ai-dynamo/aiconfigurator @ 095f58a5").all()
    assert set(rows["gpu"]) == {"H100", "H200", "B200", "A100"}
    assert set(rows["op"]) == {*COLLECTIVES, "all_to_all"} and set(rows["gpus"]) == {2, 4, 8}
    assert (rows["time_us"] > 0).all() and rows["size_bytes"].min() == 512 and rows["size_bytes"].max() == 512 << 20


def test_collectives_on_h100_and_h200_hold_11_percent_from_64_mb(compared: pl.DataFrame) -> None:
    big = compared.filter(pl.col("size_bytes") >= 64 << 20, pl.col("op").is_in(COLLECTIVES),
                          pl.col("gpu").is_in(["H100", "H200"]))
    by = one_node_summary(big)
    # 2-GPU all-gather, the worst: 10.6% on H100 (the constants were read off another H100 sweep), 9.8% on H200
    assert by.height == 18 and (by["median_abs_error"] <= 0.11).all()


def test_the_known_misses_stay_visible(compared: pl.DataFrame) -> None:
    """What docs/fabrics-validation.md reports as misses, held so that a change that moves them shows: from 64 MB B200's
    all-to-all (NCCL's point-to-point path) is 24% fast and A100's all-gather 17%; H100's and H200's all-to-all
    hold 11%."""
    big = compared.filter(pl.col("size_bytes") >= 64 << 20)
    a2a = big.filter(pl.col("op") == "all_to_all")
    assert (a2a["model_algorithm"] == "p2p").all()
    median = dict(a2a.group_by("gpu").agg(pl.col("error").median()).iter_rows())
    assert -0.30 < median["B200"] < -0.18 and -0.11 < median["H100"] < 0 and -0.11 < median["H200"] < 0
    gathers = big.filter(pl.col("gpu") == "A100", pl.col("op") == "all_gather")["error"]
    assert -0.25 < gathers.median() < -0.12


def test_the_summary_orders_the_size_bands(compared: pl.DataFrame) -> None:
    by = one_node_summary(compared).filter(pl.col("gpu") == "H100", pl.col("op") == "all_gather", pl.col("gpus") == 8)
    assert by["size_band"].to_list() == ["< 1 MB", "1 - 64 MB", ">= 64 MB"]
    assert by["points"].sum() == 42  # two dtypes x 21 sizes


def test_a_missing_corrupt_or_wrong_table_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no one-node validation table"):
        one_node_compare(tmp_path / "absent.parquet")
    (tmp_path / "corrupt.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(ConfigError, match="not a readable Parquet file"):
        one_node_compare(tmp_path / "corrupt.parquet")
    pl.read_parquet(ONE_NODE_PARQUET).drop("time_us").write_parquet(tmp_path / "short.parquet")
    with pytest.raises(ConfigError, match="missing columns time_us"):
        one_node_compare(tmp_path / "short.parquet")


def test_fabric_validate_prints_the_one_node_table_and_its_points() -> None:
    table = run_cli("fabric", "validate", "--no-multinode")
    assert table.returncode == 0, table.stderr
    assert "one-node NCCL sweeps" in table.stdout and "B200" in table.stdout and ">= 64 MB" in table.stdout
    assert "multi-node" not in table.stdout
    points = run_cli("fabric", "validate", "--no-multinode", "--json")
    assert points.returncode == 0, points.stderr
    rows = pl.DataFrame(json.loads(points.stdout))
    columns = {"source", "gpu", "op", "size_bytes", "measured_s", "model_s", "model_protocol", "error"}
    assert columns <= set(rows.columns)
    assert rows.height == 2016
    nothing = run_cli("fabric", "validate", "--no-multinode", "--no-one-node")
    assert nothing.returncode == 2 and nothing.stderr.count("\n") == 1 and "nothing to validate" in nothing.stderr
