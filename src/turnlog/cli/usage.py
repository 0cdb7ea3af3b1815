"""How the ``turnlog`` command reads its arguments and says a usage error.

Three things click and typer do otherwise:

- the global options (``--bootstrap-servers``, ``--broker-timeout``, ...) are taken wherever
  they stand, before the verb or after it (``turnlog pending --bootstrap-servers ...``): an
  option after the verb is moved before it unless that verb has an option of the same name;
- a usage error is one ``error: ...`` line naming the command's help, exit 2 -- the style of
  every other failure -- never a box;
- help is plain text: the reST double backticks of the docstrings are not shown.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from typer._click.core import Command, Context
from typer._click.exceptions import ClickException, NoArgsIsHelpError
from typer.core import TyperGroup, TyperOption

#: ``--name`` of every root option and whether it takes a value.
_FLAGS = frozenset({"--debug", "--no-debug"})


def _root_options(group: Command) -> dict[str, bool]:
    """``--name`` -> takes a value, for the options of the root command."""
    found: dict[str, bool] = {}
    for param in group.params:
        if isinstance(param, TyperOption):
            for name in (*param.opts, *param.secondary_opts):
                found[name] = not (param.is_flag or name in _FLAGS)
    return found


def _own_options(command: Command | None) -> set[str]:
    if command is None:
        return set()
    return {
        name
        for param in command.params
        if isinstance(param, TyperOption)
        for name in (*param.opts, *param.secondary_opts)
    }


def hoist(group: TyperGroup, ctx: Context, args: Sequence[str]) -> list[str]:
    """``args`` with the root's options that follow the verb moved before it."""
    root = _root_options(group)
    before: list[str] = []
    rest = list(args)
    # The root's own options, up to the verb.
    while rest and rest[0].startswith("-") and rest[0] != "--":
        name = rest[0].split("=", 1)[0]
        before.append(rest.pop(0))
        if root.get(name) and "=" not in before[-1] and rest:
            before.append(rest.pop(0))
    if not rest or rest[0].startswith("-"):
        return before + rest
    # The command chain (``topics ensure``), for the options a verb has of its own.
    chain: list[Command] = []
    command: Command | None = group
    for word in rest:
        if word.startswith("-") or not isinstance(command, TyperGroup):
            break
        command = command.get_command(ctx, word)
        if command is None:
            break
        chain.append(command)
    own = set().union(*(_own_options(c) for c in chain)) if chain else set()
    moved: list[str] = []
    kept: list[str] = []
    i = 0
    while i < len(rest):
        word = rest[i]
        if word == "--":
            kept.extend(rest[i:])
            break
        name = word.split("=", 1)[0]
        if name in root and name not in own:
            moved.append(word)
            if root[name] and "=" not in word and i + 1 < len(rest):
                moved.append(rest[i + 1])
                i += 1
        else:
            kept.append(word)
        i += 1
    return before + moved + kept


_BACKTICKS = re.compile(r"``([^`]+)``")


def plain(text: str | None) -> str | None:
    """``text`` without the reST double backticks its docstring was written with."""
    return None if text is None else _BACKTICKS.sub(r"\1", text)


def _plain_help(command: Command) -> None:
    command.help = plain(command.help)
    command.short_help = plain(command.short_help)
    for param in command.params:  # options and arguments alike carry a help text
        if isinstance(getattr(param, "help", None), str):
            param.help = plain(param.help)  # type: ignore[attr-defined]
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            _plain_help(sub)


def usage_line(exc: ClickException) -> str:
    """One line for a usage error: what is wrong and where the help is."""
    message = " ".join(exc.format_message().split()).rstrip(".")
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        return f"{message}; try '{ctx.command_path} --help'"
    return message


class TurnlogGroup(TyperGroup):
    """The root group: global options anywhere, one-line usage errors, plain help."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoist(self, ctx, args))

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        _plain_help(self)
        try:
            result = super().main(
                args, prog_name, complete_var, False, windows_expand_args, **extra
            )
        except NoArgsIsHelpError as exc:
            if not standalone_mode:
                raise
            # ``turnlog`` (or ``turnlog topics``) alone: the help, as asked for by no arguments.
            typer.echo(exc.ctx.get_help() if exc.ctx is not None else "")
            sys.exit(exc.exit_code)
        except ClickException as exc:
            if not standalone_mode:
                raise
            Console(stderr=True).print(
                f"[red]error:[/red] {escape(usage_line(exc))}", highlight=False, soft_wrap=True
            )
            sys.exit(exc.exit_code)
        except typer.Abort:
            if not standalone_mode:
                raise
            Console(stderr=True).print("[red]error:[/red] aborted", highlight=False)
            sys.exit(1)
        if not standalone_mode:
            return result
        sys.exit(result if isinstance(result, int) else 0)
