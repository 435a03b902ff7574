"""Did recording reach every process that ran torch or vLLM? A watcher over the recorded command's processes.

A process the injection never reached writes no shard and so cannot report itself: a Ray worker whose
runtime_env the hook could not extend, a subprocess started with a clean environment, another Python without
rltrace. ``rltrace record`` therefore watches the command's process tree from outside (Linux ``/proc``, every
:data:`POLL_S`): a descendant that has mapped torch's or vLLM's native libraries clearly ran them. At the end,
those without a shard are the processes recording missed. Processes that have a shard are never inspected,
so a fully recorded job costs one directory listing and one ``/proc`` scan per poll.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

POLL_S = 0.5
MARKERS = (b"libtorch", b"/vllm/")  # torch's C++ libraries; vLLM's compiled ops (vllm/_C*.so)


@dataclass(frozen=True, slots=True)
class Missed:
    """A process that ran torch or vLLM and left no shard."""

    pid: int
    command: str


class ReachWatcher:
    """Polls the descendants of ``root_pid`` for torch/vLLM users; :meth:`missed` compares with the shards."""

    def __init__(self, root_pid: int, shard_root: Path) -> None:
        self.root_pid = root_pid
        self.shard_root = shard_root
        self.host = socket.gethostname()
        self.users: dict[int, str] = {}  # pid -> command line of a process that loaded torch or vLLM
        self._once: dict[int, str] = {}  # pid -> command line, seen with torch or vLLM mapped in one poll so far
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rltrace-reach", daemon=True)
        self.enabled = Path("/proc/self/maps").exists()

    def start(self) -> None:
        if self.enabled:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            with contextlib.suppress(Exception):  # a best-effort check never disturbs the recording
                self.poll()

    def poll(self) -> None:
        """One pass: note every unrecorded descendant that has torch or vLLM mapped."""
        recorded = self.recorded()
        alive = [self.root_pid, *_descendants(self.root_pid)]  # the command itself too: `python -I train.py`
        for gone in self._once.keys() - set(alive):  # a pid seen once that exited is no one's any more
            del self._once[gone]
        for pid in alive:
            if pid in self.users or pid in recorded:
                continue
            try:
                maps = Path(f"/proc/{pid}/maps").read_bytes()
            except OSError:
                continue
            if not any(m in maps for m in MARKERS):
                self._once.pop(pid, None)
                continue
            # a user is one seen twice, running the same command: between fork and exec, a child that a torch
            # process starts (a shell, a tool, Ray's own binaries) shows its parent's maps and command line,
            # and a poll landing in that window named the parent as missed (seen once in 8 recordings)
            command = _command(pid)
            if self._once.get(pid) == command:
                self.users[pid] = command
            else:
                self._once[pid] = command

    def recorded(self) -> set[int]:
        pids = set()
        try:
            for shard in self.shard_root.iterdir():
                host, _, rest = shard.name.rpartition("-")[0].rpartition("-")
                if host == self.host and rest.isdigit():
                    pids.add(int(rest))
        except OSError:
            pass
        return pids

    def missed(self) -> list[Missed]:
        """Processes that ran torch or vLLM and have no shard (call after the job and its flushes ended)."""
        recorded = self.recorded()
        return [Missed(pid, cmd) for pid, cmd in sorted(self.users.items()) if pid not in recorded]


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            out.append(child)
            todo.append(child)
    return out


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    text = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    return text[:80] + ("..." if len(text) > 80 else "")
