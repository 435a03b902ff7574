"""One replay: a workload, a cluster and a scheduler in; a :class:`RunResult` out (the caller writes files).

``prepare`` turns a bundle's workload into jobs (requests plus per-step training-side durations) for a
cluster; ``replay`` runs one scheduler over them and computes the metrics.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from rltrace.replay.cluster import Cluster
from rltrace.replay.costmodels.calibrate import fit_generation
from rltrace.replay.costmodels.generation import GenerationCost, backend_name, catalog_generation
from rltrace.replay.costmodels.profile import (
    broadcast_bytes_per_s,
    device_from_profile,
    load_profile,
    profile_files,
)
from rltrace.replay.costmodels.switching import ModelState
from rltrace.replay.costmodels.training import AllToAll, TrainingCost, check_expert_parallel
from rltrace.replay.entities.requests import Requests
from rltrace.replay.job import Job
from rltrace.replay.metrics import MetricsConfig, compute_metrics, step_volumes, timeline_frame
from rltrace.replay.network.network import NetworkConfig, Routed, link_frame, route
from rltrace.replay.network.network import metrics as network_metrics
from rltrace.replay.network.weight_sync import local_fabric, reprice_syncs
from rltrace.replay.schedulers import create
from rltrace.replay.schedulers.base import capabilities
from rltrace.replay.simulator import Simulator
from rltrace.replay.work import same_work
from rltrace.replay.workload import Workload

from rltrace import jsontext
from rltrace.calibration import CALIBRATION, CostCalibration
from rltrace.catalog import GPUSpec, ModelSpec, from_info, get_gpu, get_model
from rltrace.catalog.models import catalog_entry, differences
from rltrace.config import to_dict
from rltrace.errors import ConfigError, HardwareUnknown
from rltrace.manifest import ModelInfo


@dataclass(frozen=True, kw_only=True, slots=True)
class CostConfig:
    """Which cost models a replay uses, and their factors."""

    generation: str = "auto"
    """"roofline" (GPU catalog), "kernels" (aiconfigurator-core's measured-kernel database, ``rltrace[kernels]``),
    "trace" (fitted to the bundle's own request timings) or "auto": trace when the bundle is a real recording
    replayed on its own GPU kind and TP, else roofline"""

    def __post_init__(self) -> None:
        if self.generation not in ("auto", "roofline", "trace", "kernels"):
            raise ConfigError(f"cost.generation must be auto, roofline, trace or kernels, got {self.generation!r}")
        for name in ("memory_efficiency", "compute_efficiency", "train_mfu", "gpu_memory_utilization"):
            if getattr(self, name) is not None and not 0 < getattr(self, name) <= 1:
                raise ConfigError(f"cost.{name} must be in (0, 1], got {getattr(self, name)}")
        if self.sync_gbps is not None and not 1e-3 <= self.sync_gbps <= 1e6:  # refuses NaN and 1e-300 too
            raise ConfigError(f"cost.sync_gbps must be in 0.001..1,000,000 GB/s, got {self.sync_gbps}")
        if self.train_ep < 1:
            raise ConfigError(f"cost.train_ep must be >= 1, got {self.train_ep}")
        given = [f"cost.{name}" for name in ("memory_efficiency", "compute_efficiency") if getattr(self, name)]
        if self.profile and given:
            raise ConfigError(f"cost.profile replaces {' and '.join(given)} (give one or the other)")
        for name in ("calibration", "profile"):  # a sweep's workers (a pool's, Ray's) need not share this directory
            if getattr(self, name):
                try:
                    object.__setattr__(self, name, str(Path(getattr(self, name)).resolve()))
                except (OSError, ValueError) as e:  # a NUL byte, a loop of links
                    raise ConfigError(f"cost.{name} {getattr(self, name)!r}: not a usable path ({e})") from None
    memory_efficiency: float | None = None
    """achieved fraction of HBM bandwidth in inference kernels (None: the calibration's ``memory_efficiency``)"""
    compute_efficiency: float | None = None
    """achieved fraction of peak FLOP/s in inference kernels (None: the calibration's ``compute_efficiency``)"""
    train_mfu: float | None = None
    """training's model FLOPs utilisation without a measured step (None: the published figure for the model's
    kind on the training GPU, :func:`rltrace.replay.costmodels.training.default_mfu`)"""
    sync_gbps: float | None = None
    """weight-sync bandwidth (GB/s) without a measured sync time or a network model (None: the calibration's
    ``sync_gbps``)"""
    train_ep: int = 1
    """expert-parallel ranks of the trainer of an MoE (Megatron's ``--expert-model-parallel-size``): a modelled
    step adds the dispatch and combine all-to-alls of every MoE layer, forward and backward, and the metrics
    their volume; 1: the experts sharded like the dense layers, no all-to-all"""
    gpu_memory_utilization: float | None = None
    """vLLM's share of GPU memory (None: the calibration's ``gpu_memory_utilization``, vLLM's default)"""
    profile: str = ""
    """an efficiency profile (a calibration file or Parquet, from `rltrace calibrate`) replacing the two efficiency
    factors of the roofline (a fit to the trace, or the kernel database, prices generation without them; its measured
    peaks and transfer rates apply either way)"""
    calibration: str = ""
    """a calibration file (the shipped files' format) whose entries replace the shipped constants of the same names
    (:meth:`rltrace.calibration.CostCalibration.overridden`); empty: the shipped files alone"""

    def constants(self) -> CostCalibration:
        """The one calibration every cost of a replay with this config is priced with: one object per file and
        content, so every job of a job list shares it and an edited file is read again."""
        if not self.calibration:
            return CALIBRATION
        path = Path(self.calibration).resolve()
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            return CALIBRATION.overridden(path)  # its one-line error
        cached = _overridden(path, digest)
        # the file read twice (hashed, then parsed): one written in between is parsed again, not kept under this digest
        return cached if cached.files[str(path)][1] == digest[:12] else CALIBRATION.overridden(path)

    def figure(self, name: str, calibration: CostCalibration) -> float:
        """Figure ``name`` (one of :data:`CALIBRATED`): as set, else ``calibration``'s."""
        if name not in CALIBRATED:
            raise ValueError(f"cost.{name} is not one of {', '.join(CALIBRATED)}")
        value: float | None = getattr(self, name)
        return calibration[name] if value is None else value


@lru_cache(maxsize=16)
def _overridden(path: Path, digest: str) -> CostCalibration:
    return CALIBRATION.overridden(path)


CALIBRATED = ("memory_efficiency", "compute_efficiency", "sync_gbps", "gpu_memory_utilization")
"""the cost settings that default to the calibration entry of the same name"""


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplayConfig:
    """Everything a replay varies besides the scheduler's own Config (``--set cost.train_mfu=0.4`` etc.)."""

    cost: CostConfig = field(default_factory=CostConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    fast_path: bool = True
    """plan whole instance queues at once when the scheduler only needs whole steps (false: one event per
    request finish; the results are the same, a test holds them equal)"""


@dataclass(frozen=True, slots=True)
class Prepared:
    """Jobs and requests ready to replay, plus what was decided on the way."""

    requests_frame: pl.DataFrame
    jobs: list[Job]
    cluster: Cluster
    notes: list[str]
    fitted_steps: tuple[int, ...] = ()
    """the recorded steps (renumbered) whose timings the generation cost was fitted to; empty when it was not
    fitted to the trace (the replay's uncertainty bootstraps over them, replay/uncertainty.py)"""
    sync_fabric: str = ""
    """what weight syncs are priced on without ``--topology``: the local fabric spec
    (:func:`~rltrace.replay.network.weight_sync.local_fabric`) when syncs measured on other GPUs were repriced, and
    a described job's (priced there), else "recorded" (the source's own sync times) or "<N> GB/s" (one model copy
    over ``cost.sync_gbps``)"""
    calibration: CostCalibration = CALIBRATION
    """the constants every job's costs were priced with (:meth:`CostConfig.constants`)"""
    recorded: bool = True
    """the jobs come from a bundle (a recording or a synthetic sample), which ``as-recorded`` replays as it ran;
    False for a described job, which has no recorded layout to replay"""
    source: dict[str, Any] = field(default_factory=dict)
    """what was replayed, as config.json's ``source`` records it: kind ("bundle", "description" or "job list"),
    absolute path, and the bundle's run id or the file's sha256; a described job's, the description as replayed
    (after the what-if options) under ``description``; a job list's, each job's under ``jobs`` (set by
    :func:`rltrace.replay.sources.open_source` and :func:`rltrace.api.prepare`; empty when the caller built the jobs
    itself)"""


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one replay produced. ``write`` puts it in a run folder."""

    scheduler: str
    metrics: dict[str, Any]
    timeline: pl.DataFrame
    requests: pl.DataFrame
    config: dict[str, Any]
    events: int
    wall_s: float
    steps: pl.DataFrame | None = None
    """job, step, end_s, step_time_s: when each step ended and how long it took; weight_sync_bytes (the copy each
    generation instance received; null: nothing sized it) and expert_alltoall_bytes_per_train_rank (null: none
    modelled), as metrics.json's ``volume_bytes_per_step`` averages them over every job's steps"""
    event_log: list[tuple[float, int, int, str, str]] | None = None
    """every event fired, in order (only with ``keep_log``)"""
    links: pl.DataFrame | None = None
    """with a network model: bytes and utilisation per link and busy interval (see replay/network/network.py)"""

    def write(self, folder: str | Path) -> Path:
        """Write metrics.json, config.json, timeline.parquet, requests.parquet, steps.parquet (and
        links.parquet with a network model) into ``folder``."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text(jsontext.dumps(self.metrics, indent=2, sort_keys=True) + "\n")
        (out / "config.json").write_text(jsontext.dumps(self.config, indent=2, sort_keys=True) + "\n")
        self.timeline.write_parquet(out / "timeline.parquet")
        self.requests.write_parquet(out / "requests.parquet")
        # the optional tables an earlier run of this folder may have left (a network model's links, an execution):
        # this run's or none, never another run's beside this one's figures
        for name, table in (("steps.parquet", self.steps), ("links.parquet", self.links)):
            if table is not None:
                table.write_parquet(out / name)
            else:
                (out / name).unlink(missing_ok=True)
        (out / "execution.parquet").unlink(missing_ok=True)  # the CLI's --execute writes it after this
        return out


def _unmeasured_steps(steps: pl.DataFrame) -> int:
    """How many steps lack a measured train time (which a cost model then prices)."""
    return steps.height if "train_s" not in steps.columns else steps["train_s"].null_count()


def model_spec(info: ModelInfo | None, override: str | None = None) -> ModelSpec | None:
    """``override`` (a catalog name or a config.json), else the model the bundle's manifest records
    (:func:`rltrace.catalog.from_info`: its recorded architecture, else the catalog's entry of its name)."""
    if override:
        return get_model(override)
    return from_info(info) if info is not None else None


def _model_note(spec: ModelSpec) -> str | None:
    """A note when the bundle's model is not the catalog's entry of the same name (an FP8 run of a BF16 entry, a
    fine-tune with other widths): the replay prices what was recorded, and says so."""
    listed = catalog_entry(spec.name)
    if listed is None:
        return None
    changed = differences(listed, spec)
    return (f"model {spec.name}: the bundle records another architecture than the catalog's entry of that name "
            f"({', '.join(changed)}); replayed as recorded") if changed else None


def _gpu(device: str | None) -> GPUSpec | None:
    try:
        return get_gpu(device) if device else None
    except ConfigError:
        return None  # "cpu" or a device the catalog lacks: measured times are used as they are


def prepare(workload: Workload, cluster: Cluster, cost: CostConfig, *, recording: pl.DataFrame | None = None,
            iterations: pl.LazyFrame | None = None, measured: bool = False, model: str | None = None,
            step_weights: dict[int, float] | None = None) -> Prepared:
    """Build the job and its requests. ``recording`` is the bundle's requests frame and ``iterations`` its
    engine iterations, read only when generation costs are fitted to the trace (the calibration data); ``measured``
    says its timings come from a real run (``rltrace record`` or an import), which lets "auto" fit generation costs
    to them; ``step_weights`` weighs the recorded steps in that fit (a bootstrap draw, see
    replay/uncertainty.py)."""
    notes: list[str] = []
    spec = model_spec(workload.model, model)
    if spec is not None and model is None and (note := _model_note(spec)):
        notes.append(note)
    profile = load_profile(cost.profile) if cost.profile else None
    constants = cost.constants()
    rollout = workload.cluster.get("rollout")
    trainer = workload.cluster.get("trainer")
    same_hw = rollout is not None and rollout.device == cluster.gen_gpu and rollout.tp == cluster.tp
    use_trace = cost.generation == "trace" or (cost.generation == "auto" and measured and same_hw
                                               and model is None and recording is not None)
    generation: GenerationCost
    if use_trace:
        if recording is None:
            raise ConfigError("cost.generation=trace needs the bundle's recorded requests")
        fitted_cost, report = fit_generation(recording, iterations.collect() if iterations is not None else None,
                                             tp=rollout.tp if rollout else 1, step_weights=step_weights)
        generation = replace(fitted_cost, tp_speedup=constants["fitted_tp_speedup"])
        unused = f" ({cost.profile}'s efficiencies unused)" if profile is not None else ""
        notes.append(f"generation cost fitted to the trace, {report}{unused}")
    else:
        gpu = _gpu(cluster.gen_gpu) or (device_from_profile(profile, cluster.gen_gpu) if profile is not None else None)
        if spec is None or gpu is None:
            raise HardwareUnknown(f"no roofline for {cluster.gen_gpu!r}: give a catalog GPU kind (--gpu) and a model, "
                                  "or a profile measured on that device (rltrace calibrate --device)")
        generation, note = catalog_generation("kernels" if cost.generation == "kernels" else "roofline",
                                              model=spec, gpu=gpu,
                                              memory_efficiency=cost.figure("memory_efficiency", constants),
                                              compute_efficiency=cost.figure("compute_efficiency", constants),
                                              gpu_memory_utilization=cost.figure("gpu_memory_utilization", constants),
                                              max_num_seqs=cluster.max_seqs, profile=profile, calibration=constants)
        generation.iteration_model(cluster.tp)  # fail now, with one message, if the profile lacks this GPU
        source = ""
        if profile is not None:
            source = (f", efficiencies from {cost.profile}" if cost.generation != "kernels" else
                      f" (measured kernels: {cost.profile}'s efficiencies unused)")
        notes.append(f"{note}{source}")
    measured_bw = broadcast_bytes_per_s(profile) if profile is not None else None
    _check_train_ep(cost.train_ep, spec, cluster.train_gpus)
    train_gpu = _gpu(cluster.train_gpu) or (device_from_profile(profile, cluster.train_gpu) if profile is not None
                                            else None)
    unmeasured = _unmeasured_steps(workload.steps)
    if spec is not None and train_gpu is None and unmeasured:
        # the model prices the trainer phases the source did not measure (a drawn workload measured none): without
        # the device's peaks each would cost 0 s, and the training pool would idle through the run unsaid
        if unmeasured == workload.steps.height:
            raise HardwareUnknown(f"no training cost model for {cluster.train_gpu!r}: give a catalog GPU kind for the "
                                  "training pool (--gpu), or a profile measured on that device "
                                  "(rltrace calibrate --device)")
        notes.append(f"{unmeasured} of {workload.steps.height} steps have no measured train time, and "
                     f"{cluster.train_gpu!r} no cost model to price one: they train in 0 s (a profile measured on it, "
                     "rltrace calibrate --device, prices them)")
    if spec is not None and train_gpu is not None:
        # the weights and mixed-precision Adam state a switch moves (.switching), at best sharded over every trainer
        state = ModelState(params=float(spec.params), weight_bytes=float(spec.weight_bytes))
        per_gpu = state.training_bytes(cluster.train_gpus, constants)
        if per_gpu > train_gpu.memory_bytes:
            gpus = f"{cluster.train_gpus} {train_gpu.name}{'s' * (cluster.train_gpus != 1)}"
            notes.append(f"training {spec.name} on {gpus}: its weights and Adam state "
                         f"alone are {per_gpu / 1e9:,.0f} GB a GPU sharded over all of them, above the "
                         f"{train_gpu.name}'s {train_gpu.memory_bytes / 1e9:.0f} GB: a real job needs more GPUs or "
                         "offloading (the replay prices the step as given)")
    # measured trainer phases move to another GPU kind by the ratio of peak FLOP/s: the catalog's, or for a device
    # it lacks (cpu), the peaks a profile measured on it
    recorded_gpu = None
    if trainer is not None:
        recorded_gpu = _gpu(trainer.device) or (device_from_profile(profile, trainer.device) if profile is not None
                                                else None)
        phases = [c for c in ("train_s", "reference_s", "optimizer_s") if c in workload.steps.columns]
        measured_train = any(workload.steps[c].null_count() < workload.steps.height for c in phases)
        if recorded_gpu is None and train_gpu is not None and trainer.device != train_gpu.name and measured_train:
            notes.append(f"trainer phases as measured on {trainer.device}, not rescaled to {train_gpu.name}: the GPU "
                         f"catalog has no peak FLOP/s for {trainer.device} (--model prices them from FLOPs instead)")
    training = TrainingCost(model=spec, gpu=train_gpu, gpus=cluster.train_gpus,
                            recorded_gpus=trainer.count if trainer else cluster.train_gpus,
                            recorded_gpu=recorded_gpu, train_mfu=cost.train_mfu,
                            ep=cost.train_ep, calibration=constants,
                            sync_gbps=measured_bw / 1e9 if measured_bw else cost.figure("sync_gbps", constants))
    samples, steps = workload.samples, workload.steps
    counts = samples.group_by("step", maintain_order=True).len()["len"].to_numpy()
    first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64).tolist()

    def col(name: str) -> list[float | None]:
        return steps[name].to_list() if name in steps.columns else [None] * steps.height

    tokens = (steps["prompt_tokens"] + steps["output_tokens"]).to_list()
    # a sample is one training sequence: its mean length per step, matched to the step by its number
    per_step = steps.select("step").join(samples.group_by("step").len(), on="step", how="left", maintain_order="left")
    per_sample = [t / max(n or 1, 1) for t, n in zip(tokens, per_step["len"].to_list())]
    train = [training.train_seconds(m, t, s) for m, t, s in zip(col("train_s"), tokens, per_sample)]
    forward = [training.forward_seconds(m, t, s) for m, t, s in zip(col("reference_s"), tokens, per_sample)]
    optim = [training.optimizer_seconds(m) for m in col("optimizer_s")]
    sync = [training.sync_seconds(m) for m in col("weight_sync_s")]
    measured_syncs = all(m is not None for m in col("weight_sync_s"))
    sync_fabric = "recorded" if measured_syncs else f"{training.sync_gbps:g} GB/s"
    measured_trainer = all(m is not None for m in [*col("train_s"), *col("reference_s")])  # what the MFU prices
    for key, all_measured in (("train_mfu", measured_trainer), ("sync_gbps", measured_syncs)):
        if getattr(cost, key) is not None and all_measured:  # it changed nothing, and said nothing
            what = "trainer phase" if key == "train_mfu" else "weight sync"
            notes.append(f"cost.{key} unused: every {what} of the source was measured, and is replayed as measured")
    reward = [r or 0.0 for r in col("reward_s")]
    other = [o or 0.0 for o in col("other_s")]
    # Expert all-to-alls of the trainer spans that are modelled; a measured span holds the recorded job's own.
    alltoall: list[tuple[AllToAll, ...] | None] | None = None
    if cost.train_ep > 1:
        alltoall = [training.alltoalls(t, train=m is None, forward=r is None) or None
                    for m, r, t in zip(col("train_s"), col("reference_s"), tokens)]
        if all(a is None for a in alltoall):
            alltoall = None
            notes.append(f"cost.train_ep {cost.train_ep}: every step's trainer time is measured, and its all-to-alls "
                         "with it; none are added (--model prices the trainer instead)")
    engine = samples["engine"]
    # A sync delivers one model copy to every engine: the recorded bytes (one flow per engine) over the engines;
    # unrecorded, the model's weights.
    weights = float(spec.weight_bytes) if spec is not None else 0.0
    engines = rollout.instances if rollout else 1
    ranks = max(trainer.count if trainer else cluster.train_gpus, 1)  # recorded collective bytes sum over ranks
    # Each turn's successor within its trajectory (request ids are row numbers), and each step's first turns.
    turns = samples.select("step", "trajectory", "turn").with_row_index("rid").sort("step", "trajectory", "turn")
    turns = turns.with_columns(pl.col("rid").shift(-1).over("step", "trajectory").fill_null(-1).alias("next_turn"))
    turns = turns.sort("rid")
    multi_turn = bool(samples["turn"].max())
    heads = None
    if multi_turn:
        first_turns = turns.filter(pl.col("turn") == 0).group_by("step", maintain_order=True).agg("rid")
        by_step = dict(zip(first_turns["step"].to_list(), first_turns["rid"].to_list()))
        heads = [by_step.get(s, []) for s in range(len(first) - 1)]
    job = Job(id=0, name="job0", first=first, generation=generation, train_s=train, forward_s=forward,
              optimizer_s=optim, sync_s=sync, reward_s=reward, other_s=other,
              engine=None if engine.null_count() else engine.to_list(),
              engines=engines, heads=heads,
              max_new_tokens=workload.max_new_tokens,
              sync_bytes=[float(b) / engines if b else weights for b in steps["sync_bytes"].to_list()],
              collective_bytes=[float(b) / ranks for b in steps["collective_bytes"].to_list()],
              sync_tensors=spec.tensors if spec is not None else 1,
              alltoalls=alltoall,
              extra={"params": float(spec.params), "weight_bytes": weights} if spec is not None else {},
              calibration=constants)
    if (rollout and rollout.device != cluster.gen_gpu) or (trainer and trainer.device != cluster.train_gpu):
        # syncs measured on other hardware: the network model prices them on the replay's GPUs
        if _gpu(cluster.train_gpu) is None:
            raise ConfigError(f"weight syncs from the recorded {cluster.train_gpu} training devices to "
                              f"{cluster.gen_gpu} generation GPUs have no network model: give the training pool a GPU "
                              "kind of the catalog too (--gpu KIND or GENERATION,TRAINING; the API's gpu, or gen_gpu "
                              "and train_gpu)")
        job.sync_s = reprice_syncs(job.sync_bytes or [], cluster.gen_gpus, cluster.train_gpus, cluster.train_gpu,
                                   tensors=job.sync_tensors)
        sync_fabric = local_fabric(cluster.gen_gpus, cluster.train_gpus, cluster.train_gpu)
        notes.append(f"weight syncs measured on other GPUs priced on {sync_fabric} (cost.sync_gbps unused; "
                     "--topology, when given, prices them instead)")
    frame = samples.select("step", "group", "prompt_tokens", "output_tokens", "env_s").with_columns(
        pl.lit(0).alias("job"), turns["next_turn"].cast(pl.Int64))
    fitted = tuple(sorted(recording["step"].unique().to_list())) if use_trace and recording is not None else ()
    return Prepared(frame, [job], cluster, notes, fitted, sync_fabric, calibration=constants)


def _check_train_ep(ep: int, spec: ModelSpec | None, train_gpus: int) -> None:
    """``cost.train_ep`` names expert parallelism a trainer of this model on these GPUs can run
    (:func:`.training.check_expert_parallel`)."""
    if spec is not None:
        check_expert_parallel(spec, ep, train_gpus, "cost.train_ep")
    elif ep != 1:  # (CostConfig has refused ep < 1)
        raise ConfigError(f"cost.train_ep {ep} needs the model's architecture, which the bundle does not record: "
                          "give --model")


def two_kinds(colocating: list[str], cluster: Cluster) -> str:
    """Why schedulers that colocate (every GPU in both roles) cannot run on ``cluster``'s two GPU kinds."""
    return (f"{', '.join(colocating)} runs generation and training on the same GPUs, but this cluster's generation "
            f"GPUs are {cluster.gen_gpu} and its training GPUs {cluster.train_gpu}")


def replay(prepared: Prepared, scheduler: str, config: ReplayConfig, settings: Any = None,
           *, progress: Callable[[int], None] | None = None, keep_log: bool = False) -> RunResult:
    """Run ``scheduler`` over the prepared jobs with ``settings`` (its Config, or a mapping of the Config's
    fields; None: the defaults); returns the metrics, the timeline and the resolved config."""
    policy, policy_config = create(scheduler, settings)
    can = capabilities(policy)
    if not prepared.recorded and can.replays_recording:
        raise ConfigError(f"{scheduler} replays a recording as it ran, and a described job has none (its mode is a "
                          "scheduler: colocated-sync or disagg-sync)")
    c = prepared.cluster
    if can.colocates and c.gen_gpu != c.train_gpu:
        raise ConfigError(f"{two_kinds([scheduler], c)}: replay on one kind (--gpu {c.train_gpu}) to compare it")
    jobs, routed, notes = _on_network(prepared, scheduler, can.colocates, config.network,
                                      replayed=len(prepared.jobs) if can.several_jobs else 1)
    f = prepared.requests_frame
    requests = Requests(f["job"].to_numpy(), f["step"].to_numpy(), f["group"].to_numpy(),
                        f["prompt_tokens"].to_numpy(), f["output_tokens"].to_numpy(),
                        *((f["next_turn"].to_numpy(), f["env_s"].to_numpy()) if "next_turn" in f.columns else ()))
    sim = Simulator(requests, jobs, prepared.cluster, keep_log=keep_log, fast_path=config.fast_path)
    started = time.perf_counter()
    record = sim.run(policy, progress)
    wall = time.perf_counter() - started
    record.colocated = can.colocates
    req_frame = _with_training(requests.to_frame(), record.consumed, f.height)
    timeline = timeline_frame(record, req_frame)
    metrics = compute_metrics(record, req_frame, timeline, config.metrics)
    links = None
    if routed is not None:
        links = link_frame(routed, timeline)
        metrics["network"] = network_metrics(routed, links, metrics["throughput_samples_per_s"], config.network)
    resolved = {
        "scheduler": {"name": scheduler, **to_dict(policy_config)},
        "replay": to_dict(config),
        "cluster": to_dict(prepared.cluster),
        "source": prepared.source,
        "generation_backend": ", ".join(dict.fromkeys(backend_name(j.generation) for j in jobs)),
        "calibration": prepared.calibration.describe(),
        "profile": profile_files(config.cost.profile) if config.cost.profile else None,
        "notes": prepared.notes + notes + (
            [(f"{scheduler} read true output lengths before they were generated (oracle=true): an upper bound, not "
              "what the real system could know")] if record.declared.get("oracle") else []),
    }
    ends = sorted(record.step_end_s.items())
    syncs, alltoalls = step_volumes(record, [key for key, _ in ends])
    steps = pl.DataFrame({"job": [j for (j, _), _ in ends], "step": [s for (_, s), _ in ends],
                          "end_s": [t for _, t in ends], "weight_sync_bytes": syncs,
                          "expert_alltoall_bytes_per_train_rank": alltoalls},
                         schema={"job": pl.Int32, "step": pl.Int32, "end_s": pl.Float64,
                                 "weight_sync_bytes": pl.Float64, "expert_alltoall_bytes_per_train_rank": pl.Float64})
    starts = {job.id: job.arrival_s for job in jobs}
    steps = steps.with_columns(
        (pl.col("end_s") - pl.col("end_s").shift(1).over("job")
         .fill_null(pl.col("job").replace_strict(starts, return_dtype=pl.Float64)))
        .alias("step_time_s")).select("job", "step", "end_s", "step_time_s", "weight_sync_bytes",
                                      "expert_alltoall_bytes_per_train_rank")
    metrics["same_work"] = same_work(req_frame, steps, metrics["makespan_s"], metrics["cost_usd"])
    return RunResult(scheduler, metrics, timeline, req_frame, resolved, record.events, wall, steps, record.event_log,
                     links)


def _on_network(prepared: Prepared, scheduler: str, colocates: bool, network: NetworkConfig, *,
                replayed: int) -> tuple[list[Job], Routed | None, list[str]]:
    """The prepared jobs, the first ``replayed`` (those ``scheduler`` replays: a one-job scheduler's first) with their
    syncs and collectives timed on ``network``'s topology when it names one (on copies: the prepared jobs stay as
    they are), with what the network model did and notes on it; the network figures are theirs alone. A described
    job under a colocating scheduler runs its own colocated step (the trainer on every GPU, the refit in place),
    which the topology does not price: it is left off the network. A recording under a colocating scheduler has its
    training collectives timed on the fabric, and no weight sync (the refit is in place)."""
    if not network.topology:
        return prepared.jobs, None, []
    mine = prepared.jobs[:replayed]
    own = [colocates and j.colocated is not None for j in mine]
    notes = []
    if any(own):
        named = "the described job" if len(own) == 1 else ", ".join(j.name for j, o in zip(mine, own) if o)
        notes.append(f"{scheduler} runs {named}'s own colocated step (the trainer on every GPU, the refit in place), "
                     "which the topology does not price" + (": no network figures" if all(own) else ""))
    if all(own):
        return prepared.jobs, None, notes
    jobs = [dataclasses.replace(j, sync_s=list(j.sync_s), train_s=list(j.train_s), forward_s=list(j.forward_s))
            for j in mine]
    c = prepared.cluster
    # a colocating scheduler refits the weights in place: no weight sync crosses the fabric
    routed = route([dataclasses.replace(j, sync_bytes=None, collective_bytes=None, alltoalls=None) if o
                    else dataclasses.replace(j, sync_bytes=None) if colocates else j
                    for j, o in zip(jobs, own)], c.gen_gpus, c.train_gpus, network)
    for before, after in zip(mine, jobs):
        after.phases = _retimed_phases(before, after)
    jobs += prepared.jobs[replayed:]  # never run: as prepared
    trainer = _gpu(c.train_gpu)  # None: not a catalog GPU (a CPU recording)
    if trainer is not None and get_gpu(routed.topology.gpu).name != trainer.name:  # another GPU's NVLink, HBM, NCCL
        routed.notes.append(f"the topology's GPUs are {routed.topology.gpu}s, the training GPUs "
                            f"{trainer.name}s: its NVLink, memory and NCCL figures are the {routed.topology.gpu}'s "
                            f"(state gpu={trainer.name} in the spec to price the replay's own)")
    return jobs, routed, notes + routed.notes


def _retimed_phases(before: Job, after: Job) -> list[dict[str, float]] | None:
    """A described job's phases per step after a network model re-timed its spans: the forward-only span's change
    shared by its phases (old-policy and reference log-probs, critic) in proportion, the train span's to train."""
    if before.phases is None:
        return None
    out = []
    for step, phases in enumerate(before.phases):
        forward = {k: phases[k] for k in ("old_logprob", "reference", "critic")}
        held = sum(forward.values())
        moved = after.forward_s[step] - before.forward_s[step]
        shared = {k: v + moved * v / held for k, v in forward.items()} if held > 0 else {}
        out.append({**phases, **shared, "train": phases["train"] + after.train_s[step] - before.train_s[step]})
    return out


def _with_training(frame: pl.DataFrame, consumed: list[tuple[int, int, np.ndarray, np.ndarray]],
                   recorded: int) -> pl.DataFrame:
    """Add what training did with each request: ``trained_step`` (the training step that consumed it, -1:
    never trained), ``staleness`` (versions behind at training, -1: never trained) and ``recorded`` (a row of
    the replayed workload, not a response a scheduler drew again past it). The report compares the trained
    work with the recorded (analysis/work.py)."""
    step = np.full(frame.height, -1, np.int32)
    stale = np.full(frame.height, -1, np.int32)
    for _, train_step, index, lag in consumed:
        step[index], stale[index] = train_step, lag
    return frame.with_columns(pl.Series("trained_step", step), pl.Series("staleness", stale),
                              pl.Series("recorded", np.arange(frame.height) < recorded))
