"""Several RL jobs in one replay: a job list (TOML) of bundles or described jobs with arrival times and SLOs.

    [[jobs]]
    name = "qwen7b-a"
    bundle = "rollpacker_qwen7b"   # a shipped sample's name, a bundle path or a described job (TOML)
    arrival_s = 0.0
    slo = 2.0                      # a step may take at most slo x its solo step time
    steps = 6                      # optional reshaping, as on the command line
    model = "Qwen2.5-7B"

Schedulers that multiplex jobs (rollmux) read every job; the others replay the first.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import polars as pl
from rltrace.replay.cluster import Cluster
from rltrace.replay.described import is_description
from rltrace.replay.loading import Shape
from rltrace.replay.run import CostConfig, Prepared
from rltrace.replay.sources import prepare_source
from rltrace.sample_traces import list_samples, sample_path

from rltrace.catalog._toml import load_toml
from rltrace.config import build
from rltrace.errors import ConfigError


@dataclass(frozen=True, kw_only=True, slots=True)
class JobSpec:
    name: str
    bundle: str
    arrival_s: float = 0.0
    slo: float = 2.0
    steps: int | None = None
    prompts_per_step: int | None = None
    samples_per_prompt: int | None = None
    max_new_tokens: int | None = None
    model: str | None = None
    seed: int | None = None
    """seed of this job's draw (None: 0, or a described job's own ``seed``)"""
    train_ep: int | None = None
    """this job's trainer expert parallelism (None: ``cost.train_ep``); a list of dense and MoE jobs sets it per
    job, since a dense model has no experts to spread"""

    def __post_init__(self) -> None:
        if self.arrival_s < 0:
            raise ConfigError(f"job {self.name!r}: arrival_s must be >= 0 (seconds after the first job), got "
                              f"{self.arrival_s:g}")
        if self.slo < 1:
            raise ConfigError(f"job {self.name!r}: slo must be >= 1 (a multiple of the job's time alone), got "
                              f"{self.slo:g}")


def load_jobs(path: str | Path) -> list[JobSpec]:
    """The ``[[jobs]]`` tables of a TOML file, checked."""
    data = load_toml(path)
    tables = data.get("jobs")
    if not isinstance(tables, list) or not tables:
        raise ConfigError(f"{path}: expected one or more [[jobs]] tables")
    other = sorted(set(data) - {"jobs"})
    if other:  # a [[job]] table (a typo) would be a job dropped without a word
        raise ConfigError(f"{path}: unknown key {other[0]!r} (a job list holds [[jobs]] tables only)")
    try:
        specs = [build(JobSpec, t, f"{path}: jobs[{i}]") for i, t in enumerate(tables)]
    except ConfigError as e:  # a value a job cannot have, said by its name: with the file too
        raise ConfigError(str(e) if str(e).startswith(str(path)) else f"{path}: {e}") from None
    here = Path(path).parent  # a relative path beside the list (a described job next to it), else as given
    specs = [replace(s, bundle=str(here / s.bundle)) if not Path(s.bundle).is_absolute()
             and s.bundle not in list_samples() and (here / s.bundle).exists() else s for s in specs]
    names = [s.name for s in specs]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise ConfigError(f"{path}: job names must be unique ({twice!r} names two jobs)")
    if any(not s.name.strip() for s in specs):
        raise ConfigError(f"{path}: a job's name is empty (reports and run folders are named by it)")
    return specs


def _pools(c: Cluster) -> tuple[int, int, int]:
    return c.gen_gpus, c.train_gpus, c.tp


def _prepare(spec: JobSpec, shape: Shape, cost: CostConfig, prices: dict[str, float] | None) -> Prepared:
    """One job alone, reshaped by its spec; a value it cannot take is a ConfigError naming the job."""
    try:
        return _prepare_one(spec, shape, cost, prices)
    except ConfigError as e:
        said = str(e)
        raise ConfigError(said if said.startswith(f"job {spec.name!r}") else f"job {spec.name!r}: {said}") from None


def _prepare_one(spec: JobSpec, shape: Shape, cost: CostConfig, prices: dict[str, float] | None) -> Prepared:
    where = sample_path(spec.bundle) if spec.bundle in list_samples() else Path(spec.bundle)
    if not where.exists():
        raise ConfigError(f"job {spec.name!r}: bundle {spec.bundle!r}: no such file or folder (a bundle folder, a "
                          "sample name or a described job's .toml, relative to the job list)")
    mine = replace(shape, steps=spec.steps, prompts_per_step=spec.prompts_per_step,
                   samples_per_prompt=spec.samples_per_prompt, max_new_tokens=spec.max_new_tokens,
                   model=spec.model or shape.model, seed=spec.seed)
    if is_description(where):  # its [training] ep is its trainer's expert parallelism, whatever cost.train_ep says
        if spec.train_ep not in (None, 1):
            raise ConfigError(f"job {spec.name!r}: a described job's trainer expert parallelism is its [training] ep; "
                              "set it there, not train_ep")
        return prepare_source(where, mine, replace(cost, train_ep=1), prices)
    prepared = prepare_source(where, mine, cost if spec.train_ep is None else replace(cost, train_ep=spec.train_ep),
                              prices)
    if mine.reshapes:  # as replay says of a bundle it reshapes
        prepared.notes.append(f"the workload is drawn from the recorded one (seed {mine.seed or 0}): its steps and "
                              "samples are resampled (without its entry's steps, prompts_per_step, "
                              "samples_per_prompt, max_new_tokens and model, and without --model, the bundle "
                              "replays as it ran)")
    return prepared


def prepare_jobs(specs: list[JobSpec], cluster: Shape, cost: CostConfig,
                 prices: dict[str, float] | None = None) -> Prepared:
    """All jobs' requests in one table (job ids in list order), each job on its own pools (``Job.cluster``).

    The jobs share one pair of GPU kinds, the first job's: a job recorded or described on others is retargeted to
    them, so its costs are priced on the GPUs it runs on. A scheduler that replays one job gets the first's
    cluster."""
    if not specs:
        raise ConfigError("a job list needs at least one job")
    alone = [_prepare(spec, cluster, cost, prices) for spec in specs]
    first = alone[0].cluster
    notes: list[str] = []
    for i, (spec, prepared) in enumerate(zip(specs, alone)):
        c = prepared.cluster
        if (c.gen_gpu, c.train_gpu) != (first.gen_gpu, first.train_gpu):
            alone[i] = _prepare(spec, replace(cluster, gpu=None, gen_gpu=first.gen_gpu, train_gpu=first.train_gpu),
                                cost, prices)
            notes.append(f"{spec.name} runs on {c.gen_gpu} + {c.train_gpu} alone; the jobs share the first job's "
                         f"kinds, {first.gen_gpu} generation + {first.train_gpu} training, and it was retargeted to "
                         "them (--gpu sets one pair for every job)")
    if any(_pools(p.cluster) != _pools(first) for p in alone):
        notes.append("the jobs' pools differ: each job's costs are priced on its own pools, rollmux opens a group on "
                     "the pools of the job that opens it, and a scheduler that replays one job replays the first on "
                     f"its own ({first.gen_gpus} + {first.train_gpus} GPUs)")
    frames, jobs, offset = [], [], 0
    for i, (spec, prepared) in enumerate(zip(specs, alone)):
        job = prepared.jobs[0]
        job.id, job.name, job.arrival_s, job.cluster = i, spec.name, spec.arrival_s, prepared.cluster
        job.first = (np.asarray(job.first) + offset).tolist()
        if job.heads is not None:
            job.heads = [[rid + offset for rid in heads] for heads in job.heads]
        job.engine = None
        job.extra["slo"] = spec.slo
        linked = pl.col("next_turn")
        frames.append(prepared.requests_frame.with_columns(
            pl.lit(i, pl.Int32).alias("job"),
            pl.when(linked >= 0).then(linked + offset).otherwise(linked).alias("next_turn")))
        offset += prepared.requests_frame.height
        jobs.append(job)
    notes = [f"{spec.name}: {n}" for spec, p in zip(specs, alone) for n in p.notes] + notes
    return Prepared(pl.concat(frames, how="vertical_relaxed"), jobs, first, notes, calibration=alone[0].calibration,
                    recorded=alone[0].recorded, source={"jobs": [{"name": spec.name, **p.source}
                                                                 for spec, p in zip(specs, alone)]})
