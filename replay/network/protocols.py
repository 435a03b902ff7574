"""Phases run as flows under NCCL's wire protocols: each protocol's latencies and payload share, the flows' time
on a topology, pipelines and their fill, and the tuner's own estimate beside the time.

:mod:`.collectives` picks an algorithm and builds its phases (:mod:`.algorithms`); :mod:`.collnet` times SHARP's
in-network reductions on the same runner. Sizes are nccl-tests' message sizes (:mod:`.collectives`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rltrace.replay.network.flows import FlowRun, run_flows
from rltrace.replay.network.schedules import Phase
from rltrace.replay.topologies.base import Links, Topology

from rltrace.errors import ConfigError


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

COLLNET = ("collnet_direct", "collnet_chain")  # in-network reduction on a SHARP fabric (.collnet)


@dataclass(frozen=True, slots=True)
class PhasesTime:
    """Phases run one after another under the protocol of lowest estimated time."""

    seconds: float
    link_bytes: np.ndarray
    reconfig_s: float
    protocol: Protocol
    estimate_s: float = 0.0
    """NCCL's tuner's view of the same run (its corrections applied), by which it picks; 0: the time itself"""


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
