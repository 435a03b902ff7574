"""Limits on what a replay, sweep or topology may ask for, and input and output paths checked before any work starts.

Every limit is checked before anything is allocated, and a request beyond it is a :class:`ConfigError` that
names the limit: ``--steps 1000000000`` or ``--topology fat-tree:k=100000`` is one line and exit 2, not an
out-of-memory kill an hour later. The limits are far above anything measured (docs/format.md, "Integrity"):
131,072 GPUs replay in 6.5 s and 430 MiB on a 2-core VM, 10M requests are a few GB.
"""

from __future__ import annotations

import ipaddress
import math
import numbers
import os
import re
import socket
from pathlib import Path
from typing import Any

from rltrace.errors import ConfigError, clean

MAX_GPUS = 131_072
"""GPUs in one replayed pool or one topology (a fat-tree of k=64 holds 65,536)."""
MAX_STEPS = 100_000
"""RL steps one replay resamples."""
MAX_PER_STEP = 10_000_000
"""prompts per step, samples per prompt, and their product."""
MAX_REQUESTS = 20_000_000
"""steps x prompts x samples: the requests one replay holds in memory."""
MAX_NEW_TOKENS = 2**31 - 1
"""output tokens are int32 in the format"""
MAX_SEED = 2**32 - 1
"""numpy's seeds are unsigned 32-bit here"""
MAX_GRID_POINTS = 100_000
"""replays in one sweep grid (each is a whole replay)."""
MAX_PRICE = 10_000.0
"""USD per GPU-hour."""
MAX_REPLICATES = 1000
"""replays behind a spread (replay, diagnose, the API's compare)"""
MAX_LOCAL_RANKS = 256
"""processes a command starts on this machine, one per rank (replay-comms, replay --execute, calibrate): a node's
8 GPUs, or a CPU's cores, are far below"""
MAX_TOKENS = 10**12
"""tokens one estimate prices (a trillion: past any step or prefill)"""
MAX_EPOCHS = 1000
"""passes over a rollout batch in one RL step (PPO runs a handful)"""
MAX_SECONDS = 1e9
"""a duration or a rate per second in a setting (a field named ``*_s``): 1e9 s is 32 years, past any step, switch
or transfer (1e300 s was taken and printed samples/s of 1e-297)"""
MAX_SIGMA = 4.0
"""log-space spread of a drawn distribution (lengths, environment times): 4 puts the 99th percentile 11,000x the
median, past any plausible workload (1e308 overflowed where the values are drawn)"""


def check_int(name: str, value: Any, lo: int, hi: int, *, what: str = "") -> int:
    """``value`` as an int in ``lo..hi`` (a numpy integer too), or a ConfigError naming ``name`` and the limit."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{name} must be an integer, got {clean(repr(value), 60)}")
    number = int(value)
    if number < lo:
        raise ConfigError(f"{name} must be >= {lo:,}, got {number:,}")
    if number > hi:
        raise ConfigError(f"{name}={number:,} is above the limit of {hi:,}{what}")
    return number


def check_shape(shape: Any) -> None:
    """The reshaping options of a replay (:class:`rltrace.replay.loading.Shape`): types and limits, before any
    resampling allocates. ``None`` keeps what the bundle recorded."""
    for name, hi in (("gen_gpus", MAX_GPUS), ("train_gpus", MAX_GPUS), ("tp", MAX_GPUS), ("max_seqs", 10_000_000),
                     ("steps", MAX_STEPS), ("prompts_per_step", MAX_PER_STEP),
                     ("samples_per_prompt", MAX_PER_STEP), ("max_new_tokens", MAX_NEW_TOKENS)):
        value = getattr(shape, name)
        if value is not None:
            check_int(name, value, 1, hi, what=_WHY.get(name, ""))
    if shape.seed is not None:
        check_int("seed", shape.seed, 0, MAX_SEED)
    for name in ("gpu", "gen_gpu", "train_gpu", "model"):
        value = getattr(shape, name)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{name} must be a name, got {clean(repr(value), 60)}")
    per_step = (shape.prompts_per_step or 1) * (shape.samples_per_prompt or 1)
    if per_step > MAX_PER_STEP:
        raise ConfigError(f"prompts_per_step x samples_per_prompt = {per_step:,} is above the limit of "
                          f"{MAX_PER_STEP:,} samples per step")
    if shape.steps is not None and shape.steps * per_step > MAX_REQUESTS:
        raise ConfigError(f"steps x prompts x samples = {shape.steps * per_step:,} requests is above the limit of "
                          f"{MAX_REQUESTS:,} in one replay")


_WHY = {
    "gen_gpus": " GPUs in a pool",
    "train_gpus": " GPUs in a pool",
    "steps": " steps in one replay",
    "max_new_tokens": " (int32 tokens)",
}


def check_replicates(name: str, value: Any) -> int:
    """Replicates behind a spread: 0 (off) or 2..MAX_REPLICATES (one replicate is no spread)."""
    check_int(name, value, 0, MAX_REPLICATES)
    if value == 1:
        raise ConfigError(f"{name} must be 0 (off) or 2..{MAX_REPLICATES}, got 1")
    return int(value)


def check_price(name: str, value: Any) -> float:
    """A price in USD per GPU-hour: a finite number in 0..MAX_PRICE."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number of USD per GPU-hour, got {clean(repr(value), 60)}")
    if not 0 <= value <= MAX_PRICE:
        raise ConfigError(f"{name} must be in 0..{MAX_PRICE:,.0f} USD per GPU-hour, got {value:g}")
    return float(value)


def check_grid_size(axes: dict[str, list[Any]], where: str) -> int:
    """The number of points a grid's axes make, refused above MAX_GRID_POINTS before any point is built."""
    n = math.prod(len(v) for v in axes.values())
    if n > MAX_GRID_POINTS:
        raise ConfigError(f"{where}: the axes make {n:,} points, above the limit of {MAX_GRID_POINTS:,} replays "
                          "in one grid")
    return n


_HOST = re.compile(r"[A-Za-z0-9](?:[\w.\-]*[A-Za-z0-9])?", re.ASCII)
"""a host name or an IPv4 address (an IPv6 one comes in brackets)"""


def _ipv6(host: str) -> bool:
    """``[ADDRESS]`` with a valid IPv6 address inside."""
    if not (host.startswith("[") and host.endswith("]")):
        return False
    try:
        ipaddress.IPv6Address(host[1:-1])
    except ValueError:
        return False
    return True


RAY_FORMS = "auto, local, HOST:PORT or ray://HOST:PORT"
"""the addresses ray.init takes, as an error names them"""


def check_ray_address(address: str, option: str = "--ray-address", forms: str = RAY_FORMS) -> str:
    """A Ray cluster address as ``ray.init`` takes one (``auto``, ``local``, ``HOST:PORT`` or
    ``ray://HOST:PORT``), checked before any work: a malformed one failed only at the end (``sweep``) or inside
    the user's job (``record``); ``forms``: the forms the command takes, as its error names them."""
    if address in ("auto", "local"):
        return address
    host, port = _host_port(address)
    if not ((_HOST.fullmatch(host) or _ipv6(host)) and re.fullmatch(r"[0-9]{1,5}", port) and 1 <= int(port) <= 65535):
        raise ConfigError(f"{option} must be {forms} (port 1..65535), got {clean(repr(address), 80)}")
    return address


RAY_CONNECT_S = 5.0
"""how long a Ray cluster's address gets to accept a connection before the command says nothing answers there"""


def _host_port(address: str) -> tuple[str, str]:
    """``HOST:PORT`` or ``ray://HOST:PORT``, split (IPv6 hosts keep their brackets)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    return host, port


def check_ray_reachable(address: str, option: str = "--ray-address", forms: str = RAY_FORMS) -> str:
    """A well-formed Ray cluster address (:func:`check_ray_address`) that accepts a connection: Ray itself
    retries an address where nothing answers for minutes, with no line that says so. ``auto`` and ``local``
    pass."""
    if check_ray_address(address, option, forms) in ("auto", "local"):
        return address
    host, port = _host_port(address)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_S).close()
    except OSError as e:
        why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or type(e).__name__)
        raise ConfigError(f"{option} {clean(address, 80)}: nothing answers there ({why}); is the Ray cluster up "
                          "(`ray status` on its head node)?") from None
    return address


def check_input(path: str | Path) -> Path:
    """An input file that exists and is a file (a folder where a file belongs is named as one, not as missing)."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{clean(p)}: a folder, expected a file")
    if not p.is_file():
        raise ConfigError(f"{clean(p)}: no such file")
    return p


def _bundle_around(path: Path, *, itself: bool = True) -> Path | None:
    """The trace bundle ``path`` is (unless not ``itself``), or lies inside, if any (a folder with a manifest.json
    and a requests table)."""
    path = Path(os.path.abspath(path))  # ".." resolved: an output beside a bundle is outside it
    for folder in ((path,) if itself else ()) + tuple(path.parents):
        if (folder / "manifest.json").is_file() and (folder / "requests.parquet").exists():
            return folder
    return None


RUN_FOLDER_FILES = frozenset({"metrics.json", "config.json", "timeline.parquet", "requests.parquet", "steps.parquet",
                              "links.parquet", "execution.parquet"})
"""the files a replay writes into a run folder (one with a metrics.json): an output written over one breaks the run"""


def check_output(path: Path, option: str = "-o", *, folder: bool = False, make_parents: bool | None = None,
                 bundle: bool = False) -> Path:
    """Refuse, before any work, an output that cannot be written: inside a trace bundle (a report over its
    manifest.json, a run folder among its tables), under an existing file, a file where a folder is needed (or
    the reverse), or in a folder this user cannot write. ``folder``: the output is a
    folder the command creates with its parents; otherwise a file, whose folder must exist unless
    ``make_parents`` (default: ``folder``) says the command creates it; ``bundle``: the output is a bundle itself,
    which may replace one (the command's ``--force`` decides), not lie inside one."""
    path = Path(path)
    around = _bundle_around(path, itself=not bundle)
    if around is not None:
        where = "is" if Path(os.path.abspath(path)) == around else "inside"
        raise ConfigError(f"{option} {clean(path)}: {where} the trace bundle {clean(around)}; write outside it (a "
                          "bundle holds its own files only)")
    if not folder and path.name in RUN_FOLDER_FILES and (path.parent / "metrics.json").is_file():
        raise ConfigError(f"{option} {clean(path)}: is a file of the replay run {clean(path.parent)}; write outside "
                          "it (a run folder holds its replay's own files)")
    if path.exists():
        if folder and not path.is_dir():
            raise ConfigError(f"{option} {clean(path)}: exists and is not a folder")
        if not folder and path.is_dir():
            raise ConfigError(f"{option} {clean(path)}: is a folder, expected a file name")
    if not folder and (path.is_symlink() or (path.exists() and not path.is_file())):
        # the write replaces the path with a new file: a device, a pipe or a link (to /dev/stdout, say) would
        # be replaced, not written through
        kind = "a symbolic link" if path.is_symlink() else "not a regular file (a device, pipe or socket)"
        raise ConfigError(f"{option} {clean(path)}: is {kind}; the output replaces it with a new file, so name a "
                          "regular file's path")
    parent = path.parent
    blocked = any(p.exists() and not p.is_dir() for p in parent.parents)
    if not (folder if make_parents is None else make_parents) and not parent.exists() and not blocked:
        raise ConfigError(f"{option} {clean(path)}: folder {clean(parent)} does not exist")
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{option} {clean(path)}: {clean(parent)} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{option} {clean(path)}: folder {clean(parent)} is not writable")
    return path
