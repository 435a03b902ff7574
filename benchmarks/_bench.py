"""What the benchmark scripts share: counts checked as argparse reads them, folders checked before any work, and
bad input as one line on stderr and exit code 2 (as the CLI's), not a traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from rltrace.errors import RltraceError


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``minimum`` (a count of 0 steps or rows measures nothing)."""
    def parse(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {number}")
        return number
    return parse


def existing_folder(text: str) -> Path:
    """An argparse type: a folder that exists (a missing one printed an empty table, or a traceback)."""
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: {'not a folder' if path.exists() else 'no such folder'}")
    return path


def run(main: Callable[[], object]) -> None:
    """Run a script's ``main``; rltrace's refusal of bad input is one line naming the script, exit code 2."""
    try:
        main()
    except RltraceError as e:
        print(f"{Path(sys.argv[0]).name}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
