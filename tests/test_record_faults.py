"""`rltrace record` under the faults a cluster produces: a disk that fills mid-run, a read-only or impossible
output, a bracket in a path, a second recording into the same folder, a rank killed with SIGKILL. Real
processes throughout: the rltrace CLI, a 2-rank Gloo job, a real (tmpfs) file system that runs out of space.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, RLTRACE, run_cli

import rltrace

pytestmark = pytest.mark.live  # a real job, engine or install: not in `make test-fast`

SPANS_JOB = str(REPO / "tests" / "jobs" / "spans_job.py")

# A 2-rank Gloo job: each rank all-reduces N times (a few ms apart), optionally fills the disk holding FILL
# halfway (then keeps going, so its later flushes fail), writes its pid to PIDDIR, and the job exits CODE.
JOB = r'''
import os, sys, time
import torch, torch.distributed as dist, torch.multiprocessing as mp

def rank_main(rank, n, fill, piddir, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    if piddir:
        open(os.path.join(piddir, f"rank{rank}.pid"), "w").write(str(os.getpid()))
    t = torch.ones(64)
    for i in range(n):
        dist.all_reduce(t)
        time.sleep(0.004)
        if fill and rank == 0 and i == n // 2:
            time.sleep(1.5)  # let the first half flush
            try:
                with open(fill, "wb") as f:
                    while True:
                        f.write(b"x" * 65536)
            except OSError:
                pass  # the disk is full now
    if fill:
        time.sleep(1.5)  # a periodic flush fails on the full disk, then the exit flush fails too
    dist.destroy_process_group()

if __name__ == "__main__":
    n, code, fill, piddir, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    ctx = mp.start_processes(rank_main, args=(n, fill, piddir, port), nprocs=2, join=False, start_method="spawn")
    try:
        while not ctx.join():
            pass
    except Exception:
        sys.exit(1)
    sys.exit(code)
'''


def _port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _job(tmp_path: Path, n: int, code: int = 0, fill: str = "", piddir: str = "") -> list[str]:
    script = tmp_path / "gloo_job.py"
    script.write_text(JOB)
    return [sys.executable, str(script), str(n), str(code), fill, piddir, _port()]


def _mount_tmpfs(path: Path, options: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs (a real full or read-only file system)")
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True)


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], check=False)


def _one_line(stderr: str, fragment: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], stderr


@pytest.mark.parametrize(("code", "script"), [
    (0, "pass"), (1, "raise SystemExit(1)"), (3, "raise SystemExit(3)"),
    (-9, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"),  # rltrace dies of it too
    (134, "import os; os.abort()"),  # SIGABRT: a core-dumping signal is reported, not repeated
])
def test_exit_codes_pass_through(tmp_path: Path, code: int, script: str) -> None:
    result = run_cli("record", "-o", str(tmp_path / "run"), "--", sys.executable, "-c", script)
    assert result.returncode == code, result.stderr
    # a bundle either way; a process killed before its first flush leaves no shard
    assert rltrace.open(tmp_path / "run").manifest.extra["shards"] >= (0 if code in (-9, 134) else 1)


def test_a_disk_that_fills_mid_run_keeps_the_code_the_shards_and_the_count(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "size=3m")
    try:
        n = 300
        result = run_cli("record", "-o", str(disk / "r[1]"), "--", *_job(tmp_path, n, code=3, fill=str(disk / "fill")))
        assert result.returncode == 3, result.stderr  # the job's code, not rltrace's failure
        assert "lost" in result.stderr and "events" in result.stderr  # the ranks said what they could not keep
        line = next(x for x in result.stderr.splitlines() if "could not write the bundle" in x)
        assert "No space left on device" in line and (disk / "r[1].shards" / "shards").is_dir()
        assert not (disk / "r[1]").exists()
        command = shlex.split(line.split("finish later: ", 1)[1].rstrip(")"))
        (disk / "fill").unlink()  # space again: the --merge it named finishes the job
        merged = subprocess.run([RLTRACE, *command[1:]], capture_output=True, text=True, timeout=120, check=False)
        assert merged.returncode == 0, merged.stderr
        assert "the recording lost" in merged.stderr
        bundle = rltrace.open(disk / "r[1]")
        extra = bundle.manifest.extra
        kept = bundle.collectives.collect().height
        assert extra["dropped_events"] > 0 and kept > 0
        assert kept + extra["dropped_events"] == 2 * n  # every event either in the bundle or counted as lost
        assert bundle.manifest.command[2:4] == [str(n), "3"]  # the --merge wrote the recorded command
    finally:
        _umount(disk)


def test_an_output_that_cannot_work_is_refused_before_the_job(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    job = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    ro = tmp_path / "ro"
    if os.geteuid() == 0:
        _mount_tmpfs(ro, "ro,size=1m")
    else:
        ro.mkdir()
        ro.chmod(0o555)
    (tmp_path / "file").write_text("x")
    try:
        for output, fragment in ((ro / "run", "not writable"), (tmp_path / "file" / "run", "is a file")):
            result = run_cli("record", "-o", str(output), "--", *job)
            assert result.returncode == 2, result.stderr
            _one_line(result.stderr, fragment)
            assert not marker.exists()
    finally:
        if os.geteuid() == 0:
            _umount(ro)


def test_a_bracket_in_the_output_path_is_a_path(tmp_path: Path) -> None:
    # (the disk-full test records Gloo collectives into 'r[1]' and merges them by the printed --merge too)
    result = run_cli("record", "--keep-shards", "-o", str(tmp_path / "r[1]"), "--",
                     sys.executable, SPANS_JOB, "exit", "0")
    assert result.returncode == 0, result.stderr
    assert rltrace.open(tmp_path / "r[1]").spans.collect().height == 3
    again = run_cli("record", "--merge", str(tmp_path / "r[1].shards"), "-o", str(tmp_path / "r[2]"))
    assert again.returncode == 0, again.stderr
    assert rltrace.open(tmp_path / "r[2]").spans.collect().height == 3
    assert run_cli("inspect", str(tmp_path / "r[2]")).returncode == 0


def test_a_second_recording_into_the_same_folder_is_refused(tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    first_job = [sys.executable, "-c", "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)",
                 str(stop)]
    first = subprocess.Popen([RLTRACE, "record", "-o", str(tmp_path / "run"), "--", *first_job],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not list((tmp_path / "run.shards" / "shards").glob("*/meta.json")):  # the first job records
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
        before = sorted(p.name for p in (tmp_path / "run.shards").rglob("*"))
        marker = tmp_path / "second-ran"
        for extra in ([], ["--force"]):
            second = run_cli("record", *extra, "-o", str(tmp_path / "run"), "--", sys.executable, "-c",
                             f"open({str(marker)!r}, 'w')")
            assert second.returncode == 2, second.stderr
            _one_line(second.stderr, f"another recording (pid {first.pid}) is writing here")
            assert not marker.exists()
        assert sorted(p.name for p in (tmp_path / "run.shards").rglob("*")) == before
    finally:
        stop.write_text("")
        _, stderr = first.communicate(timeout=60)
    assert first.returncode == 0, stderr
    assert rltrace.open(tmp_path / "run").manifest.command == first_job


def test_a_stale_lock_of_a_dead_recording_is_taken_over(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    folder = tmp_path / "run.shards"
    (folder / "shards" / "old-shard").mkdir(parents=True)
    (folder / "lock").write_text(dead.stdout)
    result = run_cli("record", "-o", str(tmp_path / "run"), "--", sys.executable, "-c", "pass")
    assert result.returncode == 0, result.stderr
    assert f"(pid {dead.stdout.strip()}) that is no longer running; taking it over" in result.stderr
    assert (tmp_path / "run.shards.1" / "shards" / "old-shard").is_dir()  # its shards were moved, not deleted
    assert "rltrace record --merge" in result.stderr


def test_a_sigkilled_rank_loses_at_most_its_last_second(tmp_path: Path) -> None:
    piddir = tmp_path / "pids"
    piddir.mkdir()
    proc = subprocess.Popen([RLTRACE, "record", "-o", str(tmp_path / "run"), "--",
                             *_job(tmp_path, 100_000, piddir=str(piddir))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (piddir / "rank1.pid").exists() or not (piddir / "rank1.pid").read_text():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    time.sleep(2.5)  # two periodic flushes
    killed_ns = time.time_ns()
    os.kill(int((piddir / "rank1.pid").read_text()), signal.SIGKILL)
    _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 1, stderr  # the job's own code: its rank died
    coll = rltrace.open(tmp_path / "run").collectives.collect()
    last = {r: coll.filter(coll["rank"] == r)["end_ns"].max() for r in (0, 1)}
    assert killed_ns - last[1] < 2.0e9, (killed_ns - last[1]) / 1e9  # its last flush interval, plus scheduling
    assert last[0] >= last[1]  # the surviving rank's rows merged too
    assert json.loads(json.dumps(rltrace.open(tmp_path / "run").manifest.extra))["shards"] >= 3


def test_a_sigint_during_the_last_flush_waits_for_it(tmp_path: Path) -> None:
    """torch's spawned ranks get SIGINT when their launcher dies (their parent-death signal), often while they exit:
    a KeyboardInterrupt in the recorder's exit-time flush printed "Exception ignored in atexit callback" into the
    job's stderr and lost the rows that flush held, counting none."""
    job = ("import atexit, os, signal, threading, time\n"
           "from rltrace.collectors import recorder, span\n"
           "recorder.current().flush_hooks.append(lambda: time.sleep(0.6))  # a slow last flush\n"
           "for _ in range(5):\n"
           "    with span('reward'):\n"
           "        pass\n"
           "def interrupt_soon():  # runs before the recorder's exit hook (atexit runs the newest first)\n"
           "    threading.Thread(target=lambda: (time.sleep(0.2), os.kill(os.getpid(), signal.SIGINT)),\n"
           "                     daemon=True).start()\n"
           "atexit.register(interrupt_soon)\n")
    result = run_cli("record", "-o", str(tmp_path / "run"), "--", sys.executable, "-c", job)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert rltrace.open(tmp_path / "run").spans.collect().height == 5


def test_what_a_collector_cannot_record_is_said_once_and_kept_in_the_manifest(tmp_path: Path) -> None:
    # a collector whose library lacks a hook or a field (an older vLLM's request timings) calls `cannot`
    job = ("from rltrace.collectors import recorder\n"
           "rec = recorder.current()\n"
           "rec.cannot('vllm request timings', 'this vLLM keeps none')\n"
           "rec.cannot('vllm request timings', 'said once per process')\n")
    result = run_cli("record", "-o", str(tmp_path / "run"), "--", sys.executable, "-c", job)
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "vllm request timings not recorded" in line]
    # once when the job's process met it, once in the summary after the merge
    assert said == ["rltrace: warning: vllm request timings not recorded: this vLLM keeps none"] * 2, result.stderr
    manifest = rltrace.open(tmp_path / "run").manifest
    assert manifest.extra["not_recorded"] == {"vllm request timings": "this vLLM keeps none"}
    assert "not recorded: vllm request timings (this vLLM keeps none)" in manifest.notes
