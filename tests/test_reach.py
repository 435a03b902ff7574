"""The watcher that names processes recording did not reach (collectors/reach.py), on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from rltrace.collectors.reach import MARKERS, ReachWatcher


def test_a_torch_process_without_a_shard_is_named_once_seen_twice(tmp_path: Path) -> None:
    # a child of this test that loads torch and writes no shard: the watcher's case
    child = subprocess.Popen([sys.executable, "-c", "import sys, time, torch; print('up', flush=True); time.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "up"
        assert any(m in Path(f"/proc/{child.pid}/maps").read_bytes() for m in MARKERS)
        watcher = ReachWatcher(os.getpid(), tmp_path / "shards")

        def children() -> list:  # the watcher's root, this test process, has torch mapped once a test imported it
            return [m for m in watcher.missed() if m.pid != os.getpid()]

        watcher.poll()
        # one sighting is not enough: between fork and exec a child shows its parent's maps and command
        assert children() == []
        watcher.poll()
        [missed] = children()
        assert missed.pid == child.pid and "import sys, time, torch" in missed.command
        # a shard under the process's host and pid means it was reached
        (tmp_path / "shards" / f"{watcher.host}-{child.pid}-{time.time_ns()}").mkdir(parents=True)
        assert children() == []
    finally:
        child.kill()
        child.wait()


def test_the_recorded_command_itself_is_watched(tmp_path: Path) -> None:
    """`rltrace record -- python -I train.py`: -I drops PYTHONPATH, so the command's own process is the one not
    reached; the watcher looked at its descendants only, and the recording exited 0 with an empty bundle."""
    child = subprocess.Popen([sys.executable, "-c", "import sys, time, torch; print('up', flush=True); time.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "up"
        watcher = ReachWatcher(child.pid, tmp_path / "shards")
        watcher.poll()
        watcher.poll()
        assert [m.pid for m in watcher.missed()] == [child.pid]
    finally:
        child.kill()
        child.wait()
