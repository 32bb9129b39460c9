"""The ``triage`` command line (Typer).

Each group of commands lives in its own module with a ``register(app)`` function, so that the
parts of the project can add commands without editing one shared file:

- ``serve/cli/core.py``: ``diagnose``, ``serve``, ``schema``
- ``serve/cli/streams.py``: ``cusum``, ``changepoints``
- ``serve/cli/datasets.py``: ``datasets …``, ``label …``
- ``serve/cli/training.py``: ``train``, ``export``, ``evaluate`` …
- ``serve/cli/retrain.py``: ``retrain``, ``encode-runs``, ``model list|promote|rollback``
- ``serve/cli/keys.py``: ``keys …``
- ``serve/cli/patterns.py``: ``patterns``
- ``serve/cli/export.py``: ``datasets export``
- ``serve/cli/agents.py``: ``agents …``
- ``serve/cli/store.py``: ``store backfill|retention|purge``
- ``serve/cli/output.py``: where they print (whole lines when piped) and how they fail

The help is plain text (``rich_markup_mode=None``, which every group inherits): click's layout,
without the type column in which rich printed ``--help <bool>``; the help strings are plain words,
which ``tests/test_cli_help.py`` checks for reStructuredText markup.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="triage",
    help="agent-triage: diagnose LLM-agent traces and recommend repairs.\n\n"
    "Run 'triage COMMAND --help' for a command's options. The service is 'triage serve' "
    "(what 'make run' starts).",
    no_args_is_help=True,
    rich_markup_mode=None,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_COMMAND_MODULES = (
    "serve.cli.core",
    "serve.cli.streams",
    "serve.cli.datasets",
    "serve.cli.export",
    "serve.cli.training",
    "serve.cli.retrain",
    "serve.cli.keys",
    "serve.cli.patterns",
    "serve.cli.agents",
    "serve.cli.store",
)

for _name in _COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:
    """Entry point of the ``triage`` script. A ``TRIAGE_*`` setting that does not validate is named in one
    line (``error: TRIAGE_AUTH='maybe': Input should be 'on' or 'off'``) and exits 2, without a traceback."""
    import sys

    from pydantic import ValidationError

    from serve.cli.output import fail

    try:
        app()
    except ValidationError as exc:
        if exc.title != "Settings":
            raise
        for err in exc.errors():
            name = "TRIAGE_" + "_".join(str(p) for p in err["loc"]).upper()
            fail(f"{name}={err['input']!r}: {err['msg']} (serve/settings.py lists the settings)")
        sys.exit(2)


if __name__ == "__main__":
    main()
