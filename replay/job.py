"""A job: one RL training run's replayable work (its requests and per-step training-side durations).

Schedulers read jobs; they never see bundles. Several jobs can share pools (RollMux), each with its own
generation cost model and step durations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rltrace.replay.cluster import Cluster
from rltrace.replay.costmodels.generation import GenerationCost
from rltrace.replay.costmodels.training import AllToAll

from rltrace.calibration import CALIBRATION, CostCalibration


@dataclass(frozen=True, kw_only=True, slots=True)
class Colocated:
    """A described job's trainer time and role switches when every GPU of the cluster trains (colocated
    schedulers), where the job's own lists are priced on the training pool alone."""

    trainer_s: list[float]
    """per step: what :meth:`Job.trainer_seconds` gives, on the whole cluster"""
    to_train_s: float
    """the engine's sleep and the training state's way in"""
    to_generate_s: float
    """the refit, the engine's wake and the training state's way out"""
    gpus: int
    """the whole cluster's GPUs: a colocated run's pool (the disaggregated pools may not sum to it: 8 GPUs in
    instances of 8 have no generation and training split)"""
    phases: dict[str, float] = field(default_factory=dict)
    """the switches' parts (sleep, refit, wake), seconds each"""
    alltoall_bytes: list[float] | None = None
    """per step: the bytes each GPU sends in expert all-to-alls when the whole cluster trains (what a colocated run
    reports, in place of :attr:`Job.alltoalls`' volume)"""
    trainer_phases: list[dict[str, float]] | None = None
    """per step: the trainer-side phases whose sum is :attr:`trainer_s` (as :attr:`Job.phases`, on the whole
    cluster)"""


@dataclass(kw_only=True, slots=True)
class Job:
    """Requests ``first[s]`` .. ``first[s + 1] - 1`` belong to step ``s``; per-step lists are indexed by step."""

    id: int
    name: str
    first: list[int]
    generation: GenerationCost
    train_s: list[float]
    """forward and backward of the step's samples"""
    forward_s: list[float]
    """forward-only passes (reference, old log-probabilities)"""
    optimizer_s: list[float]
    sync_s: list[float]
    reward_s: list[float]
    other_s: list[float]
    """measured step time no phase accounts for (data movement, host work); 0 unless replaying a recording"""
    engine: list[int] | None = None
    """recorded engine index per request (as-recorded replays), None when retargeted"""
    engines: int = 1
    """recorded generation instances"""
    arrival_s: float = 0.0
    sync_bytes: list[float] | None = None
    """bytes of the model copy each step's sync delivers to every generator (for a network model)"""
    collective_bytes: list[float] | None = None
    """bytes each training rank puts into collectives per step (for a network model; None: unknown)"""
    alltoalls: list[tuple[AllToAll, ...] | None] | None = None
    """the modelled expert-parallel all-to-alls inside each step's trainer time (an MoE with ``cost.train_ep`` > 1,
    or a described job's EP; a network model re-times them); None, for the job or a step: none modelled (EP 1, or a
    measured trainer span, which holds the recorded job's own)"""
    alltoall_bytes: list[float] | None = None
    """per step, the bytes each trainer rank sends in expert all-to-alls that its trainer time already holds and no
    network model re-times (a described job whose training pool cannot run its layout, which takes the whole
    cluster's trainer time scaled: :meth:`~rltrace.replay.described.rlstep.StepModel.alltoall_bytes`): reported
    where ``alltoalls`` is None; None: none"""
    sync_tensors: int = 1
    max_new_tokens: int | None = None
    """the generation length cap, known before any response is (None: the source records none)"""
    heads: list[list[int]] | None = None
    """multi-turn jobs: per step, the first turns of its trajectories (None: every request is single-turn)"""
    extra: dict[str, float] = field(default_factory=dict)
    phases: list[dict[str, float]] | None = None
    """a described job's trainer-side phases per step (old_logprob, reference, critic, train, optimizer; reward
    apart), whose sum is :meth:`trainer_seconds`; None: not broken down (a recording's spans)"""
    colocated: Colocated | None = None
    """a described job's costs when the whole cluster trains (None: the colocated schedulers' own defaults)"""
    step_tokens: list[float] | None = None
    """per step: the prompt plus output tokens its trainer time was measured or priced on, known when the replay is
    prepared (None: the simulator sums the step's requests before the run starts)"""
    cluster: Cluster | None = None
    """a job list's job: its own pools, which its costs were priced on (None: the replay's cluster)"""
    calibration: CostCalibration = CALIBRATION
    """the constants its costs were priced with, which the schedulers' switch costs take too"""

    @property
    def steps(self) -> int:
        return len(self.first) - 1

    def requests(self, step: int) -> range:
        return range(self.first[step], self.first[step + 1])

    def starts(self, step: int) -> range | list[int]:
        """What a scheduler submits to start ``step``: every request, or the first turn of every trajectory
        (the engine submits later turns as their environment work ends)."""
        return self.requests(step) if self.heads is None else self.heads[step]

    def trainer_seconds(self, step: int) -> float:
        """Everything the trainers do for ``step`` after its samples are in: forward-only, train, optimizer."""
        return self.forward_s[step] + self.train_s[step] + self.optimizer_s[step]

    def colocated_trainer_seconds(self, step: int, cluster: Cluster) -> float:
        """:meth:`trainer_seconds` when every GPU of its pools trains (a colocating scheduler; the job's own
        :attr:`cluster`, else ``cluster``): a described job's own (:attr:`colocated`), else the training pool's time
        scaled by that pool's share of the GPUs, as a recording's measured times scale with the GPU count (its
        communication with them, a network model's re-timed collectives included). One answer for every split of
        the same GPUs."""
        if self.colocated is not None:
            return self.colocated.trainer_s[step]
        pools = self.cluster or cluster
        return self.trainer_seconds(step) * pools.train_gpus / (pools.gen_gpus + pools.train_gpus)
