"""Options that apply to some choices of a command only: given with another, refused rather than ignored."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import typer

from rltrace.errors import ConfigError


def refuse_unused(ctx: typer.Context, command: str, choice: str, readers: Mapping[str, Collection[str]]) -> None:
    """A ConfigError naming the first option given on the command line that ``choice`` (an argument of ``command``:
    an estimate's kind, an import's source kind) does not read. ``readers`` maps an option's parameter name to the
    choices that read it, in the order the message lists them; an option it leaves out applies to every choice."""
    for param in ctx.command.params:
        name = param.name or ""
        users = readers.get(name)
        if users is None or choice in users:
            continue
        source = ctx.get_parameter_source(name)
        if source is None or source.name != "COMMANDLINE":  # a default, not something the user asked for
            continue
        flag = max(param.opts, key=len)
        raise ConfigError(f"{flag} does not apply to {command} {choice} (it is for {', '.join(users)}): drop it")
