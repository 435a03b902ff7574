"""Progress for commands that can run longer than a few seconds, on stderr.

On a terminal: a rich spinner or bar that disappears when done. Piped or redirected (CI logs, ``| tee``):
a stage still running after :func:`grace_s` says that it started ("rltrace: replay disagg-sync ..."), where it is
every :func:`piped_every_s` seconds, and when it ends ("rltrace: replay disagg-sync: 2,674 events, done in 41.2 s"),
so a long run is never silent and a log never floods. Shorter stages print nothing: a command that refuses
bad input after a quick first stage still prints one line on stderr, the error.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn


def piped_every_s() -> float:
    """Seconds between two progress lines of one stage when stderr is not a terminal: 30, or the environment
    variable RLTRACE_PROGRESS_EVERY_S (the tests use less than a second), read when a stage starts."""
    return float(os.environ.get("RLTRACE_PROGRESS_EVERY_S", "30"))


def grace_s() -> float:
    """A piped stage running this long says that it started (and then that it ended); a shorter one is silent.
    3 s, or RLTRACE_PROGRESS_GRACE_S (the tests wait a minute, so that an error reached after a slow first stage
    on a loaded machine is still the only line they print, unless a test sets the interval), never past the
    interval."""
    return min(float(os.environ.get("RLTRACE_PROGRESS_GRACE_S", "3")), piped_every_s())


def stderr() -> Console:
    """The console progress goes to."""
    return Console(stderr=True, highlight=False)


def say(err: Console, text: str) -> None:
    """One plain ``rltrace: ...`` line on stderr when it is not a terminal (a terminal shows the spinner)."""
    if not err.is_terminal:
        err.print(f"rltrace: {text}", markup=False, highlight=False, soft_wrap=True)


class _Heartbeat:
    """Piped output: a daemon thread that calls ``start()`` once the stage has run :func:`grace_s` and ``beat()``
    every :func:`piped_every_s` after, until stopped. ``started`` says whether it announced the stage."""

    def __init__(self, start: Callable[[], None], beat: Callable[[], None]) -> None:
        self._stop = threading.Event()
        self._start, self._beat = start, beat
        self._grace_s, self._every_s = grace_s(), piped_every_s()
        self.started = False
        self._thread = threading.Thread(target=self._run, name="rltrace-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self._stop.wait(self._grace_s):
            return
        self.started = True
        self._start()
        while not self._stop.wait(self._every_s):
            self._beat()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def stage(err: Console, text: str) -> Iterator[None]:
    """A stage without a count: a spinner on a terminal; piped, see the module's docstring."""
    started = time.perf_counter()
    if err.is_terminal:
        with err.status(text):
            yield
        return
    heart = _Heartbeat(lambda: say(err, f"{text} ..."),
                       lambda: say(err, f"{text}: running, {time.perf_counter() - started:.0f} s"))
    try:
        yield
    finally:
        heart.stop()
    if heart.started:
        say(err, f"{text}: done in {time.perf_counter() - started:.1f} s")


class Bar:
    """A stage with a count (events, points, replays, bytes): ``update(done, total)`` as it goes."""

    def __init__(self, err: Console, text: str, unit: str = "", *, piped_total: bool = True,
                 announce: bool = False) -> None:
        """``piped_total=False``: the total is an estimate, drawn as a bar on a terminal but left out of the
        piped lines (which then give the count alone). ``announce``: piped, say at once that it starts (for a
        stage that is never short), not only after :func:`grace_s`."""
        self.err, self.text, self.unit, self.piped_total = err, text, unit, piped_total
        self.announce = announce
        self.started = time.perf_counter()
        self.done = 0.0
        self.total: float | None = None
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._heart: _Heartbeat | None = None

    def __enter__(self) -> Bar:  # noqa: PYI034 - Bar is not subclassed
        if self.err.is_terminal:
            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn(self.unit), TimeElapsedColumn(), console=self.err, transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.text, total=None)
        elif self.announce:
            say(self.err, f"{self.text} ...")
            self._heart = _Heartbeat(self._line, self._line)
        else:
            self._heart = _Heartbeat(lambda: say(self.err, f"{self.text} ..."), self._line)
        return self

    def update(self, done: float, total: float | None = None) -> None:
        self.done, self.total = done, total if total is not None else self.total
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=done, total=self.total)

    def _line(self) -> None:
        say(self.err, f"{self.text}: {self._count()}, {time.perf_counter() - self.started:.0f} s")

    def _count(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        if self.total and self.piped_total:
            return f"{self.done:,.0f}/{self.total:,.0f}{unit}"
        return f"{self.done:,.0f}{unit}"

    def __exit__(self, *exc: object) -> None:
        if self._heart is not None:
            self._heart.stop()
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
        elif exc[0] is None and self._heart is not None and (self._heart.started or self.announce):
            say(self.err, f"{self.text}: {self._count()}, done in {time.perf_counter() - self.started:.1f} s")


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Within the block, whatever writes to this process's standard output goes to stderr instead: a library's log
    handler bound to ``sys.stdout`` (vLLM's), a child process it spawns. Standard output keeps only the command's
    own result, so ``--json`` prints JSON alone. A closed standard output (``>&-``) stays closed after the block."""
    _flush_stdout()
    try:
        saved: int | None = os.dup(1)
    except OSError:  # fd 1 closed: what the block writes goes to stderr, and fd 1 is closed again after
        saved = None
    os.dup2(2, 1)
    try:
        yield
    finally:
        _flush_stdout()
        if saved is None:
            os.close(1)
        else:
            os.dup2(saved, 1)
            os.close(saved)


def _flush_stdout() -> None:
    with suppress(OSError, ValueError):  # None or closed (Python sets sys.stdout None when fd 1 was closed)
        if sys.stdout is not None:
            sys.stdout.flush()
