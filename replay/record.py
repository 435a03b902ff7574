"""What a replay leaves behind: the run record that metrics, the timeline and reports read.

The simulator fills one :class:`RunRecord` as it runs (pool allocations, timeline spans, consumed batches,
step ends, the scheduler's extra metrics) and hands it over when the run ends; nothing downstream reads the
simulator itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from rltrace.replay.cluster import Cluster
from rltrace.replay.entities.instance import GenerationInstance
from rltrace.replay.entities.requests import Requests
from rltrace.replay.entities.resource import Resource
from rltrace.replay.job import Job

Segment = tuple[str, str, int, int, float, float, int]
"""a timeline row besides the requests: (resource, kind, step, id, start_s, end_s, job); job -1: no one job's
(an instance's busy span, a switch no job asked for)"""


@dataclass(slots=True)
class PoolUse:
    """GPUs a pool holds from ``start_s`` on (a new entry when the scheduler resizes it)."""

    pool: str
    gpu: str
    gpus: int
    start_s: float
    billed: bool


@dataclass(slots=True)
class RunRecord:
    """Everything a run recorded, for metrics (:mod:`.metrics`) and reports."""

    requests: Requests
    """every request with its final state and times (spawned ones included)"""
    jobs: list[Job]
    cluster: Cluster
    instances: list[GenerationInstance] = field(default_factory=list)
    """every instance ever added, retired ones too (the timeline names them)"""
    resources: dict[str, Resource] = field(default_factory=dict)
    pools: list[PoolUse] = field(default_factory=list)
    """allocations in time order (a resize or a release is a new entry)"""
    segments: list[Segment] = field(default_factory=list)
    consumed: list[tuple[int, int, np.ndarray, np.ndarray]] = field(default_factory=list)
    """per training step: (job, train step, requests, their staleness in versions)"""
    step_end_s: dict[tuple[int, int], float] = field(default_factory=dict)
    """(job, step) -> when the step ended"""
    extra: dict[str, float] = field(default_factory=dict)
    """metrics a scheduler adds (names of its choosing)"""
    declared: dict[str, float] = field(default_factory=dict)
    """what the view handed out that no real system has (``oracle``, a ranker's ``ranker_recall``): reported in
    the metrics' ``extra`` beside the scheduler's own, where the scheduler cannot change or remove it"""
    events: int = 0
    """events the loop fired"""
    colocated: bool = False
    """the scheduler ran every GPU in both roles (a described job's trainer then runs on the whole cluster)"""
    event_log: list[tuple[float, int, int, str, str]] | None = None
    """(time_s, priority, seq, target, event) of every event fired, when the run kept it"""
