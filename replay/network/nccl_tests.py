"""nccl-tests' printed output as multi-node validation rows (:func:`.validation.multinode_compare`'s columns).

An engineer's own cluster check is the stdout of ``all_reduce_perf -b 8 -e 8G -f 2 -g 1`` under mpirun or srun,
not a CSV. What the log states is read from it, run by run (a file may hold several, one after another): the ranks
and the host each runs on (its ``#  Rank  3 Group  0 Pid ... on node-1 device  3 [...] NVIDIA H100 80GB HBM3`` lines,
``Group`` absent before nccl-tests 2.13: nodes, GPUs a node, the GPU kind), the collective (nccl-tests >= 2.16.7
prints ``# Collective test starting: all_reduce_perf``; else the file's name), the NCCL version (``nccl-library=``
from 2.17.4, or NCCL_DEBUG=INFO's ``NCCL version 2.x``), the NCCL_ALGO / NCCL_PROTO / NCCL_COLLNET_ENABLE NCCL
reports as set by the environment, and each size's out-of-place time, the column the header names ``time``. Lines
a launcher tagged (``srun -l``'s ``0: ``, ``mpirun --tag-output``'s ``[1,0]<stdout>:``) are read untagged. What a
log does not state, the NICs, comes from the caller (:class:`Cluster`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import polars as pl
from rltrace.replay.network.schedules import OPS
from rltrace.replay.network.validation import NETWORKS

from rltrace.catalog import get_gpu, load_gpus
from rltrace.errors import ConfigError

_TAG = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:\s?|\d+:\s)")  # srun -l, mpirun --tag-output
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+"
                   r"(.+?)\s*$")
_TEST = re.compile(r"Collective test starting:\s*(\w+?)_perf")
_HEADER = re.compile(r"^#\s+size\s+count\s+type\b")
_VERSION = re.compile(r"nccl-library=(\d+)|NCCL version (\d+\.\d+\.\d+)")
_ENV = re.compile(r"\b(NCCL_ALGO|NCCL_PROTO|NCCL_COLLNET_ENABLE) set by environment to (\S+)")
# nccl-tests' binaries the model times (their names without underscores) -> the model's op
_TIMED = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
          "broadcast": "broadcast", "alltoall": "all_to_all"}
# a collective's name in a file name, those the model does not time too (so the refusal names them): the longer
# names first, so all_reduce is not read as reduce
_NAMED = re.compile(r"(?<![a-z])(all_?reduce|all_?gather|reduce_?scatter|broadcast|all_?to_?all|sendrecv|hypercube|"
                    r"gather|scatter|reduce)(?![a-z])")
_DTYPES = {"f8e4m3": "fp8", "f8e5m2": "fp8"}  # nccl-tests' FP8 names -> the model's


@dataclass(frozen=True, kw_only=True, slots=True)
class Cluster:
    """What a log does not print: the NICs a node and their line rate, the network (``efa``: aws-ofi-nccl reports a
    latency to NCCL), whether the GPUs of a node share an NVSwitch; a name for the table; and overrides of what the
    log prints."""

    nics_per_node: int
    nic_gbps: float
    network: str = "ib"
    nvswitch: bool = True
    name: str | None = None
    """the cluster's name in the table (None: the log's file name)"""
    gpu: str | None = None
    """the catalog's GPU kind (None: read from the log's device names)"""
    op: str | None = None
    """the collective (None: read from the log, else its file name)"""


def parse_cluster(text: str) -> Cluster:
    """``nics_per_node=8,nic_gbps=400[,network=efa][,nvswitch=false][,name=a3][,gpu=H100][,op=all_gather]``."""
    pairs = [p.partition("=") for p in text.split(",") if p.strip()]
    given = {k.strip(): v.strip() for k, _, v in pairs}
    known = ("nics_per_node", "nic_gbps", "network", "nvswitch", "name", "gpu", "op")
    wrong = [k for k, eq, v in pairs if not eq or not v.strip() or k.strip() not in known]
    if wrong or not {"nics_per_node", "nic_gbps"} <= given.keys():
        raise ConfigError(f"--cluster {text!r}: expected nics_per_node=N,nic_gbps=G and optionally "
                          f"{', '.join(known[2:])} as key=value")
    try:
        nics, gbps = int(given["nics_per_node"]), float(given["nic_gbps"])
    except ValueError:
        raise ConfigError(f"--cluster {text!r}: nics_per_node is a whole number, nic_gbps a number") from None
    if nics < 1 or not gbps > 0:
        raise ConfigError(f"--cluster {text!r}: nics_per_node >= 1 and nic_gbps > 0")
    if given.get("nvswitch", "true").lower() not in ("true", "false"):
        raise ConfigError(f"--cluster {text!r}: nvswitch is true or false")
    network = given.get("network", "ib").lower()
    if network not in NETWORKS:
        raise ConfigError(f"--cluster network={given['network']}: unknown network (known: {', '.join(NETWORKS)})")
    if "op" in given and given["op"] not in OPS:
        raise ConfigError(f"--cluster op={given['op']}: unknown collective (known: {', '.join(OPS)})")
    if "gpu" in given:
        try:
            get_gpu(given["gpu"])
        except ConfigError as e:
            raise ConfigError(f"--cluster gpu={given['gpu']}: {e}") from None
    return Cluster(nics_per_node=nics, nic_gbps=gbps, network=network,
                   nvswitch=given.get("nvswitch", "true").lower() == "true", name=given.get("name"),
                   gpu=given.get("gpu"), op=given.get("op"))


def _version(code: str) -> str:
    """``22105`` (NCCL_VERSION_CODE) -> ``2.21.5``; a dotted version as it is."""
    if "." in code:
        return code
    n = int(code)
    return f"{n // 10000}.{n // 100 % 100}.{n % 100}"


def _gpu_kind(device: str) -> str:
    """The catalog's kind a device name names (``NVIDIA A100-SXM4-80GB`` -> A100); a PCIe or NVL part is another
    GPU than the catalog's SXM one (its NVLink, clocks and power differ), so it is refused, not matched."""
    if re.search(r"PCIe|NVL\b", device):
        raise ConfigError(f"GPU {device!r} is not an SXM part the catalog holds; --cluster gpu=KIND prices it as "
                          "that kind anyway")
    kinds = [k for k in load_gpus() if re.search(rf"\b{re.escape(k)}\b", device, re.IGNORECASE)]
    if len(kinds) != 1:
        raise ConfigError(f"GPU {device!r}: no single catalog kind in its name; say which with --cluster gpu=KIND")
    return kinds[0]


def _op(section: str, path: Path, given: str | None) -> str:
    """The model's op for one run: ``given``, else the run's ``Collective test starting`` line, else the file's
    name."""
    if given is not None:
        return given
    found = _TEST.search(section) or _NAMED.search(path.name.lower())
    if found is None:
        raise ConfigError(f"{path}: no collective named in the log or its file name; say which with --cluster op=OP")
    name = found.group(1).replace("_", "")
    if name not in _TIMED:
        raise ConfigError(f"{path}: {name}_perf is not a collective the model times "
                          f"(it does: {', '.join(f'{b}_perf' for b in _TIMED)})")
    return _TIMED[name]


def _table_end(lines: list[tuple[int, str]], header: int) -> int:
    """The index just past the table whose column header is at ``header``: past its data rows (the units line and
    any comment before the first row belong to it)."""
    seen = False
    for i in range(header + 1, len(lines)):
        data = not lines[i][1].startswith("#") and lines[i][1].strip()
        if seen and not data and lines[i][1].startswith("#"):
            return i
        seen = seen or bool(data)
    return len(lines)


def _runs(lines: list[tuple[int, str]], path: Path) -> list[list[tuple[int, str]]]:
    """The file's runs, one after another: each from the end of the previous table to the end of its own."""
    headers = [i for i, (_, ln) in enumerate(lines) if _HEADER.match(ln)]
    if not headers:
        raise ConfigError(f"{path}: no nccl-tests table (its '#  size  count  type ...' header)")
    bounds = [0, *(_table_end(lines, h) for h in headers[:-1]), len(lines)]
    return [lines[a:b] for a, b in pairwise(bounds)]


def _table(run: list[tuple[int, str]], path: Path) -> list[tuple[int, int, str, float]]:
    """(file line, size_bytes, dtype, out-of-place time_us) of every data row under the run's column header."""
    at_header = next(i for i, (_, ln) in enumerate(run) if _HEADER.match(ln))
    header = run[at_header][1].lstrip("#").split()
    if "time" not in header or "cputime" in header:  # -C 1 names both columns cputime, or only the first
        raise ConfigError(f"{path}: line {run[at_header][0]}: the table reports "
                          f"{'CPU time (nccl-tests -C 1)' if 'cputime' in header else 'no time column'}; the model "
                          "times the GPUs' out-of-place time")
    at, kind = header.index("time"), header.index("type")  # the first "time" is the out-of-place one
    rows = []
    for number, ln in run[at_header + 1:]:
        cells = ln.split()
        # nccl-tests prints a size its ranks cannot split as 0 bytes (8 B over 32 ranks): nothing was timed
        if ln.startswith("#") or len(cells) <= at or not cells[0].isdigit() or int(cells[0]) == 0:
            continue
        try:
            rows.append((number, int(cells[0]), _DTYPES.get(cells[kind], cells[kind]), float(cells[at])))
        except ValueError:
            raise ConfigError(f"{path}: line {number}: the out-of-place time {cells[at]!r} is not a number") from None
        if not 0 < rows[-1][3] < math.inf:  # float() reads "nan" and "inf": a point with no time to hold the model to
            raise ConfigError(f"{path}: line {number}: the out-of-place time {cells[at]!r} is not a time above 0")
    if not rows:
        raise ConfigError(f"{path}: line {run[at_header][0]}: the nccl-tests table has no rows")
    return rows


def _hosts(run: list[tuple[int, str]], path: Path) -> tuple[dict[str, int], set[str]]:
    """GPUs per host and the device names of one run's rank lines; a rank listed twice, one host only or uneven
    nodes as a ConfigError."""
    ranks: dict[int, tuple[str, str]] = {}
    for number, ln in run:
        if (m := _RANK.match(ln)) is None:
            continue
        rank = int(m.group(1))
        if rank in ranks:  # -g N of a build without MPI under mpirun: every process ran its own one-node test
            raise ConfigError(f"{path}: line {number}: rank {rank} listed twice (several processes each ran their "
                              "own test, or two runs without their tables)")
        ranks[rank] = (m.group(2), m.group(3))
    if len(ranks) < 2:
        raise ConfigError(f"{path}: fewer than 2 ranks listed before a table ('#  Rank  N ... on HOST device D' "
                          "lines): nothing across nodes to hold")
    per_node = {h: sum(1 for r in ranks.values() if r[0] == h) for h, _ in ranks.values()}
    if len(per_node) < 2:
        raise ConfigError(f"{path}: all {len(ranks)} ranks on {next(iter(per_node))}: a run inside one node, and "
                          "--runs holds runs across nodes")
    if len(set(per_node.values())) != 1:
        raise ConfigError(f"{path}: nodes with different GPU counts ({sorted(per_node.values())}); the model fills "
                          "whole nodes")
    return per_node, {d for _, d in ranks.values()}


def _rows(run: list[tuple[int, str]], path: Path, cluster: Cluster, version: str) -> pl.DataFrame:
    per_node, devices = _hosts(run, path)
    if cluster.gpu is None and len(devices) > 1:
        raise ConfigError(f"{path}: ranks on different GPUs ({', '.join(sorted(devices))})")
    text = "\n".join(ln for _, ln in run)
    env = {m.group(1): m.group(2).rstrip(".") for m in _ENV.finditer(text)}  # NCCL ends "... to 1." with a period
    version = next((_version(m.group(1) or m.group(2)) for m in _VERSION.finditer(text)), version)
    lines, sizes, dtypes, times = zip(*_table(run, path), strict=True)
    device = devices.pop()
    try:
        gpu = cluster.gpu or _gpu_kind(device)
    except ConfigError as e:  # the file and the line that names the device, as every other error of a log says
        line = next((number for number, ln in run if device in ln), None)
        raise ConfigError(f"{path}: {f'line {line}: ' if line else ''}{e}") from None
    stated = {"source": str(path), "cluster": cluster.name or path.stem,
              "gpu": gpu, "nodes": len(per_node),
              "gpus_per_node": next(iter(per_node.values())), "nics_per_node": cluster.nics_per_node,
              "nic_gbps": float(cluster.nic_gbps), "nvswitch": str(cluster.nvswitch).lower(),
              "network": cluster.network, "nccl_version": version, "algorithm": "auto",
              "settings": " ".join(f"{k}={v}" for k, v in sorted(env.items())), "op": _op(text, path, cluster.op)}
    table = pl.DataFrame({"dtype": dtypes, "size_bytes": sizes, "time_us": times, "line": lines})
    return table.with_columns(pl.lit(v).alias(k) for k, v in stated.items()).select(*stated, *table.columns)


def read_log(path: Path, cluster: Cluster) -> pl.DataFrame:
    """Every run of one nccl-tests log as validation rows (every size it printed; ``line``: each row's line in the
    file), the cluster as the log and ``cluster`` state it; what the log lacks or garbles, as a ConfigError naming
    the file (and line)."""
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror or e})") from None
    lines = [(n, _TAG.sub("", ln, count=1)) for n, ln in enumerate(text.splitlines(), start=1)]
    # the file-wide version (a header printed once) stands for runs that do not print their own
    version = next((_version(m.group(1) or m.group(2)) for m in map(_VERSION.search, text.splitlines()) if m),
                   "not stated")
    return pl.concat([_rows(run, path, cluster, version) for run in _runs(lines, path)])
