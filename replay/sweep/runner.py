"""Run sweep points on a local process pool or as Ray tasks; checkpoint each result as it lands.

A point's result is a JSON file ``OUT/points/<id>.json`` (parameters + metrics row), written atomically the
moment it finishes, so an interrupted sweep loses nothing finished and a rerun skips it. A failed point
leaves ``<id>.error.json`` (its parameters and the one-line error) and is tried again on the next run.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from rltrace.replay.sweep.grid import Point, point_id
from rltrace.replay.sweep.point import run_point

from rltrace.errors import ConfigError, RltraceError

Outcome = tuple[str, dict[str, Any] | None, str | None]
"""(point id, metrics row or None, error line or None)"""


@dataclass(frozen=True, slots=True)
class Store:
    """The sweep's folder of per-point results."""

    root: Path

    def __post_init__(self) -> None:
        (self.root / "points").mkdir(parents=True, exist_ok=True)

    def path(self, pid: str, error: bool = False) -> Path:
        return self.root / "points" / f"{pid}{'.error' if error else ''}.json"

    def done(self, pid: str) -> bool:
        return self.path(pid).is_file()

    def save(self, pid: str, point: Point, row: dict[str, Any] | None, error: str | None) -> None:
        target = self.path(pid, error=row is None)
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps({"id": pid, "point": point, "row": row, "error": error}, sort_keys=True))
        os.replace(tmp, target)
        if row is not None:
            self.path(pid, error=True).unlink(missing_ok=True)

    def frame(self, points: list[Point]) -> pl.DataFrame:
        """One row per finished point of ``points``: ``point_id``, the parameters, then the metrics."""
        rows = []
        for point in points:
            pid = point_id(point)
            if self.done(pid):
                saved = json.loads(self.path(pid).read_text())
                rows.append({"point_id": pid, **point, **saved["row"]})
        return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()


@dataclass(slots=True)
class SweepResult:
    """What a sweep did: how many points ran, were skipped as already done, or failed (id -> error)."""

    ran: int = 0
    skipped: int = 0
    failed: dict[str, str] = field(default_factory=dict)


def _guarded(bundle: str, point: Point) -> tuple[dict[str, Any] | None, str | None]:
    """One point, with bad input turned into an error line instead of an exception."""
    try:
        return run_point(bundle, point), None
    except RltraceError as e:
        return None, " ".join(str(e).split())
    except Exception as e:  # noqa: BLE001 -- a bug in one point must not sink the sweep; its type and message are kept
        return None, f"{type(e).__name__}: {' '.join(str(e).split())}"


def local(bundle: str, todo: list[tuple[str, Point]], workers: int) -> Iterator[Outcome]:
    """Points on a pool of ``workers`` processes (spawned: polars' threads and fork don't mix)."""
    if workers == 1:  # in-process: no pickling, and a profiler sees the work
        for pid, point in todo:
            yield (pid, *_guarded(bundle, point))
        return
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        pending: dict[Future[tuple[dict[str, Any] | None, str | None]], str] = {
            pool.submit(_guarded, bundle, point): pid for pid, point in todo}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                yield (pending.pop(future), *future.result())


def on_ray(bundle: str, todo: list[tuple[str, Point]], address: str | None, workers: int) -> Iterator[Outcome]:
    """Points as Ray tasks on the cluster at ``address`` or, with None, on a local Ray started (and stopped)
    for this sweep. The bundle path must be readable from every node (a shared filesystem or a sample)."""
    try:
        import ray  # an optional extra (rltrace[ray]): only --ray imports it
    except ImportError:
        raise ConfigError("--ray needs Ray: pip install 'rltrace[ray]'") from None
    started = not ray.is_initialized()
    if started:
        # Ray puts the driver's working directory first on every worker's sys.path; run from a source
        # checkout, its rltrace/ folder would shadow the installed package. Start Ray from an empty folder.
        here = os.getcwd()
        with tempfile.TemporaryDirectory() as neutral:
            os.chdir(neutral)
            try:
                ray.init(address=address, num_cpus=None if address else workers, include_dashboard=False,
                         log_to_driver=False, configure_logging=False)
            except ConnectionError as e:
                # Ray >= 2.59 turns token auth on for clusters from `ray start`; a client only sends the
                # token when told to, and the failure then reads as a plain connection error.
                raise ConfigError(f"--ray {address}: cannot connect ({e}); a cluster with token auth needs "
                                  "RAY_AUTH_MODE=token here (token from RAY_AUTH_TOKEN or ~/.ray/auth_token)") from None
            finally:
                os.chdir(here)
    try:
        task = ray.remote(num_cpus=1)(_guarded)
        pending = {task.remote(bundle, point): pid for pid, point in todo}
        while pending:
            finished, _ = ray.wait(list(pending), num_returns=1)
            for ref in finished:
                yield (pending.pop(ref), *ray.get(ref))
    finally:
        if started:
            ray.shutdown()


def run_sweep(bundle: str, points: list[Point], store: Store, *, workers: int = 2, ray: str | None | bool = False,
              progress: Callable[[int, int], None] | None = None) -> SweepResult:
    """Run the points not yet in ``store``; ``ray`` False runs locally, True on a local Ray, a string on the
    Ray cluster at that address. ``progress(done, total)`` is called as points land."""
    if workers < 1:
        raise ConfigError("--workers must be at least 1")
    bundle = str(Path(bundle).resolve())  # workers (a pool's, Ray's) do not share this process's cwd
    result = SweepResult()
    todo = []
    for point in points:
        pid = point_id(point)
        if store.done(pid):
            result.skipped += 1
        else:
            todo.append((pid, point))
    by_id = dict(todo)
    if progress:
        progress(result.skipped, len(points))
    outcomes: Iterator[Outcome] = iter(())  # nothing to run: start no pool and no Ray
    if todo:
        outcomes = local(bundle, todo, workers) if ray is False else on_ray(
            bundle, todo, ray if isinstance(ray, str) else None, workers)
    for pid, row, error in outcomes:
        store.save(pid, by_id[pid], row, error)
        if row is None:
            result.failed[pid] = error or "failed"
        else:
            result.ran += 1
        if progress:
            progress(result.skipped + result.ran + len(result.failed), len(points))
    return result
