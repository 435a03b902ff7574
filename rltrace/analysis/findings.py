"""What a diagnosis finds: one row per finding, and the shared pieces its detectors use.

A finding names what is wrong (``kind``, ``phase``, the ``rank`` and generation ``instance`` as the bundle names
them), what it costs (``lost_s_per_step``: seconds each step loses to it), the evidence it was read from, what
to change, and, where a what-if replay prices the change, the step time it gains there (point estimate and 90% range
over the replay's bootstrap replicates). Detectors (``stragglers``, ``transfers``, ``capacity``, ``idle``, ``expected``)
each return :class:`Finding` objects; :mod:`rltrace.analysis.diagnose` prices and ranks them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import polars as pl

KINDS = ("straggler", "slow_transfer", "slow_phase", "bubble", "config")
"""every kind a finding can have"""
SCHEMA: dict[str, pl.DataType] = {
    "kind": pl.String(), "phase": pl.String(), "rank": pl.Int32(), "instance": pl.String(),
    "lost_s_per_step": pl.Float64(), "evidence": pl.String(), "fix": pl.String(),
    "gain_s_per_step": pl.Float64(), "gain_p05_s_per_step": pl.Float64(), "gain_p95_s_per_step": pl.Float64(),
    "gain_replay": pl.String(),
}
"""the findings frame's columns: ``gain_*`` are null where no replay priced the fix"""
WARMUP_STEPS = 1
"""the first step carries one-time start-up (vLLM's first requests, the first optimizer step's allocations):
per-step figures leave it out when more than two steps were recorded"""
MIN_LOST_S = 0.01
"""a finding costs at least this much per step: below it, timer and scheduling noise"""
MIN_LOST_SHARE = 0.02
"""... and at least this share of the mean step time"""


@dataclass(frozen=True, kw_only=True, slots=True)
class WhatIf:
    """A change a replay can price (:mod:`rltrace.analysis.whatif`): the recording replayed under ``scheduler``
    with ``train_less_s`` taken off each step's training, ``sync_less_s`` off each weight sync, its engines'
    running batch uncapped (``uncap``; ``max_seqs`` where the replay needs a number) or another pool split."""

    label: str
    """the change in words, shown beside the gain"""
    scheduler: str = "as-recorded"
    uncap: bool = False
    max_seqs: int | None = None
    gen_gpus: int | None = None
    train_gpus: int | None = None
    train_less_s: dict[int, float] = field(default_factory=dict)
    """recorded step -> seconds off its training"""
    sync_less_s: dict[int, float] = field(default_factory=dict)
    """recorded step -> seconds off its weight sync"""


@dataclass(kw_only=True, slots=True)
class Finding:
    """One finding (see the module text); ``whatif`` is the replay that prices its fix, if one can."""

    kind: str
    phase: str
    lost_s_per_step: float
    evidence: str
    fix: str
    rank: int | None = None
    instance: str | None = None
    whatif: WhatIf | None = None
    lost_from_gain: bool = False
    """the cost is the priced gain itself (a bubble or a capacity limit has no other measure of it)"""
    gain: tuple[float, float, float] | None = None
    """median, 5% and 95% quantiles of the replayed gain, seconds per step"""

    def row(self) -> dict[str, object]:
        """The finding as a row of :data:`SCHEMA`."""
        median, low, high = self.gain if self.gain is not None else (None, None, None)
        return {"kind": self.kind, "phase": self.phase, "rank": self.rank, "instance": self.instance,
                "lost_s_per_step": self.lost_s_per_step, "evidence": self.evidence, "fix": self.fix,
                "gain_s_per_step": median, "gain_p05_s_per_step": low, "gain_p95_s_per_step": high,
                "gain_replay": self.whatif.label if self.whatif is not None and self.gain is not None else None}


def ranked(findings: list[Finding]) -> list[Finding]:
    """Most seconds per step first (ties in a fixed order)."""
    return sorted(findings, key=lambda f: (-f.lost_s_per_step, f.kind, f.phase, f.rank or -1, f.instance or ""))


def frame(findings: list[Finding]) -> pl.DataFrame:
    """Findings as a DataFrame of :data:`SCHEMA`, most seconds per step first."""
    return pl.DataFrame([f.row() for f in ranked(findings)], schema=SCHEMA, orient="row")


@dataclass(frozen=True, slots=True)
class Context:
    """What every detector shares: the steps to judge (the steady ones) and the mean measured step time."""

    steps: tuple[int, ...]
    step_s: float

    def floor(self) -> float:
        """The smallest cost per step worth a finding."""
        return max(MIN_LOST_S, MIN_LOST_SHARE * self.step_s)


def steady_steps(steps: list[int]) -> tuple[int, ...]:
    """The steps to judge: all but the first ``WARMUP_STEPS`` when more than two were recorded."""
    ordered = sorted(set(steps))
    return tuple(ordered[WARMUP_STEPS:] if len(ordered) > WARMUP_STEPS + 1 else ordered)


_RANK = re.compile(r"rank(\d+)$")


def rank_of(actor: str) -> int | None:
    """The global rank an actor name carries (``trainer/rank1`` -> 1), else None."""
    hit = _RANK.search(actor)
    return int(hit.group(1)) if hit else None


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as sorted, disjoint intervals."""
    if not len(starts):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.concatenate([[True], s[1:] > reach[:-1]])
    return s[new], np.maximum.reduceat(e, np.flatnonzero(new))


def covered(starts: np.ndarray, ends: np.ndarray, iv_starts: np.ndarray, iv_ends: np.ndarray) -> np.ndarray:
    """For each interval [starts[i], ends[i]], how much of it the intervals ``iv_*`` cover (their union)."""
    us, ue = union(iv_starts, iv_ends)
    if not len(us):
        return np.zeros(len(starts), dtype=np.float64)
    # covered length of [-inf, t] as a piecewise-linear function: cumulative lengths at each interval's start
    before = np.concatenate([[0.0], np.cumsum((ue - us).astype(np.float64))])

    def upto(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(us, t, side="right")  # intervals starting at or before t
        inside = np.where(i > 0, np.clip(t - us[np.maximum(i - 1, 0)], 0, (ue - us)[np.maximum(i - 1, 0)]), 0)
        return np.asarray(before[np.maximum(i - 1, 0)] * (i > 0) + inside, dtype=np.float64)

    return np.asarray(upto(ends) - upto(starts), dtype=np.float64)


def seconds(ns: float) -> str:
    """A duration for a sentence: 0.213 s, 12.4 ms, 850 us."""
    s = ns / 1e9
    if abs(s) >= 1:
        return f"{s:.2f} s"
    if abs(s) >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} us"


def rate(bytes_per_s: float) -> str:
    """A bandwidth for a sentence: 1.24 GB/s, 310 MB/s."""
    if bytes_per_s >= 1e9:
        return f"{bytes_per_s / 1e9:.3g} GB/s"
    return f"{bytes_per_s / 1e6:.3g} MB/s"


def size(n: float) -> str:
    """Bytes for a sentence: 1.8 MB, 3.2 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"
