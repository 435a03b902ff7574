"""Collectives as flows on a topology: ring, NCCL's tree, hierarchical and NVLS algorithms.

Each algorithm is a sequence of phases (built in :mod:`.schedules`); a phase is a set of concurrent flows (a
pipelined ring or tree in steady state: every link carries its share at once), a latency term (per algorithm step,
the mean over the phase's pipeline levels of each level's slowest hop) and, for a ring, one pass over a shard in
local memory.
Like NCCL's tuner, a collective runs under whichever wire protocol (LL, LL128, Simple) finishes first: each has
its base latency, its NVLink and network hop latencies and its share of the bandwidth left for payload.

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
from rltrace.replay.network.flows import FlowRun, run_flows
from rltrace.replay.network.schedules import Phase, phases
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
from rltrace.replay.topologies.base import NCCL_ALGOS, Links, Topology

from rltrace.catalog import get_gpu
from rltrace.errors import ConfigError
from rltrace.units import BUS_FACTORS, bus_factor

ALGORITHMS = NCCL_ALGOS  # auto, ring, tree, hierarchical, nvls, nvls_tree
# Dtypes an NVSwitch can reduce (multimem.ld_reduce: f16, bf16, f32); int8 and fp8 all-reduces run the ring.
SWITCH_REDUCIBLE = ("bfloat16", "bf16", "half", "fp16", "float16", "float", "fp32", "float32")
DTYPES = (*SWITCH_REDUCIBLE, "int8", "uint8", "fp8", "float8")


@dataclass(frozen=True, slots=True)
class Protocol:
    """One of NCCL's wire protocols under one algorithm: what a collective pays once, per NVLink step and per
    step that leaves the node, and the share of the link bandwidth left for payload."""

    name: str
    base_s: float
    nvlink_hop_s: float
    net_hop_s: float
    payload: float


# NVIDIA/nccl src/graph/tuning.cc (2.2x releases; the H100 data is NCCL 2.29.2), in us, {LL, LL128, Simple}:
# baseLat Ring {6.6, 14.0, 8.4}, Tree {6.8, 14.0, 8.4}; hwLat NVLink Ring {0.6, 1.9, 3.4}, Tree {0.6, 1.25, 4.0};
# hwLat NET Ring {2.7, 4.0, 14.0}, Tree {5.0, 8.5, 14}. Payload: LL sends 4 flag bytes with every 4 data bytes
# (NCCL: busBw x 0.5), LL128 8 of every 128 (NCCL: x 0.92), Simple none; the tree's all-reduce, NCCL's tree
# refinements: x 0.92 for every protocol, then LL x 1/3.8 and LL128 x 120/128 (across nodes, where the tree runs).
# A NET figure replaces a flow's NIC hop; links beyond it (a cross-datacenter link's milliseconds) keep their own
# latency when it is longer.
LL = Protocol("LL", 6.6e-6, 0.6e-6, 2.7e-6, 0.5)
LL128 = Protocol("LL128", 14.0e-6, 1.9e-6, 4.0e-6, 0.92)
SIMPLE = Protocol("Simple", 8.4e-6, 3.4e-6, 14.0e-6, 1.0)
PROTOCOLS = (LL, LL128, SIMPLE)
TREE_PROTOCOLS = (Protocol("LL", 6.8e-6, 0.6e-6, 5.0e-6, 0.92 / 3.8),
                  Protocol("LL128", 14.0e-6, 1.25e-6, 8.5e-6, 0.92 * 120 / 128),
                  Protocol("Simple", 8.4e-6, 4.0e-6, 14.0e-6, 0.92))
# NVLS runs Simple only; NCCL charges it one latency, hwLat NVLink NVLS (25 us), and no per-step term. It stays
# inside one node here (nvls_possible), so it has no NET figure.
NVLS = Protocol("Simple", 25e-6, 0.0, 0.0, 1.0)
# NCCL's NVLS bandwidth is bwIntra x nvlsEfficiency x (nChannels - 1) / nChannels (src/tuning/nvls.cc), with 16
# NVLS channels on Hopper (NVLS_CHANNELS, in .tuner beside NVLSTree's chunking).
# NVLSTree (across nodes: NVLS inside each node, NCCL's tree between them) runs Simple only; tuning.cc charges it
# baseLat 0 + hwLat NVLink NVLSTree (25 us) + 2 x log2(nodes) x hwLat NET NVLSTree: the base here, and the NET
# figure per tree step (a tree stage has 2 x its levels steps). The NET figure is 14 us in the releases the
# multi-node validation ran (2.24.3, 2.26.2; 2.21.5 to 2.28.3 alike) and 20.9 from 2.28.9; NVLSTree runs only across
# nodes, so the one-node figures' release (2.29.2) does not apply to it. 20.9 until 2026-11-25.
NVLS_TREE = Protocol("Simple", 25e-6, 0.0, 14e-6, 1.0)
# NCCL's tuner caps LL's bus bandwidth across nodes by host CPU (tuning.cc llMaxBws, multi-node rows: Intel N2 39.0,
# N4+ 20.4 GB/s; AMD 22.5, 19.0): LL moves 8-byte flag-data pairs the CPU-side proxy and PCIe cannot pipeline
# faster. One node's figure (Hopper 141 GB/s) is not applied: tried on 2026-11-23, it worsened the one-node fit.
LL_MAX_BUSBW = {"intel": (39.0e9, 20.4e9), "amd": (22.5e9, 19.0e9)}
# Point-to-point (all-to-all, send/recv) picks its protocol itself, not through the tuner, and never LL128
# (src/enqueue.cc addP2pToPlan, NVIDIA/nccl 2.26.2 to 2.30.7, and master @ 5067397c: LL while a peer's bytes are at
# most its channels x NCCL_P2P_LL_THRESHOLD, 16 KiB, and the connection has LL buffers, else Simple). A peer's
# channels are min(nChannelsMin, ceil(bytes / minPartSize)), minPartSize an eighth of the 512 KiB p2p chunk of a node
# whose GPUs all talk over NVLink (src/init.cc computeBuffSizes): up to 64 KiB one channel, and above it every
# channel holds more than 16 KiB. So on an NVLink node LL runs exactly while a peer's bytes are at most 16 KiB,
# whatever the channel counts (a PCIe node's 128 KiB chunk would allow up to nChannelsMin x 16 KiB; every GPU here
# has NVLink). Across nodes it never runs: NCCL_ALLOC_P2P_NET_LL_BUFFERS is 0 by default (src/init.cc). An
# all-to-all's send to itself is a copy, never LL (its local pass, :func:`all_to_all`). A protocol a call forces
# (``protocol="LL"``) runs at any size: a what-if, not what NCCL would do. Until 2026-11-26 the model took the faster
# of LL and Simple inside a node, LL up to 2-4 MB all-to-alls on 2-8 GPUs, 20-46% fast there against
# aiconfigurator's H100 sweep.
P2P_PROTOCOLS = (LL, SIMPLE)
P2P_LL_THRESHOLD_BYTES = 16 << 10
# A pipelined schedule (hierarchical, NVLSTree) moves the bytes in chunks through its stages at once: the slowest
# stage sets the time, and each other stage adds its time for one chunk (the pipeline's fill). NCCL's Simple
# protocol moves a channel's data in steps of buffSize / NCCL_STEPS = 4 MiB / 8 (src/include/comm.h
# DEFAULT_BUFFSIZE, src/include/device.h NCCL_STEPS).
PIPELINE_CHUNK_BYTES = 512 << 10
# NCCL's tuner has no term for a pipeline's fill (src/graph/tuning.cc: base and hop latencies, bandwidths), so it picks
# the tree and NVLSTree by their time without it, and then they run with it: the fill is in the time, not the pick.
# Until 2026-11-25 NVLSTree's fill was in its pick too; hierarchical is rltrace's own and keeps it.
FILL_UNSEEN = ("tree",)
# An all-to-all's flows run under max-min sharing to their ends, one rate solve per finishing time: 0.35 s for 64
# ranks' 4,032 flows on a k=16 fat-tree, 7 s for 128 ranks', 2 minutes for 256 ranks' (2-core VM, 2026-11-26). Past
# this many flows an all-to-all phase takes its busiest link's bytes over its capacity instead, the bound every
# max-min run is at least: the exact runs equal it to 1e-9 on 32-64 ranks of rail, leaf-spine, k=8 fat-trees (one
# 4:1 oversubscribed) and RFabric (tests/test_fabric.py), and to 4 digits at 64 and 128 ranks of a k=16 fat-tree and
# 128 of a k=8 one (checked by hand the same day). Other independent flows (a tree weight sync's, a two-stage
# scatter's) always run exactly.
EXACT_FLOWS = 4096


@dataclass(frozen=True, slots=True)
class PhasesTime:
    """Phases run one after another under the fastest protocol."""

    seconds: float
    link_bytes: np.ndarray
    reconfig_s: float
    protocol: Protocol
    estimate_s: float = 0.0
    """NCCL's tuner's view of the same run (its corrections applied), by which it picks; 0: the time itself"""


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


COLLNET = ("collnet_direct", "collnet_chain")  # in-network reduction on a SHARP fabric (.collnet)


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


def run_phases(topo: Topology, parts: list[Phase], key: int = 0,
               protocols: tuple[Protocol, ...] = PROTOCOLS, pipelined: bool = False, size: float = 0.0,
               channels: int = 1, floor_s: dict[str, float] | None = None,
               unit_bytes: float | dict[str, float] = 0.0,
               passes: tuple[int, ...] | dict[str, tuple[int, ...]] | None = None,
               bw_factor: dict[str, float] | None = None, latency_factor: dict[str, float] | None = None,
               estimate_latency_s: dict[str, float] | None = None,
               estimate_bw_factor: dict[str, float] | None = None, fill_seen: bool = True,
               added_latency_s: dict[str, float] | None = None) -> PhasesTime:
    """Phases run one after another, each protocol's base latency once, under the fastest of ``protocols``.
    ``pipelined``: the phases are stages that ``size`` bytes pass in chunks of PIPELINE_CHUNK_BYTES per
    channel, so the flows take the slowest stage's time plus every other stage's time for one chunk.
    ``unit_bytes`` (instead of PIPELINE_CHUNK_BYTES x channels) and ``passes`` (how often one unit passes each
    stage, holding all of it) describe pipelines a unit crosses more than once: the fill is then every pass at one
    unit's time. Either may be a dict by protocol name, whose chunks and forwarding differ.
    ``bw_factor`` (per protocol name) scales the bandwidth of both the estimate and the time, as NCCL's tree
    correction does (TREE_CORRECTION); ``latency_factor`` shapes only the estimate the protocol is picked by
    (RING_PLATEAU), ``estimate_bw_factor`` its bandwidth there (CollNetDirect's factors), and
    ``estimate_latency_s`` replaces a protocol's latency there (a broadcast across nodes).
    ``fill_seen`` False: the estimate leaves the pipeline's fill out, as NCCL's tuner does (FILL_UNSEEN).
    ``added_latency_s`` (per protocol name) adds to the latency of both (the net plugin's, :func:`plugin_latency_s`).

    A protocol scales every flow's bytes by 1/payload, so under max-min sharing it scales every phase's flow
    time alike: the flows run once, and each protocol's time is computed from that one run."""
    links = topo.links()
    flow_s, reconfig, local_s = 0.0, 0.0, 0.0
    stage_s: list[float] = []
    steps_at = np.zeros(len(protocols))
    carried = np.zeros(len(links))
    configure = getattr(topo, "configure", None)
    for i, p in enumerate(parts):
        if len(p.src) == 0:
            continue
        if configure is not None:
            reconfig += configure(p.src, p.dst, p.nbytes)
            links = topo.links()
        keys = np.full(len(p.src), key + i, dtype=np.int64) + np.arange(len(p.src))
        indptr, ids = topo.paths(p.src, p.dst, keys)
        if p.levels is not None or (p.all_to_all and len(p.src) > EXACT_FLOWS):
            # a pipelined ring, chain or tree: chunks advance in step, the busiest link sets it; and so, past
            # EXACT_FLOWS, does an all-to-all (its max-min run's makespan, wherever it was computed, is that bound)
            run = _pipelined(indptr, ids, links.capacity_Bps, p.nbytes / p.efficiency)
        else:  # independent flows (all-to-all, point-to-point): max-min sharing, each flow to its end
            run = run_flows(indptr, ids, links.capacity_Bps, p.nbytes / p.efficiency)  # lower efficiency: more bytes
        flow_s += run.makespan_s
        stage_s.append(run.makespan_s + p.local_bytes / topo.memory_bytes_per_s)
        local_s += p.local_bytes / topo.memory_bytes_per_s
        steps_at += p.steps * np.array([_step_latency(_hop_latency(links, proto), indptr, ids, p.levels)
                                        for proto in protocols])
        carried += run.link_bytes * p.efficiency
    flows = {p.name: flow_s for p in protocols}
    seen = dict(flows)  # the flows' time as the tuner sees it: without the pipeline's fill where NCCL leaves it out
    if pipelined and stage_s:  # the slowest stage, plus the others' time for one chunk (local passes included)
        for proto in protocols:
            ks = passes.get(proto.name) if isinstance(passes, dict) else passes
            crossed = sum(t * k for t, k in zip(stage_s, ks or (1,) * len(stage_s), strict=True))
            unit = unit_bytes.get(proto.name, 0.0) if isinstance(unit_bytes, dict) else unit_bytes
            chunks = max(1.0, size / (unit or PIPELINE_CHUNK_BYTES * channels))
            flows[proto.name] = max(stage_s) + (crossed - max(stage_s)) / chunks
            seen[proto.name] = flows[proto.name] if fill_seen else max(stage_s)
        local_s = 0.0
    floor, bwf, latf = floor_s or {}, bw_factor or {}, latency_factor or {}
    totals, estimates = [], []
    for j, proto in enumerate(protocols):  # a protocol's least time for the bytes: NCCL's bandwidth caps (floor)
        wire = max(flows[proto.name] / proto.payload, floor.get(proto.name, 0.0))
        wire_seen = max(seen[proto.name] / proto.payload, floor.get(proto.name, 0.0))
        latency = proto.base_s + steps_at[j] + (added_latency_s or {}).get(proto.name, 0.0)
        totals.append(latency + wire / bwf.get(proto.name, 1.0) + local_s + reconfig)
        seen_latency = (estimate_latency_s or {}).get(proto.name, latency * latf.get(proto.name, 1.0))
        pick_bw = bwf.get(proto.name, 1.0) * (estimate_bw_factor or {}).get(proto.name, 1.0)
        estimates.append(seen_latency + wire_seen / pick_bw + local_s + reconfig)
    best = int(np.argmin(estimates))
    return PhasesTime(totals[best], carried, reconfig, protocols[best], estimates[best])


def _pipelined(indptr: np.ndarray, ids: np.ndarray, capacity: np.ndarray, nbytes: np.ndarray) -> FlowRun:
    """A pipelined schedule's flows: every chunk passes every hop, so all flows move at the pace of the most loaded
    link, which takes its bytes over its capacity (under max-min sharing a flow off the bottleneck would finish
    early, which a pipeline cannot). One pass over the flows, however unequal their bytes. Also the time of an
    all-to-all past EXACT_FLOWS flows, whose max-min run ends at the same bound."""
    per_hop = np.repeat(np.asarray(nbytes, dtype=np.float64), np.diff(indptr))
    load = np.bincount(ids, weights=per_hop, minlength=len(capacity))
    used = load > 0
    if np.any(capacity[used] <= 0):
        raise ConfigError("a flow crosses a link with no capacity (an optical circuit that is not set up?)")
    makespan = float((load[used] / capacity[used]).max()) if used.any() else 0.0
    return FlowRun(np.full(len(nbytes), makespan), load, 1)


def _hop_latency(links: Links, protocol: Protocol) -> np.ndarray:
    """Per-link hop latency under ``protocol``: NVLink hops take the protocol's figure, a NIC's way out of its
    node the protocol's network figure (its way in carries none), other links their own."""
    nic_out = (links.kind == "nic") & (links.latency_s > 0)
    return np.where(links.kind == "nvlink", protocol.nvlink_hop_s,
                    np.where(nic_out, protocol.net_hop_s, links.latency_s))


def plugin_latency_s(topo: Topology, op: str, algo: str, nodes: int, protocol: str) -> float:
    """The net plugin's reported latency (the topology's ``net_latency_us``) as NCCL's tuner charges it
    (src/graph/tuning.cc, 2.26.2 to 2.30.7: ``latencyInter`` in every ``interLat``, twice under Simple, its "flush
    extra latency", which the tuner adds whether or not the GPU flushes): a ring all-reduce pays it on its
    2 (nodes - 1) network steps, a ring all-gather or reduce-scatter on nodes - 1, a tree and NVLSTree all-reduce on
    2 log2(nodes) (``log2i``, rounded down), CollNet and NVLS across nodes one (.collnet.timed); a broadcast (its
    own "chunk latency") and point-to-point nothing."""
    if nodes < 2:
        return 0.0
    steps = {("all_reduce", "ring"): 2 * (nodes - 1), ("all_reduce", "hierarchical"): 2 * (nodes - 1),
             ("all_gather", "ring"): nodes - 1, ("reduce_scatter", "ring"): nodes - 1,
             ("all_reduce", "tree"): 2 * (nodes.bit_length() - 1),
             ("all_reduce", "nvls_tree"): 2 * (nodes.bit_length() - 1),
             **{("all_reduce", a): 1 for a in (*COLLNET, "nvls")}}.get((op, algo), 0)
    per_step = float(getattr(topo, "net_latency_us", 0.0)) * 1e-6 * (2 if protocol == "Simple" else 1)
    return steps * per_step


def _step_latency(latency_s: np.ndarray, indptr: np.ndarray, ids: np.ndarray, levels: np.ndarray | None) -> float:
    """One step's latency: each flow's slowest link, each level's slowest flow, the mean over the levels."""
    if not len(ids):
        return 0.0
    per_flow = np.maximum.reduceat(latency_s[ids], indptr[:-1])
    if levels is None:
        return float(per_flow.max())
    dense, inverse = np.unique(levels, return_inverse=True)
    worst = np.zeros(len(dense))
    np.maximum.at(worst, inverse, per_flow)
    return float(worst.mean())


def phase_latency(topo: Topology, phase: Phase, protocol: Protocol) -> float:
    """The latency part of a phase alone under ``protocol``: its steps times one step's latency."""
    indptr, ids = topo.paths(phase.src, phase.dst, np.arange(len(phase.src), dtype=np.int64))
    return phase.steps * _step_latency(_hop_latency(topo.links(), protocol), indptr, ids, phase.levels)


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
        from rltrace.replay.network.collnet import timed  # it builds on this module's phases and run_phases

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
    from rltrace.replay.network.collnet import whole_nodes  # it builds on this module

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
