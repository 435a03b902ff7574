"""A scheduler's window on the world: what a real RL system could know at the moment it decides.

The simulator hands every scheduler a :class:`View`, never itself. Through it a scheduler drives the engine
(the same verbs: submit, abort, migrate, work, timers, pools) and reads requests through
:class:`RequestView`, where a request's output length (and its finish time, and whether its trajectory goes
on) is known only once the request has finished, as in a real system: reading it earlier raises
:class:`LengthUnknown`. What a policy needs to know before then comes from a predictor
(:mod:`.predict`) with a stated accuracy, or, only when a run asks for it, from :meth:`View.oracle`, which
marks the run's metrics (``extra.oracle = 1``) so no reader mistakes an upper bound for a reachable result.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

import numpy as np
from rltrace.replay.entities.requests import State
from rltrace.replay.schedulers.predict import LongTailRanker, Oracle

if TYPE_CHECKING:  # (the simulator imports this module when a run starts: no import cycle at runtime)
    from rltrace.replay.cluster import Cluster
    from rltrace.replay.entities.instance import GenerationInstance
    from rltrace.replay.entities.resource import Resource
    from rltrace.replay.job import Job
    from rltrace.replay.simulator import Simulator

FINISHED, RUNNING, WAITING = int(State.FINISHED), int(State.RUNNING), int(State.WAITING)
T = TypeVar("T")


class LengthUnknown(LookupError):
    """A scheduler read what only a finished request reveals (its output length) before it finished."""


class _Revealed(Generic[T]):
    """A per-request column readable only for requests finished by now (a planned drain writes finishes
    ahead of time: those are still in the future)."""

    __slots__ = ("_finish", "_sim", "_state", "_values", "_what")

    def __init__(self, values: list[T], sim: Simulator, what: str) -> None:
        self._values, self._sim, self._what = values, sim, what
        self._state, self._finish = sim.requests.state, sim.requests.finish_s

    def __getitem__(self, rid: int) -> T:
        if self._state[rid] != FINISHED or not self._finish[rid] <= self._sim.now:
            raise LengthUnknown(f"request {rid} has not finished: its {self._what} is unknown until it does "
                                "(a policy predicts it: see rltrace.replay.schedulers.predict)")
        return self._values[rid]

    def __len__(self) -> int:
        return len(self._values)


class _States:
    """Request states as of now: a request a planned drain marked finished ahead of time reads as running, or
    waiting if its planned admission is still to come, as does one admitted at the end of an instance's switch."""

    __slots__ = ("_admitted", "_finish", "_sim", "_state")

    def __init__(self, sim: Simulator) -> None:
        req = sim.requests
        self._sim, self._state, self._finish, self._admitted = sim, req.state, req.finish_s, req.admitted_s

    def __getitem__(self, rid: int) -> int:
        s, now = self._state[rid], self._sim.now
        if s == FINISHED and not self._finish[rid] <= now:
            return RUNNING if self._admitted[rid] <= now else WAITING
        if s == RUNNING and self._admitted[rid] > now:
            return WAITING
        return s

    def __len__(self) -> int:
        return len(self._state)


class RequestView:
    """Every request as a scheduler may see it: its job, step, prompt group and prompt tokens, where it is and
    what happened to it. ``output`` (tokens generated), ``finish_s`` and ``next_turn`` (whether the
    trajectory goes on) read only for finished requests; anything else raises :class:`LengthUnknown`."""

    __slots__ = ("_req", "aborts", "finish_s", "group", "instance", "job", "next_turn", "output", "preemptions",
                 "prompt", "state", "step", "version")

    def __init__(self, sim: Simulator) -> None:
        req = self._req = sim.requests
        # the engine's own lists (the same objects, so reads cost nothing); the guarded ones check each read
        self.job: Sequence[int] = req.job
        self.step: Sequence[int] = req.step
        self.group: Sequence[int] = req.group
        self.prompt: Sequence[int] = req.prompt
        self.instance: Sequence[int] = req.instance
        self.version: Sequence[int] = req.version
        self.preemptions: Sequence[int] = req.preemptions
        self.aborts: Sequence[int] = req.aborts
        self.state = _States(sim)
        self.output: _Revealed[int] = _Revealed(req.output, sim, "output length")
        self.finish_s: _Revealed[float] = _Revealed(req.finish_s, sim, "finish time")
        self.next_turn: _Revealed[int] = _Revealed(req.next_turn, sim, "next turn")

    @property
    def n(self) -> int:
        """Requests so far (spawned ones included)."""
        return self._req.n


class View:
    """What a scheduler gets from the simulator: the engine's verbs, the jobs, the cluster, the live
    instances and resources, and the requests as of now. See :mod:`rltrace.replay.simulator` for the verbs."""

    __slots__ = ("_sim", "abort", "add_instance", "add_resource", "allocate", "cluster", "consume",
                 "end_step", "extra", "instances", "jobs", "mark", "max_seqs", "migrate", "reconfigure", "release",
                 "requests", "requests_on", "resources", "retire", "set_version", "stop", "submit", "timer", "work")

    def __init__(self, sim: Simulator, *, several_jobs: bool = False) -> None:
        self._sim = sim
        self.jobs: list[Job] = sim.jobs if several_jobs else sim.jobs[:1]
        """the run's jobs; only the first for a scheduler whose capabilities do not include several jobs"""
        self.cluster: Cluster = sim.cluster
        self.max_seqs: int = sim.max_seqs
        self.instances: list[GenerationInstance] = sim.instances
        """live instances (the engine's list: it changes as instances are added and retired)"""
        self.resources: dict[str, Resource] = sim.resources
        self.extra: dict[str, float] = sim.record.extra
        """metrics the scheduler adds (names of its choosing)"""
        self.requests = RequestView(sim)
        # the verbs: the simulator's bound methods themselves (no call through a wrapper on the hot path)
        self.submit, self.abort, self.migrate, self.requests_on = sim.submit, sim.abort, sim.migrate, sim.requests_on
        self.allocate, self.release = sim.allocate, sim.release
        self.add_instance, self.retire = sim.add_instance, sim.retire
        self.reconfigure, self.set_version, self.add_resource = sim.reconfigure, sim.set_version, sim.add_resource
        self.work, self.timer, self.consume, self.end_step = sim.work, sim.timer, sim.consume, sim.end_step
        self.mark, self.stop = sim.mark, sim.stop

    @property
    def now(self) -> float:
        """The current simulated time, seconds."""
        return self._sim.now

    @property
    def quiet(self) -> bool:
        """See ``Simulator.quiet``: one "generated" notice per step instead of one per finished request."""
        return self._sim.quiet

    @quiet.setter
    def quiet(self, value: bool) -> None:
        self._sim.quiet = value

    @property
    def multi_turn(self) -> bool:
        """Some requests are turns of multi-turn trajectories."""
        return self._sim.multi_turn

    # ---- the workload's side: new responses, the trainer's time ----------------------------------------------

    def rerun(self, head: int, *, step: int, group: int) -> range:
        """A new response to recorded trajectory ``head``'s prompt, with that trajectory's lengths and
        environment times (the world decides how long an answer is, not the scheduler), as a response of
        ``step`` and prompt ``group``; returns its turns' ids, the first pending."""
        req, chain = self._sim.requests, [head]
        while req.next_turn[chain[-1]] >= 0:
            chain.append(req.next_turn[chain[-1]])
        return req.add(req.job[head], step, group, [req.prompt[r] for r in chain], [req.output[r] for r in chain],
                       [req.env_s[r] for r in chain])

    def train_seconds(self, job: Job, recorded_step: int, rids: Iterable[int]) -> float:
        """Trainer seconds for a batch of finished samples: the recorded step's measured trainer time scaled by
        the batch's prompt + output tokens over the tokens that time was measured on (fixed when the replay was
        prepared, so the answer says nothing of the step's unfinished requests)."""
        assert job.step_tokens is not None  # (set by the simulator before the run starts)
        tokens = sum(self.requests.prompt[r] + self.requests.output[r] for r in rids)
        return job.trainer_seconds(recorded_step) * tokens / max(job.step_tokens[recorded_step], 1)

    # ---- predictors ------------------------------------------------------------------------------------------

    def ranker(self, *, recall: float, seed: int) -> LongTailRanker:
        """A long-tail ranker of the stated ``recall`` (share of the true longest it marks); the run's metrics
        carry the recall (``extra.ranker_recall``)."""
        self._sim.record.declared["ranker_recall"] = recall
        return LongTailRanker(self._sim.requests.output, recall=recall, rng=np.random.default_rng(seed))

    def oracle(self) -> Oracle:
        """True output lengths of requests not yet generated: an upper bound no real system reaches. Only for a
        run that asks for it (``--set <scheduler>.oracle=true``); the run's metrics say so (``extra.oracle``)."""
        self._sim.record.declared["oracle"] = 1.0
        return Oracle(self._sim.requests.output)
