"""A replay run as the analysis sees it: the files ``RunResult.write`` puts in a run folder, or the result
object itself straight after a replay (``rltrace replay --dashboard``)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import polars as pl
import pyarrow as pa

from rltrace.errors import ConfigError
from rltrace.manifest import MANIFEST_FILE
from rltrace.sample_traces import list_samples

TABLES = ("timeline", "requests", "links", "steps")
"""Parquet files of a run folder; timeline and requests are required, links and steps optional."""
ORDER_FILE = "runs.json"
"""in a folder of run folders: ``{"runs": [names]}``, the order the replay compared them in (its first is the
baseline a table or report takes by default)"""


class ResultLike(Protocol):
    """What :meth:`Run.from_result` reads (``rltrace.replay.run.RunResult`` has it); read-only, so that a
    frozen result satisfies it."""

    @property
    def metrics(self) -> dict[str, Any]: ...
    @property
    def config(self) -> dict[str, Any]: ...
    @property
    def timeline(self) -> pl.DataFrame: ...
    @property
    def requests(self) -> pl.DataFrame: ...
    @property
    def steps(self) -> pl.DataFrame | None: ...
    @property
    def links(self) -> pl.DataFrame | None: ...


@dataclass(frozen=True, slots=True)
class Run:
    """One replayed run: its label, metrics.json, config.json and tables."""

    name: str
    metrics: dict[str, Any]
    config: dict[str, Any]
    timeline: pl.DataFrame
    """resource, pool, kind, step, id, start_s, end_s (docs/replay.md)"""
    requests: pl.DataFrame
    """one row per replayed request: instance, start_s, first_token_s, finish_s, output_tokens, ..."""
    links: pl.DataFrame | None = None
    """link, kind, what, step, start_s, end_s, bytes, utilization (runs with a --topology)"""
    steps: pl.DataFrame | None = None
    """job, step, end_s, step_time_s (and, from runs of 2026-11-26 on, each step's volumes: replay.run.RunResult)"""
    folder: Path | None = None
    """where it was read from (None: a result in memory)"""

    @property
    def scheduler(self) -> str:
        return str(self.config.get("scheduler", {}).get("name", self.name))

    @classmethod
    def from_result(cls, name: str, result: ResultLike) -> Run:
        """Wrap a replay's in-memory result, without writing it."""
        return cls(name, result.metrics, result.config, result.timeline, result.requests, result.links, result.steps)


def load_run(folder: str | Path, name: str | None = None) -> Run:
    """Read a run folder (``rltrace replay -o OUT`` writes one per scheduler under OUT)."""
    root = Path(folder)
    if not (root / "metrics.json").is_file():
        raise ConfigError(f"{root}: not a run folder (no metrics.json)")
    metrics, config = _json(root / "metrics.json"), _json(root / "config.json")
    _check_numbers(metrics, root / "metrics.json")
    _check_required(metrics, root / "metrics.json")
    frames: dict[str, pl.DataFrame | None] = {}
    for table in TABLES:
        path = root / f"{table}.parquet"
        if not path.exists():
            if table in ("timeline", "requests"):
                raise ConfigError(f"{path}: missing (a run folder holds timeline.parquet and requests.parquet)")
            frames[table] = None
            continue
        try:
            frames[table] = pl.read_parquet(path)
        except (pl.exceptions.PolarsError, pa.ArrowException, OSError) as e:
            raise ConfigError(f"{path}: unreadable Parquet ({str(e).splitlines()[0]})") from None
    timeline, requests = frames["timeline"], frames["requests"]
    assert timeline is not None and requests is not None
    if "job" not in timeline.columns:  # an older run folder (no job column): its one job, or unknown
        one = "job" not in requests.columns or requests["job"].n_unique() <= 1
        timeline = timeline.with_columns(pl.lit(0 if one else -1, pl.Int32).alias("job"))
    return Run(name or root.name, metrics, config, timeline, requests, frames["links"], frames["steps"], root)


# metrics.json sections that hold figures only (others, such as ``network`` and ``spread``, also name things)
_FIGURES = ("bubble_fraction", "gpu_utilization", "gpus", "latency", "phases_s_per_step", "staleness", "step_time_s",
            "volume_bytes_per_step")


# keys every replay has written, in every layout: without them a report would read zeros as figures
_REQUIRED = ("steps", "samples", "makespan_s", "cost_usd", "throughput_samples_per_s", "step_time_s",
             "bubble_fraction", "gpu_utilization")


def _check_required(metrics: dict[str, Any], path: Path) -> None:
    """A damaged metrics.json (a key gone, a negative count, time or cost) named, not read as zeros."""
    missing = [key for key in _REQUIRED if key not in metrics]
    if missing:
        raise ConfigError(f"{path}: missing {', '.join(missing)} (every replay writes them: a damaged file)")
    negative = next((key for key in ("steps", "samples", "makespan_s", "cost_usd")
                     if metrics[key] is not None and metrics[key] < 0), None)
    if negative is not None:
        raise ConfigError(f"{path}: {negative} must be >= 0, got {metrics[negative]!r}")


def _check_numbers(metrics: dict[str, Any], path: Path) -> None:
    """A replay's metrics.json holds numbers (or null) at its top level and in its sections of figures: a word
    there is a damaged file, named here rather than met as a ValueError deep in a dashboard."""
    def walk(value: Any, where: str) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, f"{where}.{key}")
        elif isinstance(value, list):
            for inner in value:
                walk(inner, where)
        elif not (value is None or isinstance(value, (int, float))):
            raise ConfigError(f"{path}: {where} must be a number, got {value!r}")

    for key, value in metrics.items():
        if key in _FIGURES and value is not None and not isinstance(value, dict):  # a dashboard reads its keys
            raise ConfigError(f"{path}: {key} must be a table of figures, got {value!r}")
        if not isinstance(value, dict | list) or key in _FIGURES:
            walk(value, key)


def load_runs(paths: str | Path | Sequence[str | Path]) -> list[Run]:
    """The runs of one path or several, each a run folder or a folder of run folders (``-o OUT`` of a
    multi-scheduler replay): ``load_runs("runs")``, ``load_runs(["runs/a", "runs/b"])``.

    Runs are labelled by folder name; where two share a name, by parent/name. A folder of runs lists them in the
    order the replay compared them (its :data:`ORDER_FILE`, so the first is the same baseline), else
    alphabetically."""
    given = [paths] if isinstance(paths, str | os.PathLike) else paths
    if not isinstance(given, Sequence) or not given or not all(isinstance(p, str | os.PathLike) for p in given):
        raise ConfigError(f"load_runs takes a run folder's path or a non-empty list of them, got {paths!r:.60}")
    folders: list[Path] = []
    for path in map(Path, given):
        if not path.exists():
            sample = str(path) in list_samples()
            raise ConfigError(f"{path}: no such run folder" + (_replay_first(path, "a shipped sample's name")
                                                               if sample else ""))
        if (path / "metrics.json").is_file():
            folders.append(path)
            continue
        inner = _in_order(path, sorted(p for p in path.iterdir() if (p / "metrics.json").is_file())) \
            if path.is_dir() else []
        if not inner:
            bundle = (path / MANIFEST_FILE).is_file()
            raise ConfigError(f"{path}: not a run folder (no metrics.json) and holds none"
                              + (_replay_first(path, "a trace bundle") if bundle else ""))
        folders += inner
    names = [f.name for f in folders]
    labels = [f"{f.parent.name}/{f.name}" if names.count(f.name) > 1 else f.name for f in folders]
    if len(set(labels)) < len(labels):
        raise ConfigError(f"the same run is given twice: {', '.join(sorted(str(f) for f in folders))}")
    return [load_run(f, label) for f, label in zip(folders, labels)]


def write_order(folder: Path, names: Sequence[str]) -> None:
    """Record ``names`` first in ``folder``'s run order (:data:`ORDER_FILE`), the runs it held before after them (a
    damaged order file is replaced: the runs this replay writes come first all the same)."""
    try:
        before = _order(folder)
    except ConfigError:
        before = []
    (folder / ORDER_FILE).write_text(json.dumps({"runs": list(dict.fromkeys([*names, *before]))}), encoding="utf-8")


def _order(folder: Path) -> list[str]:
    """The run names of ``folder``'s order file, [] where it has none; a ConfigError where it holds something else
    (the first run is the baseline: falling back to alphabetical order would change it without a word)."""
    path = folder / ORDER_FILE
    try:
        runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
    except FileNotFoundError:
        return []
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror or e})") from None
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        runs = None
    if not isinstance(runs, list) or not all(isinstance(r, str) for r in runs):
        raise ConfigError(f"{path}: not the run order a replay writes ({{\"runs\": [names]}}); fix or delete it "
                          "(without it, runs are ordered by name and the first is the baseline)")
    return runs


def _in_order(folder: Path, runs: list[Path]) -> list[Path]:
    """``runs`` (alphabetical) in the order the replay that wrote them compared them, the others after."""
    if not runs:  # no runs to order: the caller says the folder holds none
        return runs
    rank = {name: i for i, name in enumerate(_order(folder))}
    return sorted(runs, key=lambda p: rank.get(p.name, len(rank)))


def _replay_first(path: Path, what: str) -> str:
    """What to do with a bundle given where runs belong."""
    return f"; it is {what}: `rltrace replay {path} -o runs` writes run folders, then `rltrace dashboard runs`"


def _json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return value
