"""The per-process recorder: bounded in-memory buffers, flushed to this process's own shard every second.

Every process that records writes only to its own shard directory (``<root>/<host>-<pid>-<token>/``), so no
cross-process locks exist. A background thread flushes each table's buffer as one complete Parquet file per
flush (temporary name, then rename): a process killed with SIGKILL loses at most the last flush interval,
and whatever it left merges. Collector code never lets an exception reach the job: :meth:`Recorder.guard`
reports each kind of failure once on stderr and counts it for the manifest.

Losses are counted, never silent: rows a full buffer dropped, rows a failed flush could not write (after one
retry at the next flush), and collectives a collector skipped by design (one-rank groups). The counts go to
``meta.json`` and to ``counts.json``, a small file reserved (written full size) when the shard opens and then
overwritten in place: on a full disk, where no new file can be made, it still receives the counts, so a later
merge reports what was lost instead of claiming nothing was. A process that lost rows also says so on stderr
when it stops.
"""

from __future__ import annotations

# Imported now, not at exit: pyarrow builds a flush's arrays after asking pandas (where installed, as TRL and
# datasets install it) whether they are pandas objects, which imports pandas, whose import of
# concurrent.futures.thread registers an exit hook; during the last flush at interpreter exit that raised
# "can't register atexit after shutdown" and lost the rows.
import concurrent.futures.thread  # noqa: F401
import json
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType
from typing import Any

from rltrace.table_names import TABLE_NAMES

FLUSH_INTERVAL_S = float(os.environ.get("RLTRACE_FLUSH_S", "1.0"))
MAX_BUFFER_BYTES = 64 * 2**20
ROW_BYTES_ESTIMATE = 256  # generous per-row size of a buffered tuple, to bound memory by row count
MAX_BUFFER_ROWS = MAX_BUFFER_BYTES // ROW_BYTES_ESTIMATE
META_FILE = "meta.json"
COUNTS_FILE = "counts.json"
COUNTS_BYTES = 4096  # reserved size of counts.json: overwritten in place, so it needs no new space
# A shard's requests group_id that names its own request (no prompt to group by): the merge scopes it to its
# engine, as it does request ids; a prompt digest is the same on every engine and stays as it is.
REQUEST_GROUP = "request:"



class Recorder:
    """Buffers rows for one process and flushes them to its shard."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._errors: dict[str, int] = {}
        self._reported: set[str] = set()
        self.meta: dict[str, Any] = {}
        self.flush_hooks: list[Callable[[], None]] = []  # run before each flush (e.g. resolve NCCL timings)
        self._open_shard()

    # ------------------------------------------------------------------ lifecycle
    def _open_shard(self) -> None:
        self.pid = os.getpid()
        self.shard = self.root / f"{socket.gethostname()}-{self.pid}-{uuid.uuid4().hex[:6]}"
        # Rows are tuples in the bundle's column order; actor-like fields may hold process-local keys
        # ("self", "engine:<n>") that the merge resolves.
        self._buffers: dict[str, list[tuple[Any, ...]]] = {name: [] for name in TABLE_NAMES}
        self._seq = 0
        self.dropped = 0
        self.lost: dict[str, int] = {}  # table -> rows a failed flush could not write
        self.skipped: dict[str, int] = {}  # why -> events a collector left out by design
        self.not_recorded: dict[str, str] = {}  # what -> why: what this process's libraries do not let it record
        self._retry: dict[str, list[tuple[Any, ...]]] = {}  # rows of a failed flush, tried once more at the next one
        self._counted: str | None = None  # the counts last written to counts.json
        self.meta = {
            "pid": self.pid,
            "host": socket.gethostname(),
            "argv": list(sys.argv),
            "started_ns": time.time_ns(),
            "roles": [],
            "rank": None,
            "world": None,
            "engines": {},
            "backends": {},
        }
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="rltrace-flush", daemon=True)
        self._thread.start()

    def after_fork_in_child(self) -> None:
        """A forked child starts its own shard (threads and buffers do not survive fork)."""
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._errors, self._reported = {}, set()
        self._open_shard()

    def stop(self, *, at_exit: bool = False) -> None:
        """Flush everything and stop the flush thread (idempotent); say on stderr what could not be kept. A SIGINT
        that arrives meanwhile waits for the flush (torch's spawned ranks get one when their launcher dies, often
        while they exit): then it is raised, or at exit (``at_exit``: the process is ending anyway) dropped."""
        with _sigint_held() as held:
            self._stop_and_flush()
        if held and not at_exit:
            raise KeyboardInterrupt

    def _stop_and_flush(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
        self.flush(final=True)
        lost = sum(self.lost.values()) + self.dropped
        if lost and "lost" not in self._reported:
            self._reported.add("lost")
            why = ", ".join([f"{n:,} {t} rows a flush could not write" for t, n in self.lost.items()]
                            + ([f"{self.dropped:,} dropped (buffer full)"] if self.dropped else []))
            last = self._last_flush_error
            with suppress(Exception):  # stderr itself may be gone
                print(f"rltrace: warning: the recording of pid {self.pid} lost {lost:,} events: {why}"
                      f"{f' ({last})' if last else ''}", file=sys.stderr)

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` has begun (a flush hook runs once more for the final flush)."""
        return self._stop.is_set()

    def cannot(self, what: str, why: str) -> None:
        """Say once (stderr, and the manifest's ``not_recorded``) what a collector cannot record here and why:
        a library release that lacks a hook or a field. The rest records as usual."""
        if what in self.not_recorded:
            return
        self.not_recorded[what] = why
        with suppress(Exception):  # stderr itself may be gone
            print(f"rltrace: warning: {what} not recorded: {why}", file=sys.stderr)

    def skip(self, why: str, n: int = 1) -> None:
        """Count ``n`` events a collector leaves out by design (e.g. a collective of a one-rank group)."""
        self.skipped[why] = self.skipped.get(why, 0) + n

    # ------------------------------------------------------------------ recording
    def add(self, table: str, row: tuple[Any, ...]) -> None:
        """Buffer one row (a tuple in the table's column order). Never blocks on I/O."""
        buf = self._buffers[table]
        if len(buf) >= MAX_BUFFER_ROWS:
            self.dropped += 1  # the flush thread is behind: drop rather than grow or stall the job
            self._wake.set()
            return
        buf.append(row)
        if len(buf) == MAX_BUFFER_ROWS // 2:
            self._wake.set()

    def note_role(self, role: str) -> None:
        if role not in self.meta["roles"]:
            self.meta["roles"].append(role)

    @contextmanager
    def guard(self, where: str) -> Iterator[None]:
        """Run collector code; any exception is reported once per ``where`` and counted, never raised."""
        try:
            yield
        except Exception as e:  # noqa: BLE001 - recording must never break the job
            self.error(where, e)

    def error(self, where: str, e: BaseException) -> None:
        self._errors[where] = self._errors.get(where, 0) + 1
        if where not in self._reported:
            self._reported.add(where)
            with suppress(Exception):  # stderr itself may be gone
                print(f"rltrace: collector error in {where} (recording continues): {type(e).__name__}: {e}",
                      file=sys.stderr)

    # ------------------------------------------------------------------ flushing
    _last_flush_error = ""

    def _loop(self) -> None:
        with self.guard("flush"):
            self._reserve_counts()  # first, while there is room: the counts file must exist before a disk fills
        while not self._stop.is_set():
            self._wake.wait(FLUSH_INTERVAL_S)
            self._wake.clear()
            self.flush()

    def flush(self, final: bool = False) -> None:
        """Write every non-empty buffer as one Parquet file and refresh meta.json and counts.json. Rows whose
        write failed are tried once more at the next flush, then counted as lost (``final``: no next flush)."""
        for hook in self.flush_hooks:
            with self.guard("flush hook"):
                hook()
        with self._lock:
            for table in TABLE_NAMES:
                retry = self._retry.pop(table, [])
                rows, self._buffers[table] = self._buffers[table], []
                if retry:
                    rows = retry + rows
                if not rows:
                    continue
                try:
                    self.shard.mkdir(parents=True, exist_ok=True)
                    self._seq += 1
                    self._write(self.shard / f"{table}-{self._seq:06d}.parquet", table, rows)
                except Exception as e:  # noqa: BLE001 - full disk, unwritable directory: count, keep the job
                    self._last_flush_error = f"{type(e).__name__}: {e}"
                    self.error("flush", e)
                    if retry or final:
                        self.lost[table] = self.lost.get(table, 0) + len(rows)
                    else:
                        self._retry[table] = rows
            try:
                self.shard.mkdir(parents=True, exist_ok=True)
                meta = {**self.meta, "errors": self._errors, "dropped": self.dropped, "lost": self.lost,
                        "skipped": self.skipped, "not_recorded": self.not_recorded, "flushed_ns": time.time_ns()}
                tmp = self.shard / f".{META_FILE}.tmp"
                tmp.write_text(json.dumps(meta))
                os.replace(tmp, self.shard / META_FILE)
            except Exception as e:  # noqa: BLE001
                self._last_flush_error = self._last_flush_error or f"{type(e).__name__}: {e}"
                self.error("flush", e)
            self._write_counts()

    def _counts(self) -> str:
        return json.dumps({"dropped": self.dropped, "lost": self.lost, "skipped": self.skipped,
                           "errors": self._errors, "not_recorded": self.not_recorded}, separators=(",", ":"))

    def _reserve_counts(self) -> None:
        """Create counts.json at its full reserved size (spaces pad the JSON), so later updates need no space."""
        path = self.shard / COUNTS_FILE
        if path.exists():
            return
        self.shard.mkdir(parents=True, exist_ok=True)
        text = self._counts()
        tmp = self.shard / f".{COUNTS_FILE}.tmp"
        tmp.write_bytes(text.encode().ljust(COUNTS_BYTES))
        os.replace(tmp, path)
        self._counted = text

    def _write_counts(self) -> None:
        """Overwrite counts.json in place when the counts changed (one write of a reserved block)."""
        text = self._counts()
        if text == self._counted:
            return
        try:
            if not (self.shard / COUNTS_FILE).exists():
                self._reserve_counts()
                return
            data = text.encode()
            if len(data) > COUNTS_BYTES:  # too many kinds of error to fit: keep the totals
                data = json.dumps({"dropped": self.dropped, "lost": self.lost,
                                   "skipped": self.skipped}).encode()[:COUNTS_BYTES]
            fd = os.open(self.shard / COUNTS_FILE, os.O_WRONLY)
            try:
                os.pwrite(fd, data.ljust(COUNTS_BYTES), 0)
            finally:
                os.close(fd)
            self._counted = text
        except Exception as e:  # noqa: BLE001
            self.error("flush", e)

    @staticmethod
    def load_writer() -> None:
        """Load what a shard write needs (pyarrow, and the numpy it imports) now, not when recording starts: a
        process that records nothing never loads it. The torch collector calls this when it attaches (torch has
        loaded numpy by then, in the job's own order), so that the first flush, a second into the job's steps,
        does not pay for the import; a process that records without torch loads it at its first write."""
        import pyarrow.parquet  # noqa: F401

        import rltrace.schema  # noqa: F401

    @staticmethod
    def _write(path: Path, table: str, rows: list[tuple[Any, ...]]) -> None:
        import pyarrow as pa  # loaded already, or now (see load_writer)
        import pyarrow.parquet as pq

        from rltrace.schema import TABLES

        schema = TABLES[table].arrow_schema()
        arrays = [pa.array([r[i] for r in rows], type=field.type) for i, field in enumerate(schema)]
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            pq.write_table(pa.Table.from_arrays(arrays, schema=schema), tmp, compression="zstd")
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a partial file of a full disk would hold the space it lacks
            raise


_current: Recorder | None = None
_fork_hook_installed = False


def current() -> Recorder | None:
    """The recorder of this process, or None when not recording."""
    return _current


def start(root: str | os.PathLike[str]) -> Recorder:
    """Start recording this process into shard directory ``root`` (idempotent per process)."""
    global _current, _fork_hook_installed
    if _current is not None and _current.pid == os.getpid():
        return _current
    _current = Recorder(root)
    if not _fork_hook_installed:
        os.register_at_fork(after_in_child=_after_fork)
        _fork_hook_installed = True
    return _current


def stop(*, at_exit: bool = False) -> None:
    """Flush and stop this process's recorder (``at_exit``: see :meth:`Recorder.stop`)."""
    global _current
    if _current is not None:
        try:
            _current.stop(at_exit=at_exit)
        finally:  # a KeyboardInterrupt it raises leaves no stopped recorder behind for the next start
            _current = None


def stop_at_exit() -> None:
    """:func:`stop` as the process ends (atexit, a child's exit, before a SIGTERM death)."""
    stop(at_exit=True)


@contextmanager
def _sigint_held() -> Iterator[list[bool]]:
    """Within the block, a first SIGINT is noted (the yielded list gets an item) instead of raising KeyboardInterrupt
    halfway through a flush, which lost the rows it held and printed a traceback into the job's stderr; a second one
    raises as usual (a flush that hangs can still be interrupted). Only on the main thread under Python's own
    SIGINT handler; a handler the job installed is left alone."""
    held: list[bool] = []
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield held
        return

    def note(signum: int, frame: FrameType | None) -> None:
        if held:
            signal.default_int_handler(signum, frame)
        held.append(True)

    signal.signal(signal.SIGINT, note)
    try:
        yield held
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _after_fork() -> None:
    if _current is not None:
        _current.after_fork_in_child()


def record(table: str, row: tuple[Any, ...]) -> None:
    """Buffer a row if recording; a no-op otherwise."""
    rec = _current
    if rec is not None:
        rec.add(table, row)


def guarded(where: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator for collector callbacks: exceptions are reported and swallowed."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - never break the job
                if _current is not None:
                    _current.error(where, e)
                return None

        inner.__name__ = fn.__name__
        inner.__doc__ = fn.__doc__
        return inner

    return wrap
