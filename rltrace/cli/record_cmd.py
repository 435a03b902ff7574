"""``rltrace record``: run a command unchanged with collectors injected, then merge its shards into a bundle."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

from rltrace.bundle import open_bundle
from rltrace.catalog import get_model
from rltrace.collectors import reach, shards
from rltrace.collectors.autostart import ENV_DIR, SITECUSTOMIZE_TEMPLATE
from rltrace.collectors.ray_hook import ENV_SESSION
from rltrace.errors import ConfigError, RltraceError
from rltrace.summary import summarize

# rltrace record's own exit code when the job exited 0 but recording missed processes that ran torch or vLLM
# (a failing job's own code always passes through instead).
EXIT_UNRECORDED = 3


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
    command's stdin, stdout, stderr and exit code pass through; SIGINT and SIGTERM reach it, and the
    bundle is still written. A killed job's shards merge with --merge. If processes that ran torch or vLLM
    were not recorded, one line names them and rltrace exits 3 (when the job itself exited 0).

    Example: rltrace record -o run -- torchrun --nproc-per-node 2 train.py
    """
    # A config.json the job writes itself is read after the run; anything else is checked now.
    deferred = bool(model and model.endswith(".json") and not Path(model).exists())
    info = get_model(model).info() if model and not deferred else None
    groups = set(sync_group or [])
    if merge_dir is not None:
        if command:
            raise ConfigError("give either a command or --merge, not both")
        _merge(merge_dir, output, command=[], model=info, groups=groups, force=force, keep=True, run_id=name)
        return 0
    if not command:
        raise ConfigError("nothing to record: give a command after --, e.g. rltrace record -- python train.py")
    if output.exists() and not force:
        raise ConfigError(f"{output}: already exists (pass --force to replace it)")
    record_dir = output.with_name(output.name + ".shards")
    if record_dir.exists():
        shutil.rmtree(record_dir)
    inject = record_dir / "inject"
    inject.mkdir(parents=True)
    shutil.copyfile(SITECUSTOMIZE_TEMPLATE, inject / "sitecustomize.py")
    env = dict(os.environ)
    env[ENV_DIR] = str((record_dir / shards.SHARDS).resolve())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(inject.resolve()), env.get("PYTHONPATH", "")) if p)
    env.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")  # NCCL work durations from CUDA events
    session = None
    if ray_address:
        session = uuid.uuid4().hex[:12]
        env["RAY_ADDRESS"] = ray_address  # the job's ray.init() joins the cluster
        env[ENV_SESSION] = session  # its workers keep their shards on their own node until collected

    watcher = reach.ReachWatcher(0, record_dir / shards.SHARDS)
    code = _run(command, env, watcher)
    missed = _unreached(watcher)
    if ray_address and session:
        nodes = _collect_ray(ray_address, session, record_dir / shards.SHARDS)
        if nodes is not None and not any(n.shards for n in nodes):
            missed.append(f"the job's Ray workers on all {len(nodes)} node(s) of {ray_address} (no shard came back)")
    if missed:
        print(f"rltrace: warning: recording did not reach {len(missed)} process(es) that ran torch or "
              f"vLLM; the bundle lacks their work: {'; '.join(missed)}", file=sys.stderr)
        if code == 0:
            code = EXIT_UNRECORDED
    try:
        if deferred:
            info = get_model(str(model)).info()
        _merge(record_dir, output, command=command, model=info, groups=groups, force=force, keep=keep_shards,
               run_id=name)
    except RltraceError as e:
        print(f"rltrace: error: could not write the bundle: {e}; shards kept in {record_dir} "
              f"(retry: rltrace record --merge {record_dir} -o {output})", file=sys.stderr)
    return code


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


def _run(command: list[str], env: dict[str, str], watcher: reach.ReachWatcher | None = None) -> int:
    """Run the command, forwarding SIGTERM (and SIGINT unless the terminal already delivered it)."""
    try:
        child = subprocess.Popen(command, env=env)
    except FileNotFoundError:
        raise ConfigError(f"command not found: {command[0]}") from None
    except PermissionError:
        raise ConfigError(f"command not executable: {command[0]}") from None

    def forward(signum: int, _frame: Any) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, signal.SIG_IGN if _terminal_delivers_sigint() else forward)
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
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as shells report it


def _terminal_delivers_sigint() -> bool:
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except OSError:
        return False


def _merge(
    record_dir: Path,
    output: Path,
    *,
    command: list[str],
    model: Any,
    groups: set[str],
    force: bool,
    keep: bool,
    run_id: str | None = None,
) -> None:
    manifest = shards.merge(record_dir, output, command=command, model=model, sync_groups=groups,
                               overwrite=force, run_id=run_id)
    if not keep:
        shutil.rmtree(record_dir, ignore_errors=True)
    s = summarize(open_bundle(output))
    rows = ", ".join(f"{n:,} {t}" for t, n in s.table_rows.items())
    lines = [f"rltrace: recorded {output}: {rows}"]
    ot = s.output_tokens
    if ot["max"] is not None:
        lines.append(f"rltrace:   output tokens p50 {ot['p50']:.0f}, max {ot['max']:.0f} over {s.per_step.height} steps")
    if s.collectives_by_op.height:
        ops = ", ".join(f"{r['op']} x{r['count']}" for r in s.collectives_by_op.iter_rows(named=True))
        lines.append(f"rltrace:   collectives: {ops}")
    errors = manifest.extra.get("collector_errors") or {}
    if errors:
        lines.append(f"rltrace:   collector errors (job unaffected): {errors}")
    print("\n".join(lines), file=sys.stderr)
