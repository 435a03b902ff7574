"""``rltrace fabric``: time one collective on a topology, and hold the model against measured NCCL tables."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.console import Console
from rich.table import Table

from rltrace import jsontext
from rltrace.cli.progress import stage, stderr
from rltrace.config import override, parse_set
from rltrace.errors import ConfigError
from rltrace.manifest import MAX_INT
from rltrace.replay.network.collectives import ALGORITHMS, DTYPES, SWITCH_REDUCIBLE, collective
from rltrace.replay.network.cost import FabricPrices, fabric_cost
from rltrace.replay.network.nccl_tests import parse_cluster, read_log
from rltrace.replay.network.schedules import OPS
from rltrace.replay.network.track_record import track_record
from rltrace.replay.network.validation import (
    MULTINODE_CSV,
    compare,
    multinode_compare,
    multinode_summary,
    one_node_compare,
    one_node_summary,
    summary,
)
from rltrace.replay.topologies import names, parse
from rltrace.scalars import number

fabric = typer.Typer(help="Network fabrics: time a collective on a topology; validate against measured NCCL.\n\n"
                          "Example: rltrace fabric bench --topology fat-tree:k=16,gpu=H100 --size 1G",
                     no_args_is_help=True)
UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30,
         "kb": 10**3, "mb": 10**6, "gb": 10**9}
"""nccl-tests' K, M and G are binary, as are KiB, MiB and GiB; kB, MB and GB are decimal (SI)"""


MAX_SIZE = MAX_INT
"""the largest message a command takes: bytes are int64 in the format, and far past any collective"""


def parse_size(text: str, option: str = "--size", minimum: int = 1) -> int:
    """``1048576``, ``64M`` or ``64MiB`` (binary, as nccl-tests' -b and -e), ``1GB`` (decimal) -> bytes, at least
    ``minimum``."""
    shown = text if len(text) <= 60 else f"{text[:57]}..."  # the limit's message, not 5,000 digits, in the line
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS:
        raise ConfigError(f"{option} {shown!r}: expected bytes, e.g. 1048576, 64M or 1GiB (binary), 1GB (decimal)")
    digits = m.group(1)
    # exact: 1.5M is 1,572,864 bytes and 1.5 none; 40 digits are far past the limit, and Python's int parsing stops
    # at 4,300 digits (a traceback)
    exact = Fraction(digits) * UNITS[m.group(2).lower()] if len(digits) <= 40 else Fraction(MAX_SIZE + 1)
    if exact < minimum:  # 0.5 is no byte count either: it would round to nothing
        raise ConfigError(f"{option} {shown!r}: at least {minimum} byte(s)")
    if exact > MAX_SIZE:  # 1e23 bytes was priced, at 389,721,105,833 s
        raise ConfigError(f"{option} {shown!r}: at most {MAX_SIZE:,} bytes (int64, as the format holds them)")
    if exact.denominator != 1:  # 1.5 was taken as 1 byte
        raise ConfigError(f"{option} {shown!r}: not a whole number of bytes")
    return int(exact)


@fabric.command("bench")
def bench(
    topology: Annotated[str, typer.Option(help=f"Topology spec NAME:key=value,... ({', '.join(names())}).")],
    size: Annotated[str, typer.Option(help="Message size as nccl-tests counts it: bytes, K/M/G or KiB/MiB/GiB "
                                           "(binary), kB/MB/GB (decimal).")],
    op: Annotated[str, typer.Option(help=f"Collective: {', '.join(OPS)}.")] = "all_reduce",
    ranks: Annotated[int | None, typer.Option(help="Ranks (GPUs 0..N-1; default: every GPU of the topology).")] = None,
    algorithm: Annotated[str, typer.Option(help=f"Algorithm (NCCL_ALGO): {', '.join(ALGORITHMS)}.")] = "auto",
    protocol: Annotated[str, typer.Option(help="Protocol (NCCL_PROTO): auto, LL, LL128, Simple.")] = "auto",
    dtype: Annotated[str, typer.Option(help=f"Element type ({', '.join(DTYPES)}); NVLS all-reduce needs one the "
                                            f"NVSwitch reduces ({', '.join(SWITCH_REDUCIBLE)}).")] = "bfloat16",
    price: Annotated[list[str] | None, typer.Option(
        "--price", help="Override a fabric price, e.g. transceiver_usd=650.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON: seconds, busbw_gbps (nccl-tests), ...")] = False,
) -> None:
    """Time one collective on a topology with the flow-level model, with the fabric's cost.

    Example: rltrace fabric bench --topology nvswitch:gpus=8,gpu=H100 --op all_reduce --size 256M --json
    """
    topo = parse(topology)
    n = topo.gpus if ranks is None else ranks
    if topo.gpus < 2:  # one rank has nobody to talk to
        raise ConfigError(f"a collective needs at least 2 GPUs; topology {topology} has {topo.gpus}")
    if not 2 <= n <= topo.gpus:
        raise ConfigError(f"--ranks must be in 2..{topo.gpus} for this topology, got {n}")
    prices = override(FabricPrices(), [(*parse_set(p, "--price"), f"--price {p!r}") for p in price or []], "--price")
    nbytes = parse_size(size)
    result = collective(topo, op, n, nbytes, algorithm, dtype, protocol)
    cost = fabric_cost(topo, prices)
    record = track_record(op, topo.gpu, n, topo.gpus_per_node, nbytes, getattr(topo, "nvswitch", True))
    out = {**result.to_json(), "op": op, "ranks": n, "size_bytes": nbytes, "topology": topology,
           "fabric_capex_usd": cost["capex_usd"], "track_record": record.to_json()}
    if as_json:
        print(jsontext.dumps(out, indent=2))
        return
    console = Console(highlight=False)
    console.print(f"{op} of {out['size_bytes']:,} B over {n} GPUs on {topology}: {result.seconds * 1e3:.3f} ms, "
                  f"busbw {result.busbw_gbps:.1f} GB/s ({result.algorithm}, {result.protocol}); "
                  f"fabric capex ${cost['capex_usd']:,.0f}",
                  markup=False, soft_wrap=True)
    console.print(f"  {record.line()}", markup=False, soft_wrap=True)


@fabric.command("validate")
def validate(
    tables: Annotated[Path | None, typer.Option(
        help="Folder with aic_nccl_perf.parquet / vidur_h100_dgx_{all_reduce,send_recv}.csv (one node).")] = None,
    multinode: Annotated[bool, typer.Option(help="Also hold it against the packaged public multi-node runs.")] = True,
    one_node: Annotated[bool, typer.Option(help="Also hold it against the packaged one-node sweeps (H100, H200, "
                                                "B200, A100; aiconfigurator's).")] = True,
    runs: Annotated[list[Path] | None, typer.Option(
        help="Multi-node nccl-tests runs of your own in place of the packaged ones, repeatable: a log as nccl-tests "
             "printed it (with --cluster), or a .csv with the packaged set's columns.")] = None,
    cluster: Annotated[str | None, typer.Option(
        help="What --runs' logs do not print: nics_per_node=N,nic_gbps=G[,network=ib|roce|efa|...]"
             "[,nvswitch=false][,name=CLUSTER][,gpu=KIND][,op=OP].")] = None,
    gpu: Annotated[str | None, typer.Option(
        help="With --tables: GPU kind the tables were measured on [default: H100].")] = None,
    min_size: Annotated[str | None, typer.Option(
        help="With --tables: summarise its messages of at least this size (the packaged sets print fixed size "
             "bands) [default: 64M].")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print every compared point of one set as JSON: --tables' "
                                                         "points if given, else the multi-node runs', else "
                                                         "(--no-multinode) the packaged one-node sweeps' (--tables "
                                                         "with --runs is refused).")] = False,
) -> None:
    """Hold the collective model (spec-sheet NVLink and NICs, NCCL's constants, no per-size fit) against measured
    NCCL timings: the packaged public multi-node nccl-tests runs, the packaged one-node sweeps of four GPU kinds,
    and one-node tables of your own (--tables) or multi-node nccl-tests runs of your own (--runs).

    Example: rltrace fabric validate --runs all_reduce_perf.log --cluster nics_per_node=8,nic_gbps=400
    """
    if tables is None and not multinode and not one_node:
        raise ConfigError("nothing to validate: give --tables or leave --multinode or --one-node on")
    if runs and not multinode:
        raise ConfigError("--runs are multi-node runs: drop --no-multinode")
    smallest = parse_size(min_size or "64M", "--min-size", minimum=0)
    if tables is None:  # they would be ignored without a word (an unknown --gpu too)
        given = [flag for flag, value in (("--gpu", gpu), ("--min-size", min_size)) if value is not None]
        if given:
            raise ConfigError(f"{given[0]} goes with --tables (the packaged sets state their own): drop it")
    gpu, min_size = gpu or "H100", min_size or "64M"
    if as_json and tables is not None and runs:
        raise ConfigError("--json prints one set's points: give --tables or --runs, not both")
    files = runs or [MULTINODE_CSV]
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise ConfigError(f"{missing[0]}: no such file")
    logs = [f for f in files if f.suffix.lower() not in (".csv", ".parquet")]
    if logs and cluster is None:
        raise ConfigError(f"{logs[0]}: an nccl-tests log does not print its NICs; give --cluster "
                          "nics_per_node=N,nic_gbps=G")
    if cluster is not None and not logs:
        raise ConfigError("--cluster describes nccl-tests logs, and --runs names none (a CSV states its cluster)")
    spec = parse_cluster(cluster) if cluster is not None else None

    def across_nodes() -> pl.DataFrame:
        return pl.concat([multinode_compare(f, frame=read_log(f, spec)) if spec is not None and f in logs
                          else multinode_compare(f) for f in files], how="diagonal_relaxed")

    if as_json:  # one set's points: --tables' if given, else the multi-node runs', else the one-node sweeps'
        with stage(stderr(), "pricing every measured point"):
            chosen = (compare(tables, gpu) if tables is not None else across_nodes() if multinode
                      else one_node_compare())
        print(jsontext.dumps(chosen.to_dicts(), indent=2))
        return
    with stage(stderr(), "pricing every measured point"):
        compared = compare(tables, gpu) if tables is not None else None
        across = across_nodes() if multinode else None
        inside = one_node_compare() if one_node else None
    console = Console(highlight=False, width=120)
    if across is not None:
        _print_multinode(console, across, "public multi-node nccl-tests runs (replay/network/data/multinode_nccl.csv)"
                         if runs is None else f"multi-node nccl-tests runs ({', '.join(map(str, runs))})")
    if inside is not None:
        _print_one_node(console, inside)
    if compared is None:
        return
    table = Table(title=f"Model vs measured NCCL on {gpu}, messages >= {min_size}", title_justify="left")
    for col in ("source", "op", "dtype", "GPUs", "nodes", "model", "points", "median |error|", "max |error|"):
        table.add_column(col, justify="left" if col in ("source", "op", "dtype", "model") else "right")
    for row in summary(compared, smallest).iter_rows(named=True):
        table.add_row(row["source"], row["op"], row["dtype"], str(row["gpus"]), str(row["nodes"]), row["algorithm"],
                      str(row["points"]), f"{row['median_abs_error']:.1%}", f"{row['max_abs_error']:.1%}")
    console.print(table)


def _print_one_node(console: Console, inside: pl.DataFrame) -> None:
    """The packaged one-node table: median (signed and |error|) and worst |error| by GPU kind, op, GPUs and size."""
    table = Table(title="Model vs aiconfigurator's one-node NCCL sweeps (replay/network/data/one_node_nccl.parquet; "
                        "error < 0: the model faster)", title_justify="left")
    for col in ("GPU", "op", "GPUs", "size", "points", "median error", "median |error|", "max |error|"):
        table.add_column(col, justify="left" if col in ("GPU", "op", "size") else "right")
    for row in one_node_summary(inside).iter_rows(named=True):
        table.add_row(row["gpu"], row["op"], str(row["gpus"]), row["size_band"], str(row["points"]),
                      f"{row['median_error']:+.1%}", f"{row['median_abs_error']:.1%}", f"{row['max_abs_error']:.1%}")
    console.print(table)


def _print_multinode(console: Console, across: pl.DataFrame, what: str) -> None:
    """The multi-node table of ``what``: median and worst |error| by op, GPU kind, node count and size band."""
    table = Table(title=f"Model vs {what}", title_justify="left")
    for col in ("op", "GPU", "nodes", "size band", "points", "clusters", "median |error|", "max |error|"):
        table.add_column(col, justify="left" if col in ("op", "GPU", "size band") else "right")
    for row in multinode_summary(across).iter_rows(named=True):
        table.add_row(row["op"], row["gpu"], str(row["nodes"]), row["size_band"], str(row["points"]),
                      str(row["clusters"]), f"{row['median_abs_error']:.1%}", f"{row['max_abs_error']:.1%}")
    console.print(table)
    big = across.filter(pl.col("size_bytes") >= 64 << 20)["error"].abs()
    small = across.filter(pl.col("size_bytes") < 64 << 20)["error"].abs()
    # a run of your own may have no size in a band: say so rather than a median of nothing
    large = (f"{big.len()} points, median |error| {number(big.median()):.1%}, worst {number(big.max()):.1%}, "
             f"{int((big <= 0.2).sum())} within 20%" if big.len() else "no points")
    below = f"{small.len()} points, median {number(small.median()):.1%}" if small.len() else "no points"
    console.print(f"multi-node, >= 64 MB: {large}; < 64 MB: {below}", markup=False)
