"""Fidelity: how close a replay comes to the measured step time of a real recording.

``as_recorded_error`` replays a bundle as it was recorded; ``retarget_error`` replays bundle A reshaped to
bundle B's batch (prompts and samples per prompt, steps) and holds it against B's measurement. Both
compare mean step time over the steady steps: step 0 of a recording carries one-time start-up (vLLM's
first-request compilation and allocation) that no steady-state model reproduces, so it is left out of
both sides.
"""

from __future__ import annotations

from dataclasses import dataclass

from rltrace.replay.run import CostConfig, ReplayConfig, Shape, from_bundle, replay
from rltrace.replay.workload import extract

from rltrace.bundle import Bundle

WARMUP_STEPS = 1


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


def _measured(bundle: Bundle) -> float:
    wall = extract(bundle).steps["wall_s"]
    return float(wall[WARMUP_STEPS:].mean())


def _replayed(bundle: Bundle, shape: Shape, cost: CostConfig) -> tuple[float, list[str]]:
    prepared = from_bundle(bundle, shape, cost)
    steps = replay(prepared, "as-recorded", ReplayConfig()).steps
    assert steps is not None
    return float(steps["step_time_s"][WARMUP_STEPS:].mean()), prepared.notes


def as_recorded_error(bundle: Bundle, cost: CostConfig | None = None) -> Fidelity:
    """Replay ``bundle`` on its own layout and timings; compare mean steady step time."""
    replayed, notes = _replayed(bundle, Shape(), cost or CostConfig())
    return Fidelity(_measured(bundle), replayed, notes)


def retarget_error(source: Bundle, target: Bundle, cost: CostConfig | None = None) -> Fidelity:
    """Replay ``source`` reshaped to ``target``'s batch shape; compare with ``target``'s measured step time."""
    rl = extract(target).samples
    groups = rl.group_by("step", "group").len()
    shape = Shape(steps=rl["step"].n_unique(), prompts_per_step=int(groups.group_by("step").len()["len"].median()),
                  samples_per_prompt=int(groups["len"].median()))
    replayed, notes = _replayed(source, shape, cost or CostConfig())
    return Fidelity(_measured(target), replayed, notes)
