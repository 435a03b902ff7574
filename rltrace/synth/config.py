"""Parameters of a synthetic workload (``rltrace synth``), with TOML presets.

Units are in the names: ``*_s`` seconds, ``*_gbps`` GB/s, ``*_ns`` ns since the Unix epoch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rltrace.calibration.defaults import MEMORY_EFFICIENCY, SYNC_GBPS, SYNTH_TRAIN_MFU
from rltrace.catalog._toml import load_toml, paths_from_folder
from rltrace.config import build, override, parse_set, to_dict
from rltrace.errors import ConfigError
from rltrace.limits import (
    MAX_GPUS,
    MAX_NEW_TOKENS,
    MAX_PER_STEP,
    MAX_REQUESTS,
    MAX_SEED,
    MAX_SIGMA,
    MAX_STEPS,
    check_int,
)
from rltrace.manifest import MAX_INT

PRESET_DIR = Path(__file__).with_name("presets")
LENGTH_KINDS = ("lognormal", "lognormal_pareto", "empirical")


MAX_ENV_S = 86_400.0
"""an environment step's longest seconds, its median's limit and every draw's cap: a day, past any tool call or
sandbox step (1e300, or a far tail draw at the largest spread, overflowed the timestamps)"""
ALGORITHMS = ("grpo", "ppo")
"""what synth draws (either case): GRPO (no critic) or PPO (a critic update after the policy's)"""


@dataclass(kw_only=True, slots=True)
class LengthConfig:
    """A token-length distribution; see :mod:`rltrace.synth.distributions`."""

    kind: str = "lognormal"
    median: float = 600.0
    sigma: float = 1.0
    tail_fraction: float = 0.0
    tail_alpha: float = 1.5
    tail_start_quantile: float = 0.9
    path: str = ""
    """empirical: CSV, JSON-lines or Parquet file holding the lengths"""
    column: str = ""
    scale: float = 1.0
    group_correlation: float = 0.0
    """correlation of the normal latents of samples sharing a prompt, in [0, 1)"""


@dataclass(kw_only=True, slots=True)
class PoolConfig:
    """A GPU pool: device kind from the catalog, GPU count and tensor-parallel degree per instance."""

    device: str = "H100"
    gpus: int = 8
    tp: int = 1


MAX_RUN_S = 100 * 365 * 86_400
"""how far from its start a synthetic run may stamp a time: a century, well inside int64 nanoseconds (292 years)
even from the default start in 2026"""


@dataclass(kw_only=True, slots=True)
class TimingConfig:
    """The simple timing model that stamps synthetic requests, spans and collectives (docs/synth.md)."""

    start_ns: int = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z: fixed, so output is reproducible
    max_num_seqs: int = 256
    decode_efficiency: float = MEMORY_EFFICIENCY
    """fraction of HBM bandwidth a decode iteration achieves"""
    prefill_mfu: float = 0.5
    train_mfu: float = SYNTH_TRAIN_MFU
    reward_s_per_sample: float = 0.002
    sync_gbps: float = SYNC_GBPS
    """weight-sync transport bandwidth (400 Gb/s NIC)"""
    network_gbps: float = SYNC_GBPS
    """per-GPU inter-node bandwidth used by training collectives across nodes"""
    step_gap_s: float = 0.5


@dataclass(kw_only=True, slots=True)
class AgenticConfig:
    """Multi-turn agentic trajectories: each sample is ``turns`` generation turns with environment work between
    them. Turn k's prompt is the sample's prompt plus every earlier turn's output and observation."""

    turns: int = 1
    """generation turns per trajectory (1: single-turn, the default)"""
    env_median_s: float = 2.0
    """median environment time before each later turn (tool call, sandbox step), lognormal"""
    env_sigma: float = 1.0
    observation_median_tokens: float = 200.0
    """median tokens the environment returns per turn (appended to the next turn's prompt), lognormal"""
    observation_sigma: float = 0.5


@dataclass(kw_only=True, slots=True)
class SynthConfig:
    """A whole synthetic RL run."""

    name: str = "synthetic"
    seed: int = 0
    model: str = "Qwen2.5-7B"
    algorithm: str = "grpo"
    steps: int = 10
    prompts_per_step: int = 128
    samples_per_prompt: int = 8
    max_new_tokens: int = 16384
    output: LengthConfig = field(default_factory=LengthConfig)
    prompt: LengthConfig = field(default_factory=lambda: LengthConfig(median=300.0, sigma=0.5))
    generation: PoolConfig = field(default_factory=PoolConfig)
    training: PoolConfig = field(default_factory=PoolConfig)
    timing: TimingConfig = field(default_factory=TimingConfig)
    agentic: AgenticConfig = field(default_factory=AgenticConfig)

    def check(self) -> SynthConfig:
        """Reject impossible values with one clear message; returns self."""
        for key in ("steps", "prompts_per_step", "samples_per_prompt", "max_new_tokens"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.seed < 0:  # numpy's generators take non-negative seeds only
            raise ConfigError(f"seed must be >= 0, got {self.seed}")
        if self.algorithm.lower() not in ALGORITHMS:
            raise ConfigError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {self.algorithm!r}")
        for where, length in (("output", self.output), ("prompt", self.prompt)):
            if length.kind not in LENGTH_KINDS:
                raise ConfigError(
                    f"{where}.kind {length.kind!r} is unknown (expected one of: {', '.join(LENGTH_KINDS)})"
                )
            if length.kind == "empirical" and not (length.path and length.column):
                raise ConfigError(f"{where}: empirical lengths need path and column")
            if length.kind != "empirical" and (length.median <= 0 or length.sigma <= 0):
                raise ConfigError(f"{where}: median and sigma must be > 0")
            if length.kind != "empirical" and (length.median > MAX_NEW_TOKENS or length.sigma > MAX_SIGMA):
                raise ConfigError(f"{where}: median must be at most {MAX_NEW_TOKENS:,} tokens and sigma at most "
                                  f"{MAX_SIGMA:g}, got median {length.median:g}, sigma {length.sigma:g}")
            if not 0 < length.scale < math.inf:
                raise ConfigError(f"{where}: scale must be > 0, got {length.scale:g}")
            if not 0.0 <= length.tail_fraction < 1.0 or length.tail_alpha <= 0:
                raise ConfigError(f"{where}: tail_fraction must be in [0, 1) and tail_alpha > 0")
            if not 0.0 < length.tail_start_quantile < 1.0:  # the body's quantile where the tail starts
                raise ConfigError(f"{where}: tail_start_quantile must be in (0, 1), got {length.tail_start_quantile:g}")
        for where, pool in (("generation", self.generation), ("training", self.training)):
            if pool.gpus < 1 or pool.tp < 1 or pool.gpus % pool.tp:
                raise ConfigError(f"{where}: gpus ({pool.gpus}) must be a positive multiple of tp ({pool.tp})")
            check_int(f"{where}.gpus", pool.gpus, 1, MAX_GPUS)
        a = self.agentic
        if a.turns < 1 or a.env_median_s < 0 or a.env_sigma < 0 or a.observation_median_tokens < 0 \
                or a.observation_sigma < 0:
            raise ConfigError("agentic: turns must be >= 1; env_median_s, env_sigma, observation_median_tokens "
                              "and observation_sigma >= 0")
        if max(a.env_sigma, a.observation_sigma) > MAX_SIGMA or not (
                a.env_median_s < MAX_ENV_S and a.observation_median_tokens <= MAX_NEW_TOKENS):
            raise ConfigError(f"agentic: env_sigma and observation_sigma must be at most {MAX_SIGMA:g}, env_median_s "
                              f"below {MAX_ENV_S:,} s and observation_median_tokens at most {MAX_NEW_TOKENS:,}")
        t = self.timing
        if not (0 < t.decode_efficiency <= 1 and 0 < t.prefill_mfu <= 1 and 0 < t.train_mfu <= 1):
            raise ConfigError("timing: efficiencies and MFUs must be in (0, 1]")
        if t.max_num_seqs < 1 or t.sync_gbps <= 0 or t.network_gbps <= 0 or t.step_gap_s < 0 \
                or t.reward_s_per_sample < 0:
            raise ConfigError("timing: max_num_seqs, sync_gbps and network_gbps must be > 0, step_gap_s and "
                              "reward_s_per_sample >= 0")
        # a century of run past the start must still fit int64 nanoseconds
        check_int("timing.start_ns", t.start_ns, 0, MAX_INT - MAX_RUN_S * 10**9,
                  what=" (a run starting later would overflow int64 nanoseconds)")
        # the limits a replay has (rltrace.limits), before anything is drawn
        for key, hi in (("steps", MAX_STEPS), ("prompts_per_step", MAX_PER_STEP), ("samples_per_prompt", MAX_PER_STEP),
                        ("max_new_tokens", MAX_NEW_TOKENS), ("seed", MAX_SEED)):
            check_int(key, getattr(self, key), 0, hi)
        requests = self.steps * self.prompts_per_step * self.samples_per_prompt * a.turns
        check_int("steps x prompts_per_step x samples_per_prompt x agentic.turns", requests, 1, MAX_REQUESTS,
                  what=" requests in one bundle")
        return self


_READ_BY = {"median": ("lognormal", "lognormal_pareto"), "sigma": ("lognormal", "lognormal_pareto"),
            "tail_fraction": ("lognormal_pareto",), "tail_alpha": ("lognormal_pareto",),
            "tail_start_quantile": ("lognormal_pareto",), "path": ("empirical",), "column": ("empirical",),
            "scale": ("empirical",)}
"""the length keys only some kinds read (docs/synth.md's table), and those kinds"""


def unused(config: SynthConfig) -> list[str]:
    """Notes on keys set away from their defaults that the output does not depend on: length keys the chosen
    ``kind`` does not read (a tail on a plain lognormal, a file on a drawn distribution, a median on a file's
    lengths), and a trainer's ``tp`` (kept in the manifest only). A preset's own values count as set."""
    default, notes = LengthConfig(), []
    for where, length in (("output", config.output), ("prompt", config.prompt)):
        by_readers: dict[tuple[str, ...], list[str]] = {}
        for key, kinds in _READ_BY.items():
            if length.kind not in kinds and getattr(length, key) != getattr(default, key):
                by_readers.setdefault(kinds, []).append(f"{where}.{key}")
        for kinds, keys in by_readers.items():
            notes.append(f"{', '.join(keys)} unused: read by {where}.kind = "
                         f"{' or '.join(repr(k) for k in kinds)} only ({where}.kind is {length.kind!r})")
    if config.training.tp != 1:
        notes.append(f"training.tp = {config.training.tp} is kept in the manifest only: the synthetic trainer is one "
                     "FSDP rank per GPU (its collectives and times are those of tp = 1)")
    return notes


def presets() -> list[str]:
    """Names of the built-in presets (files in rltrace/synth/presets/)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def load_config(
    *, preset: str | None = None, path: str | Path | None = None, sets: list[str] | None = None, seed: int | None = None
) -> SynthConfig:
    """Defaults, then a preset or a TOML file, then ``--set`` overrides, then an explicit seed."""
    data: dict[str, Any] = to_dict(SynthConfig())
    if preset and path:
        raise ConfigError("give either --preset or --config, not both")
    source = None
    if preset:
        if preset not in presets():
            raise ConfigError(f"unknown preset {preset!r} (known: {', '.join(presets())})")
        source = PRESET_DIR / f"{preset}.toml"
    elif path:
        source = Path(path)
    if source is not None:
        # a config file's relative paths from its folder, as a described job's (a preset's name none)
        _merge(data, paths_from_folder(load_toml(source), source.parent, tables=("output", "prompt")), str(source))
    config = build(SynthConfig, data, f"{source}: synth" if source is not None else "synth")
    assignments = [(*parse_set(item), f"--set {item!r}") for item in sets or []]
    if seed is not None:
        assignments.append(("seed", seed, "--seed"))
    return override(config, assignments, "synth").check()


def _merge(base: dict[str, Any], update: dict[str, Any], where: str) -> None:
    for key, value in update.items():
        if key not in base:
            raise ConfigError(f"{where}: unknown key {key!r}")
        if isinstance(base[key], dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: {key} must be a table")
            _merge(base[key], value, f"{where}: {key}")
        else:
            base[key] = value
