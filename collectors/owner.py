"""One recording per recording folder: an advisory lock holding the owner's pid.

``rltrace record -o run`` writes its shards into ``run.shards/``. Two recordings into the same folder would mix
(or delete) each other's shards, so the folder is owned through ``run.shards/lock``, held with ``flock`` for
as long as the recording runs: the kernel releases it when its owner dies, however it dies, so a lock left by
a killed recording is never mistaken for a live one (no pid-reuse guess). A second recording is refused
before its job starts, touching nothing; one that finds a dead owner's lock takes it over and says so.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from rltrace.errors import ConfigError, clean

LOCK_FILE = "lock"
HOLDER_WAIT_S = 1.0
"""how long a refused recording waits for the lock's new holder to write its pid (it does so at once)"""


@dataclass(slots=True)
class Ownership:
    """A held recording folder: its path, the lock's descriptor, and the pid of a dead previous owner."""

    folder: Path
    fd: int
    previous_pid: int | None = None

    def release(self, *, remove: bool) -> None:
        """Give the folder up; ``remove``: delete it (everything but the lock first, so no one else's new
        lock is deleted), otherwise leave its shards and drop only the lock. Once given up, a second call does
        nothing (the descriptor's number may be another file's by then)."""
        if self.fd < 0:
            return
        try:
            if remove:
                for child in self.folder.iterdir():
                    if child.name != LOCK_FILE:
                        shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
            (self.folder / LOCK_FILE).unlink(missing_ok=True)
            if remove:
                self.folder.rmdir()
        except OSError:
            pass  # a folder a newer recording took, or one that vanished: nothing of ours is left to clean
        finally:
            os.close(self.fd)
            self.fd = -1


def _pid_in(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _holder(fd: int, wait_s: float = HOLDER_WAIT_S) -> int | None:
    """The live pid a held lock file names. A holder writes its pid right after it takes the lock, so a refusal that
    lands in between reads nothing (or the dead previous owner's pid): it waits up to ``wait_s`` for the new one."""
    deadline = time.monotonic() + wait_s
    while True:
        pid = _pid_in(fd)
        if (pid is not None and _alive(pid)) or time.monotonic() >= deadline:
            return pid
        time.sleep(0.005)


def take(folder: Path, option: str = "-o") -> Ownership:
    """Own ``folder`` (created with its parents) or raise ConfigError: another live recording owns it, or it
    cannot be created or written (a read-only or full file system)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise ConfigError(f"{option}: cannot create the recording folder {clean(folder)}: {e.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        owner = _holder(fd)
        os.close(fd)
        raise ConfigError(f"{clean(folder)}: another recording (pid {owner or 'unknown'}) is writing here; "
                          f"wait for it or record to another {option}") from None
    previous = _pid_in(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        os.fsync(fd)  # a full disk is found here, before the job starts
    except OSError as e:
        os.close(fd)
        raise ConfigError(f"{option}: cannot write in the recording folder {clean(folder)}: {e.strerror}") from None
    return Ownership(folder, fd, previous if previous != os.getpid() else None)


def held_by_other(folder: Path) -> int | None:
    """The pid of a live recording that owns ``folder``, or None (free, stale, or no lock at all)."""
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except OSError:
        return _pid_in(fd) or -1
    finally:
        os.close(fd)
