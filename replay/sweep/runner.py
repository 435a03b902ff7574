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
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from rltrace.replay.sweep.grid import FILE_KEYS, Point, file_digest, point_id
from rltrace.replay.sweep.point import ROW_COLUMNS, ROW_VERSION, prepared, run_point

from rltrace import jsontext
from rltrace.errors import ConfigError, RltraceError
from rltrace.manifest import MANIFEST_FILE
from rltrace.signals import keep_sigterm
from rltrace.version import __version__

SOURCE_FILE = "source.json"
"""in a sweep's folder: what its points replayed (:func:`source_identity`)"""
Outcome = tuple[str, dict[str, Any] | None, str | None]
"""(point id, metrics row or None, error line or None)"""


def source_identity(source: str) -> dict[str, str]:
    """A swept source's absolute path and content digest (a bundle's manifest.json, which holds its tables' row
    counts and its run's id, or the described job's file): one re-recorded in place is another source."""
    where = Path(source).resolve()
    content = where / MANIFEST_FILE if where.is_dir() else where
    return {"path": str(where), "sha256": file_digest(str(content))}


@dataclass(frozen=True, slots=True)
class Store:
    """The sweep's folder of per-point results, of one source (``source``: the bundle folder or description file
    swept; its path and content digest are kept in :data:`SOURCE_FILE`, and a folder of another source's points is
    refused: a point's id names its parameters, not what it replays). A folder of points that names no source (an
    older rltrace's) is taken as this source's."""

    root: Path
    source: str = ""

    def __post_init__(self) -> None:
        if self.source:
            self._claim(source_identity(self.source))
        (self.root / "points").mkdir(parents=True, exist_ok=True)

    def _claim(self, ident: dict[str, str]) -> None:
        kept = self.root / SOURCE_FILE
        try:
            before = json.loads(kept.read_text(encoding="utf-8"))
        except FileNotFoundError:
            before = None
        except (OSError, ValueError):
            before = {}  # unreadable: not one this wrote
        same = isinstance(before, dict) and (before.get("sha256") == ident["sha256"] if ident["sha256"]
                                             else before.get("path") == ident["path"])
        if before is None or (not same and not any((self.root / "points").glob("*.json"))):
            # a new folder, or one whose sweep kept no point (it stopped before any ran: no Ray at the address)
            self.root.mkdir(parents=True, exist_ok=True)
            kept.write_text(json.dumps(ident), encoding="utf-8")
            return
        if not same:  # the content decides: a sample reached through another install is the same source
            was = before.get("path", "another source") if isinstance(before, dict) else "another source"
            changed = " as it was then (it has changed since)" if was == ident["path"] else ""
            raise ConfigError(f"{self.root}: holds the points of a sweep of {was}{changed}, not of "
                              f"{ident['path']}; write to another -o (or empty this one)")

    def path(self, pid: str, error: bool = False) -> Path:
        return self.root / "points" / f"{pid}{'.error' if error else ''}.json"

    def done(self, pid: str) -> bool:
        """Whether the point has a result of this row version (one saved by an older rltrace, whose figures meant
        something else, runs again)."""
        path = self.path(pid)
        if not path.is_file():
            return False
        try:
            row = json.loads(path.read_text()).get("row") or {}
        except (OSError, ValueError):
            return False  # a torn or foreign file: the point runs again and replaces it
        return bool(row.get("row_version") == ROW_VERSION)

    def save(self, pid: str, point: Point, row: dict[str, Any] | None, error: str | None) -> None:
        target = self.path(pid, error=row is None)
        tmp = target.with_suffix(".tmp")
        try:
            tmp.write_text(jsontext.dumps({"id": pid, "point": point, "row": row, "error": error}, sort_keys=True))
            os.replace(tmp, target)
        except BaseException:  # interrupted mid-write (Ctrl-C, SIGTERM): no half-written file is left
            tmp.unlink(missing_ok=True)
            raise
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
        if not rows:
            return pl.DataFrame()
        frame = pl.DataFrame(rows, infer_schema_length=None)  # a stored row's keys are sorted: ROW_COLUMNS' order
        return frame.select(*[c for c in frame.columns if c not in ROW_COLUMNS], *ROW_COLUMNS)


@dataclass(slots=True)
class SweepResult:
    """What a sweep did: how many points ran, were skipped as already done, or failed (id -> error)."""

    ran: int = 0
    skipped: int = 0
    failed: dict[str, str] = field(default_factory=dict)


def _warm(bundle: str, point: Point) -> None:
    """Load what a point of ``bundle`` needs (imports, its workload); a bad point fails later, where it runs."""
    try:
        prepared(bundle, point)
    except RltraceError:
        pass


def _guarded(bundle: str, point: Point) -> tuple[dict[str, Any] | None, str | None]:
    """One point, with bad input turned into an error line instead of an exception."""
    try:
        return run_point(bundle, point), None
    except RltraceError as e:
        return None, " ".join(str(e).split())
    except Exception as e:  # noqa: BLE001 -- a bug in one point must not sink the sweep; its type and message are kept
        return None, f"{type(e).__name__}: {' '.join(str(e).split())}"


@dataclass(frozen=True, slots=True)
class LocalPool:
    """Worker processes kept for several :func:`run_sweep` calls (advise's rounds), so that they start once and keep
    what they loaded (the bundle's workload, prepared clusters). With ``inline`` this process runs points too, as
    one of the workers: one process fewer to start, and its own caches used."""

    executor: ProcessPoolExecutor | None
    processes: int
    inline: bool

    def warm(self, bundle: str, point: Point) -> None:
        """Start the processes now, each loading ``bundle``'s workload as ``point`` draws it, while this process
        does other work (their imports and the bundle's reading take a second or two)."""
        if self.executor is not None:
            for _ in range(self.processes):
                self.executor.submit(_warm, str(Path(bundle).resolve()), point)


@contextmanager
def local_pool(workers: int, *, inline: bool = False) -> Iterator[LocalPool]:
    """A :class:`LocalPool` of ``workers`` workers (this process one of them with ``inline``), stopped on exit."""
    if workers < 1:
        raise ConfigError("--workers must be at least 1")
    processes = workers - 1 if inline else workers
    if processes < 1 or workers == 1:
        yield LocalPool(None, 0, True)
        return
    executor = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield LocalPool(executor, processes, inline)
    except BaseException:  # interrupted (Ctrl-C, SIGTERM to this process alone): queued points must not run on
        running = list((getattr(executor, "_processes", None) or {}).values())  # (shutdown forgets them)
        executor.shutdown(wait=False, cancel_futures=True)
        for process in running:
            process.terminate()  # a running point's result would be discarded: stop it too
        raise
    executor.shutdown(wait=True)


def local(bundle: str, todo: list[tuple[str, Point]], workers: int, pool: LocalPool | None = None) -> Iterator[Outcome]:
    """Points on ``pool``, else on a pool of ``workers`` processes started for them (spawned: polars' threads and
    fork don't mix); with one worker, in this process (no pickling, and a profiler sees the work)."""
    if pool is None:
        with local_pool(workers) as started:
            yield from local(bundle, todo, workers, started)
        return
    pending: dict[Future[tuple[dict[str, Any] | None, str | None]], str] = {}
    queue = deque(todo)
    while queue or pending:
        while queue and pool.executor is not None and (not pool.inline or len(pending) < pool.processes):
            pid, point = queue.popleft()  # to the processes: all at once, or one each while this one runs its own
            pending[pool.executor.submit(_guarded, bundle, point)] = pid
        if queue:  # inline: this process takes the next point
            pid, point = queue.popleft()
            yield (pid, *_guarded(bundle, point))
            finished = {f for f in pending if f.done()}
        else:
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
                with keep_sigterm():  # Ray's own handler dumps a native stack and exits 1 on SIGTERM
                    ray.init(address=address, num_cpus=None if address else workers, include_dashboard=False,
                             log_to_driver=False, configure_logging=False)
            except ConnectionError as e:
                # Ray >= 2.59 turns token auth on for clusters from `ray start`; a client only sends the
                # token when told to, and the failure then reads as a plain connection error.
                raise ConfigError(f"--ray-address {address}: cannot connect ({e}); a cluster with token auth "
                                  "needs RAY_AUTH_MODE=token here (token from RAY_AUTH_TOKEN or ~/.ray/auth_token)"
                                  ) from None
            except BaseException:  # interrupted while Ray starts: what it started so far stops too
                ray.shutdown()
                raise
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


def _this_version(row: dict[str, Any] | None, error: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """A worker's outcome as this rltrace reads it: a row of another row version (a Ray worker that imports another
    rltrace install than this process) is an error saying so, not a result that :meth:`Store.done` would then
    drop without a word."""
    if row is None or row.get("row_version") == ROW_VERSION:
        return row, error
    return None, (f"the worker's rltrace wrote row version {row.get('row_version')}, this one ({__version__}, "
                  f"{Path(jsontext.__file__).parent}) reads {ROW_VERSION}: the workers import another rltrace "
                  "install; install this one where they run")


def run_sweep(bundle: str, points: list[Point], store: Store, *, workers: int = 2, ray: str | None | bool = False,
              progress: Callable[[int, int], None] | None = None,
              pool: LocalPool | None = None) -> SweepResult:
    """Run the points not yet in ``store``; ``ray`` False runs locally (on ``pool`` when given, see
    :func:`local_pool`), True on a local Ray, a string on the Ray cluster at that address. ``progress(done,
    total)`` is called as points land."""
    if workers < 1:
        raise ConfigError("--workers must be at least 1")
    bundle = str(Path(bundle).resolve())  # workers (a pool's, Ray's) do not share this process's cwd
    result = SweepResult()
    todo, seen = [], set()
    for point in points:
        pid = point_id(point)
        if pid in seen:  # a point given twice (two of advise's shares at one split): one replay, counted once
            continue
        seen.add(pid)
        if store.done(pid):
            result.skipped += 1
        else:  # a file a setting names, as the bundle, by its absolute path
            todo.append((pid, {k: str(Path(v).resolve()) if k in FILE_KEYS and v else v for k, v in point.items()}))
    by_id = dict(todo)
    if progress:
        progress(result.skipped, len(seen))
    outcomes: Iterator[Outcome] = iter(())  # nothing to run: start no pool and no Ray
    if todo:
        outcomes = local(bundle, todo, workers, pool) if ray is False else on_ray(
            bundle, todo, ray if isinstance(ray, str) else None, workers)
    try:
        for pid, outcome, why in outcomes:
            row, error = _this_version(outcome, why)
            store.save(pid, by_id[pid], row, error)
            if row is None:
                result.failed[pid] = error or "failed"
            else:
                result.ran += 1
            if progress:
                progress(result.skipped + result.ran + len(result.failed), len(seen))
    finally:  # interrupted here, not inside the pool's generator: stop its workers now, not when it is collected
        close = getattr(outcomes, "close", None)
        if close is not None:
            close()
    return result
