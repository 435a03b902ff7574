"""`rltrace record` as a wrapper: exit codes, signals, killed jobs, collector failures, bad input."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import select
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from helpers import REPO, RLTRACE, run_cli
from rltrace.collectors.shards import engine_scoped_ids

import rltrace
from rltrace.cli import main, record_cmd

pytestmark = pytest.mark.live  # a real job, engine or install: not in `make test-fast`

JOB = str(REPO / "tests" / "jobs" / "spans_job.py")


def test_exit_code_and_output_pass_through(tmp_path: Path) -> None:
    result = run_cli("record", "-o", str(tmp_path / "run"), "--", sys.executable, JOB, "exit", "3")
    assert result.returncode == 3
    assert result.stdout == "job output\n"
    spans = rltrace.open(tmp_path / "run").spans.collect()
    assert spans["phase"].to_list() == ["reward"] * 3
    assert spans["step"].to_list() == [0, 1, 2]
    assert not (tmp_path / "run.shards").exists()


def test_children_of_every_start_method_record(tmp_path: Path) -> None:
    result = run_cli("record", "-o", str(tmp_path / "run"), "--", sys.executable, JOB, "children")
    assert result.returncode == 0, result.stderr
    spans = rltrace.open(tmp_path / "run").spans.collect()
    assert sorted(spans["name"].to_list()) == ["child-fork", "child-forkserver", "child-spawn", "score-0"]
    assert spans["actor"].n_unique() == 4  # four processes, four shards


def _start_loop(tmp_path: Path, *extra: str, mode: str = "loop") -> tuple[subprocess.Popen, int]:
    pidfile = tmp_path / "pid"
    proc = subprocess.Popen(
        [RLTRACE, "record", "-o", str(tmp_path / "run"), *extra, "--", sys.executable, JOB, mode, str(pidfile)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 60
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    time.sleep(1.5)  # let it record (and flush) for a while
    return proc, int(pidfile.read_text())


def _flushed_spans(shards: Path) -> int:
    """Span rows the periodic flushes have written into ``shards`` so far (each file lands whole, by rename)."""
    return sum(pq.ParquetFile(f).metadata.num_rows for f in shards.glob("shards/*/spans-*.parquet"))


def _wait_flushed(tmp_path: Path, proc: subprocess.Popen, rows: int = 20) -> None:
    """Until the periodic flushes have written more than ``rows`` spans: a job a signal kills without a handler
    keeps those alone, and a loaded machine may not have flushed in the 1.5 s _start_loop waits."""
    deadline = time.monotonic() + 60
    while _flushed_spans(tmp_path / "run.shards") <= rows:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)


def test_a_signal_ignored_at_start_stays_ignored_for_the_job(tmp_path: Path) -> None:
    """A shell's background job starts with SIGINT ignored. Under rltrace the job started with it at its default
    (polars' handler replaced the ignored disposition, and a handler does not pass to a child) and rltrace
    forwarded a SIGINT: the job died of a signal it ignores without rltrace."""
    job = ("import signal, sys, time; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN, flush=True); "
           "time.sleep(4); print('done')")
    proc = subprocess.Popen(["bash", "-c", "trap '' INT; exec \"$@\"", "bash", RLTRACE, "record", "-o",
                             str(tmp_path / "run"), "--", sys.executable, "-c", job],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "True\n"  # started with SIGINT ignored
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0 and stdout == "done\n", stderr


def test_a_killed_recordings_job_that_runs_on_keeps_a_new_recording_out(tmp_path: Path) -> None:
    """rltrace killed, its job running on: a new recording into the same -o took the folder over, and the old
    job's shards (821 all_reduces of another command) landed in the new bundle."""
    proc, job = _start_loop(tmp_path)
    proc.kill()
    proc.wait(timeout=60)  # not communicate(): the job runs on and holds the pipes open
    try:
        again = run_cli("record", "-o", str(tmp_path / "run"), "--", sys.executable, "-c", "pass")
        assert again.returncode == 2 and f"processes of an earlier recording still write there (pid {job})" in \
            again.stderr, again.stderr
        assert not (tmp_path / "run").exists()
        # nor is a merge of its shards a bundle yet: it merged what they held so far, exit 0, without a word
        merged = run_cli("record", "--merge", str(tmp_path / "run.shards"), "-o", str(tmp_path / "merged"))
        assert merged.returncode == 2 and f"processes of the recording still write there (pid {job})" in \
            merged.stderr, merged.stderr
        assert not (tmp_path / "merged").exists()
    finally:
        os.kill(job, signal.SIGKILL)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def test_a_descriptor_the_caller_handed_over_reaches_the_job(tmp_path: Path) -> None:
    """`rltrace record -- job 3>log` (or a jobserver's pipe, an activated socket): the job found the descriptor
    closed, EBADF, where alone it writes there."""
    with open(tmp_path / "log", "wb") as log:
        fd = log.fileno()
        os.set_inheritable(fd, True)
        done = subprocess.run([RLTRACE, "record", "-o", str(tmp_path / "run"), "--", sys.executable, "-c",
                               f"import os; os.write({fd}, b'handed over')"], pass_fds=(fd,), capture_output=True,
                              text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "log").read_bytes() == b"handed over"


def test_sigterm_reaches_the_job_and_the_bundle_is_written(tmp_path: Path) -> None:
    proc, _ = _start_loop(tmp_path)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM  # rltrace dies of the signal the job died of
    assert "rltrace: recorded" in stderr
    spans = rltrace.open(tmp_path / "run").spans.collect()
    assert spans.height > 20  # flushed on SIGTERM, not only what the last periodic flush wrote


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGUSR1])
def test_other_signals_reach_the_job_as_if_it_ran_alone(tmp_path: Path, sig: signal.Signals) -> None:
    """A closed ssh session's SIGHUP (or a job's own SIGUSR1) ended rltrace at once: the job ran on, never
    signalled, and no bundle was written. The job gets it now and dies of it as it would alone."""
    proc, _ = _start_loop(tmp_path)
    _wait_flushed(tmp_path, proc)  # the job dies of it with no handler: only the periodic flushes are kept
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == -sig, stderr
    assert "rltrace: recorded" in stderr and rltrace.open(tmp_path / "run").spans.collect().height > 20


def _record_in_a_terminal(tmp_path: Path, job: Path, *, stdin_null: bool = False) -> tuple[int, int]:
    """``rltrace record`` of ``job`` as the leader of a new session on a new terminal (its stdin from /dev/null with
    ``stdin_null``), once the job has written ``tmp_path/started``: rltrace's pid and the terminal's master end."""
    pid, fd = pty.fork()
    if pid == 0:
        if stdin_null:
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.execv(RLTRACE, [RLTRACE, "record", "-o", str(tmp_path / "run"), "--", sys.executable, str(job)])
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists():
        assert time.monotonic() < deadline
        if select.select([fd], [], [], 0.2)[0]:
            with contextlib.suppress(OSError):
                os.read(fd, 4096)  # keep the terminal drained
    return pid, fd


def test_a_hang_up_reaches_the_job_when_rltrace_leads_the_session(tmp_path: Path) -> None:
    """`ssh host rltrace record ...` (a shell execs its last command) makes rltrace the session leader, which alone
    gets the terminal's hang-up: it must pass it on, then finish the bundle and exit with the job's code without
    failing on the dead terminal (EIO)."""
    job = tmp_path / "job.py"
    job.write_text("import os, signal, sys, time\n"
                   f"signal.signal(signal.SIGHUP, lambda *_: (open({str(tmp_path / 'hup')!r}, 'w').close(), "
                   "sys.exit(0)))\n"
                   f"open({str(tmp_path / 'started')!r}, 'w').close()\n"
                   "time.sleep(60)\n")
    pid, fd = _record_in_a_terminal(tmp_path, job)
    deadline = time.monotonic() + 60
    time.sleep(1)
    os.close(fd)  # hang up
    while (done := os.waitpid(pid, os.WNOHANG)) == (0, 0):
        assert time.monotonic() < deadline + 60, "rltrace never ended"
        time.sleep(0.1)
    assert (tmp_path / "hup").exists()  # the job got it
    assert os.waitstatus_to_exitcode(done[1]) == 0  # the job's code, not 1 from writing to the dead terminal
    assert (tmp_path / "run" / "manifest.json").is_file() and not (tmp_path / "run.shards").exists()


def test_one_ctrl_c_reaches_the_job_once_with_stdin_redirected(tmp_path: Path) -> None:
    """rltrace asked its stdin whether the terminal delivers Ctrl-C: with `< /dev/null` it forwarded the SIGINT the
    terminal had already sent the job, which got two (a second Ctrl-C: a hard abort in many jobs)."""
    count = tmp_path / "count"
    job = tmp_path / "job.py"
    job.write_text("import signal, time\n"
                   "got = []\n"
                   "signal.signal(signal.SIGINT, lambda *_: got.append(1))\n"
                   f"open({str(tmp_path / 'started')!r}, 'w').close()\n"
                   "while not got:\n    time.sleep(0.05)\n"
                   "time.sleep(1.5)  # a forwarded copy would come now\n"
                   f"open({str(count)!r}, 'w').write(str(len(got)))\n")
    pid, fd = _record_in_a_terminal(tmp_path, job, stdin_null=True)
    deadline = time.monotonic() + 60
    os.write(fd, b"\x03")  # Ctrl-C: the terminal signals its foreground group, rltrace and the job
    while (done := os.waitpid(pid, os.WNOHANG)) == (0, 0):
        assert time.monotonic() < deadline + 60, "rltrace never ended"
        if select.select([fd], [], [], 0.1)[0]:
            with contextlib.suppress(OSError):
                os.read(fd, 4096)
    os.close(fd)
    assert count.read_text() == "1"
    assert os.waitstatus_to_exitcode(done[1]) == 0


def test_a_hang_up_after_the_job_ended_still_writes_the_bundle(tmp_path: Path) -> None:
    """The terminal closing (or ssh's SIGHUP) once the job has ended, while rltrace writes the bundle: the default
    action ended rltrace there (exit 129), the bundle unwritten and the shards left behind."""
    pidfile = tmp_path / "pid"
    job = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(1)"
    proc = subprocess.Popen([RLTRACE, "record", "-o", str(tmp_path / "run"), "--", sys.executable, "-c", job],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    job_pid = int(pidfile.read_text())
    while Path(f"/proc/{job_pid}").exists():  # rltrace reaps it as it ends: from here rltrace waits and merges
        assert time.monotonic() < deadline
        time.sleep(0.002)
    proc.send_signal(signal.SIGHUP)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert (tmp_path / "run" / "manifest.json").is_file() and not (tmp_path / "run.shards").exists()


def test_recording_in_process_leaves_the_callers_hang_up_handler_as_it_was(tmp_path: Path) -> None:
    # record's hang-up handler (send what it prints to /dev/null) stayed installed in a process that called it
    before = signal.getsignal(signal.SIGHUP)
    assert main(["record", "-o", str(tmp_path / "run"), "--", sys.executable, "-c", "pass"]) == 0
    assert signal.getsignal(signal.SIGHUP) is before


def test_after_sigterm_the_bundle_waits_for_the_jobs_processes_that_outlive_it(tmp_path: Path) -> None:
    """SIGTERM ends the job's first process; its child, which no signal reached, records on for a few seconds.
    record waits for it (saying so) before it merges: the child's last span is in the bundle, and no shards are
    left behind."""
    proc, _ = _start_loop(tmp_path, mode="orphan")
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM, stderr
    assert "recorded process(es) of the job that are still running" in stderr, stderr
    assert "still running (pid" not in stderr.split("signal again to stop waiting")[-1], stderr  # it ended in time
    names = rltrace.open(tmp_path / "run").spans.collect()["name"].to_list()
    assert "tail-done" in names
    assert not (tmp_path / "run.shards").exists()


def test_a_process_left_running_keeps_the_shards_its_warning_names(tmp_path: Path) -> None:
    """The job ends and leaves a recorded child running past record's wait: the warning names a --merge of the
    shards for later, and record then deleted them (the command it printed could not work)."""
    done = run_cli("record", "-o", str(tmp_path / "run"), "--", sys.executable, JOB, "leave")
    assert done.returncode == 0, done.stderr
    warned = re.search(r"still running \(pid (\d+)\).*\(once they end: (rltrace record --merge .+)\)$", done.stderr,
                       re.MULTILINE)
    assert warned, done.stderr
    deadline = time.monotonic() + 60
    while Path(f"/proc/{warned.group(1)}").exists():  # the child records 4 s in all
        assert time.monotonic() < deadline
        time.sleep(0.1)
    merged = run_cli(*shlex.split(warned.group(2))[1:])
    assert merged.returncode == 0, merged.stderr
    spans = rltrace.open(tmp_path / "run.late").spans.collect()
    assert "tail-done" in spans["name"].to_list()
    # every shard of the recording: the job's own too (with the folder deleted, only what the child wrote after)
    assert spans["actor"].n_unique() == 2, spans


def test_a_model_file_the_job_writes_that_cannot_be_read_leaves_the_bundle_without_a_model(tmp_path: Path) -> None:
    """A job wrote an AWQ config.json (a scheme the cost model refuses): the bundle was not written, exit 0."""
    config = tmp_path / "model" / "config.json"
    writes = (f"import json, pathlib; p = pathlib.Path({str(config)!r}); p.parent.mkdir(); p.write_text(json.dumps("
              "{'hidden_size': 64, 'num_hidden_layers': 2, 'num_attention_heads': 4, 'intermediate_size': 128, "
              "'vocab_size': 1000, 'quantization_config': {'quant_method': 'awq', 'bits': 4}}))")
    done = run_cli("record", "-o", str(tmp_path / "run"), "--model", str(config), "--", sys.executable, "-c", writes)
    assert done.returncode == 0, done.stderr
    assert "quant_method 'awq' is not priced" in done.stderr and "the bundle records no model" in done.stderr
    assert rltrace.open(tmp_path / "run").manifest.model is None and not (tmp_path / "run.shards").exists()


def test_a_model_file_that_never_appears_is_said_at_start_and_at_the_merge(tmp_path: Path) -> None:
    """A --model config.json may be written by the job, so a missing one is read when it ends: record says so at
    the start, keeps the shards when it is still missing (the job's exit code passes), and the --merge it suggests
    says the bundle goes without a model instead of dropping it silently."""
    missing = tmp_path / "nope" / "config.json"
    first = run_cli("record", "-o", str(tmp_path / "run"), "--model", str(missing), "--", sys.executable, JOB,
                    "exit", "0")
    assert first.returncode == 0
    assert "does not exist yet; it is read when the job ends" in first.stderr.splitlines()[0]
    assert "could not write the bundle" in first.stderr and (tmp_path / "run.shards").is_dir()
    merged = run_cli("record", "--merge", str(tmp_path / "run.shards"), "-o", str(tmp_path / "run"))
    assert merged.returncode == 0, merged.stderr
    assert "the recording's --model could not be read" in merged.stderr
    assert rltrace.open(tmp_path / "run").manifest.model is None


def test_a_sigkilled_job_still_merges(tmp_path: Path) -> None:
    proc, pid = _start_loop(tmp_path, "--keep-shards")
    _wait_flushed(tmp_path, proc)
    os.kill(pid, signal.SIGKILL)  # no handler runs: only the periodic flushes survive
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    spans = rltrace.open(tmp_path / "run").spans.collect()
    assert spans.height > 20
    last_span_ns = spans["end_ns"].max()
    assert time.time_ns() - last_span_ns < 30e9
    # the kept shards merge again by hand, into the same rows
    again = run_cli("record", "--merge", str(tmp_path / "run.shards"), "-o", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    assert rltrace.open(tmp_path / "again").spans.collect().height == spans.height


def test_collector_errors_are_reported_once_counted_and_harmless(tmp_path: Path) -> None:
    result = run_cli("record", "-o", str(tmp_path / "run"), "--", sys.executable, JOB, "bad-flow")
    assert result.returncode == 0
    assert result.stdout == "job finished\n"
    assert result.stderr.count("collector error in log_flow") == 1
    manifest = rltrace.open(tmp_path / "run").manifest
    assert manifest.extra["collector_errors"] == {"log_flow": 2}


def test_python_api_start_stop_and_an_unwritable_directory(tmp_path: Path) -> None:
    ok = subprocess.run([sys.executable, JOB, "api", str(tmp_path / "rec")], capture_output=True, text=True,
                        check=False)
    assert ok.returncode == 0, ok.stderr
    from rltrace import collectors

    collectors.merge(tmp_path / "rec", tmp_path / "run")
    assert rltrace.open(tmp_path / "run").spans.collect().height == 4
    (tmp_path / "file").write_text("not a directory")
    bad = subprocess.run([sys.executable, JOB, "api", str(tmp_path / "file" / "rec")], capture_output=True, text=True,
                         check=False)
    assert bad.returncode == 0
    assert bad.stderr.count("rltrace: collector error in flush") == 1


def test_bad_record_input_is_one_line(tmp_path: Path) -> None:
    cases = [
        (["record"], "nothing to record"),
        (["record", "--", "/no/such/program"], "command not found: /no/such/program"),
        (["record", "--merge", str(tmp_path)], "no recording here"),
        (["record", "--model", "GPT-9", "--", "true"], "unknown model 'GPT-9'"),
        (["record", "-o", ".", "--force", "--", "true"], "exists and is not a trace bundle"),  # refused before it runs
        (["record", "-o", "plain", "--force", "--", "true"], "plain: exists and is not a trace bundle"),
        (["record", "--name", "", "--", "true"], "--name must not be empty"),  # a generated id replaced it
        (["record", "--model", "", "--", "true"], "--model must not be empty"),  # read as no --model
        (["record", "--sync-group", " ", "--", "true"], "--sync-group must not be empty"),
    ]
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "x.txt").write_text("mine")
    (tmp_path / "x.txt").write_text("mine")
    for args, fragment in cases:
        result = run_cli(*args, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and fragment in lines[0], (args, result.stderr)
    # nothing was recorded, and nothing is left behind: no shards folder (the command not found left one)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain", "x.txt"]
    assert (tmp_path / "plain" / "x.txt").read_text() == "mine"


@pytest.mark.parametrize(("rows", "groups"), [
    # a prompt's samples spread over two engines stay one group (its digest is the same on both)
    ([("rollout/engine0", "0", "p1f"), ("rollout/engine1", "0", "p1f")], ["p1f", "p1f"]),
    # requests without prompt tokens are their own groups; two engines may both number one "0"
    ([("rollout/engine0", "0", "request:0"), ("rollout/engine1", "0", "request:0")],
     ["rollout/engine0:0", "rollout/engine1:0"]),
    # n > 1 completions of one such request share it
    ([("rollout/engine0", "7:0", "request:7"), ("rollout/engine0", "7:1", "request:7")],
     ["rollout/engine0:7", "rollout/engine0:7"]),
])
def test_the_merge_scopes_request_ids_and_request_groups_to_their_engine(rows, groups) -> None:
    requests = pl.DataFrame(rows, schema=["engine", "request_id", "group_id"], orient="row")
    merged = engine_scoped_ids(requests)
    assert merged["group_id"].to_list() == groups
    assert merged["request_id"].to_list() == [f"{e}:{r}" for e, r, _ in rows]


CHAINS = """import os, signal, sys, time
previous = signal.getsignal(signal.SIGTERM)
stop = False
def handler(signum, frame):  # as Lightning's signal connector does: note it, then chain to what was there
    global stop
    print("saving a checkpoint", flush=True)
    stop = True
    if callable(previous):
        previous(signum, frame)
signal.signal(signal.SIGTERM, handler)
os.kill(os.getpid(), signal.SIGTERM)
while not stop:
    time.sleep(0.01)
print("saved, exiting", flush=True)
sys.exit(0)
"""


def test_a_job_handler_that_chains_to_the_previous_one_shuts_down_as_unrecorded(tmp_path: Path) -> None:
    """The recorder's own SIGTERM handler (a flush before the default death) was what such a job chained to,
    and it killed the job mid-shutdown: exit 143 and no second line."""
    job = tmp_path / "chains.py"
    job.write_text(CHAINS)
    plain = subprocess.run([sys.executable, str(job)], capture_output=True, text=True, timeout=60, check=False)
    recorded = run_cli("record", "-o", str(tmp_path / "run"), "--", sys.executable, str(job), timeout=120)
    assert plain.returncode == recorded.returncode == 0, recorded.stderr
    assert plain.stdout == recorded.stdout == "saving a checkpoint\nsaved, exiting\n"


RE_KILLS = """import os, signal, sys
previous = signal.getsignal(signal.SIGTERM)
def handler(signum, frame):  # save, then whatever was there: the previous handler, or the default's death again
    print("saved", flush=True)
    if callable(previous):
        previous(signum, frame)
    else:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
signal.signal(signal.SIGTERM, handler)
os.kill(os.getpid(), signal.SIGTERM)
print("ran on", flush=True)
"""
OVER_THE_DEFAULT = """import os, signal, sys
def graceful(signum, frame):
    print("graceful shutdown", flush=True)
    sys.exit(0)
if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # a handler of its own only where nobody else has one
    signal.signal(signal.SIGTERM, graceful)
os.kill(os.getpid(), signal.SIGTERM)
"""


BY_KEYWORD = """import os, signal, sys
signal.signal(signal.SIGTERM, handler=lambda *_: sys.exit(print("handled") or 0))  # the stdlib's own keyword
os.kill(os.getpid(), signal.SIGTERM)
"""


@pytest.mark.parametrize("script", [RE_KILLS, OVER_THE_DEFAULT, BY_KEYWORD],
                         ids=["re-kills", "over-the-default", "by-keyword"])
def test_a_job_sees_sigterm_at_its_default_as_unrecorded(tmp_path: Path, script: str) -> None:
    """The flush handler was visible to the job: one that chained to a callable previous handler ran on to exit 0
    (143 unrecorded), and one that installs its handler only over the default died without its shutdown."""
    job = tmp_path / "job.py"
    job.write_text(script)
    plain = subprocess.run([sys.executable, str(job)], capture_output=True, text=True, timeout=60, check=False)
    recorded = run_cli("record", "-o", str(tmp_path / "run"), "--", sys.executable, str(job), timeout=120)
    assert recorded.returncode == plain.returncode, (plain, recorded.stderr)  # -15: both die of SIGTERM
    assert recorded.stdout == plain.stdout


def test_the_jobs_own_sitecustomize_runs_as_itself(tmp_path: Path) -> None:
    """record's sitecustomize runs the one it shadows; that one read rltrace's __file__, not its own."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['SITE_FILE'] = __file__\n")
    job = [sys.executable, "-c", "import os; print(os.environ.get('SITE_FILE'))"]
    env = {"PYTHONPATH": str(site)}
    plain = subprocess.run(job, capture_output=True, text=True, timeout=60, check=False, env={**os.environ, **env})
    recorded = run_cli("record", "-o", str(tmp_path / "run"), "--", *job, env=env, timeout=120)
    assert recorded.returncode == 0, recorded.stderr
    assert plain.stdout == recorded.stdout == f"{site / 'sitecustomize.py'}\n"


def test_an_unrecorded_command_itself_is_named_and_exits_3(tmp_path: Path) -> None:
    """`python -I` ignores PYTHONPATH, so recording never reaches the command's own process; the watcher looked
    at its descendants only and the recording exited 0 with an empty bundle and no word."""
    result = run_cli("record", "-o", str(tmp_path / "run"), "--", sys.executable, "-I", "-c",
                     "import time, torch; time.sleep(2)", timeout=120)
    assert result.returncode == 3, result.stderr
    assert "did not reach 1 process" in result.stderr and "-I -c import time, torch" in result.stderr


def test_a_recorded_process_loads_nothing_heavy_until_it_records(tmp_path: Path) -> None:
    """The recorder imported pyarrow, and with it numpy and OpenBLAS, when each process started: 166 ms a process,
    and a job that set OPENBLAS_NUM_THREADS before its own numpy import got every core's threads instead."""
    probe = "import sys; print(sorted(m for m in ('numpy', 'pyarrow', 'polars', 'torch') if m in sys.modules))"
    result = run_cli("record", "-o", str(tmp_path / "run"), "--", sys.executable, "-c", probe, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[]\n"


DETACHES = """import subprocess, sys
child = "import time, rltrace; time.sleep(float(sys.argv[1])); rltrace.span('reward', name='detached').__enter__()"
subprocess.Popen([sys.executable, "-c", "import sys; " + child, sys.argv[1]], start_new_session=True)
"""


@pytest.mark.parametrize(("lives_s", "named"), [(0.1, False), (8.0, True)])
def test_a_process_the_job_leaves_running_is_waited_for_briefly_then_named(
        lives_s: float, named: bool, tmp_path: Path) -> None:
    """A process the job detached recorded on after the merge, into a shards folder the next recording then called
    an earlier one's, and nothing said so. One that ends within a moment is in the bundle; one that does not is
    named, with the --merge command for its later shards."""
    job = tmp_path / "detaches.py"
    job.write_text(DETACHES)
    # (run_cli reads the job's output through pipes, which the detached child holds: the call returns when it ends)
    result = run_cli("record", "-o", str(tmp_path / "run"), "--", sys.executable, str(job), str(lives_s),
                     timeout=120)
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "still running" in line]
    assert len(said) == named, result.stderr
    if named:
        assert f"record --merge {tmp_path / 'run.shards'} -o {tmp_path / 'run.late'}" in said[0]
    spans = rltrace.open(tmp_path / "run").spans.collect()
    assert spans["name"].to_list() == ([] if named else ["detached"])


@pytest.mark.parametrize("allocator", [None, "narenas:1"])
def test_the_job_gets_the_environment_record_was_given(allocator: str | None, tmp_path: Path) -> None:
    """polars, which record loads, sets _RJEM_MALLOC_CONF in its own process when it loads (or adds its settings to
    the user's), and the job inherited that. Only record's own variables may differ from what record was given."""
    given = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    if allocator is not None:
        given["_RJEM_MALLOC_CONF"] = allocator
    job = [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"]
    result = subprocess.run([RLTRACE, "record", "-o", str(tmp_path / "run"), "--", *job], capture_output=True,
                            text=True, timeout=120, env=given, check=False)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    own = {"RLTRACE_RECORD_DIR", "PYTHONPATH", "TORCH_NCCL_ENABLE_TIMING"}
    assert {k: v for k, v in seen.items() if k not in own} == {k: v for k, v in given.items() if k not in own}


class _Unstopped(Exception):
    """The test's own SIGTERM handler ran: rltrace left SIGTERM at what it was (the default would end pytest)."""


def test_a_signal_once_the_job_has_ended_stops_the_merge_and_keeps_the_shards(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A second Ctrl-C or a SIGTERM while rltrace merged killed it: no bundle, not a word, the shards left behind."""
    def merging(*_args: object, **_kwargs: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler runs here

    def unstopped(_signum: int, _frame: object) -> None:
        raise _Unstopped

    monkeypatch.setattr(record_cmd, "_merge", merging)
    previous = signal.signal(signal.SIGTERM, unstopped)
    try:
        code = main(["record", "-o", str(tmp_path / "run"), "--", sys.executable, "-c", "pass"])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert code == 0  # the job's
    assert "rltrace: stopped before the bundle was written; the shards are kept in" in capsys.readouterr().err
    assert not (tmp_path / "run").exists() and (tmp_path / "run.shards" / "shards").is_dir()
