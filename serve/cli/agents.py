"""``triage agents list | rename | merge | split``: a tenant's agents, read and corrected in the store
(the same code as ``GET /v1/agents`` and ``POST /v1/agents/rename|merge|split``; docs/agents.md says
what happens to the past)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from model.core.errors import TriageError

agents_app = typer.Typer(help="A tenant's agents: list them; rename, merge or split them.", no_args_is_help=True)

Tenant = Annotated[str, typer.Option("--tenant", help="The tenant (local: make run's key).")]
AsJson = Annotated[bool, typer.Option("--json", help="The API's JSON instead of a table.")]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=2)


@contextmanager
def _agents(tenant: str) -> Iterator[Any]:
    """The service's agents over the store and model registry the settings name."""
    from model.scoring.agent_registry import Registry
    from serve.services.agents import Agents
    from serve.settings import get_settings
    from serve.store import check_tenant_name, open_store

    settings = get_settings()
    try:
        check_tenant_name(tenant)
        store = open_store(settings)
    except TriageError as exc:
        raise _fail(str(exc)) from None
    try:
        yield Agents(store, Registry(settings.resolved_model_registry))
    finally:
        store.dispose()


def _run(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except TriageError as exc:  # an unknown agent, a name taken, runs not of the agent, the store
        raise _fail(str(exc)) from None


def _show(items: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(items, indent=2, default=str))
        return
    typer.echo(f"{'agent':<28} {'name':<20} {'source':<9} {'runs':>6} {'labelled':>8}  {'last seen':<16}  tools")
    for a in items:
        last = f"{a['last_seen']:%Y-%m-%d %H:%M}" if a.get("last_seen") else "-"
        tools = ", ".join((a.get("profile") or {}).get("tools", [])[:5]) or "-"
        alias = f"  (was: {', '.join(a['aliases'])})" if a["aliases"] else ""
        typer.echo(f"{a['key'][:28]:<28} {(a['name'] or '-')[:20]:<20} {a['source']:<9} {a['runs']:>6} "
                   f"{a['labelled_runs']:>8}  {last:<16}  {tools}{alias}")


@agents_app.command("list")
def list_cmd(tenant: Tenant = "local", as_json: AsJson = False) -> None:
    """Each agent of the tenant: key, name, how it was found, runs, labelled runs, last seen, tools
    (and its old keys, when it was renamed or others were merged into it)."""
    with _agents(tenant) as agents:
        _show(_run(lambda: agents.list(tenant)), as_json)


@agents_app.command("rename")
def rename_cmd(
    agent: Annotated[str, typer.Argument(help="The agent's key (triage agents list).")],
    name: Annotated[str, typer.Argument(help="Its name from now on: it becomes the key; the old key stays an alias.")],
    tenant: Tenant = "local", as_json: AsJson = False,
) -> None:
    """Name an agent. Its runs, labels, streams, models and patterns move to the new key; later runs
    matched to it, or naming the old key, get the new one."""
    with _agents(tenant) as agents:
        _show([_run(lambda: agents.rename(tenant, agent, name, actor="cli"))], as_json)


@agents_app.command("merge")
def merge_cmd(
    agent: Annotated[str, typer.Argument(help="The agent merged away (it stays an alias).")],
    into: Annotated[str, typer.Argument(help="The agent that keeps the merged history.")],
    tenant: Tenant = "local", as_json: AsJson = False,
) -> None:
    """Merge one agent into another. The second one's streams start their warm-up again; it keeps the
    model it served (else serves the first one's)."""
    with _agents(tenant) as agents:
        _show([_run(lambda: agents.merge(tenant, agent, into, actor="cli"))], as_json)


@agents_app.command("split")
def split_cmd(
    agent: Annotated[str, typer.Argument(help="The agent to split runs off.")],
    runs: Annotated[Path, typer.Option("--runs", help="A file with the trace ids to split off, one a line.",
                                       exists=True, dir_okay=False, readable=True)],
    name: Annotated[str | None, typer.Option("--name", help="The new agent's name (default: a key of its own).")]
    = None,
    tenant: Tenant = "local", as_json: AsJson = False,
) -> None:
    """Split the runs listed in --runs off an agent into a new one. The first agent's streams start
    their warm-up again; its models stay with it."""
    ids = [line.strip() for line in runs.read_text(encoding="utf-8").splitlines() if line.strip()]
    with _agents(tenant) as agents:
        _show([_run(lambda: agents.split(tenant, agent, ids, name=name, actor="cli"))], as_json)


def register(app: typer.Typer) -> None:
    """Add ``agents`` to ``app``."""
    app.add_typer(agents_app, name="agents")


__all__ = ["agents_app", "register"]
