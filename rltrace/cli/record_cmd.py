"""``rltrace record``: run a command unchanged with collectors injected, then merge its shards into a bundle."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

import rltrace
from rltrace.bundle import check_target, open_bundle
from rltrace.catalog import get_model
from rltrace.cli.progress import stage, stderr
from rltrace.collectors import SHARDS, owner, reach, shards
from rltrace.collectors.autostart import ENV_DIR, SITECUSTOMIZE_TEMPLATE
from rltrace.collectors.ray_hook import ENV_SESSION
from rltrace.errors import ConfigError, RltraceError, clean
from rltrace.limits import check_output, check_ray_reachable
from rltrace.signals import terminate_as_interrupt
from rltrace.summary import summarize

# rltrace record's own exit code when the job exited 0 but recording missed processes that ran torch or vLLM
# (a failing job's own code always passes through instead).
EXIT_UNRECORDED = 3
STRAGGLER_WAIT_S = 60.0
"""after a signal, how long record waits for the job's recorded processes that outlived the one it reached"""
LEFT_RUNNING_WAIT_S = 2.0
"""without a signal, how long a recorded process the job left running (detached, a daemon, a pool shutting down) gets
to end before record names it"""
BOOTING_S = 1.0
"""a process started this recently counts as recorded before it has made its shard (Python's start-up and rltrace's)"""
SET_BY_IMPORTS = ("_RJEM_MALLOC_CONF",)
"""variables that libraries rltrace loads set in its own process (polars: its allocator's settings), which the job
gets as rltrace was started with them"""
# What `record` was asked for, kept beside the shards so that a later `--merge` writes the same bundle.
RECORD_FILE = "record.json"


def record(
    command: Annotated[list[str] | None, typer.Argument(help="The command to run, after --.")] = None,
    output: Annotated[Path, typer.Option("-o", "--output", help="Bundle directory to write.")] = Path("rltrace_run"),
    name: Annotated[str | None, typer.Option(help="Run id of the bundle (default: generated).")] = None,
    model: Annotated[
        str | None, typer.Option(help="Model of the job: a catalog name or a Hugging Face config.json.")
    ] = None,
    sync_group: Annotated[
        list[str] | None,
        typer.Option("--sync-group", help="Process group (e.g. pg1) whose broadcasts are weight syncs (repeatable)."),
    ] = None,
    merge_dir: Annotated[
        Path | None, typer.Option("--merge", help="Only merge the shards left in this recording directory.")
    ] = None,
    keep_shards: Annotated[bool, typer.Option("--keep-shards", help="Keep the per-process shards.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing bundle at --output.")] = False,
    ray_address: Annotated[
        str | None,
        typer.Option("--ray-address", help="Attach to this running Ray cluster (host:port): the job's workers "
                     "record on every node, and their shards are collected from each node at the end."),
    ] = None,
) -> int:
    """Run COMMAND unchanged, recording every Python process it starts, and write a trace bundle.

    Requests (vLLM), collectives (torch.distributed), weight-sync flows and phase spans are captured. The
    command's stdin, stdout, stderr and exit code pass through; SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and
    SIGUSR2 reach it, and the bundle is still written. A killed job's shards merge with --merge. If processes that
    ran torch or vLLM were not recorded, one line names them and rltrace exits 3 (when the job itself exited 0).

    Example: rltrace record -o run -- torchrun --nproc-per-node 2 train.py
    """
    _died_of.clear()
    for option, given in (("--model", [model] if model is not None else []), ("--sync-group", sync_group or [])):
        if any(not value.strip() for value in given):  # read as none given, without a word
            raise ConfigError(f"{option} must not be empty")
    # A config.json the job writes itself is read after the run; anything else is checked now.
    deferred = bool(model and model.endswith(".json") and not Path(model).exists())
    info = get_model(model).info() if model and not deferred else None
    if deferred and merge_dir is None and command:
        print(f"rltrace: note: --model {clean(str(model))} does not exist yet; it is read when the job ends (a job "
              "may write it)", file=sys.stderr)
    groups = set(sync_group or [])
    if name is not None and not name.strip():  # it was replaced by a generated id without a word
        raise ConfigError("--name must not be empty (leave it out for a generated run id)")
    check_output(output, "-o", folder=True, bundle=True)  # before any work: under a file, not writable
    if ray_address is not None:
        if ray_address == "local" or ray_address.startswith("ray://"):  # accepted, and then nothing was recorded
            raise ConfigError(f"--ray-address {ray_address}: record attaches to a running cluster by its own address "
                              "(HOST:PORT, or auto): a ray:// client's workers and a cluster the job starts itself do "
                              "not get the recording's hook")
        check_ray_reachable(ray_address, forms="auto or HOST:PORT")  # the job's own ray.init() would fail on it
    if merge_dir is not None:
        if command:
            raise ConfigError("give either a command or --merge, not both")
        return _merge_only(merge_dir, output, info, groups, force, name)
    if not command:
        raise ConfigError("nothing to record: give a command after --, e.g. rltrace record -- python train.py")
    if output.name in ("", ".."):  # "-o ." or "-o ..": the folder by its own name, for the shards beside it
        output = Path(os.path.abspath(output))
    if output.exists() and not force:
        raise ConfigError(f"{clean(output)}: already exists (pass --force to replace it)")
    check_target(output, force)  # --force replaces a bundle or an empty folder, nothing else: said before the job runs
    record_dir = output.with_name(output.name + ".shards")
    held = owner.take(record_dir)  # a second recording into this folder stops here, touching nothing
    try:
        env, session = _prepare(held, record_dir, output, force, ray_address,
                                {"command": command, "name": name, "model": model, "sync_groups": sorted(groups)})
    except BaseException:
        held.release(remove=False)
        raise

    watcher = reach.ReachWatcher(0, record_dir / SHARDS)
    terminal_fds = [fd for fd in (1, 2) if os.isatty(fd)]  # asked now: a hung-up terminal is no tty any more
    with _through_hang_up(terminal_fds):  # a hang-up once the job has ended (_run forwards one while it runs)
        try:
            code, signalled = _run(command, env, terminal_fds, watcher)
        except ConfigError:  # the command could not start: nothing was recorded, nothing to keep
            held.release(remove=True)
            raise
        except BaseException:
            held.release(remove=False)
            raise

        state = {"code": code, "written": False, "remove": False}

        def finish() -> None:  # the job has ended: wait for its stragglers, merge what it recorded
            # after a signal, the job's processes may outlive the one it reached: their shards still come in;
            # without one, a process the job left running (detached, a daemon) gets a moment to end, then is named
            later = _merge_command(record_dir, output.with_name(output.name + ".late"))
            wait_s = STRAGGLER_WAIT_S if signalled else LEFT_RUNNING_WAIT_S
            still = _wait_for_recorders(watcher, record_dir / SHARDS, wait_s, later, announce=signalled)
            try:  # from here on, whatever fails, the job's exit code is what rltrace exits with
                missed = _unreached(watcher)
                if ray_address and session:
                    nodes = _collect_ray(ray_address, session, record_dir / SHARDS)
                    if nodes is not None and not any(n.shards for n in nodes):
                        missed.append(f"the job's Ray workers on all {len(nodes)} node(s) of {ray_address} "
                                      "(no shard came back)")
                if missed:
                    print(f"rltrace: warning: recording did not reach {len(missed)} process(es) that ran torch or "
                          f"vLLM; the bundle lacks their work: {'; '.join(missed)}", file=sys.stderr)
                    if state["code"] == 0:
                        state["code"] = EXIT_UNRECORDED
                _merge(record_dir, output, command=command, model=_deferred_model(str(model)) if deferred else info,
                       groups=groups, force=force, run_id=name)
            except Exception as e:  # noqa: BLE001 - disk full, read-only: say so, keep the shards
                print(f"rltrace: error: could not write the bundle {clean(output)}: {_why(e)}; the shards are kept in "
                      f"{clean(record_dir)} (finish later: {_merge_command(record_dir, output)})", file=sys.stderr)
                return
            state["written"] = True
            # processes still recording write on into the shards: kept for the --merge the warning names
            state["remove"] = not keep_shards and not still

        try:
            with _stoppable():  # a signal now stops rltrace's own work, and keeps the shards
                finish()
        except KeyboardInterrupt:
            if not state["written"]:
                print(f"rltrace: stopped before the bundle was written; the shards are kept in {clean(record_dir)} "
                      f"(finish later: {_merge_command(record_dir, output)})", file=sys.stderr)
            state["remove"] = False
        held.release(remove=bool(state["remove"]))
        return int(state["code"])


def _deferred_model(model: str) -> Any:
    """The model a job wrote as it ran (``--model`` naming a config.json that did not exist yet), or None with a
    warning where the file it wrote cannot be read: the bundle goes without it rather than not at all. A file that
    never appeared is an error (the shards are kept for a --merge once it is there)."""
    if not Path(model).exists():
        return get_model(model).info()  # no such file: said as such
    try:
        return get_model(model).info()
    except RltraceError as e:
        print(f"rltrace: warning: --model {clean(model)} could not be read ({clean(str(e), 300)}); the bundle records "
              "no model", file=sys.stderr)
        return None


def _prepare(held: owner.Ownership, record_dir: Path, output: Path, force: bool, ray_address: str | None,
             request: dict[str, Any]) -> tuple[dict[str, str], str | None]:
    """Set up an owned recording folder: earlier shards moved aside (or removed with --force), the injected
    sitecustomize, what was asked (for a later --merge), and the job's environment."""
    left = record_dir / SHARDS
    if held.previous_pid or left.exists():
        # a killed recording's job may run on and write its shards here: they would land in this bundle
        writers = _writers(left)
        if writers:
            raise ConfigError(f"{clean(record_dir)}: processes of an earlier recording still write there (pid "
                              f"{', '.join(map(str, writers[:5]))}{', ...' if len(writers) > 5 else ''}): stop them, "
                              "or record to another -o")
    if held.previous_pid:
        print(f"rltrace: note: {clean(record_dir)} was owned by a recording (pid {held.previous_pid}) that is no "
              "longer running; taking it over", file=sys.stderr)
    if left.exists() and any(left.iterdir()):
        if force:
            shutil.rmtree(left)
        else:  # the shards of a recording whose merge failed, or of a killed one: never deleted unasked
            n = 1
            while (aside := record_dir.with_name(f"{record_dir.name}.{n}")).exists():
                n += 1
            aside.mkdir()
            os.rename(left, aside / SHARDS)
            old = record_dir / RECORD_FILE
            if old.exists():
                os.rename(old, aside / RECORD_FILE)
            print(f"rltrace: note: shards of an earlier recording were in {clean(record_dir)}; moved to "
                  f"{clean(aside)} (merge them: {_merge_command(aside, output.with_name(output.name + f'.{n}'))})",
                  file=sys.stderr)
    shutil.rmtree(record_dir / "inject", ignore_errors=True)
    inject = record_dir / "inject"
    try:
        inject.mkdir(parents=True)
        (record_dir / SHARDS).mkdir(exist_ok=True)  # a job that starts no Python still gets a bundle
        shutil.copyfile(SITECUSTOMIZE_TEMPLATE, inject / "sitecustomize.py")
        (record_dir / RECORD_FILE).write_text(json.dumps(request))
    except OSError as e:
        raise ConfigError(f"-o: cannot write in the recording folder {clean(record_dir)}: {e.strerror}") from None
    env = _job_environ()
    env[ENV_DIR] = str((record_dir / SHARDS).resolve())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(inject.resolve()), env.get("PYTHONPATH", "")) if p)
    env.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")  # NCCL work durations from CUDA events
    session = None
    if ray_address:
        session = uuid.uuid4().hex[:12]
        env["RAY_ADDRESS"] = ray_address  # the job's ray.init() joins the cluster
        env[ENV_SESSION] = session  # its workers keep their shards on their own node until collected
    return env, session


@contextlib.contextmanager
def _stoppable() -> Iterator[None]:
    """Within the block SIGINT and SIGTERM raise KeyboardInterrupt (one ignored when rltrace started stays ignored),
    each handler put back after: a second Ctrl-C, or a SIGTERM, once the job has ended stops the wait and the merge
    with a word, rather than killing rltrace silently with the shards left behind."""
    with terminate_as_interrupt():
        previous = signal.getsignal(signal.SIGINT)
        if signal.SIGINT not in rltrace._STARTING_IGNORED:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


def _job_environ() -> dict[str, str]:
    """This process's environment less what libraries it imported set in it (:data:`SET_BY_IMPORTS`, as they were
    when rltrace started): the job starts with the environment it was given."""
    env = dict(os.environ)
    for key in SET_BY_IMPORTS:
        if key in rltrace._STARTING_ENVIRON:
            env[key] = rltrace._STARTING_ENVIRON[key]
        else:
            env.pop(key, None)
    return env


def _merge_only(merge_dir: Path, output: Path, model: Any, groups: set[str], force: bool, name: str | None) -> int:
    """``--merge``: the shards a recording left (with what that recording was asked, where it wrote it)."""
    busy = owner.held_by_other(merge_dir)
    if busy:
        raise ConfigError(f"{clean(merge_dir)}: a recording (pid {busy}) is still writing here; merge when it ends")
    writers = _writers(merge_dir / SHARDS)  # a killed recording's job, running on: its shards are not complete
    if writers:
        raise ConfigError(f"{clean(merge_dir)}: processes of the recording still write there (pid "
                          f"{', '.join(map(str, writers[:5]))}{', ...' if len(writers) > 5 else ''}); merge when they "
                          "end")
    asked: dict[str, Any] = {}
    try:
        asked = json.loads((merge_dir / RECORD_FILE).read_text())
    except (OSError, ValueError):
        pass
    if model is None and isinstance(asked.get("model"), str):
        try:
            model = get_model(asked["model"]).info()
        except RltraceError as e:  # the recording was asked for it: say why the bundle goes without
            print(f"rltrace: warning: the recording's --model could not be read ({clean(str(e), 300)}); the bundle "
                  "records no model (give --model to set one)", file=sys.stderr)
            model = None
    command = [str(c) for c in asked.get("command") or []] if isinstance(asked.get("command"), list) else []
    groups = groups or {str(g) for g in asked.get("sync_groups") or [] if isinstance(g, str)}
    run_id = name or (asked.get("name") if isinstance(asked.get("name"), str) else None)
    try:
        _merge(merge_dir, output, command=command, model=model, groups=groups, force=force, run_id=run_id)
    except OSError as e:
        print(f"rltrace: error: could not write the bundle {clean(output)}: {_why(e)}; the shards in "
              f"{clean(merge_dir)} are untouched", file=sys.stderr)
        return 1
    return 0


def _why(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return f"{e.strerror}{f' ({clean(e.filename, 200)})' if e.filename else ''}"
    return clean(" ".join(str(e).split()) or type(e).__name__, 300)


def _merge_command(record_dir: Path, output: Path) -> str:
    return f"rltrace record --merge {shlex.quote(str(record_dir))} -o {shlex.quote(str(output))}"


def _unreached(watcher: reach.ReachWatcher) -> list[str]:
    return [f"pid {m.pid} ({m.command})" for m in watcher.missed()]


def _collect_ray(address: str, session: str, dest: Path) -> list[Any] | None:
    """Shards of an attached job from every node of the cluster; None (and one line) if that failed."""
    try:
        from rltrace.collectors import ray_collect

        nodes = ray_collect.collect(address, session, dest)
    except Exception as e:  # noqa: BLE001 - what is here still merges
        print(f"rltrace: error: could not collect shards from the Ray cluster at {address}: "
              f"{type(e).__name__}: {e}", file=sys.stderr)
        return None
    got = ", ".join(f"{n.node_id[:8]} ({n.host}): {n.shards}" for n in nodes)
    print(f"rltrace: collected shards from {len(nodes)} Ray node(s): {got}", file=sys.stderr)
    return nodes


FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
"""signals that reach the job as if it ran alone: by default each would end rltrace and leave the job running
unsignalled, with no bundle (a closed ssh session's SIGHUP; torchrun handles SIGHUP and SIGQUIT itself)"""
TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)
"""signals a terminal sends to its whole foreground process group (Ctrl-C, Ctrl-\\, a hang-up), the job included:
there rltrace notes them and does not send a second copy (a hang-up reaches a session leader alone: rltrace run as
one, by ``ssh host rltrace ...`` or ``setsid``, forwards it)"""
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
"""forwarded signals that stop a job: after one, its processes that outlive it are waited for longer, and a second
one stops that wait (a USR signal asks a running job for something, a checkpoint, a dump)"""


def _run(command: list[str], env: dict[str, str], terminal_fds: list[int],
         watcher: reach.ReachWatcher | None = None) -> tuple[int, bool]:
    """Run the command, forwarding :data:`FORWARDED` (those of :data:`TERMINAL_SIGNALS` unless the terminal already
    delivered them); a signal rltrace started with ignored the job starts with ignored too, and it is not
    forwarded. ``terminal_fds``: rltrace's standard streams that are a terminal (left for /dev/null when it hangs
    up). Returns the job's exit code and whether a signal reached rltrace while it ran."""
    ignored = rltrace._STARTING_IGNORED
    for s in ignored:  # ignored again here (polars' handler replaced it), so the job starts with them ignored
        signal.signal(s, signal.SIG_IGN)
    try:
        # the descriptors rltrace was handed, those still open as handed (a number closed and reused since is not)
        child = subprocess.Popen(command, env=env, pass_fds=rltrace._inheritable_fds(rltrace._STARTING_FDS))
    except FileNotFoundError:
        raise ConfigError(f"command not found: {command[0]}") from None
    except PermissionError:
        raise ConfigError(f"command not executable: {command[0]}") from None

    signalled = False

    def forward(signum: int, _frame: Any) -> None:
        nonlocal signalled
        signalled = signalled or signum in STOPPING
        if child.poll() is None:
            child.send_signal(signum)
        if signum == signal.SIGHUP and _session_leader():
            _leave_hung_up_terminal(terminal_fds)

    def noted(signum: int, _frame: Any) -> None:  # the terminal delivered it to the job itself
        nonlocal signalled
        signalled = True
        if signum == signal.SIGHUP:  # and is gone
            _leave_hung_up_terminal(terminal_fds)

    forwarded = [s for s in FORWARDED if s not in ignored]  # an ignored one stays ignored
    previous = {s: signal.getsignal(s) for s in forwarded}
    at_terminal = _terminal_delivers_sigint()
    delivered = {s for s in TERMINAL_SIGNALS if at_terminal and not (s == signal.SIGHUP and _session_leader())}
    for s in forwarded:
        signal.signal(s, noted if s in delivered else forward)
    if watcher is not None:
        watcher.root_pid = child.pid
        watcher.start()
    try:
        code = child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if watcher is not None:
            watcher.stop()
    if code < 0 and -code in MIRRORED:
        _died_of.append(-code)  # the console script dies of it too, once the bundle is written
    return (128 - code if code < 0 else code), signalled  # killed by signal N: 128 + N, as shells report it


MIRRORED = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL, signal.SIGUSR1, signal.SIGUSR2,
                      signal.SIGALRM, signal.SIGPIPE})
"""signals whose default action only ends a process: where one killed the job, the ``rltrace`` command dies of it
too (a shell stops a loop on a death by Ctrl-C, not on exit 130); a core-dumping one (SIGSEGV, SIGABRT, SIGQUIT)
is reported as exit 128 + N instead"""
_died_of: list[int] = []


def job_signal() -> int | None:
    """The signal of :data:`MIRRORED` that killed the last recorded job, if one did (None after any other end)."""
    return _died_of[-1] if _died_of else None


def _wait_for_recorders(watcher: reach.ReachWatcher, shards: Path, limit_s: float, later: str, *,
                        announce: bool = True) -> list[int]:
    """Wait up to ``limit_s`` for the job's recorded processes that outlived the one it ran or a signal reached (a
    launcher's children, an engine's processes, a process it detached) to end and flush, so the bundle holds what
    they recorded; a second signal stops the wait (``announce``: say so when it starts). Those still running then
    are named: what they record later goes to shards that ``later`` (a --merge command) turns into a bundle of its
    own. Returns their pids (none: every recorded process ended)."""
    running = _alive_recorders(watcher, shards)
    if not running:
        return []
    if announce:
        print(f"rltrace: note: waiting up to {limit_s:.0f} s for {len(running)} recorded process(es) of the job that "
              f"are still running (pid {', '.join(map(str, running))}); signal again to stop waiting",
              file=sys.stderr)
    stop = threading.Event()
    previous = {s: signal.getsignal(s) for s in STOPPING}  # read before any is replaced: a signal may come between

    def stopped(signum: int, frame: Any) -> None:
        stop.set()
        if signum == signal.SIGHUP and callable(after := previous[signal.SIGHUP]):  # the terminal is gone: leave it too
            after(signum, frame)

    for s in STOPPING:
        signal.signal(s, stopped)
    try:
        deadline = time.monotonic() + limit_s
        while running and not stop.wait(0.2) and time.monotonic() < deadline:
            running = _alive_recorders(watcher, shards)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if running:
        print(f"rltrace: warning: {len(running)} recorded process(es) still running (pid "
              f"{', '.join(map(str, running))}); what they record from now on is not in the bundle (once they end: "
              f"{later})", file=sys.stderr)
    return running


def _alive_recorders(watcher: reach.ReachWatcher, shards: Path) -> list[int]:
    """This host's processes that record into ``shards`` and still run: those that wrote a shard there (a pid whose
    environment does not name this recording is another process now), and those started in the last
    :data:`BOOTING_S`, which may not have made theirs yet."""
    return _recording_into(watcher.recorded() | _started_within(BOOTING_S), shards)


def _recording_into(pids: set[int], shards: Path) -> list[int]:
    """Those of ``pids`` still running whose environment records into ``shards``."""
    needle = f"{ENV_DIR}={shards.resolve()}\0".encode()
    alive = []
    for pid in sorted(pids):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:  # gone (or not ours to read)
            continue
        if needle in environ:
            alive.append(pid)
    return alive


def _writers(shards: Path) -> list[int]:
    """This host's running processes (those this user can read) whose environment records into ``shards``."""
    try:
        pids = {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()}
    except OSError:  # no Linux /proc: nothing to ask
        return []
    return _recording_into(pids, shards)


def _started_within(seconds: float) -> set[int]:
    """Pids of the processes started in the last ``seconds`` (none where there is no Linux /proc)."""
    try:
        now = float(Path("/proc/uptime").read_text().split()[0])
        ticks = os.sysconf("SC_CLK_TCK")
        entries = [p for p in Path("/proc").iterdir() if p.name.isdigit()]
    except (OSError, ValueError):
        return set()
    young = set()
    for entry in entries:
        try:  # field 22 of stat, the start time in clock ticks since boot (the 20th after the command's ")")
            started = int((entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[19]) / ticks
        except (OSError, ValueError, IndexError):
            continue
        if now - started < seconds:
            young.add(int(entry.name))
    return young


@contextlib.contextmanager
def _through_hang_up(terminal_fds: list[int]) -> Iterator[None]:
    """Within the block, a hang-up (the terminal closed, the ssh session gone) only sends what rltrace still prints to
    /dev/null: once the job has ended it has no job to reach, and by default it would end rltrace while it waits for
    the job's processes or writes the bundle, leaving shards and no word. A hang-up ignored at start stays ignored;
    the handler before is restored after."""
    if signal.SIGHUP in rltrace._STARTING_IGNORED:
        yield
        return
    previous = signal.signal(signal.SIGHUP, lambda *_: _leave_hung_up_terminal(terminal_fds))
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


def _leave_hung_up_terminal(fds: list[int]) -> None:
    """A session leader's SIGHUP is its terminal hanging up: what rltrace still has to say (the summary, the
    bundle's path) would fail there with EIO and end it before it cleans up and exits with the job's code, so its
    standard streams ``fds`` that were that terminal go to /dev/null."""
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in fds:
        with contextlib.suppress(OSError):
            os.dup2(null, fd)
    os.close(null)


def _session_leader() -> bool:
    """Whether rltrace leads its session: a terminal's hang-up then reaches rltrace alone, not the job."""
    return os.getsid(0) == os.getpid()


def _terminal_delivers_sigint() -> bool:
    """Whether rltrace runs in its controlling terminal's foreground process group, whose Ctrl-C reaches the job
    too: asked of the terminal itself (/dev/tty), whatever its standard streams were redirected to."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:  # no controlling terminal
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _merge(
    record_dir: Path,
    output: Path,
    *,
    command: list[str],
    model: Any,
    groups: set[str],
    force: bool,
    run_id: str | None = None,
) -> None:
    with stage(stderr(), f"merging the recording's shards into {clean(output)}"):
        manifest = shards.merge(record_dir, output, command=command, model=model, sync_groups=groups,
                                overwrite=force, run_id=run_id)
    lines = []
    try:
        s = summarize(open_bundle(output, validate=False))  # the merge validated every row it wrote
        rows = ", ".join(f"{n:,} {t}" for t, n in s.table_rows.items())
        lines.append(f"rltrace: recorded {output}: {rows}")
        ot = s.output_tokens
        if ot["max"] is not None:
            lines.append(f"rltrace:   output tokens p50 {ot['p50']:.0f}, max {ot['max']:.0f} "
                         f"over {s.per_step.height} steps")
        if s.collectives_by_op.height:
            ops = ", ".join(f"{r['op']} x{r['count']}" for r in s.collectives_by_op.iter_rows(named=True))
            lines.append(f"rltrace:   collectives: {ops}")
    except RltraceError as e:  # the bundle is written; only its summary failed
        lines.append(f"rltrace: recorded {output} (no summary: {_why(e)})")
    errors = manifest.extra.get("collector_errors") or {}
    if errors:
        lines.append(f"rltrace:   collector errors (job unaffected): {errors}")
    left_out = manifest.extra.get("left_out") or {}
    if left_out:
        lines.append("rltrace:   left out by design: " + ", ".join(f"{n:,} {why}" for why, n in left_out.items()))
    for what, why in (manifest.extra.get("not_recorded") or {}).items():
        lines.append(f"rltrace: warning: {what} not recorded: {why}")
    lost = manifest.extra.get("lost") or {}
    if lost:
        lines.append(f"rltrace: warning: the recording lost {manifest.extra.get('dropped_events', 0):,} events: "
                     + ", ".join(f"{why} {n:,}" for why, n in lost.items()))
    print("\n".join(lines), file=sys.stderr)
