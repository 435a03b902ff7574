"""A replay's settings resolved against every config they may address: the replay's own (``cost.*``,
``metrics.*``, ``network.*``), GPU prices (``prices.<GPU>``) and each chosen scheduler's Config
(``<scheduler>.<key>``). Shared by ``rltrace replay``, ``sweep`` and ``advise``.

Settings arrive as typed values (a sweep grid's TOML values, ``--topology``'s parsed spec) or as ``--set``
text read once by :func:`rltrace.config.parse_set`; they go onto the config dataclasses directly and come
out as dataclasses (the replay's :class:`ReplayConfig`, each scheduler's own ``Config``), never through text
again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rltrace.replay.run import ReplayConfig
from rltrace.replay.schedulers import lookup, names

from rltrace.catalog import get_gpu, load_gpus
from rltrace.config import Assignment, override, parse_set
from rltrace.errors import ConfigError
from rltrace.limits import check_price


@dataclass(frozen=True, slots=True)
class Settings:
    """The resolved settings."""

    config: ReplayConfig
    per_scheduler: dict[str, Any]
    """each chosen scheduler's Config dataclass, for ``replay(..., settings=)``"""
    prices: dict[str, float]
    """USD per GPU-hour by GPU kind"""


def resolve(schedulers: list[str], sets: Iterable[str] = (), values: Mapping[str, Any] | None = None,
            *, where: str = "") -> Settings:
    """Apply ``sets`` (``--set key=value`` items), then ``values`` (dotted key -> typed value: a flag such as
    ``--topology``, a grid point's keys) to the defaults. An unknown key, or one both give, is a ConfigError naming
    it and where it came from (the ``--set`` item, or ``where`` for ``values``)."""
    assignments: list[Assignment] = [(*parse_set(item), f"--set {item!r}") for item in sets]
    given = {key: origin for key, _, origin in assignments}
    for key in values or {}:  # one would win without a word
        if key in given:
            raise ConfigError(f"{where or 'settings'} and {given[key]} both set {key}: give one")
    assignments += [(k, v, where or "settings") for k, v in (values or {}).items()]
    prices = {name: gpu.usd_per_hour for name, gpu in load_gpus().items()}
    by_scheduler: dict[str, list[Assignment]] = {name: [] for name in schedulers}
    replay: list[Assignment] = []
    for key, value, origin in assignments:
        head, _, rest = key.partition(".")
        if head == "prices":  # GPU kinds by name, case-insensitively, as the catalog looks them up everywhere
            try:
                kind = get_gpu(rest).name
            except ConfigError:
                raise ConfigError(f"{origin}: unknown key {key!r} (GPU kinds: {', '.join(sorted(prices))})") from None
            prices[kind] = check_price(f"{origin}: {key}", value)
        elif head in by_scheduler and rest:
            by_scheduler[head].append((rest, value, origin))
        elif rest and head in names():
            raise ConfigError(f"{origin}: unknown key {key!r} ({head} is not among the chosen schedulers: "
                              f"{', '.join(schedulers)})")
        else:  # anything else is the replay's (an unchosen scheduler's key is unknown there)
            replay.append((key, value, origin))
    per_scheduler = {name: override(lookup(name).Config(), by_scheduler[name], f"scheduler {name}", f"{name}.")
                     for name in schedulers}
    return Settings(override(ReplayConfig(), replay, "replay"), per_scheduler, prices)
