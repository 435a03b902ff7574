"""``python -m rltrace`` and the ``rltrace`` command (its console script points at :func:`console`)."""

import sys

import rltrace
from rltrace.signals import EXIT_INTERRUPTED


def console() -> None:
    """Run the CLI. The import is here, not at the top, so that Ctrl-C while the CLI's modules load (a second or
    more on a busy machine) ends the command as Ctrl-C during it does: exit 130, no traceback."""
    rltrace._STARTING_FDS = rltrace._inheritable_fds()  # before the CLI's imports open any
    try:
        from rltrace.cli import console as run_cli
        run_cli()
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    console()
