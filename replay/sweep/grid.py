"""A sweep grid: the replay parameters to vary (axes) and those held fixed, from TOML.

    # grid.toml
    [axes]                       # every combination of these is one point
    scheduler = ["disagg-sync", "rollpacker", "streamrl"]
    gen_gpus = [8, 16]
    gpu = ["H100", "H800"]
    topology = ["", "fat-tree:k=8,gpu=H800"]   # "" = no network model

    [fixed]                      # the same for every point
    steps = 4
    train_gpus = 8
    "cost.train_mfu" = 0.4       # any `rltrace replay --set` key

Parameters: ``scheduler``, the reshaping options of ``rltrace replay`` (:data:`SHAPE_KEYS`), ``topology``,
``sync_strategy``, and dotted ``--set`` keys (``cost.*``, ``metrics.*``, ``prices.<GPU>``, ``<scheduler>.*``).
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from rltrace.replay.loading import Shape
from rltrace.replay.schedulers import lookup, names
from rltrace.replay.schedulers.base import capabilities
from rltrace.replay.settings import resolve
from rltrace.replay.topologies.base import TopologySpec

from rltrace.catalog import get_gpu, get_model
from rltrace.catalog._toml import load_toml
from rltrace.errors import ConfigError
from rltrace.files import sha256_of
from rltrace.limits import check_grid_size

SHAPE_KEYS = tuple(f.name for f in fields(Shape))
"""gen_gpus, train_gpus, gpu, gen_gpu, train_gpu, tp, max_seqs, model, steps, prompts_per_step,
samples_per_prompt, max_new_tokens, seed, source_steps"""
NETWORK_KEYS = ("topology", "sync_strategy")
GPU_KEYS = ("gpu", "gen_gpu", "train_gpu")
"""parameters that name a GPU kind, looked up without case"""

Point = dict[str, Any]
"""One replay's parameters: scheduler, shape keys, network keys and dotted set keys."""


@dataclass(frozen=True, slots=True)
class Grid:
    """Axes to combine and values held fixed."""

    axes: dict[str, list[Any]]
    fixed: dict[str, Any]

    def points(self) -> list[Point]:
        """Every combination, in axis order (the last axis varies fastest); fixed values added to each."""
        keys = list(self.axes)
        return [{**self.fixed, **dict(zip(keys, combo))} for combo in itertools.product(*self.axes.values())]


def load_grid(path: Path) -> Grid:
    """Read and check a grid file; every point's keys are validated before anything runs."""
    data = load_toml(path)
    unknown = set(data) - {"axes", "fixed"}
    if unknown:
        raise ConfigError(f"{path}: unknown table(s) {', '.join(sorted(unknown))} (expected [axes] and [fixed])")
    axes, fixed = data.get("axes", {}), data.get("fixed", {})
    for name, table in (("axes", axes), ("fixed", fixed)):
        if not isinstance(table, dict):  # `axes = 3`, `[[axes]]`: named here, not an error from .items()
            raise ConfigError(f"{path}: {name} must be a table ([{name}] with one key per parameter), got "
                              f"{type(table).__name__}")
    if not axes:
        raise ConfigError(f"{path}: no [axes]: a grid needs at least one parameter to vary")
    for key, values in axes.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{path}: axes.{key} must be a non-empty list")
        check_distinct(values, key, f"{path}: axes.{key}", "point")
    both = set(axes) & set(fixed)
    if both:
        raise ConfigError(f"{path}: {', '.join(sorted(both))} both varied and fixed")
    check_grid_size(axes, str(path))  # before the points are built
    grid = Grid(dict(axes), dict(fixed))
    check(grid.points(), str(path))
    return grid


def identity(key: str, value: Any) -> str:
    """What makes two values of parameter ``key`` one point: GPU kinds without case ("h100" is H100), a topology
    as its spec reads (``k=8,gpu=H800`` is ``gpu=H800,k=8``), recorded steps as the set a replay takes (``[4, 2]``
    is ``[2, 4]``); any other value (a table too) as written."""
    if key in GPU_KEYS and isinstance(value, str):
        value = value.casefold()
    elif key in ("topology", "network.topology") and isinstance(value, str):
        try:
            spec = TopologySpec.parse(value) if value.strip() else None
        except ConfigError:  # refused, naming its grid or space file, by the checks that follow
            spec = None
        value = value.strip()  # "" and " ": no network model
        if spec is not None:
            value = [spec.name, [[k, v.casefold() if k in GPU_KEYS and isinstance(v, str) else v]
                                 for k, v in spec.params]]
    elif key == "source_steps" and isinstance(value, list) and all(isinstance(s, int) for s in value):
        value = sorted(set(value))
    return json.dumps(value, sort_keys=True, default=str)


def check_distinct(values: list[Any] | tuple[Any, ...], key: str, where: str, unit: str) -> None:
    """Refuse a list that gives one value twice, however spelt (:func:`identity`): each value is one ``unit``."""
    seen = [identity(key, v) for v in values]
    if len(set(seen)) < len(seen):
        first = next(s for s in seen if seen.count(s) > 1)
        spellings = dict.fromkeys(repr(v) for v, s in zip(values, seen) if s == first)  # "H100" and "h100"
        raise ConfigError(f"{where} lists {' and '.join(spellings)} twice (each value is one {unit})")


def check(points: list[Point], where: str) -> None:
    """Refuse unknown parameters and schedulers, and --set keys no config has, naming the first."""
    known = ("scheduler", *SHAPE_KEYS, *NETWORK_KEYS)
    for point in points:
        for key in point:  # first: a misspelt key ("schedular") is the reason a scheduler seems missing
            if key not in known and "." not in key:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise ConfigError(f"{where}: unknown parameter {key!r} ({hint}known: {', '.join(known)}, or a "
                                  "dotted --set key such as cost.train_mfu)")
        scheduler = point.get("scheduler")
        if scheduler is None:
            raise ConfigError(f"{where}: every point needs a scheduler: a 'scheduler' axis or fixed value")
        if scheduler not in names():
            raise ConfigError(f"{where}: unknown scheduler {scheduler!r} (known: {', '.join(names())})")
        for key in NETWORK_KEYS:  # settings() would let one override the other without a word
            if point.get(key) and f"network.{key}" in point:
                raise ConfigError(f"{where}: a point gives both {key} and network.{key}: give one")
        values = settings(point)
        resolve([scheduler], values=values, where=where)
        gen, train = point.get("gen_gpu") or point.get("gpu"), point.get("train_gpu") or point.get("gpu")
        if gen and train and gen != train and capabilities(lookup(scheduler)).colocates:
            raise ConfigError(f"{where}: a point of {scheduler} on {gen} generation and {train} training GPUs: it runs "
                              "generation and training on the same GPUs (give it one kind)")
        if values.get("network.sync_strategy") and not values.get("network.topology"):
            # without a fabric no sync strategy runs: such points would repeat the no-topology result under other
            # strategy names (rltrace replay refuses the same)
            raise ConfigError(f"{where}: a point with sync_strategy {values['network.sync_strategy']!r} and no "
                              "topology: a weight-sync strategy picks how a sync runs on a fabric; vary "
                              "sync_strategy only in a grid whose every point has a topology")
        steps = point.get("source_steps")
        if steps is not None and not (isinstance(steps, list) and steps and all(
                isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps)):
            raise ConfigError(f"{where}: source_steps must be a list of recorded step numbers, such as [2, 4, 6] (an "
                              f"axis: a list of such lists), got {steps!r}")
        try:  # types and limits of the shape keys (steps = "two" is named here, not a TypeError later)
            shape_of(point)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None


def shape_of(point: Point) -> Shape:
    """The point's workload shape (``source_steps``, a list in the grid, as the tuple a shape holds)."""
    given: dict[str, Any] = {k: tuple(v) if k == "source_steps" else v for k, v in point.items() if k in SHAPE_KEYS}
    return Shape(**given)


def check_names(points: list[Point], where: str, recorded: set[str]) -> None:
    """Refuse GPU kinds and models the catalog does not know, before anything runs (not as a failed point per
    design). A device the bundle recorded passes as it does in a replay, catalogued or not (a CPU run's "cpu")."""
    for point in points:
        try:
            for key in ("gpu", "gen_gpu", "train_gpu"):
                if point.get(key) is not None and point[key] not in recorded:
                    get_gpu(point[key])
            if point.get("model") is not None:
                get_model(point["model"])
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None


def settings(point: Point) -> dict[str, Any]:
    """The point's settings for :func:`rltrace.replay.settings.resolve`: its dotted keys and the network keys
    (``network.topology``, ...), with their values as the grid file typed them."""
    values = {k: v for k, v in point.items() if "." in k}
    values.update({f"network.{k}": point[k] for k in NETWORK_KEYS if point.get(k)})
    return values


FILE_KEYS = ("cost.calibration", "cost.profile")
"""settings that name a file: a point's id covers the file's content too"""


def point_id(point: Point) -> str:
    """A stable name for a point: a hash of its parameters (order-free) and of the content of any file a setting
    names (:data:`FILE_KEYS`), so a rerun finds its result and an edited calibration or profile runs again."""
    keyed = dict(point)
    for key in FILE_KEYS:
        if isinstance(point.get(key), str) and point[key]:
            keyed[f"{key}#sha256"] = file_digest(point[key])
    return hashlib.sha1(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:16]


def file_digest(path: str) -> str:
    """The SHA-256 of the file at ``path`` ("" where there is none: the run that reads it gives the error)."""
    try:
        return sha256_of(path)
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        return ""
