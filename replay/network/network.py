"""The network in a replay: weight syncs and training collectives routed through a topology.

``route`` places the generation GPUs first and the training GPUs after them (so a ``cross-dc`` topology with
``split`` = the generation nodes puts the pools in different datacenters), times each step's weight sync
with the chosen strategy and its training collectives on the training GPUs, and writes those times into
the jobs: the sync takes the network's time; training takes max(its compute time, the collectives' time)
(FSDP overlaps the two, so only a network slower than compute stretches the step). ``link_frame`` turns the
bytes each step put on each link into per-link utilisation over the replay's timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl
from rltrace.replay.costmodels.training import AllToAll
from rltrace.replay.job import Job
from rltrace.replay.network.collectives import collective
from rltrace.replay.network.cost import FabricPrices, fabric_cost
from rltrace.replay.network.protocols import P2P_LL_THRESHOLD_BYTES
from rltrace.replay.network.weight_sync import STRATEGIES, weight_sync
from rltrace.replay.topologies import Topology, TopologySpec

from rltrace.errors import ConfigError
from rltrace.scalars import number


@dataclass(frozen=True, kw_only=True, slots=True)
class NetworkConfig:
    topology: TopologySpec | None = None
    """a topology spec (``fat-tree:k=16,...``, read once into a TopologySpec; see docs/fabrics.md); None or
    empty: no network model (weight syncs take their measured time or one model copy over ``cost.sync_gbps``)"""
    sync_strategy: str = "bucketed"
    prices: FabricPrices = field(default_factory=FabricPrices)

    def __post_init__(self) -> None:
        if isinstance(self.topology, str):  # NetworkConfig(topology="rail:nodes=2") in code: read it here, once
            object.__setattr__(self, "topology", TopologySpec.from_config(self.topology, "network.topology"))
        if self.sync_strategy not in STRATEGIES:
            raise ConfigError(
                f"network.sync_strategy must be one of {', '.join(STRATEGIES)}, got {self.sync_strategy!r}"
            )


@dataclass(slots=True)
class Routed:
    """What the network did, per (job, step): seconds and bytes per link of the sync and the collectives."""

    topology: Topology
    sync_s: dict[tuple[int, int], float]
    collective_s: dict[tuple[int, int], float]
    sync_bytes: dict[tuple[int, int], np.ndarray]
    collective_bytes: dict[tuple[int, int], np.ndarray]
    reconfig_s: float
    cost: dict[str, float]
    alltoall_s: dict[tuple[int, int], float] = field(default_factory=dict)
    """each step's expert all-to-alls (an MoE trainer with ``cost.train_ep`` > 1, or a described job's EP), on the
    topology"""
    notes: list[str] = field(default_factory=list)
    """what a reader of the run should know about how the network was used"""


def route(jobs: list[Job], gen_gpus: int, train_gpus: int, config: NetworkConfig) -> Routed:
    """Time every job's weight syncs and training collectives on the topology; updates the jobs' times. Each job
    runs on ``gen_gpus`` + ``train_gpus``, or on its own pools where it has them (a job list's job,
    ``Job.cluster``): generators first, then trainers."""
    if config.topology is None:
        raise ConfigError("route: the network config names no topology")
    topo = config.topology.build()
    pools = [(job.cluster.gen_gpus, job.cluster.train_gpus) if job.cluster else (gen_gpus, train_gpus)
             for job in jobs] or [(gen_gpus, train_gpus)]
    need = max(pools, key=sum)
    if sum(need) > topo.gpus:
        raise ConfigError(f"topology '{config.topology}' has {topo.gpus} GPUs, the replay needs "
                          f"{need[0]} + {need[1]}")
    out = Routed(topo, {}, {}, {}, {}, 0.0, fabric_cost(topo, config.prices))
    for job, (gens, trains) in zip(jobs, pools):
        generators, trainers = np.arange(gens), gens + np.arange(trains)
        expert_alltoalls = _ExpertAllToAlls(topo, trainers, job)
        if expert_alltoalls.straddling and not out.notes:
            out.notes.append(f"expert-parallel groups of {expert_alltoalls.straddling[0]} cross nodes: the training "
                             f"GPUs start at GPU {gens}, inside a node of {topo.gpus_per_node} (a generation "
                             "pool of whole nodes keeps each group in one)")
        for step in range(job.steps):
            key = (job.id, step)
            nbytes = job.sync_bytes[step] if job.sync_bytes else 0.0
            if nbytes > 0:
                s = weight_sync(topo, config.sync_strategy, trainers, generators, nbytes, tensors=job.sync_tensors)
                out.sync_s[key], out.sync_bytes[key] = s.seconds, s.link_bytes
                out.reconfig_s += s.reconfig_s
                job.sync_s[step] = s.seconds
            # expert all-to-alls: not overlapped with compute, so each span takes the topology's time for them in
            # place of the built-in node's; the training pass's are added after FSDP's overlap below
            parts = job.alltoalls[step] if job.alltoalls else None
            expert_train = 0.0
            if parts:
                seconds, carried = expert_alltoalls(parts)
                out.alltoall_s[key] = sum(seconds.values())
                out.collective_bytes[key] = carried
                for p in parts:
                    if p.span == "forward":
                        job.forward_s[step] -= p.seconds
                    else:
                        job.train_s[step] -= p.seconds
                job.forward_s[step] += seconds.get("forward", 0.0)
                expert_train = seconds.get("train", 0.0)
            volume = job.collective_bytes[step] if job.collective_bytes else 0.0
            if volume > 0 and trains > 1:
                # the step's per-rank collective volume, timed as one ring all-gather over the training GPUs
                n = trains
                c = collective(topo, "all_gather", trainers, volume * n / (n - 1))  # NCCL's ring; one per NIC
                out.collective_s[key] = c.seconds
                out.collective_bytes[key] = out.collective_bytes.get(key, 0.0) + c.link_bytes
                out.reconfig_s += c.reconfig_s
                job.train_s[step] = max(job.train_s[step], c.seconds)
            job.train_s[step] += expert_train
    return out


class _ExpertAllToAlls:
    """A job's expert all-to-alls on the topology: consecutive training GPUs form the expert-parallel groups
    (Megatron's order), every group runs each call at once, and a call takes its slowest group. A collective's time
    is affine in its size while its protocol stays, so each group is timed at the smallest and largest size the job's
    steps send, and on both sides of point-to-point's LL threshold inside a node where the sizes cross it
    (P2P_LL_THRESHOLD_BYTES a peer: a few tokens a GPU); each step's size is drawn on those lines, and the bytes it
    puts on a link are proportional to the size. Timed on settled circuits: a reconfigurable fabric's circuit changes
    are its syncs' and collectives' (its state is restored after the timing runs)."""

    def __init__(self, topo: Topology, trainers: np.ndarray, job: Job) -> None:
        parts = [p for step in job.alltoalls or [] if step for p in step]
        self.links = len(topo.links())
        self.lines: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        circuits = getattr(topo, "circuits", None)
        saved = (circuits.copy(), getattr(topo, "reconfigurations", 0)) if circuits is not None else None
        self.straddling: list[int] = []
        for ranks in sorted({p.ranks for p in parts}):
            sizes = [p.size_bytes for p in parts if p.ranks == ranks]
            lo, hi = min(sizes), max(sizes)
            groups = trainers.reshape(-1, ranks)
            nodes = groups // topo.gpus_per_node
            if ranks <= topo.gpus_per_node and (nodes.min(axis=1) != nodes.max(axis=1)).any():
                self.straddling.append(ranks)  # the training pool starts mid-node
            ll_top = P2P_LL_THRESHOLD_BYTES * ranks  # the largest all-to-all that runs LL inside a node
            crossing = [ll_top, min(ll_top + 1.0, hi)] if lo <= ll_top < hi else []
            knots = sorted({float(lo), float(hi), *crossing})  # ascending, each once
            timed = [[collective(topo, "all_to_all", g, size) for size in knots] for g in groups]
            self.lines[ranks] = (np.array(knots, dtype=np.float64),
                                 np.array([[c.seconds - c.reconfig_s for c in g] for g in timed]),
                                 sum((g[-1].link_bytes for g in timed), np.zeros(self.links)) / max(hi, 1e-300))
        if saved is not None:
            topo.circuits, topo.reconfigurations = saved  # type: ignore[attr-defined]  # an RFabric's state

    def __call__(self, parts: tuple[AllToAll, ...]) -> tuple[dict[str, float], np.ndarray]:
        """Seconds of one step's all-to-alls on the topology, by the trainer span they sit in, and the bytes they
        put on each link."""
        seconds: dict[str, float] = {}
        carried = np.zeros(self.links)
        for p in parts:
            knots, times, per_byte = self.lines[p.ranks]
            slowest = float(_on_lines(p.size_bytes, knots, times).max())
            seconds[p.span] = seconds.get(p.span, 0.0) + p.calls * slowest * p.scale
            carried += p.calls * p.size_bytes * per_byte
        return seconds, carried


def _on_lines(size: float, knots: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Every group's time at ``size``, linear between the knots (sizes, ascending) it was timed at (``times``: one
    row per group); a size beyond them keeps the nearest segment's line."""
    if len(knots) == 1:
        return times[:, 0]
    i = int(np.clip(np.searchsorted(knots, size, side="right") - 1, 0, len(knots) - 2))
    share = min(max((size - knots[i]) / (knots[i + 1] - knots[i]), 0.0), 1.0)  # knots are distinct: no 0 / 0
    result: np.ndarray = times[:, i] + share * (times[:, i + 1] - times[:, i])
    return result


def link_frame(routed: Routed, timeline: pl.DataFrame) -> pl.DataFrame:
    """Per link and busy interval: bytes and utilisation (bytes / (capacity x duration)) of each job's weight
    syncs (during its "weight_sync" spans) and training collectives (during its "train" spans), by the spans'
    ``job``."""
    links = routed.topology.links()
    columns = ("link", "kind", "what", "job", "step", "start_s", "end_s", "bytes")
    rows: dict[str, list[object]] = {c: [] for c in columns}
    spans = (timeline.filter(pl.col("kind").is_in(["weight_sync", "train"]))
             .group_by("kind", "job", "step").agg(pl.col("start_s").min(), pl.col("end_s").max())
             .sort("job", "step", "kind"))
    for kind, job, step, start, end in spans.iter_rows():
        table = routed.sync_bytes if kind == "weight_sync" else routed.collective_bytes
        carried = table.get((job, step))
        if carried is None:
            continue
        used = np.flatnonzero(carried > 0)
        rows["link"] += [links.names[i] for i in used]
        rows["kind"] += links.kind[used].tolist()
        rows["what"] += [kind] * len(used)
        rows["job"] += [job] * len(used)
        rows["step"] += [step] * len(used)
        rows["start_s"] += [start] * len(used)
        rows["end_s"] += [end] * len(used)
        rows["bytes"] += carried[used].tolist()
    types = (pl.String, pl.String, pl.String, pl.Int32, pl.Int32, pl.Float64, pl.Float64, pl.Float64)
    frame = pl.DataFrame(rows, schema=dict(zip(columns, types, strict=True)))
    capacity = dict(zip(links.names, links.capacity_Bps.tolist()))
    return frame.with_columns(
        (pl.col("bytes") / (pl.col("link").replace_strict(capacity, return_dtype=pl.Float64)
                            * (pl.col("end_s") - pl.col("start_s")).clip(lower_bound=1e-12))).clip(upper_bound=1.0)
        .alias("utilization"))


def metrics(routed: Routed, links: pl.DataFrame, throughput: float, config: NetworkConfig) -> dict[str, object]:
    """The run's network figures (metrics.json key "network")."""
    capex = routed.cost["capex_usd"]
    return {
        "topology": str(config.topology),
        "sync_strategy": config.sync_strategy,
        "weight_sync_s": float(np.mean(list(routed.sync_s.values()))) if routed.sync_s else 0.0,
        "collective_s": float(np.mean(list(routed.collective_s.values()))) if routed.collective_s else 0.0,
        "expert_alltoall_s": float(np.mean(list(routed.alltoall_s.values()))) if routed.alltoall_s else 0.0,
        "reconfig_s": routed.reconfig_s,
        "max_link_utilization": number(links["utilization"].max()) if links.height else 0.0,
        "fabric": routed.cost,
        "samples_per_s_per_fabric_musd": throughput / (capex / 1e6) if capex > 0 else None,
    }
