"""Where the ``triage`` commands print: a terminal gets rich's layout; a pipe or a file gets whole lines.

Rich wraps at the terminal's width, and at 80 columns when there is no terminal, which cut a
trace id in two when the output went through ``grep`` or into a file. :func:`console` gives each
command a console that, when stdout (or stderr) is not a terminal, never wraps a line and lets a
table be as wide as its content. :func:`fail` is the one way a command reports an error: one
``error:`` line on stderr and exit code 2.
"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

#: The page width of piped output: wide enough that no table row or line of ours is wrapped
#: (evidence is cut at 200 characters, agent names at 200), finite because rich lays out to it.
PIPE_WIDTH = 4096


def console(*, stderr: bool = False) -> Console:
    """A rich console for one command's output, decided when the command runs (tests swap stdout).

    On a terminal: rich's own width and wrapping. Otherwise: no line is wrapped (``soft_wrap``) and
    the page is :data:`PIPE_WIDTH` wide, so a table is as wide as its content and an id stays whole.

    >>> console().width  # no terminal under doctest
    4096
    """
    probe = Console(stderr=stderr)
    if probe.is_terminal:
        return probe
    return Console(stderr=stderr, width=PIPE_WIDTH, soft_wrap=True)


def fail(message: str) -> typer.Exit:
    """Print ``error: MESSAGE`` on stderr (the message is never read as rich markup); the caller
    raises the returned ``Exit(2)``."""
    console(stderr=True).print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code=2)


__all__ = ["PIPE_WIDTH", "console", "fail"]
