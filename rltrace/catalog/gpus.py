"""Accelerator catalog: datasheet figures (see ``gpus.toml`` for each source), extendable from TOML."""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path
from typing import Any

from rltrace.catalog._toml import load_toml, lookup
from rltrace.errors import ConfigError


@dataclass(frozen=True, kw_only=True, slots=True)
class GPUSpec:
    """One accelerator kind; units in the field names."""

    name: str
    bf16_tflops: float
    hbm_gbps: float
    memory_gb: float
    nvlink_gbps: float
    source: str = ""

    @property
    def flops(self) -> float:
        """Peak dense BF16 FLOP/s."""
        return self.bf16_tflops * 1e12

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_gbps * 1e9


def _spec(name: str, raw: dict[str, Any], where: str) -> GPUSpec:
    allowed = {f.name for f in fields(GPUSpec)} - {"name"}
    unknown = set(raw) - allowed
    if unknown:
        raise ConfigError(f"{where}: gpu {name!r} has unknown key {sorted(unknown)[0]!r}")
    try:
        spec = GPUSpec(name=name, **raw)
    except TypeError as e:
        raise ConfigError(f"{where}: gpu {name!r}: {e}") from None
    for key in ("bf16_tflops", "hbm_gbps", "memory_gb", "nvlink_gbps"):
        value = getattr(spec, key)
        if not isinstance(value, (int, float)) or value <= 0:
            raise ConfigError(f"{where}: gpu {name!r}: {key} must be a positive number")
    return spec


@cache
def _builtin() -> dict[str, GPUSpec]:
    path = Path(__file__).with_name("gpus.toml")
    return {n: _spec(n, raw, str(path)) for n, raw in load_toml(path)["gpus"].items()}


def load_gpus(extra: str | Path | None = None) -> dict[str, GPUSpec]:
    """Built-in GPUs plus (overriding by name) the [gpus.NAME] tables of a user TOML file."""
    gpus = dict(_builtin())
    if extra is not None:
        for name, raw in (load_toml(extra).get("gpus") or {}).items():
            gpus[name] = _spec(name, raw, str(extra))
    return gpus


def get_gpu(name: str, extra: str | Path | None = None) -> GPUSpec:
    """Look a GPU kind up by name, case-insensitively."""
    return lookup(load_gpus(extra), name, "GPU kind")
