"""What ``rltrace advise`` says about each design: how its search ended, its bottleneck, and why it lost.

Every design ends in exactly one outcome (:data:`OUTCOMES`): it *met* the target (at the fewest GPUs that do),
was *priced out* (at the next GPU count its price floor is above the ``top``-th cheapest design that met the
target, so it cannot be among those listed), went *over budget*, *missed the target* at the most GPUs tried
(replayed there, or ruled out by its trainer bound without a replay), or *failed* (a replay's error).

Bottleneck, from the replay's phase breakdown (``metrics.json``'s ``phases_s_per_step``) against its mean step
time: *sync-bound* when weight syncs take at least :data:`SHARE` of a step, *switch-bound* when a colocated
engine's role switches (sleep, refit, wake) do; otherwise *trainer-bound* when the trainers are busy (every trainer
phase: log-prob passes, update, optimizer) for at least :data:`SHARE` of a step, else *generation-bound*: the
trainers wait for samples longer than they train. For a synchronous scheduler that is the larger of a step's two
halves; under an asynchronous one, whether the trainers or the generators pace it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MET, PRICED_OUT, OVER_BUDGET, MISSED, FAILED = "met", "priced out", "over budget", "missed the target", "failed"
OUTCOMES = (MET, PRICED_OUT, OVER_BUDGET, MISSED, FAILED)
"""how a design's search ends, one each"""

SYNC_SHARE = 0.25
"""a step share of weight syncs (or role switches) that makes them the bottleneck: a quarter of every step spent
moving weights is worth a better fabric before more GPUs"""
SHARE = 0.5
"""the trainers' busy share of a step above which they, not generation, pace the run"""
SWITCHES = ("switch", "sleep", "refit", "wake")
"""phases_s_per_step keys of a colocated engine's role switches"""
NOT_TRAINER = ("generation", "reward", "weight_sync", *SWITCHES)
"""phases_s_per_step keys that are not the trainers' own work"""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one design's search stands: ``kind`` is "" while it is still open."""

    kind: str
    total: int
    """GPUs of the candidate that decided it (or that runs next, while open)"""
    row: dict[str, Any] | None = None
    """the replay at ``total`` (None: decided without one)"""
    last: dict[str, Any] | None = None
    """without a replay at ``total``: the design's replay at the most GPUs below it, if any"""
    floor: float | None = None
    """price floor at ``total`` (USD/h), when that decided it"""
    bound: float | None = None
    """trainer bound at ``total`` (samples/s), when that decided it"""
    error: str = ""
    """why it failed; for a miss, why the larger counts after it failed"""
    screened: int = 0
    """GPU counts the trainer bound ruled out for it without a replay"""
    nearest: tuple[float, int] = (0.0, 0)
    """(bound, GPUs) of the ruled-out count nearest the target"""


def bottleneck(row: dict[str, Any]) -> tuple[str, str]:
    """(kind, words) of a replay's bottleneck (module docstring), e.g. ("training", "trainer-bound: trainers busy
    62 s of each 70 s step"); ("", "") for a run that finished no step."""
    metrics = json.loads(row["metrics_json"]) if row.get("metrics_json") else {}
    phases = {k: v or 0.0 for k, v in (metrics.get("phases_s_per_step") or {}).items()}
    step = (metrics.get("step_time_s") or {}).get("mean") or row.get("step_time_s") or 0.0
    if not phases or step <= 0:
        return "", ""
    sync = phases.get("weight_sync", 0.0)
    switches = sum(phases.get(k, 0.0) for k in SWITCHES)
    trainer = sum(v for k, v in phases.items() if k not in NOT_TRAINER)
    of = f"of each {step:.3g} s step"
    if sync >= SYNC_SHARE * step:
        return "weight sync", f"sync-bound: weight syncs {sync:.3g} s {of}"
    if switches >= SYNC_SHARE * step:
        return "role switches", f"switch-bound: role switches {switches:.3g} s {of}"
    if trainer >= SHARE * step:
        return "training", f"trainer-bound: trainers busy {trainer:.3g} s {of}"
    return "generation", f"generation-bound: trainers wait {max(step - trainer - switches, 0.0):.3g} s {of} for samples"


def why(outcome: Outcome, *, cheapest: float | None, cutoff: float | None, top: int, budget: float | None) -> str:
    """Why a design is where it is (the outcome, in words), then the bottleneck of the replay that shows it."""
    shown = outcome.row or outcome.last
    _, words = bottleneck(shown) if shown is not None else ("", "")
    if shown is not None and shown is not outcome.row and words:
        words = f"at {shown['gpus']} GPUs {words}"
    at = f"at {outcome.total} GPUs"
    if outcome.kind == MET:
        assert outcome.row is not None
        extra = outcome.row["usd_per_hour"] - (cheapest if cheapest is not None else outcome.row["usd_per_hour"])
        head = f"+${extra:.2f}/h" if extra > 0.005 else ""
    elif outcome.kind == PRICED_OUT:
        rank = "the cheapest" if top == 1 else f"the {_ordinal(top)} cheapest"
        head = f"priced out {at}: at least ${outcome.floor:.2f}/h, above {rank} that met the target (${cutoff:.2f}/h)"
    elif outcome.kind == OVER_BUDGET:
        billed = outcome.row["usd_per_hour"] if outcome.row is not None else outcome.floor
        head = f"over budget {at}: {'' if outcome.row is not None else 'at least '}${billed:.2f}/h > ${budget:g}/h"
    elif outcome.kind == MISSED:
        head = (f"missed the target {at}, " + (outcome.error or "the most tried") if outcome.row is not None else
                f"missed the target {at}, the most tried: its trainers allow at most {outcome.bound:.3g} "
                "samples/s (not replayed)")
    else:
        head = f"failed: {outcome.error}"
    return "; ".join(part for part in (head, words) if part)


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def counts(kinds: list[str], shown: int) -> dict[str, int]:
    """How many designs ended each way, the ``shown`` winners apart: ``listed``, then each of :data:`OUTCOMES`
    (``met`` counts the winners not listed). The values add up to the number of designs."""
    out = {"listed": shown, **{k: 0 for k in OUTCOMES}}
    for kind in kinds:
        out[kind] += 1
    out[MET] -= shown
    return out
