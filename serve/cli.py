"""The ``triage`` command line (Typer).

Each group of commands lives in its own module with a ``register(app)`` function, so that the
parts of the project can add commands without editing one shared file:

- ``serve/cli_core.py``: ``diagnose``, ``serve``, ``schema``
- ``serve/cli_streams.py``: ``cusum``, ``changepoints``
- ``serve/cli_datasets.py``: ``datasets …``, ``label …``
- ``serve/cli_model.py``: ``train``, ``export``, ``evaluate`` …
- ``serve/cli_retrain.py``: ``retrain``, ``model list|promote|rollback``
- ``serve/cli_keys.py``: ``keys …``
- ``serve/cli_patterns.py``: ``patterns``
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
    "serve.cli_core",
    "serve.cli_streams",
    "serve.cli_datasets",
    "serve.cli_export",
    "serve.cli_model",
    "serve.cli_retrain",
    "serve.cli_keys",
    "serve.cli_patterns",
)

for _name in _COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:
    """Entry point of the ``triage`` script."""
    app()


if __name__ == "__main__":
    main()
