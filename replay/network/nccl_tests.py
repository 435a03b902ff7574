"""nccl-tests' printed output as multi-node validation rows (:func:`.validation.multinode_compare`'s columns).

An engineer's own cluster check is the stdout of ``all_reduce_perf -b 8 -e 8G -f 2 -g 1`` under mpirun or srun,
not a CSV. What the log states is read from it: the ranks and the host each runs on (its ``#  Rank  3 Group  0 Pid
... on node-1 device  3 [0x...] NVIDIA H100 80GB HBM3`` lines: nodes, GPUs a node, the GPU kind), the collective
(nccl-tests >= 2.13 prints ``# Collective test starting: all_reduce_perf``; else the file's name), the NCCL version
(its ``nccl-library`` or, under NCCL_DEBUG=INFO, ``NCCL version 2.x``), the NCCL_ALGO / NCCL_PROTO NCCL reports as
set by the environment, and each size's out-of-place time, the column the header names ``time``. What it does not
state, the NICs, comes from the caller (:class:`Cluster`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl
from rltrace.replay.network.schedules import OPS

from rltrace.catalog import load_gpus
from rltrace.errors import ConfigError

# "#  Rank  0 Group  0 Pid  12345 on   node-001 device  0 [0x18] NVIDIA H100 80GB HBM3" (nccl-tests' common.cu)
RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+"
                       r"\[[^\]]*\]\s+(.+?)\s*$")
TEST_LINE = re.compile(r"Collective test starting:\s*(\w+?)_perf")
VERSION = re.compile(r"nccl-library=(\d+)|NCCL version (\d+\.\d+\.\d+)")
ENV_SET = re.compile(r"\b(NCCL_ALGO|NCCL_PROTO) set by environment to (\S+)")
# nccl-tests' binaries by the op names the model uses
BINARIES = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
            "broadcast": "broadcast", "alltoall": "all_to_all"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Cluster:
    """What a log does not print: the NICs a node and their line rate, the network's plugin (``efa`` reports a
    latency to NCCL), whether the GPUs of a node share an NVSwitch; and overrides of what it does print."""

    nics_per_node: int
    nic_gbps: float
    network: str = "ib"
    nvswitch: bool = True
    gpu: str | None = None
    """the catalog's GPU kind (None: read from the log's device names)"""
    op: str | None = None
    """the collective (None: read from the log, else its file name)"""


def _version(code: str) -> str:
    """``22105`` (NCCL_VERSION_CODE) -> ``2.21.5``; a dotted version as it is."""
    if "." in code:
        return code
    n = int(code)
    return f"{n // 10000}.{n // 100 % 100}.{n % 100}"


def _gpu_kind(device: str) -> str:
    """The catalog's kind a device name names (``NVIDIA A100-SXM4-80GB`` -> A100); PCIe and NVL parts are other
    GPUs than the catalog's SXM ones, so they are refused, not matched."""
    if re.search(r"PCIe|NVL\b", device):
        raise ConfigError(f"GPU {device!r} is not an SXM part the catalog holds; say which with --cluster gpu=KIND")
    kinds = [k for k in load_gpus() if re.search(rf"\b{re.escape(k)}\b", device, re.IGNORECASE)]
    if len(kinds) != 1:
        raise ConfigError(f"GPU {device!r}: no single catalog kind in its name; say which with --cluster gpu=KIND")
    return kinds[0]


def parse_cluster(text: str) -> Cluster:
    """``nics_per_node=8,nic_gbps=400[,network=efa][,nvswitch=false][,gpu=H100][,op=all_gather]`` -> Cluster."""
    pairs = [p.partition("=") for p in text.split(",") if p.strip()]
    given = {k.strip(): v.strip() for k, _, v in pairs}
    known = ("nics_per_node", "nic_gbps", "network", "nvswitch", "gpu", "op")
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
    if "op" in given and given["op"] not in OPS:
        raise ConfigError(f"--cluster op={given['op']}: unknown collective (known: {', '.join(OPS)})")
    return Cluster(nics_per_node=nics, nic_gbps=gbps, network=given.get("network", "ib"),
                   nvswitch=given.get("nvswitch", "true").lower() == "true", gpu=given.get("gpu"), op=given.get("op"))


def _op(text: str, path: Path, given: str | None) -> str:
    if given is not None:
        return given
    found = TEST_LINE.search(text) or re.search(r"([a-z_]+?)_perf", path.name)
    if found is None:
        raise ConfigError(f"{path}: no collective named in the log or its file name; say which with --cluster op=OP")
    if found.group(1) not in BINARIES:
        raise ConfigError(f"{path}: {found.group(1)}_perf is not a collective the model times "
                          f"(it does: {', '.join(f'{b}_perf' for b in BINARIES)})")
    return BINARIES[found.group(1)]


def _table(lines: list[str], path: Path) -> list[tuple[int, str, float]]:
    """(size_bytes, dtype, out-of-place time_us) of every data line under the column header."""
    header = next((ln.lstrip("#").split() for ln in lines if re.match(r"^#\s+size\s+count\s+type", ln)), None)
    if header is None:
        raise ConfigError(f"{path}: no nccl-tests table (its '#  size  count  type ...' header)")
    at = header.index("time")  # the first "time" is the out-of-place one
    rows = []
    for ln in lines:
        cells = ln.split()
        # nccl-tests prints a size its ranks cannot split as 0 bytes (8 B over 32 ranks): nothing was timed
        if ln.startswith("#") or len(cells) <= at or not cells[0].isdigit() or int(cells[0]) == 0:
            continue
        try:
            rows.append((int(cells[0]), cells[header.index("type")], float(cells[at])))
        except ValueError:
            raise ConfigError(f"{path}: line {ln.strip()!r}: the out-of-place time is not a number") from None
    if not rows:
        raise ConfigError(f"{path}: the nccl-tests table has no rows")
    return rows


def read_log(path: Path, cluster: Cluster) -> pl.DataFrame:
    """One nccl-tests log as validation rows (every size it printed), the cluster as the log and ``cluster`` state
    it; what the log lacks or garbles, as a ConfigError naming the file."""
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror or e})") from None
    lines = text.splitlines()
    ranks = {int(m.group(1)): (m.group(2), m.group(3)) for m in map(RANK_LINE.match, lines) if m}
    if len(ranks) < 2:
        raise ConfigError(f"{path}: fewer than 2 ranks listed ('#  Rank  N ... on HOST device D' lines): "
                          "nothing across nodes to hold")
    hosts = {h for h, _ in ranks.values()}
    per_node = {h: sum(1 for r in ranks.values() if r[0] == h) for h in hosts}
    if len(set(per_node.values())) != 1:
        raise ConfigError(f"{path}: nodes with different GPU counts ({sorted(per_node.values())}); the model fills "
                          "whole nodes")
    devices = {d for _, d in ranks.values()}
    gpu = cluster.gpu or (_gpu_kind(devices.pop()) if len(devices) == 1 else "")
    if not gpu:
        raise ConfigError(f"{path}: ranks on different GPUs ({', '.join(sorted(devices))})")
    version = next((_version(m.group(1) or m.group(2)) for m in map(VERSION.search, lines) if m), "not stated")
    env = {m.group(1): m.group(2) for m in map(ENV_SET.search, lines) if m}
    settings = " ".join(f"{k}={v}" for k, v in sorted(env.items()))
    op = _op(text, path, cluster.op)
    sizes, dtypes, times = zip(*_table(lines, path), strict=True)
    stated = {"source": str(path), "cluster": path.stem, "gpu": gpu, "nodes": len(hosts),
              "gpus_per_node": next(iter(per_node.values())), "nics_per_node": cluster.nics_per_node,
              "nic_gbps": float(cluster.nic_gbps), "nvswitch": str(cluster.nvswitch).lower(),
              "network": cluster.network, "nccl_version": version, "algorithm": "auto", "settings": settings, "op": op}
    table = pl.DataFrame({"dtype": dtypes, "size_bytes": sizes, "time_us": times})
    return table.with_columns(pl.lit(v).alias(k) for k, v in stated.items()).select(*stated, *table.columns)
