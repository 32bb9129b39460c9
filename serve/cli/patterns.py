"""``triage patterns [--tenant T] [--days N | --since T] [--until T] [--json]``: the failure
patterns of a tenant's stored runs, ranked (the same code as ``GET /v1/patterns``)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Literal

import typer

from model.core.errors import TriageError


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=2)


def _when(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise _fail(f"{name}: expected an ISO 8601 date-time such as 2026-11-29T10:00:00Z; got {value!r}") from None


def register(app: typer.Typer) -> None:
    """Add ``patterns`` to ``app``."""

    @app.command("patterns")
    def patterns_cmd(
        tenant: Annotated[str, typer.Option("--tenant", help="The tenant (`local`: make run's key).")] = "local",
        days: Annotated[float | None, typer.Option("--days", help="Window length ending at --until (default 7).")]
        = None,
        since: Annotated[str | None, typer.Option("--since", help="Window start (ISO 8601), instead of --days.")]
        = None,
        until: Annotated[str | None, typer.Option("--until", help="Window end, exclusive (default now).")] = None,
        level: Annotated[str, typer.Option("--level", help="failure, signal or all.")] = "all",
        agent: Annotated[str | None, typer.Option("--agent", help="Only this agent's runs.")] = None,
        limit: Annotated[int, typer.Option("--limit", min=1, max=10_000)] = 20,
        examples: Annotated[int, typer.Option("--examples", min=0, max=20)] = 3,
        as_json: Annotated[bool, typer.Option("--json", help="The API's JSON instead of a table.")] = False,
    ) -> None:
        """Failures and signals grouped into patterns (kind, tool, normalised evidence, agent), ranked by
        runs × severity × (1 − repair success), with the trend against the previous window."""
        from serve.services.patterns import tenant_patterns, window
        from serve.settings import get_settings
        from serve.store import check_tenant_name, open_store

        if level not in ("failure", "signal", "all"):
            raise _fail(f"--level: one of failure, signal, all; got {level!r}")
        lvl: Literal["failure", "signal", "all"] = level  # type: ignore[assignment]
        try:
            check_tenant_name(tenant)
            start, end = window(since=_when(since, "--since"), until=_when(until, "--until"), days=days)
            store = open_store(get_settings())
            try:
                out = tenant_patterns(store, tenant, since=start, until=end, level=lvl, limit=limit,
                                      examples=examples, agent=agent)
            finally:
                store.dispose()
        except TriageError as exc:
            raise _fail(str(exc)) from None
        if as_json:
            typer.echo(json.dumps(out.model_dump(mode="json"), indent=2))
            return
        typer.echo(f"tenant {out.tenant}: {out.runs} runs with failures or signals, {out.total_patterns} patterns, "
                   f"{out.since:%Y-%m-%d %H:%M} – {out.until:%Y-%m-%d %H:%M} UTC (trend vs the "
                   f"{(out.until - out.since).total_seconds() / 86400:g} days before)")
        typer.echo(f"{'score':>7} {'runs':>5} {'prev':>5} {'trend':<5} {'repair':>6}  {'level':<7} "
                   f"{'kind':<19} {'tool':<20} {'agent':<14} signature")
        for p in out.patterns:
            rep = "-" if p.repair_success is None else f"{100 * p.repair_success:.0f}%"
            typer.echo(f"{p.score:7.1f} {p.runs:5d} {p.previous_runs:5d} {p.trend:<5} {rep:>6}  {p.level:<7} "
                       f"{p.kind:<19} {(p.tool or '-')[:20]:<20} {(p.agent or '-')[:14]:<14} {p.signature}")


__all__ = ["register"]
