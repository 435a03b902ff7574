"""What-if replays: what a change to a recorded job gains, with the replay's spread.

A change (:class:`~rltrace.analysis.findings.WhatIf`) is priced as a paired difference: the recording replayed
as it ran (``as-recorded``), against the same recording replayed with the change (a rank's excess training time
or a sync's idle time taken off each step, an engine's running batch no longer capped, another scheduler or
pool split). The gain is the mean over the steady steps (the first, with its start-up, left out) of the
difference in step time. The point estimate uses the generation cost fitted to every recorded step; each
replicate draws the recorded steps with replacement (as ``rltrace replay`` does for its spread,
:mod:`rltrace.replay.uncertainty`), refits the generation cost on that draw for both sides and averages the
per-step differences over it, so the spread covers the machine's drift between steps and the steps' own
variation, not the change's alone.

**A capped engine.** A generation cost fitted to a recording's engine iterations
(:mod:`rltrace.replay.costmodels.iteration_fit`) replays a step as one admission wave and charges what the
recorded wave ran past its longest request as part of that wave's prefill: in a recording whose engine held
fewer requests than the step had, that is the queueing, so the as-recorded replay reproduces it at any
``max_num_seqs``. Uncapped, the wave is admitted once and runs no longer than its longest request: the change
replays with the fitted per-iteration cost and a single admission. A recording without engine iterations (its
cost fitted per request, or a roofline) replays at the recorded cap against the step's batch instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import polars as pl

from rltrace.analysis.findings import WhatIf
from rltrace.bundle import Bundle
from rltrace.replay.costmodels.generation import FittedGeneration
from rltrace.replay.costmodels.iteration_fit import IterationFit, fit_iterations, iteration_features
from rltrace.replay.loading import Shape, from_bundle
from rltrace.replay.run import CostConfig, Prepared, ReplayConfig, RunResult, replay
from rltrace.replay.uncertainty import bootstrap
from rltrace.replay.workload import WARMUP_STEPS, extract

Gain = tuple[float, float, float]
"""point estimate, 5% and 95% quantiles of a gain, seconds per step"""


class Pricer:
    """Replays of one bundle, cached by shape and bootstrap draw (draw -1: every step once, no resampling).
    ``cap``: the running batch the recording's engines were held to, if any (:mod:`.capacity`)."""

    def __init__(self, bundle: Bundle, cost: CostConfig | None = None, seed: int = 0, cap: int | None = None) -> None:
        self.bundle = bundle
        self.cost = cost or CostConfig()
        self.config = ReplayConfig()
        self.seed = seed
        self.cap = cap
        self.steps: list[int] = sorted(extract(bundle).steps["step"].to_list())
        self._prepared: dict[tuple[Shape, int], Prepared] = {}
        self._weights: dict[int, dict[int, float]] = {}
        self._fits: dict[int, IterationFit | None] = {}
        self._times: dict[tuple[Shape, int, str], np.ndarray] = {}
        self._work: dict[int, tuple[WhatIf, bool]] = {}
        """id of a what-if (kept alive beside it) -> whether its replay changed the work"""

    def weights(self, draw: int) -> dict[int, float] | None:
        """Recorded step -> its weight in bootstrap draw ``draw`` (None for draw -1: every step once)."""
        if draw < 0:
            return None
        if draw not in self._weights:
            self._weights[draw] = bootstrap(tuple(self.steps), np.random.default_rng([self.seed, draw]))
        return self._weights[draw]

    def prepared(self, shape: Shape, draw: int = -1) -> Prepared:
        """The bundle prepared for ``shape``, its generation cost fitted to bootstrap draw ``draw``."""
        key = (shape, draw)
        if key not in self._prepared:
            self._prepared[key] = from_bundle(self.bundle, shape, self.cost, step_weights=self.weights(draw))
        return self._prepared[key]

    def iteration_fit(self, draw: int = -1) -> IterationFit | None:
        """The per-iteration generation fit the replay uses at draw ``draw``; None when it uses another cost."""
        if draw not in self._fits:
            fitted = isinstance(self.prepared(Shape()).jobs[0].generation, FittedGeneration)  # whatever the draw
            iterations = self.bundle.iterations.collect()
            self._fits[draw] = fit_iterations(iteration_features(iterations, self.bundle.requests.collect()),
                                              self.weights(draw)) if fitted and iterations.height else None
        return self._fits[draw]

    @property
    def base_shape(self) -> Shape:
        """The as-recorded replay's shape: at the recorded cap unless the fit already holds its queueing."""
        return Shape(max_seqs=None if self.iteration_fit() is not None else self.cap)

    def metrics(self, scheduler: str = "as-recorded", gen_gpus: int | None = None,
                train_gpus: int | None = None) -> dict[str, object]:
        """The metrics of one replay (every step's fit) at the base shape, under ``scheduler`` and a split."""
        shape = dataclasses.replace(self.base_shape, gen_gpus=gen_gpus, train_gpus=train_gpus)
        return replay(self.prepared(shape), scheduler, self.config).metrics

    @staticmethod
    def _step_times(result: RunResult) -> np.ndarray:
        assert result.steps is not None  # every replay returns its steps
        return result.steps.filter(pl.col("job") == 0).sort("step")["step_time_s"].to_numpy()

    def base(self, draw: int = -1) -> np.ndarray:
        """Per-step step times of the as-recorded replay."""
        key = (self.base_shape, draw, "as-recorded")
        if key not in self._times:
            self._times[key] = self._step_times(replay(self.prepared(self.base_shape, draw), "as-recorded",
                                                       self.config))
        return self._times[key]

    def _apply(self, whatif: WhatIf, draw: int) -> Prepared:
        """The bundle prepared with ``whatif``'s change, at bootstrap draw ``draw``."""
        uncap = whatif.uncap and self.iteration_fit(draw) is not None
        shape = dataclasses.replace(self.base_shape, gen_gpus=whatif.gen_gpus, train_gpus=whatif.train_gpus)
        if whatif.uncap and not uncap:
            shape = dataclasses.replace(shape, max_seqs=whatif.max_seqs)
        prepared = self.prepared(shape, draw)
        if not (whatif.train_less_s or whatif.sync_less_s or uncap):
            return prepared
        index = {s: i for i, s in enumerate(self.steps)}
        fit = self.iteration_fit(draw)
        jobs = []
        for job in prepared.jobs:
            train = _less(job.train_s, whatif.train_less_s, index)
            sync = _less(job.sync_s, whatif.sync_less_s, index)
            generation = job.generation
            if uncap and fit is not None and isinstance(generation, FittedGeneration):
                generation = dataclasses.replace(generation, prefill_base_s=fit.coef["prefill_base"])
            jobs.append(dataclasses.replace(job, train_s=train, sync_s=sync, generation=generation))
        return dataclasses.replace(prepared, jobs=jobs)

    def changed(self, whatif: WhatIf, draw: int = -1) -> np.ndarray:
        """Per-step step times of the replay with ``whatif`` applied."""
        result = replay(self._apply(whatif, draw), whatif.scheduler, self.config)
        if draw < 0:
            self._work[id(whatif)] = (whatif, bool(result.metrics["same_work"]["changed"]))
        return self._step_times(result)

    def changes_work(self, whatif: WhatIf) -> bool:
        """Whether the replay with ``whatif`` applied trains other work than the recording (fewer or other samples:
        ``rltrace.replay.work``), so that its step time is no like-for-like gain."""
        if id(whatif) not in self._work:
            self.changed(whatif)
        return self._work[id(whatif)][1]

    def result(self, whatif: WhatIf | None = None) -> RunResult:
        """The whole replay (every step's fit) of the recording as it ran, or with ``whatif`` applied."""
        if whatif is None:
            return replay(self.prepared(self.base_shape), "as-recorded", self.config)
        return replay(self._apply(whatif, -1), whatif.scheduler, self.config)

    def gain(self, whatif: WhatIf, replicates: int = 10, progress: Callable[[], None] | None = None) -> Gain:
        """The step time ``whatif`` saves: the point estimate and the 5%-95% range over ``replicates``
        bootstrap draws (the point alone, three times, with fewer than two)."""
        point = self._mean(self.base() - self.changed(whatif), None)
        draws = []
        for k in range(replicates if replicates >= 2 else 0):
            draws.append(self._mean(self.base(k) - self.changed(whatif, k), self.weights(k)))
            if progress is not None:
                progress()
        if not draws:
            return point, point, point
        low, high = np.quantile(np.asarray(draws), (0.05, 0.95))
        return point, float(low), float(high)

    def replayed_step_s(self, steps: tuple[int, ...]) -> float:
        """The as-recorded replay's mean step time over the recorded ``steps``, which every gain is a difference
        from (NaN when the replay has none of them)."""
        base = self.base()
        times = [t for s, t in zip(self.steps, base) if s in steps]
        return float(np.mean(times)) if times else float("nan")

    def _mean(self, saved: np.ndarray, weights: dict[int, float] | None) -> float:
        """Mean of per-step savings over the steady steps, each weighed by its count in the draw."""
        first = WARMUP_STEPS if len(saved) > WARMUP_STEPS else 0
        w = (np.ones(len(saved)) if weights is None
             else np.array([weights.get(s, 0.0) for s in self.steps[:len(saved)]]))
        w[:first] = 0.0
        return float(np.average(saved, weights=w)) if w.sum() > 0 else float(saved[first:].mean())


def _less(values: list[float], less: dict[int, float], index: dict[int, int]) -> list[float]:
    """``values`` (one per replayed step) with ``less`` (recorded step -> seconds) taken off, never below 0."""
    out = list(values)
    for step, seconds in less.items():
        i = index.get(step)
        if i is not None and i < len(out):
            out[i] = max(out[i] - seconds, 0.0)
    return out
