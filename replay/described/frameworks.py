"""Framework profiles (``frameworks.toml``): each framework's documented defaults for a described job's
generation engine, training backend and weight update, and its calibration (``data/framework_calibration.csv``):
how much slower than the published pretraining MFU its policy update and log-prob passes run, dense and MoE, and
the rate its colocated refit hands weights over at, each fitted to the fit split of the published RL runs
(``benchmarks/fit_rl_calibration.py``; :func:`.fit.fit_calibration`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import polars as pl

from rltrace.catalog._toml import load_toml
from rltrace.config import build
from rltrace.errors import ConfigError

PROFILES = Path(__file__).with_name("frameworks.toml")
CALIBRATION_CSV = Path(__file__).parent / "data" / "framework_calibration.csv"
POOLED = "*"
"""the calibration row that every framework without enough measured phases of its own takes"""
FACTORS = ("update_dense", "update_moe", "logprob_dense", "logprob_moe")
DEFAULT_REFIT_GBPS = 2.5
"""only when no calibration file is found (a user's own profile): replaced by the fitted value otherwise"""


@dataclass(frozen=True, slots=True)
class Calibration:
    """Measured corrections of one framework: time factors on the closed-form phases, and its refit rate."""

    factors: dict[str, float] = field(default_factory=dict)
    """``update_dense``, ``update_moe``, ``logprob_dense``, ``logprob_moe``: measured / closed-form seconds"""
    refit_gbps: float = DEFAULT_REFIT_GBPS
    """GB/s each GPU's serving shard reaches the engine at in a colocated refit"""
    source: str = ""

    def factor(self, phase: str, kind: str) -> float:
        return self.factors.get(f"{phase}_{kind}", 1.0)


@dataclass(frozen=True, kw_only=True, slots=True)
class Framework:
    """One framework's defaults (key meanings in ``frameworks.toml``)."""

    name: str = ""
    source: str
    backend: str
    max_num_seqs: int
    gpu_memory_utilization: float
    max_num_batched_tokens: int
    offload_training_state: bool
    reward_s_per_sample: float
    calibration: Calibration = field(default_factory=Calibration)


def read_calibration(path: str | Path = CALIBRATION_CSV) -> dict[str, dict[str, float]]:
    """framework (or :data:`POOLED`) -> quantity -> value, from a calibration CSV (framework, quantity, value, rows,
    fitted_on)."""
    frame = pl.read_csv(path)
    return {str(name): dict(zip(rows["quantity"].to_list(), map(float, rows["value"].to_list())))
            for (name,), rows in frame.group_by("framework", maintain_order=True)}


def calibrated(framework: Framework, table: dict[str, dict[str, float]]) -> Framework:
    """``framework`` with its own calibration where the table has one, each missing quantity from the pooled row."""
    values = {**table.get(POOLED, {}), **table.get(framework.name, {})}
    source = f"{CALIBRATION_CSV.name}: {framework.name if framework.name in table else POOLED}"
    return dataclasses.replace(framework, calibration=Calibration(
        factors={k: values[k] for k in FACTORS if k in values},
        refit_gbps=values.get("refit_gbps", DEFAULT_REFIT_GBPS), source=source))


@cache
def frameworks() -> dict[str, Framework]:
    """Every shipped profile by name, calibrated."""
    table = load_toml(PROFILES)["frameworks"]
    calibration = read_calibration() if CALIBRATION_CSV.is_file() else {}
    return {name: calibrated(build(Framework, {"name": name, **raw}, f"{PROFILES.name}: {name}"), calibration)
            for name, raw in table.items()}


def get_framework(name: str) -> Framework:
    """A profile by name; an unknown one is one line naming the known."""
    known = frameworks()
    if name not in known:
        raise ConfigError(f"framework must be one of {', '.join(sorted(known))}, got {name!r}")
    return known[name]
