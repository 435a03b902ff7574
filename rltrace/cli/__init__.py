"""The ``rltrace`` command line. Commands register here, in one place; each lives in its own module.

``main()`` owns error handling: bad input of any kind (usage errors, unreadable bundles, invalid values,
unknown names) prints one line on stderr and exits with code 2; no traceback reaches the user.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from inspect import cleandoc

import typer
from rich.markup import escape
from typer import _click as click
from typer._click import exceptions as click_exc

from rltrace.cli.advise_cmd import advise_cmd
from rltrace.cli.calibrate_cmd import calibrate
from rltrace.cli.dashboard_cmd import dashboard
from rltrace.cli.diagnose_cmd import diagnose_cmd
from rltrace.cli.estimate_cmd import estimate
from rltrace.cli.export_cmd import export
from rltrace.cli.fabric_cmd import fabric
from rltrace.cli.import_cmd import import_cmd
from rltrace.cli.inspect_cmd import inspect
from rltrace.cli.record_cmd import job_signal, record
from rltrace.cli.replay_cmd import replay
from rltrace.cli.replay_comms_cmd import replay_comms
from rltrace.cli.schema_cmd import schema
from rltrace.cli.sweep_cmd import sweep
from rltrace.cli.synth_cmd import synth
from rltrace.errors import MAX_ERROR_CHARS, RltraceError, clean
from rltrace.signals import EXIT_INTERRUPTED, EXIT_TERMINATED, terminate_as_interrupt

app = typer.Typer(
    name="rltrace",
    help="Record, replay and compare RL post-training workloads. Start with `rltrace inspect`.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("inspect")(inspect)
app.command("diagnose")(diagnose_cmd)
app.command("synth")(synth)
app.command("schema")(schema)
app.command("estimate")(estimate)
app.command("replay")(replay)
app.command("replay-comms")(replay_comms)
app.command("calibrate")(calibrate)
app.command("sweep")(sweep)
app.command("advise")(advise_cmd)
app.command("import")(import_cmd)
app.command("dashboard")(dashboard)
app.add_typer(fabric, name="fabric")
app.add_typer(export, name="export")
# Everything after the command's first word belongs to the recorded command, never to rltrace.
app.command("record", context_settings={"allow_interspersed_args": False})(record)

EXIT_BAD_INPUT = 2


def reflow(text: str) -> str:
    """``text`` with the lines of each prose paragraph joined, so that the terminal wraps them: Typer keeps a
    docstring's line breaks, which a terminal narrower than the source breaks again mid-sentence. Indented
    blocks (examples) and list items ("- ") keep their lines, and a closing "Example:" keeps a line of its own
    (Typer dedents the text after the first paragraph, which would strip an example block's indent were no
    other line there unindented)."""
    paragraphs = []
    for paragraph in cleandoc(text).split("\n\n"):
        lines = paragraph.split("\n")
        if any(line.startswith((" ", "\t")) for line in lines):
            paragraphs.append(paragraph)
            continue
        joined: list[str] = []
        for line in lines:
            if joined and not line.startswith("- ") and line != "Example:":
                joined[-1] += " " + line
            else:
                joined.append(line)
        if joined[-1].endswith(" Example:"):
            joined[-1:] = [joined[-1].removesuffix(" Example:"), "Example:"]
        paragraphs.append("\n".join(joined))
    return "\n\n".join(paragraphs)


def help_as_written(command: click.Command) -> click.Command:
    """Make every help text render as written: Typer reads help as rich markup, which would eat bracketed
    words (TOML's [axes], [fixed], [[jobs]]; extras such as rltrace[ray]); prose paragraphs wrap to the
    terminal (:func:`reflow`)."""
    if command.help:
        command.help = escape(reflow(command.help))
    if command.short_help:
        command.short_help = escape(command.short_help)
    for param in command.params:
        if getattr(param, "help", None):
            param.help = escape(param.help)  # type: ignore[attr-defined]  # help is on Options and Arguments, not Parameter
    for sub in getattr(command, "commands", {}).values():
        help_as_written(sub)
    return command


def console() -> None:
    """The ``rltrace`` command: :func:`main`'s exit code, except that where ``record``'s job was killed by a signal
    that only ends a process, rltrace dies of the same signal once the bundle is written, as the job did."""
    code = main()
    died = job_signal()
    if died is not None and code == 128 + died:
        sys.stdout.flush()
        sys.stderr.flush()
        if died != signal.SIGKILL:  # its disposition cannot be changed, nor need be
            signal.signal(died, signal.SIG_DFL)
        os.kill(os.getpid(), died)
    sys.exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (the console script passes it to sys.exit)."""
    command = help_as_written(typer.main.get_command(app))
    with terminate_as_interrupt() as stop:  # SIGTERM stops a command as Ctrl-C does: its cleanup runs
        code = _run(command, argv)
    return EXIT_TERMINATED if stop.terminated else code


def _run(command: click.Command, argv: Sequence[str] | None) -> int:
    try:
        result = command.main(args=list(argv) if argv is not None else None, prog_name="rltrace", standalone_mode=False)
    except click_exc.NoArgsIsHelpError as e:
        print(e.format_message())
        return 0
    except click_exc.ClickException as e:
        return _fail(_plain(e.format_message()))
    except RltraceError as e:
        return _fail(str(e))
    except typer.Abort:  # Ctrl-C at a prompt
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `rltrace inspect --json | head`: stop quietly, as the Python docs advise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as e:
        if e.filename is None:  # not about a path the user named or asked for: a bug, shown as one
            raise
        # an output folder that cannot be made, a path that is a folder where a file was meant, no permission
        return _fail(f"{e.filename}: {e.strerror or e}")
    return result if isinstance(result, int) else 0


_LIBRARY_WORDS = (("Value error, ", ""), ("Input should be a valid number, unable to parse string as a number",
                                              "not a number"),
                  ("Input should be a valid integer, unable to parse string as an integer", "not a whole number"))
"""how the option parser's validation library words a bad value, and how rltrace says it"""


def _plain(message: str) -> str:
    for said, meant in _LIBRARY_WORDS:
        message = message.replace(said, meant)
    return message


def _fail(message: str) -> int:
    # one line, whatever the message, bounded in length and with no terminal control sequences from the data
    line = clean(" ".join(message.split()), MAX_ERROR_CHARS)
    print(f"rltrace: error: {line}", file=sys.stderr)
    return EXIT_BAD_INPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
