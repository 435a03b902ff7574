"""Fidelity: how close a replay comes to the measured step time of a real recording.

``as_recorded_error`` replays a bundle as it was recorded; ``retarget_error`` replays bundle A reshaped to
bundle B's batch (prompts and samples per prompt, steps) and holds it against B's measurement. Both
compare mean step time over the steady steps: step 0 of a recording carries one-time start-up (vLLM's
first-request compilation and allocation) that no steady-state model reproduces, so the first step of each
side is left out.

A and B may also be two sets of steps of one recording that alternates two settings step by step
(``settings`` finds them): interleaved, both settings see the same machine, so a drift in the machine's
speed between two separate recordings does not count against the replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl
from rltrace.replay.run import CostConfig, ReplayConfig, Shape, from_bundle, replay
from rltrace.replay.workload import WARMUP_STEPS, extract, renumber_steps

from rltrace.bundle import Bundle


@dataclass(frozen=True, slots=True)
class Fidelity:
    measured_s: float
    """mean measured step time over the steady steps"""
    replayed_s: float
    """mean replayed step time over the same steps"""
    notes: list[str]

    @property
    def error(self) -> float:
        """(replayed - measured) / measured"""
        return self.replayed_s / self.measured_s - 1


def settings(bundle: Bundle) -> dict[int, tuple[int, ...]]:
    """The recorded steps by their number of samples, smallest setting first."""
    per_step = extract(bundle).steps.group_by("samples").agg(pl.col("step").sort()).sort("samples")
    return {int(k): tuple(v) for k, v in zip(per_step["samples"], per_step["step"])}


def _measured(bundle: Bundle, steps: Sequence[int] | None) -> float:
    recorded = extract(bundle).steps
    if steps is not None:
        recorded = renumber_steps(recorded, steps).sort("step")
    return float(recorded["wall_s"][WARMUP_STEPS:].mean())


def _replayed(bundle: Bundle, shape: Shape, cost: CostConfig) -> tuple[float, list[str]]:
    prepared = from_bundle(bundle, shape, cost)
    steps = replay(prepared, "as-recorded", ReplayConfig()).steps
    assert steps is not None
    return float(steps["step_time_s"][WARMUP_STEPS:].mean()), prepared.notes


def _tuple(steps: Sequence[int] | None) -> tuple[int, ...] | None:
    return None if steps is None else tuple(steps)


def as_recorded_error(bundle: Bundle, cost: CostConfig | None = None, *,
                      steps: Sequence[int] | None = None) -> Fidelity:
    """Replay ``bundle`` (only its recorded ``steps`` when given) on its own layout and timings; compare mean
    steady step time."""
    replayed, notes = _replayed(bundle, Shape(source_steps=_tuple(steps)), cost or CostConfig())
    return Fidelity(_measured(bundle, steps), replayed, notes)


def retarget_error(source: Bundle, target: Bundle, cost: CostConfig | None = None, *,
                   source_steps: Sequence[int] | None = None, target_steps: Sequence[int] | None = None) -> Fidelity:
    """Replay ``source`` reshaped to ``target``'s batch shape; compare with ``target``'s measured step time.
    ``source_steps`` and ``target_steps`` restrict either side to some of its recorded steps."""
    rl = extract(target).samples
    if target_steps is not None:
        rl = renumber_steps(rl, target_steps)
    groups = rl.group_by("step", "group").len()
    shape = Shape(steps=rl["step"].n_unique(), prompts_per_step=int(groups.group_by("step").len()["len"].median()),
                  samples_per_prompt=int(groups["len"].median()), source_steps=_tuple(source_steps))
    replayed, notes = _replayed(source, shape, cost or CostConfig())
    return Fidelity(_measured(target, target_steps), replayed, notes)
