"""A plain Python job that records spans through the API, for record's signal and failure tests.

    python spans_job.py exit CODE          # a few spans, then exit with CODE
    python spans_job.py loop PIDFILE       # spans every 10 ms until killed; writes its pid first
    python spans_job.py bad-flow           # misuses the API twice (a collector error), then exits 0
    python spans_job.py api DIR            # records through rltrace.collectors.start(DIR) / stop()
    python spans_job.py children           # one child per multiprocessing start method, each records a span
    python spans_job.py orphan PIDFILE     # starts a child that records for 4 s, writes its own pid, then waits
                                           # (SIGTERM ends it; the child, which no signal reaches, runs on)
    python spans_job.py leave              # starts that child, then exits 0 at once (the child records on)
"""

import multiprocessing
import os
import subprocess
import sys
import time

import rltrace
from rltrace import collectors


def child(method: str) -> None:
    with rltrace.span("environment", step=0, name=f"child-{method}"):
        time.sleep(0.01)


def spans(n: int) -> None:
    for k in range(n):
        rltrace.set_step(k)
        with rltrace.span("reward", name=f"score-{k}"):
            time.sleep(0.001)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "exit":
        spans(3)
        print("job output", flush=True)
        sys.exit(int(sys.argv[2]))
    elif mode == "loop":
        with open(sys.argv[2], "w") as f:
            f.write(str(os.getpid()))
        k = 0
        while True:
            spans(1)
            k += 1
            time.sleep(0.01)
    elif mode == "bad-flow":
        for _ in range(2):
            rltrace.log_flow(version=0, src="a", dst="b", bytes=1, start_ns=0, end_ns=1, method="pigeon")
        spans(2)
        print("job finished", flush=True)
    elif mode == "children":
        for method in ("fork", "spawn", "forkserver"):
            proc = multiprocessing.get_context(method).Process(target=child, args=(method,))
            proc.start()
            proc.join()
            assert proc.exitcode == 0, method
        spans(1)
    elif mode == "orphan":
        subprocess.Popen([sys.executable, __file__, "tail"])
        with open(sys.argv[2], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(3600)
    elif mode == "leave":  # starts the same child, then ends at once: the child records on past the job
        subprocess.Popen([sys.executable, __file__, "tail"], start_new_session=True)
        spans(1)
    elif mode == "tail":
        end = time.monotonic() + 4.0
        while time.monotonic() < end:
            spans(1)
            time.sleep(0.01)
        with rltrace.span("environment", name="tail-done"):
            pass
    elif mode == "api":
        collectors.start(sys.argv[2])
        spans(4)
        collectors.stop()
