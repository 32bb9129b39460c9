"""The ``triage`` command line (Typer).

Each group of commands lives in its own module with a ``register(app)`` function, so that the
parts of the project can add commands without editing one shared file:

- ``serve/cli/core.py``: ``diagnose``, ``serve``, ``schema``
- ``serve/cli/streams.py``: ``cusum``, ``changepoints``
- ``serve/cli/datasets.py``: ``datasets …``, ``label …``
- ``serve/cli/training.py``: ``train``, ``export``, ``evaluate`` …
- ``serve/cli/retrain.py``: ``retrain``, ``model list|promote|rollback``
- ``serve/cli/keys.py``: ``keys …``
- ``serve/cli/patterns.py``: ``patterns``
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="triage",
    help="agent-triage: diagnose LLM-agent traces and recommend repairs.",
    no_args_is_help=True,
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
)

for _name in _COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:
    """Entry point of the ``triage`` script."""
    app()


if __name__ == "__main__":
    main()
