"""``triage patterns [--tenant T] [--days N | --since T] [--until T] [--json]``: the failure
patterns of a tenant's stored runs, ranked (the same code as ``GET /v1/patterns``)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Literal

import typer

from model.core.errors import TriageError
from serve.cli.output import fail


def _when(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise fail(f"{name}: expected an ISO 8601 date-time such as 2026-11-29T10:00:00Z; got {value!r}") from None


def register(app: typer.Typer) -> None:
    """Add ``patterns`` to ``app``."""

    @app.command("patterns")
    def patterns_cmd(
        tenant: Annotated[str, typer.Option(
            "--tenant", metavar="TENANT", help="The tenant ('local' is the tenant of the key that 'make run' prints).")]
        = "local",
        days: Annotated[float | None, typer.Option(
            "--days", metavar="DAYS", help="The window's length, ending at --until (default 7).")] = None,
        since: Annotated[str | None, typer.Option(
            "--since", metavar="TIME", help="The window's start (ISO 8601), instead of --days.")] = None,
        until: Annotated[str | None, typer.Option(
            "--until", metavar="TIME", help="The window's end, not included (ISO 8601; default: now).")] = None,
        level: Annotated[str, typer.Option("--level", metavar="LEVEL", help="failure, signal or all.")] = "all",
        agent: Annotated[str | None, typer.Option("--agent", metavar="AGENT", help="Only this agent's runs.")]
        = None,
        limit: Annotated[int, typer.Option("--limit", min=1, max=10_000, metavar="N", help="At most N patterns.")]
        = 20,
        examples: Annotated[int, typer.Option(
            "--examples", min=0, max=20, metavar="N", help="Example runs per pattern (with --json).")] = 3,
        as_json: Annotated[bool, typer.Option("--json", help="The API's JSON instead of a table.")] = False,
    ) -> None:
        """List a tenant's failure patterns, the most costly first.

        The failures and signals of the stored runs are grouped into patterns: the same kind, tool,
        agent and evidence (with numbers, ids and quoted values masked). A pattern's score is runs ×
        severity × (1 − repair success); its trend compares its runs with the window of the same
        length just before. The same list as GET /v1/patterns and the console's Patterns page.
        """
        from serve.services.patterns import tenant_patterns, window
        from serve.settings import get_settings
        from serve.store import check_tenant_name, open_stores

        if level not in ("failure", "signal", "all"):
            raise fail(f"--level: one of failure, signal, all; got {level!r}")
        lvl: Literal["failure", "signal", "all"] = level  # type: ignore[assignment]
        try:
            check_tenant_name(tenant)
            start, end = window(since=_when(since, "--since"), until=_when(until, "--until"), days=days)
            stores = open_stores(get_settings())
            try:
                out = tenant_patterns(stores.reports, tenant, since=start, until=end, level=lvl, limit=limit,
                                      examples=examples, agent=agent)
            finally:
                stores.db.dispose()
        except TriageError as exc:
            raise fail(str(exc)) from None
        if as_json:
            typer.echo(json.dumps(out.model_dump(mode="json"), indent=2))
            return
        typer.echo(f"tenant {out.tenant}: {out.runs} runs with failures or signals, {out.total_patterns} patterns, "
                   f"{out.since:%Y-%m-%d %H:%M} – {out.until:%Y-%m-%d %H:%M} UTC (trend vs the "
                   f"{(out.until - out.since).total_seconds() / 86400:g} days before)")
        typer.echo("prev: its runs in the window before; repair: of its runs with a repair outcome reported, "
                   "the share repaired (-: none reported)")
        # the tool and agent columns are as wide as their longest value: an agent's key is never cut
        wt = max([4, *(len(p.tool or "-") for p in out.patterns)])
        wa = max([5, *(len(p.agent or "-") for p in out.patterns)])
        typer.echo(f"{'score':>7} {'runs':>5} {'prev':>5} {'trend':<5} {'repair':>6}  {'level':<7} "
                   f"{'kind':<19} {'tool':<{wt}} {'agent':<{wa}} signature")
        for p in out.patterns:
            rep = "-" if p.repair_success is None else f"{100 * p.repair_success:.0f}%"
            typer.echo(f"{p.score:7.1f} {p.runs:5d} {p.previous_runs:5d} {p.trend:<5} {rep:>6}  {p.level:<7} "
                       f"{p.kind:<19} {p.tool or '-':<{wt}} {p.agent or '-':<{wa}} {p.signature}")


__all__ = ["register"]
