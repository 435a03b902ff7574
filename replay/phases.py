"""Seconds per step by phase, from a run's timeline: what ``metrics.json``'s ``phases_s_per_step`` holds.

``generation`` is a step's first request start to its last finish; ``reward``, ``weight_sync`` and ``switch`` the
step's spans of that kind; the trainer's span is split into the phases a described job prices
(``Job.phases``: old-policy and reference log-probs, critic, policy update, optimizer steps) and a colocated
switch into the engine's sleep, the refit and its wake (``Job.colocated``), in the proportions the job gives.
A recording's trainer span is one phase, ``train``. Phases run in parallel under an asynchronous scheduler, so they
need not add up to the step time. Means over every step of every job.
"""

from __future__ import annotations

import polars as pl
from rltrace.replay.job import Job

GENERATION_KINDS = ("request", "preempted", "aborted", "migrated", "dropped")


def _shares(parts: list[dict[str, float]]) -> dict[str, float]:
    """Each key's share of the parts' total, summed over steps."""
    totals: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            totals[key] = totals.get(key, 0.0) + value
    whole = sum(totals.values())
    return {k: v / whole for k, v in totals.items()} if whole > 0 else {}


def phase_breakdown(timeline: pl.DataFrame, jobs: list[Job], *, colocated: bool = False) -> dict[str, float]:
    """Mean seconds per step of each phase (see the module text; a ``colocated`` run's trainer in the proportions of
    the whole cluster's phases); empty for a run that finished no step."""
    steps = timeline.filter(pl.col("step") >= 0).select(pl.struct("job", "step").n_unique()).item()
    if not steps:
        return {}
    # groups in a fixed order: a float sum in another order differs in its last bits (runs must match exactly)
    gen = (timeline.filter(pl.col("kind").is_in(GENERATION_KINDS)).group_by("job", "step", maintain_order=True)
           .agg((pl.col("end_s").max() - pl.col("start_s").min()).alias("s")).sort("job", "step"))
    out = {"generation": float(gen["s"].sum()) / steps}
    spans = (timeline.filter(pl.col("kind").is_in(["reward", "train", "switch", "weight_sync"]))
             .group_by("kind", maintain_order=True).agg((pl.col("end_s") - pl.col("start_s")).sum().alias("s")))
    per_kind = {k: float(s) / steps for k, s in spans.iter_rows()}
    out["reward"] = per_kind.get("reward", 0.0)
    trainer = _shares([p for job in jobs for p in ((job.colocated.trainer_phases if colocated and job.colocated
                                                    else None) or job.phases or [])])
    for phase, share in (trainer or {"train": 1.0}).items():
        out[phase] = per_kind.get("train", 0.0) * share
    if "switch" in per_kind:
        # a colocated run's switches are its sleep, refit and wake; another scheduler's (OrchestrRL regrouping its
        # instances) are switches of its own
        switch = _shares([job.colocated.phases for job in jobs if job.colocated is not None]) if colocated else None
        for phase, share in (switch or {"switch": 1.0}).items():
            out[phase] = per_kind["switch"] * share
    out["weight_sync"] = per_kind.get("weight_sync", 0.0)
    return out
