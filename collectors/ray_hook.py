"""Recording inside Ray: every worker process of a recorded job records, whatever its ``runtime_env`` does.

A Ray worker is started by its node's raylet, not by the job, so the ``sitecustomize`` that ``rltrace record``
puts on ``PYTHONPATH`` reaches it only while the job leaves ``PYTHONPATH`` alone; verl and OpenRLHF set
``runtime_env={"env_vars": {"PYTHONPATH": ...}}`` and their workers would run unrecorded. So, in a recorded
driver, when the job imports ray:

1. Ray's job runtime-env hook (``ray._private.worker._maybe_modify_runtime_env``, which is where Ray 2.60
   applies ``RAY_RUNTIME_ENV_HOOK`` to the job's ``runtime_env``) is wrapped: after Ray's own hook, the job's
   runtime_env gets ``RLTRACE_RECORD_DIR`` in its ``env_vars`` (Ray merges job and actor ``env_vars``, so an
   actor's own PYTHONPATH keeps it) and Ray's ``worker_process_setup_hook``, which Ray runs in every worker
   before any task, chained in front of the job's own hook if it has one.
2. The setup hook starts this module's :func:`worker_setup`: it boots the recorder and puts a node-local copy
   of the sitecustomize back on the worker's ``PYTHONPATH``, so what the worker starts (vLLM engine
   processes, torch subprocesses) records too.
3. A Ray worker dies without ``atexit`` when its job ends, so before the driver's ``ray.shutdown`` (explicit
   or at exit) :func:`drain` waits until every live recorder of the job has flushed once more (at most
   :data:`DRAIN_TIMEOUT_S`; each flushes every second), on every node when attached to a cluster.

The setup hook is pickled by value (it names no rltrace global), so a worker whose Python lacks rltrace
imports nothing and runs unrecorded instead of failing. Verified on ray 2.60.0.
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rltrace.collectors import recorder

ENV_DIR = "RLTRACE_RECORD_DIR"
ENV_SESSION = "RLTRACE_RAY_SESSION"  # set by `record --ray-address`: shards stay on each node until collected
ENV_NEXT_SETUP = "RLTRACE_NEXT_SETUP_HOOK"  # the job's own worker_process_setup_hook, given as a module path
SETUP_HOOK_VAR = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"  # Ray's own env var for the setup hook
DRAIN_TIMEOUT_S = 5.0
_installed = False


def install(ray_module: Any) -> None:
    """In a recorded process that imported ray: wrap the job runtime-env hook and drain before shutdown."""
    global _installed
    if _installed:
        return
    _installed = True
    # Any: Ray's private module, whose functions this patches (verified on the pinned Ray)
    worker: Any = sys.modules.get("ray._private.worker") or importlib.import_module("ray._private.worker")
    original = getattr(worker, "_maybe_modify_runtime_env", None)
    if original is None:  # another Ray than the one verified: say so once, the job runs as it would
        raise RuntimeError("ray._private.worker._maybe_modify_runtime_env is gone: Ray workers will not record")

    def modify(runtime_env: dict[str, Any] | None, *args: Any, **kwargs: Any) -> dict[str, Any]:
        runtime_env = original(runtime_env, *args, **kwargs)
        rec = recorder.current()
        if rec is None:
            return runtime_env
        with rec.guard("ray runtime_env hook"):
            runtime_env = add_recording(runtime_env)
        return runtime_env

    worker._maybe_modify_runtime_env = modify
    shutdown = worker.shutdown

    def shutdown_after_drain(*args: Any, **kwargs: Any) -> Any:
        drain()
        return shutdown(*args, **kwargs)

    shutdown_after_drain.__doc__ = shutdown.__doc__
    worker.shutdown = shutdown_after_drain
    if getattr(ray_module, "shutdown", None) is shutdown:
        ray_module.shutdown = shutdown_after_drain
    # ray registered its own exit-time shutdown when it was imported; atexit runs the newest first, so this
    # drain runs before it.
    import atexit

    atexit.register(drain)


def add_recording(runtime_env: dict[str, Any] | None) -> dict[str, Any]:
    """The job's runtime_env plus what makes its workers record (the job's own settings are kept)."""
    runtime_env = runtime_env if runtime_env is not None else {}
    env_vars = dict(runtime_env.get("env_vars") or {})
    if SETUP_HOOK_VAR in env_vars:  # already exported (a job supervisor's): Ray forbids a second one
        return runtime_env
    for name in (ENV_DIR, ENV_SESSION):
        if os.environ.get(name):
            env_vars.setdefault(name, os.environ[name])
    theirs = runtime_env.get("worker_process_setup_hook")
    if isinstance(theirs, str):
        env_vars[ENV_NEXT_SETUP] = theirs
        theirs = None
    runtime_env["env_vars"] = env_vars
    runtime_env["worker_process_setup_hook"] = _setup_hook(theirs)
    return runtime_env


def _setup_hook(theirs: Callable[[], Any] | None) -> Callable[[], Any]:
    def rltrace_worker_setup() -> Any:
        setup: Callable[[], None] | None
        try:
            from rltrace.collectors.ray_hook import worker_setup as setup
        except Exception:  # noqa: BLE001 - no rltrace in this worker's Python: it runs unrecorded
            setup = None
        if setup is not None:
            setup()
        return theirs() if theirs is not None else None

    # Pickled by value: "__main__" functions are never looked up by name, so the worker needs no rltrace.
    rltrace_worker_setup.__module__ = "__main__"
    rltrace_worker_setup.__qualname__ = "rltrace_worker_setup"
    return rltrace_worker_setup


def node_root(session: str) -> Path:
    """This Ray node's own directory for an attached recording's shards (in the node's session dir)."""
    import ray._private.worker

    node = ray._private.worker.global_worker.node
    if node is None:
        raise RuntimeError("Ray is not initialised in this process: no node session directory")
    return Path(node.get_session_dir_path()) / f"rltrace-{session}"


def worker_setup() -> None:
    """Ray's worker_process_setup_hook: start recording this worker; then the job's own hook, if any."""
    root = os.environ.get(ENV_DIR)
    if root:
        try:
            _start_worker(root)
        except Exception as e:  # noqa: BLE001 - recording must never stop a worker from starting
            print(f"rltrace: recording disabled in this Ray worker: {type(e).__name__}: {e}", file=sys.stderr)
    theirs = os.environ.get(ENV_NEXT_SETUP)
    if theirs:  # as Ray would run it: errors reach Ray as they would without rltrace
        module, _, name = theirs.rpartition(".")
        getattr(importlib.import_module(module), name)()


def _start_worker(root: str) -> None:
    import ray
    from rltrace.collectors import autostart

    session = os.environ.get(ENV_SESSION)
    if session:  # attached to a cluster: no shared filesystem is assumed, each node keeps its own shards
        root = str(node_root(session) / "shards")
        os.environ[ENV_DIR] = root
    inject = Path(root).parent / "inject"
    site = inject / "sitecustomize.py"
    if not site.exists():  # another node, or a runtime_env that replaced PYTHONPATH: write it here
        inject.mkdir(parents=True, exist_ok=True)
        tmp = inject / f".sitecustomize.{os.getpid()}.tmp"
        tmp.write_bytes(autostart.SITECUSTOMIZE_TEMPLATE.read_bytes())
        os.replace(tmp, site)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(inject) not in paths:  # so the worker's own children (vLLM engine processes) record too
        os.environ["PYTHONPATH"] = os.pathsep.join([str(inject), *paths])
    rec = recorder.current()
    if rec is None or rec.pid != os.getpid():
        autostart.boot()
        rec = recorder.current()
    if rec is not None:
        rec.meta["ray_node"] = ray.get_runtime_context().get_node_id()


def drain() -> None:
    """In the driver, before Ray's shutdown: wait until every live recorder of the job flushed once more."""
    try:
        import ray
        from ray._private import worker

        if not ray.is_initialized() or worker.global_worker.mode != worker.SCRIPT_MODE:
            return
        since = time.time_ns()
        session = os.environ.get(ENV_SESSION)
        if not session:
            root = os.environ.get(ENV_DIR)
            if root:
                await_flush(Path(root), since, DRAIN_TIMEOUT_S)
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        task = ray.remote(num_cpus=0, max_retries=0)(_drain_node)
        refs = [
            task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
                session, since
            )
            for n in ray.nodes() if n.get("Alive")
        ]
        ray.wait(refs, num_returns=len(refs), timeout=DRAIN_TIMEOUT_S + 10)
    except Exception as e:  # noqa: BLE001 - the job's shutdown goes on regardless
        rec = recorder.current()
        if rec is not None:
            rec.error("ray drain", e)


def _drain_node(session: str, since_ns: int) -> None:
    await_flush(node_root(session) / "shards", since_ns, DRAIN_TIMEOUT_S)


def await_flush(root: Path, since_ns: int, timeout_s: float) -> list[int]:
    """Wait until each live process with a shard under ``root`` on this host flushed after ``since_ns``;
    returns the pids still behind at the timeout."""
    host, me = socket.gethostname(), os.getpid()
    deadline = time.monotonic() + timeout_s
    while True:
        behind = []
        for meta in root.glob("*/meta.json"):
            try:
                m = json.loads(meta.read_text())
            except (OSError, ValueError):
                continue  # being replaced right now: the next pass reads it
            pid = m.get("pid")
            if m.get("host") != host or pid == me or not isinstance(pid, int) or not _alive(pid):
                continue
            if m.get("flushed_ns", 0) < since_ns:
                behind.append(pid)
        if not behind or time.monotonic() > deadline:
            return behind
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie has exited (and flushed whatever it could) but still answers kill(0)
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return True
