"""Closed forms that let ``rltrace advise`` skip replays: a price floor and a trainer bound per candidate.

A candidate is a design (GPU kind, scheduler, generation share, fabric) at a GPU count. Two numbers bound what
its replay could show, from the prepared workload alone:

- **Price floor**: the replay bills every GPU of both pools for the whole run (plus serverless reward time): the
  training pool at its GPU kind, the generation pool at least at the cheapest of its kind and any kind its
  scheduler's settings name (rollart's ``prefill_gpu`` takes part of the generation budget).
- **Trainer bound**: advise checks its target on samples/s on the same work (replay/work.py): the recorded samples
  over the time the run took to train as many samples and output tokens as the workload holds. No step's work
  trains faster than the prepared workload's fastest step (its prompt + output tokens over its trainer seconds), so
  no replay trains the recorded work faster than its tokens over that rate, whatever mix of samples its scheduler
  trains on the way (a run that trains shorter ones first still has to train as many tokens). A scheduler none of
  whose candidates was replayed gets one replay, at the candidate its bound ruled out by the least, before the
  bound stands for it.

Both are checked against every replay that runs: a replay billed under its floor, or faster than its trainer
bound (a mix of prompts cheaper to train than the recorded one could get there), switches that bound off for its
scheduler (a note says so), and the candidates it had ruled out are searched again.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import polars as pl
from rltrace.replay.run import Prepared
from rltrace.replay.schedulers import lookup
from rltrace.replay.schedulers.base import capabilities
from rltrace.replay.settings import resolve
from rltrace.replay.sweep.grid import Point, settings
from rltrace.replay.sweep.point import prepared

from rltrace.errors import ConfigError

TOLERANCE = 1e-6
"""relative slack of every comparison with a bound (float sums in another order differ in their last bits)"""


def _kinds(config: Any, prices: dict[str, float]) -> set[str]:
    """GPU kinds a scheduler's settings name: any string field whose value is a priced GPU kind."""
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        return set()
    values = (getattr(config, f.name) for f in dataclasses.fields(config))
    return {v for v in values if isinstance(v, str) and v in prices}


def recorded_work(ready: Prepared) -> tuple[int, int]:
    """(samples, prompt + output tokens) of the prepared workload: the recorded work a replay is given."""
    f = ready.requests_frame
    return f.height, int((f["prompt_tokens"] + f["output_tokens"]).sum())


def trainer_rate(ready: Prepared, *, colocates: bool = False) -> float:
    """Tokens per trainer second of the prepared workload's fastest step (inf: a step trains for free, or several
    jobs share the trainers), on the training pool, or on every GPU for a scheduler that ``colocates``."""
    if len(ready.jobs) != 1:
        return math.inf
    job = ready.jobs[0]
    tokens = (ready.requests_frame.group_by("step").agg((pl.col("prompt_tokens") + pl.col("output_tokens"))
                                                          .sum().alias("t")))
    per_step = dict(zip(tokens["step"].to_list(), tokens["t"].to_list()))
    best = 0.0
    for step in range(job.steps):
        seconds = (job.colocated_trainer_seconds(step, ready.cluster) if colocates else job.trainer_seconds(step))
        if seconds <= 0:
            return math.inf
        best = max(best, per_step.get(step, 0) / seconds)
    return best


@dataclasses.dataclass(slots=True)
class Learned:
    """What the replays so far showed about one scheduler."""

    replays: int = 0
    trainer_off: str = ""
    """why its trainer bound no longer applies ("" while it does)"""
    floor_off: str = ""
    """why its price floor no longer applies"""


@dataclasses.dataclass(slots=True)
class Bounds:
    """The two bounds of every candidate of one search (module docstring), and what replays taught them."""

    bundle: str
    learned: dict[str, Learned] = dataclasses.field(default_factory=dict)
    _rates: dict[tuple[Any, ...], tuple[float, str, bool]] = dataclasses.field(default_factory=dict)
    _prices: dict[tuple[Any, ...], tuple[float, float]] = dataclasses.field(default_factory=dict)

    def of(self, scheduler: str) -> Learned:
        return self.learned.setdefault(scheduler, Learned())

    def floor(self, point: Point) -> float:
        """Least dollars per hour the candidate's replay can bill (0 once its scheduler broke the floor)."""
        if self.of(point["scheduler"]).floor_off:
            return 0.0
        key = _key(point, ("scheduler", "gpu", "gen_gpu", "train_gpu"))
        if key not in self._prices:
            resolved = resolve([point["scheduler"]], values=settings(point))
            prices = resolved.prices
            gen_kind = point.get("gen_gpu") or point.get("gpu")
            train_kind = point.get("train_gpu") or point.get("gpu")
            kinds = {gen_kind} | _kinds(resolved.per_scheduler[point["scheduler"]], prices)
            self._prices[key] = (min((prices.get(k, 0.0) for k in kinds if k), default=0.0),
                                 prices.get(train_kind, 0.0) if train_kind else 0.0)
        gen, train = self._prices[key]
        return float(point["gen_gpus"] * gen + point["train_gpus"] * train)

    def _prepared(self, point: Point) -> tuple[float, str, bool]:
        """(trainer-limited samples/s on the recorded work, sync fabric, whether the workload prepares on the
        point's cluster), per cluster and role layout (a colocating scheduler's trainers are every GPU)."""
        colocates = capabilities(lookup(point["scheduler"])).colocates
        key = (*_key({k: v for k, v in point.items() if k != "scheduler"}), ("colocates", repr(colocates)))
        if key not in self._rates:
            try:
                ready, _ = prepared(self.bundle, point)
            except ConfigError:  # a cluster the workload cannot take (tp, memory): its replay fails and says why
                self._rates[key] = (math.inf, "", False)
                return self._rates[key]
            samples, tokens = recorded_work(ready)
            rate = trainer_rate(ready, colocates=colocates)
            self._rates[key] = (rate * samples / tokens if tokens else math.inf, ready.sync_fabric, True)
        return self._rates[key]

    def takes(self, point: Point) -> bool:
        """Whether the workload prepares on the point's cluster (its TP splits the generation pool, the model fits)."""
        return self._prepared(point)[2]

    def fabric(self, point: Point) -> str:
        """What the candidate's weight syncs run on: its topology, else the prepared workload's sync fabric."""
        return str(point.get("topology") or self._prepared(point)[1])

    def trainer_cap(self, point: Point) -> float:
        """Most samples/s on the same work the candidate's trainers allow."""
        return self._prepared(point)[0]

    def bound(self, point: Point) -> float:
        """Most samples/s the candidate can reach on the same work: its trainer cap (inf once the scheduler broke
        the bound)."""
        return math.inf if self.of(point["scheduler"]).trainer_off else self.trainer_cap(point)

    def learn(self, point: Point, row: dict[str, Any]) -> list[str]:
        """Check both bounds against a finished replay; returns a note for each bound this replay broke."""
        scheduler, notes = point["scheduler"], []
        learned = self.of(scheduler)
        learned.replays += 1
        cap = self.trainer_cap(point)
        rate = row.get("samples_per_s") or 0.0
        if not learned.trainer_off and rate > cap * (1 + TOLERANCE):
            learned.trainer_off = (f"{scheduler} beat its trainer bound ({rate:.3g} samples/s on the same work "
                                   f"against {cap:.3g} at {_where(point)}): no longer used for its candidates")
            notes.append(learned.trainer_off)
        billed = row.get("usd_per_hour")
        floor = self.floor(point)
        if not learned.floor_off and billed is not None and billed < floor * (1 - TOLERANCE):
            learned.floor_off = (f"{scheduler} billed ${billed:.2f}/h under its price floor ${floor:.2f}/h at "
                                 f"{_where(point)}: no longer used for its candidates")
            notes.append(learned.floor_off)
        return notes


def _key(point: Point, names: tuple[str, ...] | None = None) -> tuple[tuple[str, str], ...]:
    """A hashable key of the point's parameters: all of them, or ``names`` and every dotted setting."""
    return tuple(sorted((k, repr(v)) for k, v in point.items() if names is None or k in names or "." in k))


def _where(point: Point) -> str:
    return f"{point['gen_gpus']} + {point['train_gpus']} {point['gpu']}"
