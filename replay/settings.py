"""``--set key=value`` assignments resolved against every config they may address: the replay's own
(``cost.*``, ``metrics.*``, ``network.*``), GPU prices (``prices.<GPU>``) and each chosen scheduler's Config
(``<scheduler>.<key>``). Shared by ``rltrace replay``, ``sweep`` and ``advise``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rltrace.replay.run import ReplayConfig
from rltrace.replay.schedulers import lookup

from rltrace.catalog import load_gpus
from rltrace.config import apply_sets, build, to_dict
from rltrace.limits import check_price


@dataclass(frozen=True, slots=True)
class Settings:
    """The resolved assignments."""

    config: ReplayConfig
    per_scheduler: dict[str, dict[str, Any]]
    """each scheduler's Config fields, as a dict for ``replay(..., settings=)``"""
    prices: dict[str, float]
    """USD per GPU-hour by GPU kind"""


def resolve(schedulers: list[str], sets: list[str]) -> Settings:
    """Apply ``sets`` to the defaults; an unknown key or scheduler is a ConfigError naming it."""
    tree: dict[str, Any] = to_dict(ReplayConfig())
    tree["prices"] = {name: gpu.usd_per_hour for name, gpu in load_gpus().items()}
    for name in schedulers:
        tree[name] = to_dict(lookup(name).Config())
    apply_sets(tree, sets)
    prices = {gpu: check_price(f"prices.{gpu}", usd) for gpu, usd in tree.pop("prices").items()}
    per_scheduler = {name: tree.pop(name) for name in schedulers}
    return Settings(build(ReplayConfig, tree, "replay"), per_scheduler, prices)
