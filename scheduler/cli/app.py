"""The ``schedctl`` Typer app and what every command module shares.

Each group of commands lives in its own module under ``scheduler/cli/`` and registers itself on
:data:`app`; :mod:`scheduler.cli.main` imports them all.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text

from scheduler.cli import render
from scheduler.cli.client import ApiClient, CliError

app = typer.Typer(help="gpu-arbiter: run GPU jobs on the cheapest offer that fits, across "
                       "clouds and spot markets, and move them when the market moves.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
# Piped output uses COLUMNS or a generous width, not rich's 80-column default.
console = Console(width=render.stdout_width())
err = Console(stderr=True)

HomeOption = typer.Option(None, "--home", envvar="GA_HOME",
                          help="state directory of the daemon to talk to")


def client(home: Path | None) -> ApiClient:
    return ApiClient(home)


def print_error(message: object) -> None:
    """``error: MESSAGE`` on stderr, the message as plain text: what it quotes (a config
    path such as ``hosts[box1]``, a server's words) is never read as rich markup."""
    err.print(Text.assemble(("error:", "bold red"), " ", str(message)))


def fail(exc: CliError) -> NoReturn:
    """Print a CLI error (a table of problems for a refused spec) and exit 2."""
    if exc.problems:
        err.print(render.problems_table(exc.problems))
    else:
        print_error(exc)
    raise typer.Exit(2)
