"""The topology contract, a registry by name, and the pieces most topologies share.

A topology is a set of directed links (capacity in bytes/s, a latency per hop) over which GPU-to-GPU flows
are routed. Every topology puts ``gpus_per_node`` GPUs behind one NVSwitch domain (each GPU one NVLink
uplink and downlink at half the catalog's bidirectional NVLink figure) and, when it spans nodes, one NIC per
GPU (GPUDirect RDMA). ``paths`` routes many flows at once: arrays in, a CSR of link ids out, ECMP by a hash
of (source, destination, flow key).

Specs are ``name:key=value,...`` (``fat-tree:k=16,gpus_per_node=8,nic_gbps=400,gpu=H100``); each topology
module declares its parameters as a kw_only/slots dataclass and registers itself with ``@register``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from rltrace.catalog import get_gpu
from rltrace.config import as_written, build, parse_scalar
from rltrace.errors import ConfigError
from rltrace.limits import MAX_GPUS
from rltrace.registry import Registry

# Per-hop latency the links carry. NVLink: NCCL's hwLat for NVLink, Ring/LL (NVIDIA/nccl src/graph/tuning.cc,
# 0.6 us); a collective replaces it by its protocol's figure (rltrace.replay.network.protocols.PROTOCOLS).
# Network hop (NIC + switch traversal): 2 us, rltrace's assumption, the order of InfiniBand NDR port-to-port
# plus NIC latency; not fitted to any measurement. Collectives and weight syncs replace a NIC's way out by their
# protocol's NET figure (NCCL's hwLat NET, 2.7-14 us, which counts the proxy and network stack too).
NVLINK_HOP_S = 0.6e-6
NETWORK_HOP_S = 2.0e-6
# Share of the spec-sheet bandwidth NCCL reaches. Two constants, derived from the marginal bus bandwidth
# (256 -> 512 MB) of aiconfigurator's half-precision all-gather on 4 and 8 H100 (NCCL 2.29.2: 327.6 and
# 346.6 GB/s), and held for every other size, GPU count, op and dtype (docs/fabrics-validation.md):
# - NVLink: 0.805 of 450 GB/s per direction (362 GB/s): what the ring's link transfers reach;
# - local memory: 2.28 TB/s of traffic on H100 (a copy reads and writes each byte, so 1.14 TB/s copied): a ring also
#   passes one shard through local memory, outside the link pipeline (all-gather copies its own shard into the
#   output; reduce-scatter and all-reduce reduce into it, 3 bytes of traffic per byte), which is why fewer GPUs
#   reach less bus bandwidth on the same links (2-GPU all-gather at 512 MB: 272 GB/s, against 338 on 8). NCCL's
#   kernels make that pass with the SMs of their channels, and it is not bound by the HBM; its rate is taken as the
#   GPU's SMs x clock: 8.716 bytes per SM cycle (2.28 TB/s over 132 SMs at 1.98 GHz). Until 2026-11-26 it was 0.68 of
#   HBM bandwidth, which gave H200 (HBM 4.8 TB/s, H100's SMs) a faster pass; aiconfigurator's H200 sweep measured the
#   same ring bus bandwidth as H100's from 64 MB (all-gather and reduce-scatter within 0.5% at 512 MB), and B200 a
#   2-GPU all-gather 23% below the HBM rule (docs/fabrics-validation.md). Which GPU figure sets the rate (SMs x clock,
#   the clock alone, or one rate for all) those four kinds cannot settle; SMs x clock fits them best. A GPU without SM
#   figures in the catalog (H20: no cited clock) takes the HBM rule, 0.68 of its HBM bandwidth (HBM_COPY_SHARE).
#   copy_efficiency scales the rate (1.0; it was 0.68 of HBM before, so a spec that set copy_efficiency=0.68 now slows
#   the pass by that much again).
# NIC: 0.9, rltrace's assumption for NCCL collectives over InfiniBand/RoCE. The one public measurement across
# H100 nodes in ../shared is point-to-point (Vidur's h100_dgx send/recv): about 0.7 of a 400 Gb/s NIC (33.8
# GB/s marginal from 16 MB up, 35.9 at 64 MB). NCCL's send/recv has its own network path, so that figure is
# not taken for collectives; with nic_efficiency=0.7 in the spec the model is within 6% of it (median, each
# size band; docs/fabrics-validation.md).
# What a spec may force, as NCCL_ALGO / NCCL_PROTO do (rltrace.replay.network.collectives uses the same names).
NCCL_ALGOS = ("auto", "ring", "tree", "hierarchical", "nvls", "nvls_tree", "collnet_direct", "collnet_chain")
NCCL_PROTOS = ("auto", "LL", "LL128", "Simple")
NVLINK_EFFICIENCY = 0.805
COPY_EFFICIENCY = 1.0
LOCAL_BYTES_PER_SM_CYCLE = 8.716
HBM_COPY_SHARE = 0.68
NIC_EFFICIENCY = 0.9


@dataclass(frozen=True, slots=True)
class Links:
    """Directed links: name, kind ("nvlink", "nic", "fabric", "dci", "ocs"), capacity and latency."""

    names: list[str]
    kind: np.ndarray
    capacity_Bps: np.ndarray
    latency_s: np.ndarray

    def __len__(self) -> int:
        return len(self.names)


class Topology(Protocol):
    """A fabric joining ``gpus`` GPUs of kind ``gpu``."""

    gpus: int
    gpu: str
    gpus_per_node: int

    @property
    def memory_bytes_per_s(self) -> float:
        """Local memory traffic one GPU's collective kernels reach (a ring's local pass over a shard)."""
        ...

    def links(self) -> Links:
        """Every directed link (the same object on every call: capacities may change between phases)."""
        ...

    def paths(self, src: np.ndarray, dst: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Route flows ``src[i] -> dst[i]``: (indptr, link ids), flow i's links are ``ids[indptr[i]:indptr[i+1]]``."""
        ...


TOPOLOGIES: Registry[type[Topology]] = Registry("topology")
register = TOPOLOGIES.register
"""Class decorator: make a topology available as ``name`` in specs. A duplicate name is an error."""
names = TOPOLOGIES.names


@dataclass(frozen=True, slots=True)
class TopologySpec:
    """A topology by name with its parameters, read once from ``name:key=value,...`` (the one grammar for
    topology specs: ``--topology``, ``--set network.topology=...``, a sweep grid, ``fabric bench``) and carried
    typed from there to :meth:`build`. Values are TOML scalars (``k=16``, ``nic_gbps=400.0``, ``gpu=H100``)."""

    name: str
    params: tuple[tuple[str, Any], ...] = ()
    """(key, value) sorted by key (``k=8,gpu=H100`` is ``gpu=H100,k=8``); keys and value types checked against
    the topology's parameters"""
    text: str = field(default="", compare=False)
    """the spec as written (what reports and config.json show)"""

    @classmethod
    def parse(cls, spec: str) -> TopologySpec:
        """Read ``name:key=value,...``; unknown names or keys and badly typed values are ConfigErrors."""
        name, _, rest = spec.strip().partition(":")
        name = name.strip()
        topology = TOPOLOGIES.lookup(name)
        values: dict[str, Any] = {}
        for item in filter(None, (p.strip() for p in rest.split(","))):
            key, eq, text = item.partition("=")
            if not eq:
                raise ConfigError(f"topology {name}: expected key=value, got {item!r} (a list of values is joined "
                                  "by +, nccl_algo=ring+tree)")
            if key.strip() in values:
                raise ConfigError(f"topology {name}: {key.strip()} is given twice")
            values[key.strip()] = parse_scalar(text.strip())
        user = user_keys(topology)
        unknown = sorted(set(values) - set(user))
        if unknown:  # before build, whose message would list internal fields (links, circuits) too
            raise ConfigError(f"topology {name}: unknown key {unknown[0]!r} (known: {', '.join(user)})")
        build(topology, values, f"topology {name}")  # value types now, where the spec is read; links at build()
        return cls(name, tuple(sorted(values.items())), spec.strip())

    @classmethod
    def from_config(cls, value: Any, where: str) -> TopologySpec | None:
        """A config field's value: a spec's text (empty: no topology) or a spec already read."""
        if isinstance(value, cls):
            return value
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a topology spec such as fat-tree:k=8,gpu=H100, got "
                              f"{as_written(value)}")
        try:
            return cls.parse(value) if value.strip() else None
        except ConfigError as e:  # say where the spec came from (a --set item, a grid file)
            raise ConfigError(f"{where}: {e}") from None

    def to_config(self) -> str:
        """The spec's text (config.json)."""
        return str(self)

    def __str__(self) -> str:
        if self.text:
            return self.text
        body = ",".join(f"{k}={v}" for k, v in self.params)
        return f"{self.name}:{body}" if body else self.name

    def build(self) -> Topology:
        """The topology, its links built (so a bad combination of parameters is one message now)."""
        topo: Topology = build(TOPOLOGIES.lookup(self.name), dict(self.params), f"topology {self.name}")
        topo.links()
        return topo


def parse(spec: str | TopologySpec) -> Topology:
    """Build a topology from ``name:key=value,...`` (or a spec already read); unknown names or keys and bad
    values are ConfigErrors."""
    return (spec if isinstance(spec, TopologySpec) else TopologySpec.parse(spec)).build()


def user_keys(cls: type) -> list[str]:
    """The keys a user may set in a spec: the dataclass's init fields, not its internal state."""
    return sorted(f.name for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")
                  and f.name not in INTERNAL_KEYS)


INTERNAL_KEYS = frozenset({"circuits", "reconfigurations"})  # rfabric's optical state, set by the model itself


ROUTINGS = ("ecmp", "dmodk")  # a flow's way up a tree: a hash of it, or its destination (InfiniBand's D-mod-k)


def check_routing(name: str, routing: str) -> None:
    """``routing`` is one of :data:`ROUTINGS` (a ConfigError naming the topology otherwise)."""
    if routing not in ROUTINGS:
        raise ConfigError(f"{name}: routing must be one of {', '.join(ROUTINGS)}, got {routing!r}")


def ecmp(src: np.ndarray, dst: np.ndarray, key: np.ndarray, ways: int, salt: int = 0) -> np.ndarray:
    """A deterministic hash of each flow onto one of ``ways`` equal-cost choices (splitmix64's finaliser over
    source, destination, flow key and a salt per routing decision)."""
    with np.errstate(over="ignore"):
        x = (src.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
             + dst.astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)
             + (key.astype(np.uint64) + np.uint64(salt) * np.uint64(0x165667B19E3779F9))
             * np.uint64(0x94D049BB133111EB))
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    choice: np.ndarray = (x % np.uint64(ways)).astype(np.int64)
    return choice


def csr(hops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(flows x max hops) link ids with -1 for no hop -> CSR (indptr, ids), hops kept in order."""
    used = hops >= 0
    indptr = np.concatenate([[0], np.cumsum(used.sum(axis=1))]).astype(np.int64)
    return indptr, hops[used]


@dataclass(kw_only=True, slots=True)
class NodeFabric:
    """Nodes of ``gpus_per_node`` GPUs on NVSwitch, one NIC per GPU; topologies add their network on top.

    Link ids: NVLink up of GPU g = g, NVLink down = gpus + g, NIC up = 2 gpus + g, NIC down = 3 gpus + g,
    then the topology's own links from ``4 gpus`` on (``_net`` holds them)."""

    gpu: str = "H100"
    gpus_per_node: int = 8
    nvlink_domain: int = 0
    """GPUs one NVLink fabric may join (0: the GPU kind's ``nvlink_domain``, 8 on HGX, 72 on GB200 NVL72); a node
    of more GPUs is refused unless this says the hardware joins them"""
    nic_gbps: float = 400.0
    """line rate of one NIC, Gb/s (400 Gb/s: ConnectX-7 NDR)"""
    nics_per_node: int = 0
    """NICs per node (0: one per GPU); fewer than GPUs: GPU i of a node uses NIC i x nics / gpus_per_node; more
    (a multiple): each GPU has nics / gpus_per_node of them (one link of their summed speed)"""
    cpu: str = "intel"
    """host CPU vendor, intel or amd: NCCL's tuner caps the LL protocol across nodes lower on AMD hosts"""
    nccl_algo: str = "auto"
    """the algorithm every all-reduce on this fabric runs unless a call names one (NCCL_ALGO), or several of NCCL's
    joined by ``+`` that its tuner picks among (``ring+tree``: NCCL_ALGO=Ring,Tree); any case"""
    nvswitch: bool = True
    """the node's GPUs on NVSwitches (HGX 8-GPU boards); false: a direct NVLink mesh (4-GPU boards), which has no
    NVLink SHARP, so no NVLS or NVLSTree"""
    sharp: bool = False
    """InfiniBand SHARP in the NIC switches with NCCL's CollNet on (NCCL_COLLNET_ENABLE=1): an all-reduce across whole
    nodes may also run CollNet Direct or Chain, or NVLS + SHARP (.network.collnet; not validated). Only on the
    switched fabrics (``SHARP_FABRIC``): leaf-spine, rail, fat-tree"""
    nccl_proto: str = "auto"
    """the protocol every collective runs unless a call names one (NCCL_PROTO): LL, LL128 or Simple"""
    net_latency_us: float = 0.0
    """the inter-node latency the NCCL net plugin reports (ncclNetProperties_t.latency), which NCCL's tuner adds to
    each network step of a ring or tree, twice under Simple (src/graph/tuning.cc latencyInter, 2.18 to 2.30; see
    .network.protocols.plugin_latency_s): 0 for NCCL's own InfiniBand/RoCE transport ("Not set",
    src/transport/net_ib), 75 from aws-ofi-nccl on EFA p4d/p5/p5e (src/platform-aws.c from v1.7.0-aws,
    platform-aws.cpp from v1.15.0, through v1.16.3), 35 on p5en and later (from v1.15.0)"""
    SHARP_FABRIC: ClassVar[bool] = False
    """whether the topology's switches can reduce (SHARP): the switched node fabrics say so"""
    nvlink_efficiency: float = NVLINK_EFFICIENCY
    nic_efficiency: float = NIC_EFFICIENCY
    copy_efficiency: float = COPY_EFFICIENCY
    _links: Links | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def nic_bytes_per_s(self) -> float:
        """What one GPU slot's NIC link carries per direction (several NICs per GPU: their sum)."""
        return self.nic_gbps / 8 * 1e9 * self.nic_efficiency * max(1, self.nics // self.gpus_per_node)

    @property
    def memory_bytes_per_s(self) -> float:
        """Local memory traffic (bytes read plus written) per second one GPU's collective kernels reach: its SMs x
        clock x LOCAL_BYTES_PER_SM_CYCLE (without SM figures: 0.68 of its HBM bandwidth), times ``copy_efficiency``."""
        spec = get_gpu(self.gpu)
        if spec.sm_cycles_per_s > 0:
            return spec.sm_cycles_per_s * LOCAL_BYTES_PER_SM_CYCLE * self.copy_efficiency
        return HBM_COPY_SHARE * spec.hbm_bytes_per_s * self.copy_efficiency

    @property
    def nics(self) -> int:
        """NICs per node."""
        return self.nics_per_node or self.gpus_per_node

    def nic_of(self, gpu: np.ndarray) -> np.ndarray:
        """The GPU slot whose NIC links ``gpu`` uses: the first GPU of the group of ``gpus_per_node / nics`` GPUs
        sharing one NIC (each GPU its own when there is one NIC per GPU)."""
        per = max(1, self.gpus_per_node // self.nics)
        slot: np.ndarray = gpu - (gpu % self.gpus_per_node) % per
        return slot

    def _check(self, gpus: int) -> None:
        sizes = (("nodes", getattr(self, "nodes", 1)), ("gpus", gpus), ("gpus_per_node", self.gpus_per_node),
                 ("nic_gbps", self.nic_gbps))
        bad = [f"{name}={value:g}" for name, value in sizes if value <= 0]
        if bad:
            raise ConfigError(f"topology: {', '.join(bad)}: nodes, gpus, gpus_per_node and nic_gbps must be positive "
                              "(a topology of nodes has nodes x gpus_per_node GPUs)")
        algos = self.nccl_algo.lower().split("+")
        named = [a for a in NCCL_ALGOS if a != "auto"]
        # a list is NCCL_ALGO's: of NCCL's algorithms, so not rltrace's own hierarchical schedule
        listable = [a for a in named if a != "hierarchical"]
        ok = algos == ["auto"] or (len(algos) == 1 and algos[0] in named) or (
            len(set(algos)) == len(algos) and all(a in listable for a in algos))
        if not ok:
            raise ConfigError(f"topology: nccl_algo must be auto, one of {', '.join(named)}, or several of "
                              f"{', '.join(listable)} joined by + (each once), got {self.nccl_algo!r}")
        if self.nccl_proto not in NCCL_PROTOS:
            raise ConfigError(f"topology: nccl_proto must be one of {', '.join(NCCL_PROTOS)}, got {self.nccl_proto!r}")
        if not self.net_latency_us >= 0:
            raise ConfigError(f"topology: net_latency_us must be >= 0, got {self.net_latency_us}")
        if self.cpu not in ("intel", "amd"):
            raise ConfigError(f"topology: cpu must be intel or amd, got {self.cpu!r}")
        if self.sharp and not self.SHARP_FABRIC:
            raise ConfigError("topology: sharp=true needs a switched InfiniBand fabric of nodes (leaf-spine, rail, "
                              "fat-tree): SHARP reduces in those switches")
        if self.nics_per_node < 0 or (self.gpus_per_node % self.nics and self.nics % self.gpus_per_node):
            raise ConfigError(f"topology: nics_per_node must divide gpus_per_node ({self.gpus_per_node}) or be a "
                              f"multiple, got {self.nics_per_node}")
        if self.nvlink_domain < 0:
            raise ConfigError(f"topology: nvlink_domain must be >= 0 (0: the GPU kind's), got {self.nvlink_domain}")
        domain = self.nvlink_domain or get_gpu(self.gpu).nvlink_domain
        if self.gpus_per_node > domain:  # else the more GPUs NVLink joined, the faster it ran
            raise ConfigError(f"topology: {self.gpus_per_node} GPUs on one NVLink fabric, but one of {self.gpu} joins "
                              f"{domain} (give nodes of at most {domain}: leaf-spine, rail or fat-tree; or "
                              "nvlink_domain=N where the hardware joins N)")
        if gpus > MAX_GPUS:  # before any per-GPU link is allocated
            raise ConfigError(f"topology: {gpus:,} GPUs is above the limit of {MAX_GPUS:,} GPUs in a topology")
        if not all(0 < e <= 1 for e in (self.nvlink_efficiency, self.nic_efficiency, self.copy_efficiency)):
            raise ConfigError("topology: nvlink_efficiency, nic_efficiency and copy_efficiency must be in (0, 1]")
        get_gpu(self.gpu)

    def _node_links(self, gpus: int) -> tuple[list[str], list[str], list[float], list[float]]:
        nvl = get_gpu(self.gpu).nvlink_gbps / 2 * 1e9 * self.nvlink_efficiency  # per direction
        nic = self.nic_bytes_per_s
        names, kinds, cap, lat = [], [], [], []
        # a NIC's links sit in the slot of the first GPU that uses it; a slot without a NIC has none (no capacity)
        owner = (self.nic_of(np.arange(gpus)) == np.arange(gpus)).tolist()
        for label, kind, c, hop in (("nvl_up", "nvlink", nvl, NVLINK_HOP_S), ("nvl_down", "nvlink", nvl, NVLINK_HOP_S),
                                    ("nic_up", "nic", nic, NETWORK_HOP_S), ("nic_down", "nic", nic, 0.0)):
            names += [f"gpu{g}/{label}" for g in range(gpus)]
            if kind == "nic":
                kinds += [kind if o else "none" for o in owner]
                cap += [c if o else 0.0 for o in owner]
            else:
                kinds += [kind] * gpus
                cap += [c] * gpus
            lat += [hop] * gpus
        return names, kinds, cap, lat

    def links(self) -> Links:
        """The node links plus the topology's own (``_network``), built once."""
        if self._links is None:
            self._check(self.gpus)  # type: ignore[attr-defined]  # the topology class defines it
            self._links = self._finish(self.gpus, self._network())  # type: ignore[attr-defined]  # the topology class defines both
        return self._links

    def _network(self) -> list[tuple[str, str, float, float]]:
        """The topology's links beyond the nodes: (name, kind, bytes/s, latency s); none by default."""
        return []

    def _finish(self, gpus: int, extra: list[tuple[str, str, float, float]]) -> Links:
        names, kinds, cap, lat = self._node_links(gpus)
        for n, k, c, lt in extra:
            names.append(n)
            kinds.append(k)
            cap.append(c)
            lat.append(lt)
        return Links(names, np.array(kinds), np.array(cap, dtype=np.float64), np.array(lat, dtype=np.float64))

    def _local(self, src: np.ndarray, dst: np.ndarray, gpus: int) -> np.ndarray:
        """Two-hop NVLink paths (the rows where source and destination share a node)."""
        return np.stack([src, gpus + dst], axis=1)
