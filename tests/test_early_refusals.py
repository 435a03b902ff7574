"""Inputs refused before any work starts, in one line within a second (issue 55): a huge --recorded-steps range, a
--baseline that names no replayed scheduler, and a recording folder whose new owner has not yet written its pid."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest
from rltrace.collectors import owner

from rltrace.cli import main
from rltrace.errors import ConfigError


@pytest.mark.parametrize(("args", "says"), [
    (["--recorded-steps", "0:10000000000000"], "selects 10,000,000,000,000 steps, above the limit"),
    (["--recorded-steps", "0:200000:1"], "above the limit of 100,000"),
    (["-s", "disagg-sync", "--dashboard", "{tmp}/r.html", "--baseline", "nosuch"], "--baseline 'nosuch' is not among"),
])
def test_refused_in_one_line_within_a_second(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                            says: str) -> None:
    elapsed = []
    for _ in range(3):  # the fastest of three: the refusal's own path, not a busy machine's pause or a first load
        started = time.perf_counter()
        code = main(["replay", "rollpacker_qwen7b", *(a.format(tmp=tmp_path) for a in args)])
        elapsed.append(time.perf_counter() - started)
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and says in err, err
    assert min(elapsed) < 1.0, elapsed


def test_a_refusal_names_the_owner_that_has_not_written_its_pid_yet(tmp_path: Path) -> None:
    folder = tmp_path / "run.shards"
    folder.mkdir()
    (folder / owner.LOCK_FILE).write_text("999999999\n")  # a dead previous owner's pid, still in the file
    fd = os.open(folder / owner.LOCK_FILE, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the new owner holds the lock ...

    def record_pid() -> None:  # ... and writes its pid a moment later, as take() does
        time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    writer = threading.Thread(target=record_pid)
    writer.start()
    try:
        with pytest.raises(ConfigError, match=rf"another recording \(pid {os.getpid()}\)"):
            owner.take(folder)
    finally:
        writer.join()
        os.close(fd)


def test_a_recording_folder_is_given_up_once(tmp_path: Path) -> None:
    """A second release (a signal between the merge and the exit) closed the lock's descriptor again: EBADF, or
    another file's descriptor where the number had been reused."""
    held = owner.take(tmp_path / "run.shards")
    spare = os.open(os.devnull, os.O_RDONLY)
    held.release(remove=True)
    reused = os.open(os.devnull, os.O_RDONLY)  # most likely the lock's old number
    try:
        held.release(remove=False)
        os.fstat(reused)  # still open
    finally:
        os.close(reused)
        os.close(spare)
    assert not (tmp_path / "run.shards").exists()
