"""Collectives as flows on a topology: ring, NCCL's tree, hierarchical and NVLS algorithms.

Each algorithm is a sequence of phases (built in :mod:`.algorithms`, run by :mod:`.protocols`); a phase is a set of
concurrent flows (a pipelined ring or tree in steady state: every link carries its share at once), a latency term
(per algorithm step, the mean over the phase's pipeline levels of each level's slowest hop) and, for a ring, one pass
over a shard in local memory.
Like NCCL's tuner, a collective runs under the wire protocol (LL, LL128, Simple) of lowest estimated time (the
estimate leaves out pipeline fill, as NCCL's does): each has its base latency, its NVLink and network hop latencies
and its share of the bandwidth left for payload.

NVLS (NVLink SHARP, one NVSwitch node of Hopper or later, a dtype the switch can reduce): each GPU's 1/n
slice is reduced in the switch as it reads every GPU's copy (multimem.ld_reduce) and multicast back
(multimem.st), so every GPU sends and receives (1 + 1/n) x the buffer, at the GPU's ``nvls_efficiency`` x
(channels - 1) / channels of what a ring reaches. The default picks it when it is faster than the ring, as
NCCL's tuner does.

Bus bandwidth follows nccl-tests (doc/PERFORMANCE.md): algbw = bytes / time; busbw = algbw x 2(n-1)/n for
all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for broadcast.

Sizes: ``size`` is what nccl-tests calls the message size: all-reduce and broadcast the buffer, all-gather
the output, reduce-scatter the input, all-to-all each rank's send buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rltrace.replay.network.algorithms import phases
from rltrace.replay.network.collnet import timed, whole_nodes
from rltrace.replay.network.protocols import (
    COLLNET,
    FILL_UNSEEN,
    LL,
    LL_MAX_BUSBW,
    NVLS,
    NVLS_TREE,
    P2P_LL_THRESHOLD_BYTES,
    P2P_PROTOCOLS,
    PROTOCOLS,
    SIMPLE,
    TREE_PROTOCOLS,
    PhasesTime,
    Protocol,
    plugin_latency_s,
    run_phases,
)
from rltrace.replay.network.tuner import (
    CHANNELS_PER_NIC,
    NVLS_CHANNELS,
    RING_PLATEAU,
    STEP_CHUNK_BYTES,
    channel_ceilings_gbps,
    nvls_tree_unit_bytes,
    tree_correction,
    tree_unit_bytes,
)
from rltrace.replay.topologies.base import NCCL_ALGOS, Topology

from rltrace.catalog import get_gpu
from rltrace.errors import ConfigError
from rltrace.units import BUS_FACTORS, bus_factor

ALGORITHMS = NCCL_ALGOS  # auto, ring, tree, hierarchical, nvls, nvls_tree
# Dtypes an NVSwitch can reduce (multimem.ld_reduce: f16, bf16, f32); int8 and fp8 all-reduces run the ring.
SWITCH_REDUCIBLE = ("bfloat16", "bf16", "half", "fp16", "float16", "float", "fp32", "float32")
DTYPES = (*SWITCH_REDUCIBLE, "int8", "uint8", "fp8", "float8")


@dataclass(frozen=True, slots=True)
class CollectiveTime:
    seconds: float
    algorithm: str
    busbw_gbps: float
    """nccl-tests bus bandwidth, GB/s"""
    link_bytes: np.ndarray
    reconfig_s: float = 0.0
    protocol: str = ""

    def to_json(self) -> dict[str, float | str]:
        return {"seconds": self.seconds, "busbw_gbps": self.busbw_gbps, "algorithm": self.algorithm,
                "protocol": self.protocol, "reconfig_s": self.reconfig_s}


def candidates(op: str, ranks: np.ndarray, gpus_per_node: int, nvls: bool, sharp: bool = False) -> tuple[str, ...]:
    """The algorithms NCCL's tuner weighs for ``op`` (src/graph/tuning.cc): inside one node the ring, and NVLS for
    an all-reduce the switch can reduce; across nodes the ring, and for an all-reduce also the tree and, on GPUs
    with NVLS, NVLSTree; on a SHARP fabric (``sharp``: whole nodes on a topology with ``sharp=true``) CollNet
    Direct and Chain too, and NVLS across nodes. All-gather, reduce-scatter, broadcast and all-to-all have one
    schedule here."""
    if op != "all_reduce":
        return ("ring",)
    if len(np.unique(ranks // gpus_per_node)) == 1:
        return ("ring", "nvls") if nvls else ("ring",)
    base = ("ring", "tree", "nvls_tree") if nvls else ("ring", "tree")
    if sharp:
        return (*base, *COLLNET, *(("nvls",) if nvls else ()))
    return base

def nvls_possible(topo: Topology, op: str, ranks: np.ndarray, dtype: str) -> bool:
    """NVLS applies to an all-reduce on NVSwitch nodes whose GPUs have it (several GPUs in each node, as many in
    each), in a dtype the switch reduces: NVLS inside one node, NVLSTree across nodes (and NVLS + SHARP across whole
    nodes of a SHARP fabric, .collnet)."""
    _, per_node = np.unique(ranks // topo.gpus_per_node, return_counts=True)
    return (op == "all_reduce" and dtype in SWITCH_REDUCIBLE and len(ranks) > 1 and getattr(topo, "nvswitch", True)
            and get_gpu(topo.gpu).nvls_efficiency > 0 and bool((per_node > 1).all())
            and bool((per_node == per_node[0]).all()))


def _timed(topo: Topology, op: str, ranks: np.ndarray, size: float, algo: str, protocol: str = "auto") -> PhasesTime:
    """One algorithm's time under the protocol NCCL's tuner would pick for it (or the one asked for), with the
    tuner's own estimate beside it: its phases, NCCL's ceilings, corrections, chunking and fills (or CollNet's)."""
    nodes = len(np.unique(ranks // topo.gpus_per_node))
    if algo in COLLNET or (algo == "nvls" and nodes > 1):
        if protocol.lower() not in ("auto", "simple"):
            raise ConfigError(f"algorithm {algo} does not run protocol {protocol!r} (Simple only)")
        return timed(topo, ranks, size, algo)
    eff = get_gpu(topo.gpu).nvls_efficiency * (NVLS_CHANNELS - 1) / NVLS_CHANNELS
    protocols = {"nvls": (NVLS,), "tree": TREE_PROTOCOLS, "nvls_tree": (NVLS_TREE,)}.get(algo, PROTOCOLS)
    if op == "all_to_all":  # point-to-point: LL for a peer's 16 KiB or less inside a node, else Simple
        p2p_ll = nodes == 1 and size / len(ranks) <= P2P_LL_THRESHOLD_BYTES
        protocols = P2P_PROTOCOLS if protocol != "auto" else ((LL,) if p2p_ll else (SIMPLE,))
    if protocol != "auto":  # NCCL_PROTO-style override
        protocols = tuple(p for p in protocols if p.name.lower() == protocol.lower())
        if not protocols:
            what = "all_to_all (point-to-point)" if op == "all_to_all" else f"algorithm {algo}"
            raise ConfigError(f"{what} does not run protocol {protocol!r}")
    nics = min(int(getattr(topo, "nics", 0)), topo.gpus_per_node)  # channels: one per NIC slot
    parts = phases(op, ranks, size, algo, topo.gpus_per_node, eff, nics)
    pipelined = algo in ("hierarchical", "nvls_tree")
    floor: dict[str, float] = {}
    if nodes > 1 and op in BUS_FACTORS:  # LL's cap, on the bus bandwidth: the least time for this size
        cap = LL_MAX_BUSBW[getattr(topo, "cpu", "intel")][0 if nodes <= 2 else 1]
        floor["LL"] = size * bus_factor(op, len(ranks)) / cap
    if nodes > 1:  # NCCL's per-channel ceilings (LL128 rings, trees): a least time for this size
        floor = _ceiling_floors(topo, op, algo, len(ranks), size, nodes, protocols, floor)
    bw_factor, latency_factor, estimate_latency = {}, {}, {}
    if op == "all_reduce" and algo == "tree":  # NCCL's tree correction, in its estimate and (since 2026-11-25) the time
        bw_factor = {p.name: tree_correction(p.name, size) for p in protocols}
    if op == "all_reduce" and algo == "ring" and nodes > 1:  # its ring plateau, Simple across nodes
        latency_factor = {"Simple": RING_PLATEAU}
    unit: float | dict[str, float] = 0.0
    passes: tuple[int, ...] | dict[str, tuple[int, ...]] | None = None
    if algo == "nvls_tree":  # NCCL's NVLSTree unit; the NVLS stage passed twice, each tree level twice
        unit = nvls_tree_unit_bytes(size, nodes, nics or topo.gpus_per_node)
        passes = (2, 2 * int(np.ceil(np.log2(nodes))))
    if algo == "tree" and nodes > 1:  # NCCL's tree chunks (2 channels a NIC); the levels that hold a whole chunk
        channels = CHANNELS_PER_NIC * (nics or topo.gpus_per_node)
        unit = {p.name: tree_unit_bytes(p.name, size, nodes, len(ranks) / nodes, channels) for p in protocols}
        chain = int(np.bincount(ranks // topo.gpus_per_node).max()) - 1  # the longest chain's levels
        every, network = parts[0].steps, parts[0].steps - 2 * chain  # up and down: chain and tree, the tree
        pipelined, passes = True, {p.name: (every if p.name == "Simple" else network,) for p in protocols}
    if op == "broadcast" and nodes > 1:  # only the root holds data at first: the chain fills, one chunk a level
        # NCCL's ring broadcast moves one step a chunk (BROADCAST_CHUNKSTEPS 1, src/include/collectives.h), every
        # protocol's whole step; Simple holds it at every hop, LL and LL128 only where the chain leaves a node
        unit = {p.name: float(STEP_CHUNK_BYTES[p.name] * CHANNELS_PER_NIC * (nics or topo.gpus_per_node))
                for p in protocols}
        every, network = parts[0].steps, nodes - 1
        pipelined, passes = True, {p.name: (every if p.name == "Simple" else network,) for p in protocols}
        # NCCL's tuner prices a broadcast across nodes with "some chunk latency, waiting for proper chunk modeling"
        # (tuning.cc, graphs whose channels differ): nRanks x the network hop's latency (Simple: the tree's), its
        # stand-in for the fill above, which its estimate otherwise lacks
        estimate_latency = {p.name: p.base_s + len(ranks) * (TREE_PROTOCOLS[2] if p.name == "Simple" else p).net_hop_s
                            for p in protocols}
    added = {p.name: plugin_latency_s(topo, op, algo, nodes, p.name) for p in protocols}
    return run_phases(topo, parts, protocols=protocols, pipelined=pipelined, size=size, channels=max(nics, 1),
                      floor_s=floor, bw_factor=bw_factor, latency_factor=latency_factor,
                      estimate_latency_s=estimate_latency, unit_bytes=unit,
                      passes=passes, fill_seen=algo not in FILL_UNSEEN and op != "broadcast", added_latency_s=added)


def _ceiling_floors(topo: Topology, op: str, algo: str, n: int, size: float, nodes: int,
                    protocols: tuple[Protocol, ...], floor: dict[str, float]) -> dict[str, float]:
    """``floor`` with NCCL's per-channel bandwidth ceilings across nodes (.tuner.channel_ceilings_gbps) as least
    times: a ring's LL128 bus bandwidth (every op NCCL runs as a ring; an all-to-all is point-to-point), a tree
    all-reduce's bus bandwidth under every protocol, half of it algorithm bandwidth."""
    ring_ll128, tree, tree_ll128 = channel_ceilings_gbps(get_gpu(topo.gpu).nccl_arch, nodes,
                                                         int(getattr(topo, "nics", 0)) or topo.gpus_per_node)
    out = dict(floor)
    if algo == "ring" and op != "all_to_all" and "LL128" in {p.name for p in protocols}:
        out["LL128"] = max(out.get("LL128", 0.0), size * bus_factor(op, n) / (ring_ll128 * 1e9))
    if algo == "tree" and op == "all_reduce":  # NCCL caps the tree, then divides LL's bandwidth by 3.8
        for p in protocols:
            cap = {"LL128": tree_ll128, "LL": tree / 3.8}.get(p.name, tree)
            out[p.name] = max(out.get(p.name, 0.0), size / (0.5 * cap * 1e9))
    return out


SIMPLE_ONLY = ("nvls", "nvls_tree", *COLLNET)


def _whole_nodes(topo: Topology, ranks: np.ndarray) -> bool:
    """Whether ``ranks`` fill whole, equal nodes of several GPUs (CollNet's and NVLS + SHARP's condition here)."""
    return whole_nodes(topo, ranks) is not None


def _cannot_run(algorithm: str, nvls: bool, multi: bool, sharp: bool, sharp_nodes: bool) -> str:
    """Why ``algorithm`` cannot run this collective ("" when it can): NVLS inside one node, or across nodes on a
    SHARP fabric (NVLS + SHARP); NVLSTree across nodes; CollNet on a SHARP fabric. (Asked for by a call, the tree
    and hierarchical run inside one node too: NCCL's tree there, hierarchical as the ring.)"""
    if algorithm == "nvls" and (not nvls or (multi and not sharp)):
        return ("nvls needs an all-reduce of a GPU with NVLS (nvls_efficiency > 0) in a dtype the switch reduces "
                f"({', '.join(SWITCH_REDUCIBLE)}), inside one node or across whole nodes of a SHARP fabric "
                "(sharp=true); across nodes otherwise: nvls_tree")
    if algorithm == "nvls_tree" and not (nvls and multi):
        return ("nvls_tree needs an all-reduce across nodes of as many GPUs each, of a GPU with NVLS, in a dtype the "
                "switch reduces")
    if algorithm in COLLNET and not sharp:
        if sharp_nodes:
            return f"{algorithm} runs all-reduces only"
        return (f"{algorithm} needs an all-reduce across every GPU of equal, whole nodes of a SHARP fabric (a topology "
                "with sharp=true: InfiniBand SHARP switches and NCCL_COLLNET_ENABLE=1)")
    return ""


def collective(topo: Topology, op: str, ranks: int | np.ndarray, size: float, algorithm: str = "auto",
               dtype: str = "bfloat16", protocol: str = "auto") -> CollectiveTime:
    """Time of one collective of ``size`` bytes over ``ranks`` (a count: GPUs 0..n-1, or GPU ids) in ``dtype``
    (which decides whether NVLS can reduce it in the switch). ``algorithm`` and ``protocol`` ("auto", or one of
    ALGORITHMS / LL, LL128, Simple) override NCCL's choice as NCCL_ALGO and NCCL_PROTO do; "auto" takes the
    fastest modelled algorithm x protocol of NCCL's candidates, as NCCL's tuner takes its lowest estimate."""
    ranks = np.arange(ranks) if isinstance(ranks, (int, np.integer)) else np.asarray(ranks, dtype=np.int64)
    n = len(ranks)
    spec_algos = getattr(topo, "nccl_algo", "auto").lower().split("+")
    spec_algo = algorithm == "auto" and op == "all_reduce" and spec_algos != ["auto"]
    allowed = spec_algos if spec_algo and len(spec_algos) > 1 else None  # NCCL_ALGO=Ring,Tree: the tuner picks
    if spec_algo and allowed is None:  # the spec's NCCL_ALGO, where a call leaves it to the tuner
        algorithm = spec_algos[0]
    # the spec's NCCL_PROTO, which steers NCCL's tuner, so collectives only (point-to-point picks its own)
    spec_proto = protocol == "auto" and op != "all_to_all" and getattr(topo, "nccl_proto", "auto") != "auto"
    if spec_proto:
        protocol = getattr(topo, "nccl_proto", "auto")
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm {algorithm!r} (known: {', '.join(ALGORITHMS)})")
    if op == "all_to_all" and algorithm != "auto":  # NCCL runs it as grouped sends and receives: no algorithm
        raise ConfigError(f"all_to_all runs as point-to-point sends and receives; algorithm {algorithm} is not one "
                          "of its (leave it auto)")
    if op in ("all_gather", "reduce_scatter", "broadcast") and algorithm not in ("auto", "ring"):
        raise ConfigError(f"{op} runs NCCL's ring here; {algorithm} runs all-reduces only")
    if n < 1 or size < 0:
        raise ConfigError("a collective needs at least one rank and a size >= 0")
    if ranks.max() >= topo.gpus or ranks.min() < 0 or len(np.unique(ranks)) != n:
        raise ConfigError(f"ranks must be distinct GPUs of the topology's {topo.gpus}")
    if n == 1:
        return CollectiveTime(0.0, "none", 0.0, np.zeros(len(topo.links())))
    if dtype not in DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
    if protocol.lower() not in ("auto", "ll", "ll128", "simple"):
        raise ConfigError(f"unknown protocol {protocol!r} (known: auto, LL, LL128, Simple)")
    nvls = nvls_possible(topo, op, ranks, dtype)
    multi = len(np.unique(ranks // topo.gpus_per_node)) > 1
    fabric_sharp = bool(getattr(topo, "sharp", False))
    whole = fabric_sharp and _whole_nodes(topo, ranks)  # only a SHARP fabric asks
    sharp = multi and op == "all_reduce" and fabric_sharp and whole
    why = _cannot_run(algorithm, nvls, multi, sharp, fabric_sharp and whole)
    if spec_algo and (why or (algorithm in ("tree", "hierarchical") and not multi)):
        # NCCL fails such a call ("no algorithm/protocol available", src/enqueue.cc 2.27.7); a fabric's spec covers a
        # replay's every all-reduce, in-node ones too, so the model takes the tuner's own choice instead
        algorithm = "auto"
    elif why:
        raise ConfigError(why)
    tried = candidates(op, ranks, topo.gpus_per_node, nvls, sharp) if algorithm == "auto" else (algorithm,)
    if allowed is not None:  # among NCCL_ALGO's list; none of it can run here: the tuner's own choice, as for one
        tried = tuple(a for a in tried if a in allowed) or tried
    if spec_proto and protocol.lower() != "simple" and all(a in SIMPLE_ONLY for a in tried):
        protocol = "auto"  # the spec's protocol where every algorithm left runs Simple only
    if protocol.lower() in ("ll", "ll128"):
        tried = tuple(a for a in tried if a not in SIMPLE_ONLY) or tried  # NVLS and CollNet run Simple only
    algo, timed = "", None
    for name in tried:  # NCCL's tuner: the lowest estimated time over algorithm x protocol
        t = _timed(topo, op, ranks, size, name, protocol)
        if timed is None or t.estimate_s < timed.estimate_s:
            algo, timed = name, t
    assert timed is not None
    seconds = timed.seconds
    busbw = size / seconds * bus_factor(op, n) / 1e9 if seconds > 0 else 0.0
    label = "p2p" if op == "all_to_all" else algo  # NCCL runs an all-to-all as grouped sends and receives, no ring
    return CollectiveTime(seconds, label, busbw, timed.link_bytes, timed.reconfig_s, timed.protocol.name)
