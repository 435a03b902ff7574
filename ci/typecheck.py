"""Run mypy on the rltrace package as it is installed, from the source tree.

pyproject's package-dir installs the top-level folders replay/, collectors/, dashboards/ and sample_traces/
inside the rltrace namespace; mypy cannot express that mapping, so this script builds the installed layout
as a tree of symlinks under build/mypy/ (generated afresh each run, ignored by git), runs mypy on it with
pyproject's [tool.mypy] settings, and prints each finding with its path in the source tree. The exit
status is mypy's: 0 when it finds nothing, 1 on any finding.

Usage: .venv/bin/python ci/typecheck.py [extra mypy arguments]
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, installed with rltrace (see pyproject's dependencies)
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
TREE = REPO / "build" / "mypy"
PACKAGE = "rltrace"


def folders() -> dict[str, str]:
    """Top-level folders installed as a direct subpackage of rltrace: subpackage name -> folder."""
    with open(REPO / "pyproject.toml", "rb") as fh:
        package_dir: dict[str, str] = tomllib.load(fh)["tool"]["setuptools"]["package-dir"]
    return {
        name.split(".")[1]: folder for name, folder in package_dir.items() if name.count(".") == 1
    }


def build_tree(mapped: dict[str, str]) -> Path:
    """Symlink rltrace/'s entries and the mapped folders into TREE/rltrace; returns that folder."""
    root = TREE / PACKAGE
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for entry in (REPO / PACKAGE).iterdir():
        if entry.name != "__pycache__":
            (root / entry.name).symlink_to(entry)
    for name, folder in mapped.items():
        (root / name).symlink_to(REPO / folder)
    return root


def source_path(line: str, mapped: dict[str, str]) -> str:
    """Rewrite a finding's tree path (rltrace/replay/x.py) to its source path (replay/x.py)."""
    for name, folder in mapped.items():
        prefix = f"{PACKAGE}/{name}/"
        if line.startswith(prefix):
            return folder + "/" + line[len(prefix):]
    return line


def main(argv: list[str]) -> int:
    """Build the tree, run mypy on it, print its report with source paths; returns mypy's exit status."""
    mapped = folders()
    build_tree(mapped)
    command = [
        sys.executable, "-m", "mypy",
        "--config-file", str(REPO / "pyproject.toml"),
        "--cache-dir", str(TREE / ".mypy_cache"),
        "-p", PACKAGE, *argv,
    ]
    # check=False: mypy's own exit status (1 on findings, 2 on a crash or bad usage) is passed through.
    done = subprocess.run(command, cwd=TREE, capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        print(source_path(line, mapped))
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
