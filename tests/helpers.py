"""Test helpers: tiny synthetic configs, the real CLI (in process, or as a subprocess where that is tested), the shared
data folder."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import subprocess
import sys
import traceback
from pathlib import Path
from types import ModuleType

import pytest

from rltrace.cli import main as cli_main
from rltrace.synth import load_config

REPO = Path(__file__).resolve().parents[1]
COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")
"""the ring/tree collectives of the network validation sets (point-to-point: send/recv, all-to-all, own tests)"""


def shared_data() -> Path:
    """../shared/data beside the checkout (CI puts it there); RLTRACE_SHARED_DATA overrides."""
    return Path(os.environ.get("RLTRACE_SHARED_DATA", REPO.parent / "shared" / "data"))


def load_script(path: Path) -> ModuleType:
    """A script of the repository (ci/, benchmarks/) as a module, once per test run."""
    if path.stem in sys.modules:
        return sys.modules[path.stem]
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def require(module: str, reason: str) -> None:
    """Skip the calling test module when ``module`` is not installed, without importing it (vLLM takes 4 s to
    import: every worker collects every module, selected or not). A module that is installed but broken fails
    the tests that use it instead of skipping them."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed: {reason}", allow_module_level=True)


def require_shared(relative: str) -> Path:
    """A file from the shared data folder; in CI its absence is a failure, elsewhere a skip with the reason."""
    path = shared_data() / relative
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"shared data file missing in CI: {path}")
        pytest.skip(f"shared data not present here: {path}")
    return path


SMALL = [
    "steps=3",
    "prompts_per_step=8",
    "samples_per_prompt=4",
    "max_new_tokens=2048",
    "generation.gpus=2",
    "training.gpus=2",
    "model=Qwen2.5-7B",
]


def small_config(*extra: str, seed: int = 0):
    """A tiny synthetic run (96 requests) for fast tests."""
    return load_config(sets=[*SMALL, *extra], seed=seed)


def tiny_model(folder: Path) -> Path:
    """The tiny random Llama of examples/tiny_rl (built once per folder)."""
    sys.path.insert(0, str(REPO / "examples" / "tiny_rl"))
    try:
        import tiny_llama
    finally:
        sys.path.pop(0)
    return tiny_llama.build(folder)


RLTRACE = str(Path(sys.executable).parent / "rltrace")
PROCESS_COMMANDS = ("record", "replay-comms", "calibrate")
"""commands that start processes or collective groups of their own, or patch the interpreter: always run as the
installed console script, in a process of their own"""
PROCESS_OPTIONS = ("--execute", "--ray")
"""options (as prefixes: --ray-address too) that only take effect in a new interpreter: a real kernel run, Ray"""
PROCESS_ENV = ("PYTHONPATH",)
"""environment that only takes effect in a new interpreter (an import path; RAY_* too)"""


def needs_process(args: tuple[str, ...], env: dict[str, str] | None) -> bool:
    """Whether ``rltrace args`` crosses a process boundary that an in-process call would not."""
    return (bool(args) and args[0] in PROCESS_COMMANDS) or any(a.startswith(PROCESS_OPTIONS) for a in args) or any(
        k in PROCESS_ENV or k.startswith("RAY_") for k in env or {})


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: int = 300,
    process: bool | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the CLI with ``args`` as a user would: in this process through :func:`rltrace.cli.main` (its exit code,
    stdout and stderr captured, ``env`` and ``cwd`` applied for the call), or, where a process boundary is what
    is tested (``process=True``, or :func:`needs_process`), as the installed console script in a subprocess."""
    # progress lines only where a test asks for them (RLTRACE_PROGRESS_EVERY_S): on a loaded machine a slow first
    # stage would otherwise print "... running" before the one-line error a test checks
    merged = {"COLUMNS": "120", "RLTRACE_PROGRESS_GRACE_S": "60", **(env or {})}
    if process or (process is None and needs_process(args, env)):
        return subprocess.run(
            [RLTRACE, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout, env={**os.environ, **merged},
            check=False,  # callers assert on the exit code and stderr themselves
        )
    return _in_process(list(args), cwd, merged)


def _in_process(args: list[str], cwd: Path | None, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    os.environ.update(env)
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli_main(args)
            except SystemExit as e:  # what the console script would exit with
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except Exception:  # noqa: BLE001 - the interpreter's own report, as the console script would print it
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    texts = []
    for stream in (out, err):
        stream.flush()
        buffer = stream.buffer
        assert isinstance(buffer, io.BytesIO)
        texts.append(buffer.getvalue().decode("utf-8", errors="replace"))
    return subprocess.CompletedProcess(["rltrace", *args], code, texts[0], texts[1])


PINNED = re.compile(r"^(torch|vllm|vllm[-_.]cpu|transformers|ray)(==| @ )", re.IGNORECASE)
"""the packages a user's framework pins: installing rltrace must not change them"""
_installed_stacks: dict[str, Path] = {}


def stack_names(holding: str | None = None) -> list[str]:
    """The older software stacks of ci/stacks.toml (each a cached venv built by ci/stacks.py); ``holding``: only
    those whose extra packages include it (``"ray"``: the stacks with a Ray of their own)."""
    stacks = load_script(REPO / "ci" / "stacks.py").load()
    return [name for name, stack in stacks.items()
            if holding is None or any(re.match(rf"{re.escape(holding)}\b", req) for req in stack.extra)]


def _pinned(python: Path) -> list[str]:
    freeze = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True, check=True)
    return sorted(line for line in freeze.stdout.splitlines() if PINNED.match(line))


def stack_with_rltrace(name: str) -> Path:
    """The interpreter of stack ``name`` (waiting for its build), with this checkout's rltrace installed once per
    test run the way a user would: a plain ``pip install <repo>``, after which ``pip freeze`` of torch, vLLM,
    transformers and Ray must be what it was."""
    if name in _installed_stacks:
        return _installed_stacks[name]
    python = load_script(REPO / "ci" / "stacks.py").wait(name)
    pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "uninstall", "--quiet", "--yes", "rltrace"], capture_output=True, check=False)
    before = _pinned(python)
    assert any(line.lower().startswith("vllm") for line in before), before
    installed = subprocess.run([*pip, "install", "--quiet", str(REPO)], capture_output=True, text=True, timeout=600,
                               check=False)
    assert installed.returncode == 0, installed.stderr[-3000:]
    assert _pinned(python) == before, "installing rltrace changed the stack's torch, vLLM, transformers or Ray"
    _installed_stacks[name] = python
    return python
