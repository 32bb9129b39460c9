"""``triage`` commands: see serve/cli.py for the map of modules."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
