"""nccl-tests' printed logs as multi-node validation rows: real logs read as the packaged set transcribed them, and
every log or cluster spec the model cannot hold refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from helpers import run_cli
from rltrace.replay.network.nccl_tests import Cluster, parse_cluster, read_log
from rltrace.replay.network.validation import MULTINODE_CSV, multinode_compare

from rltrace.errors import ConfigError

LOGS = Path(__file__).parent / "data" / "nccl_tests"
VOLTAGE_PARK = Cluster(nics_per_node=8, nic_gbps=400)
RANKS = "".join(f"#  Rank {r:2d} Group  0 Pid {100 + r} on node-{r // 2} device {r % 2} [0x{r:02x}] NVIDIA H100 80GB "
                "HBM3\n" for r in range(4))
TABLE = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
         "busbw #wrong\n"
         "     1048576        262144     float     sum      -1    60.12   17.44   26.16      0    59.80   17.53   "
         "26.30      0\n")


@pytest.mark.parametrize(("log", "op"), [
    ("nccl_allreduce_20260224_225706.txt", "all_reduce"),
    ("nccl_allgather_20260224_225706.txt", "all_gather"),
    ("nccl_broadcast_20260224_225706.txt", "broadcast"),
])
def test_a_real_log_reads_as_the_packaged_set_transcribed_it(log: str, op: str) -> None:
    rows = read_log(LOGS / log, VOLTAGE_PARK)
    assert rows.select("gpu", "nodes", "gpus_per_node", "op", "nccl_version").unique().rows() == [
        ("H100", 4, 8, op, "2.24.3")]
    assert rows["size_bytes"].min() > 0 and rows["size_bytes"].max() == 8 << 30  # all-gather's 0-byte rows skipped
    packaged = pl.read_csv(MULTINODE_CSV).filter(cluster="voltagepark-h100-ib", op=op)
    both = packaged.join(rows, on="size_bytes", suffix="_log")
    assert both.height == packaged.height == 14 and both["time_us"].to_list() == both["time_us_log"].to_list()
    # priced alike: the log's rows are the packaged rows
    from_log = multinode_compare(LOGS / log, frame=rows).join(packaged.select("size_bytes"), on="size_bytes")
    assert from_log["model_s"].to_list() == multinode_compare(where=(pl.col("cluster") == "voltagepark-h100-ib")
                                                              & (pl.col("op") == op))["model_s"].to_list()


@pytest.mark.slow  # over 5 s on 2 cores
def test_fabric_validate_reads_logs_beside_a_csv() -> None:
    args = ("fabric", "validate", "--no-one-node", "--cluster", "nics_per_node=8,nic_gbps=400",
            "--runs", str(LOGS / "nccl_allreduce_20260224_225706.txt"), "--runs", str(MULTINODE_CSV))
    table = run_cli(*args)
    assert table.returncode == 0, table.stderr
    assert "nccl_allreduce_20260224_225706.txt" in table.stdout and "multinode_nccl.csv" in table.stdout
    points = pl.DataFrame(json.loads(run_cli(*args, "--json").stdout))
    assert points.height == 31 + pl.read_csv(MULTINODE_CSV).height  # 31 sizes of 8 B to 8 GiB
    assert points.filter(pl.col("cluster") == "nccl_allreduce_20260224_225706")["settings"].unique().to_list() == [""]


@pytest.mark.parametrize(("text", "name", "cluster", "message"), [
    ("", "nccl_reduce_20260225_221049.txt", "", "reduce_perf is not a collective the model times"),
    (RANKS + TABLE, "mine.txt", "", "no collective named in the log or its file name"),
    (RANKS.splitlines(keepends=True)[0] + TABLE, "all_reduce_perf.txt", "", "fewer than 2 ranks"),
    (RANKS.replace("node-1", "node-0", 1) + TABLE, "all_reduce_perf.txt", "", "nodes with different GPU counts"),
    (RANKS.replace("node-1", "node-2", 1) + TABLE, "all_reduce_perf.txt", "", "nodes with different GPU counts"),
    (RANKS, "all_reduce_perf.txt", "", "no nccl-tests table"),
    (RANKS + TABLE.replace("60.12", "fast"), "all_reduce_perf.txt", "", "line 6: the out-of-place time 'fast' is not"),
    (RANKS + TABLE.replace("60.12", "nan"), "all_reduce_perf.txt", "", ("line 6: the out-of-place time 'nan' is not a "
     "time above 0")),  # read, and the summary's median moved
    (RANKS.replace("80GB HBM3", "PCIe") + TABLE, "all_reduce_perf.txt", "", ("all_reduce_perf.txt: line 1: GPU "
     "'NVIDIA H100 PCIe' is not an SXM part the catalog holds")),  # the file and line were not named
    (RANKS.replace("H100 80GB HBM3", "V100-SXM2-32GB") + TABLE, "all_reduce_perf.txt", "", ("all_reduce_perf.txt: line "
     "1: GPU 'NVIDIA V100-SXM2-32GB': no single catalog kind")),
    (RANKS.replace("H100", "H200", 1) + TABLE, "all_reduce_perf.txt", "", "ranks on different GPUs"),
    (RANKS + TABLE, "all_reduce_perf.txt", ",gpu=V100", "--cluster gpu=V100: unknown GPU kind 'V100'"),
    (RANKS + TABLE.replace("float", "int32"), "all_reduce_perf.txt", "", "line 6: unknown dtype 'int32'"),
    (RANKS.replace("node-1", "node-0") + TABLE, "all_reduce_perf.txt", "", "a run inside one node"),
    (RANKS.replace("Rank  2", "Rank  0") + TABLE, "all_reduce_perf.txt", "", "line 3: rank 0 listed twice"),
    (RANKS + TABLE.replace("     time", "  cputime", 1), "all_reduce_perf.txt", "", "reports CPU time (nccl-tests -C"),
    (RANKS + TABLE, "all_reduce_perf.txt", ",network=efx", "--cluster network=efx: unknown network"),
    (RANKS + TABLE, "nccl_sendrecv_perf.txt", "", "sendrecv_perf is not a collective the model times"),
    (RANKS + TABLE, "all_reduce_perf.txt", ",op=gather", "--cluster op=gather: unknown collective"),
    (RANKS + TABLE, "all_reduce_perf.txt", ",nvswitch=maybe", "nvswitch is true or false"),
    (RANKS + TABLE, "all_reduce_perf.txt", ",radix=3", "expected nics_per_node=N,nic_gbps=G"),
])
def test_a_log_the_model_cannot_hold_is_one_line_and_exit_2(tmp_path: Path, text: str, name: str, cluster: str,
                                                            message: str) -> None:
    log = LOGS / name if not text else tmp_path / name
    if text:
        log.write_text(text)
    result = run_cli("fabric", "validate", "--runs", str(log), "--cluster", f"nics_per_node=2,nic_gbps=400{cluster}")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and message in lines[0], result.stderr


def test_a_log_needs_the_nics_it_does_not_print() -> None:
    result = run_cli("fabric", "validate", "--runs", str(LOGS / "nccl_allreduce_20260224_225706.txt"))
    assert result.returncode == 2 and "does not print its NICs; give --cluster" in result.stderr


@pytest.mark.parametrize(("text", "expected"), [
    ("nics_per_node=8,nic_gbps=400", Cluster(nics_per_node=8, nic_gbps=400.0)),
    ("nic_gbps=100, nics_per_node=32, network=efa, nvswitch=False, gpu=H100, op=all_to_all",
     Cluster(nics_per_node=32, nic_gbps=100.0, network="efa", nvswitch=False, gpu="H100", op="all_to_all")),
])
def test_a_cluster_spec_reads_every_key(text: str, expected: Cluster) -> None:
    assert parse_cluster(text) == expected


@pytest.mark.parametrize("text", ["nics_per_node=8", "nics_per_node=0,nic_gbps=400", "nics_per_node=8,nic_gbps=-1",
                                  "nics_per_node=eight,nic_gbps=400", "nics_per_node=8,nic_gbps"])
def test_a_bad_cluster_spec_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError, match="--cluster"):
        parse_cluster(text)


def test_the_nccl_algo_a_log_reports_is_the_rows_setting(tmp_path: Path) -> None:
    # under NCCL_DEBUG=INFO NCCL says what the environment forced; the model then runs that algorithm
    log = tmp_path / "all_reduce_perf.txt"
    log.write_text("node-0:1:1 [0] NCCL INFO NCCL_ALGO set by environment to Tree\nNCCL version 2.21.5+cuda12.4\n"
                   + RANKS + TABLE)
    rows = read_log(log, Cluster(nics_per_node=2, nic_gbps=400))
    assert rows.select("settings", "nccl_version", "nodes", "gpus_per_node").row(0) == (
        "NCCL_ALGO=Tree", "2.21.5", 2, 2)
    assert multinode_compare(log, frame=rows)["model_algorithm"].to_list() == ["tree"]


@pytest.mark.parametrize(("name", "text"), [
    ("nccl_all_reduce_perf_4n.txt", RANKS + TABLE),  # the collective anywhere in the file's name
    ("allreduce.log", RANKS.replace("Group  0 ", "") + TABLE),  # rank lines before nccl-tests 2.13: no Group
    ("srun_all_reduce_perf.txt", "".join(f"0: {ln}\n" for ln in (RANKS + TABLE).splitlines())),  # srun -l
    ("mpi.txt", "# Collective test starting: all_reduce_perf\n" + "".join(
        f"[1,0]<stdout>:{ln}\n" for ln in (RANKS + TABLE).splitlines())),  # mpirun --tag-output
])
def test_the_forms_a_log_comes_in_read_alike(tmp_path: Path, name: str, text: str) -> None:
    log = tmp_path / name
    log.write_text(text)
    rows = read_log(log, Cluster(nics_per_node=2, nic_gbps=400))
    assert rows.select("op", "nodes", "gpus_per_node", "gpu", "size_bytes", "time_us").rows() == [
        ("all_reduce", 2, 2, "H100", 1048576, 60.12)]


def test_a_file_of_several_runs_reads_each_as_its_own(tmp_path: Path) -> None:
    # a sweep that appends every test to one file: each run keeps its own op, ranks and rows
    both = tmp_path / "sweep.txt"
    both.write_text((LOGS / "nccl_allreduce_20260224_225706.txt").read_text()
                    + (LOGS / "nccl_allgather_20260224_225706.txt").read_text())
    rows = read_log(both, VOLTAGE_PARK)
    assert rows.group_by("op").len().sort("op").rows() == [("all_gather", 25), ("all_reduce", 31)]
    alone = read_log(LOGS / "nccl_allgather_20260224_225706.txt", VOLTAGE_PARK)
    assert rows.filter(op="all_gather")["time_us"].to_list() == alone["time_us"].to_list()
    # the second run's rows carry their lines in the joined file
    assert rows.filter(op="all_gather")["line"].min() > rows.filter(op="all_reduce")["line"].max()


def test_what_nccl_reports_as_set_reaches_the_row(tmp_path: Path) -> None:
    log = tmp_path / "all_reduce_perf.txt"
    log.write_text("NCCL version 2.23.4+cuda12.6\n"
                   "node-0:1:1 [0] NCCL INFO NCCL_PROTO set by environment to Simple\n"
                   "node-0:1:1 [0] NCCL INFO NCCL_COLLNET_ENABLE set by environment to 1.\n"
                   + RANKS + TABLE.replace("float", "f8e4m3"))
    rows = read_log(log, Cluster(nics_per_node=2, nic_gbps=400, name="lab-a"))
    assert rows.select("cluster", "settings", "nccl_version", "dtype").row(0) == (
        "lab-a", "NCCL_COLLNET_ENABLE=1 NCCL_PROTO=Simple", "2.23.4", "fp8")
    assert multinode_compare(log, frame=rows)["model_protocol"].to_list() == ["Simple"]


@pytest.mark.parametrize(("args", "message"), [
    (["--runs", str(MULTINODE_CSV), "--cluster", "nics_per_node=8,nic_gbps=400"], "--runs names none"),
    (["--runs", str(MULTINODE_CSV), "--tables", str(LOGS), "--json"], "give --tables or --runs, not both"),
])
def test_options_that_cannot_go_together_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = run_cli("fabric", "validate", *args)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_a_log_without_a_size_in_a_band_says_so(tmp_path: Path) -> None:
    log = tmp_path / "all_reduce_perf.txt"
    log.write_text(RANKS + TABLE)  # one size, 1 MB
    result = run_cli("fabric", "validate", "--runs", str(log), "--cluster", "nics_per_node=2,nic_gbps=400",
                     "--no-one-node")
    assert result.returncode == 0, result.stderr
    assert "multi-node, >= 64 MB: no points; < 64 MB: 1 points, median" in result.stdout
