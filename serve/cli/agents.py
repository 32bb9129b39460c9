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
from serve.cli.output import fail

agents_app = typer.Typer(help="A tenant's agents: list them; rename, merge or split them.", no_args_is_help=True)

Tenant = Annotated[str, typer.Option(
    "--tenant", metavar="TENANT", help="The tenant ('local' is the tenant of the key that 'make run' prints).")]
AsJson = Annotated[bool, typer.Option("--json", help="The API's JSON instead of a table.")]


@contextmanager
def _agents(tenant: str) -> Iterator[Any]:
    """The service's agents over the store and model registry the settings name."""
    from model.scoring.agent_registry import Registry
    from serve.services.agents import Agents
    from serve.settings import get_settings
    from serve.store import check_tenant_name, open_stores

    settings = get_settings()
    try:
        check_tenant_name(tenant)
        stores = open_stores(settings)
    except TriageError as exc:
        raise fail(str(exc)) from None
    try:
        yield Agents(stores.agents, Registry(settings.resolved_model_registry))
    finally:
        stores.db.dispose()


def _run(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except TriageError as exc:  # an unknown agent, a name taken, runs not of the agent, the store
        raise fail(str(exc)) from None


def _show(items: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(items, indent=2, default=str))
        return
    # the key and name columns are as wide as their longest value: a key is never cut (it is what
    # rename, merge and split take)
    wk = max([5, *(len(a["key"]) for a in items)])
    wn = max([4, *(len(a["name"] or "-") for a in items)])
    typer.echo(f"{'agent':<{wk}} {'name':<{wn}} {'source':<9} {'runs':>6} {'labelled':>8}  {'last seen':<16}  tools")
    for a in items:
        last = f"{a['last_seen']:%Y-%m-%d %H:%M}" if a.get("last_seen") else "-"
        tools = ", ".join((a.get("profile") or {}).get("tools", [])[:5]) or "-"
        alias = f"  (was: {', '.join(a['aliases'])})" if a["aliases"] else ""
        typer.echo(f"{a['key']:<{wk}} {a['name'] or '-':<{wn}} {a['source']:<9} {a['runs']:>6} "
                   f"{a['labelled_runs']:>8}  {last:<16}  {tools}{alias}")


@agents_app.command("list")
def list_cmd(tenant: Tenant = "local", as_json: AsJson = False) -> None:
    """List the tenant's agents.

    Each agent's key, name, source, runs, labelled runs, last run, tools, and its old keys when it
    was renamed or others were merged into it. The source says how the agent was found: option (the
    caller named it), span (the root agent span's name), task_type, inferred (from what its runs
    show), or split (split off another agent).
    """
    with _agents(tenant) as agents:
        _show(_run(lambda: agents.list(tenant)), as_json)


@agents_app.command("rename")
def rename_cmd(
    agent: Annotated[str, typer.Argument(
        metavar="AGENT", help="The agent's key (as 'triage agents list' shows it).")],
    name: Annotated[str, typer.Argument(
        metavar="NAME", help="Its name from now on: it becomes the key; the old key stays an alias.")],
    tenant: Tenant = "local", as_json: AsJson = False,
) -> None:
    """Name an agent.

    Its runs, labels, streams, models and patterns move to the new key; later runs matched to it, or
    naming the old key, get the new one.
    """
    with _agents(tenant) as agents:
        _show([_run(lambda: agents.rename(tenant, agent, name, actor="cli"))], as_json)


@agents_app.command("merge")
def merge_cmd(
    agent: Annotated[str, typer.Argument(metavar="AGENT", help="The agent merged away (its key stays an alias).")],
    into: Annotated[str, typer.Argument(metavar="INTO", help="The agent that keeps the merged history.")],
    tenant: Tenant = "local", as_json: AsJson = False,
) -> None:
    """Merge agent AGENT into agent INTO.

    INTO's metric streams start their warm-up again; INTO keeps the model it served (if it had none,
    it serves AGENT's).
    """
    with _agents(tenant) as agents:
        _show([_run(lambda: agents.merge(tenant, agent, into, actor="cli"))], as_json)


@agents_app.command("split")
def split_cmd(
    agent: Annotated[str, typer.Argument(metavar="AGENT", help="The agent to split runs off.")],
    runs: Annotated[Path, typer.Option("--runs", metavar="FILE", help="A file with the trace ids to split off, one a line.",
                                       exists=True, dir_okay=False, readable=True)],
    name: Annotated[str | None, typer.Option("--name", metavar="NAME", help="The new agent's name (default: a new key).")]
    = None,
    tenant: Tenant = "local", as_json: AsJson = False,
) -> None:
    """Move the runs listed in --runs from an agent to a new one.

    The first agent's metric streams start their warm-up again; its models stay with it.
    """
    ids = [line.strip() for line in runs.read_text(encoding="utf-8").splitlines() if line.strip()]
    with _agents(tenant) as agents:
        _show([_run(lambda: agents.split(tenant, agent, ids, name=name, actor="cli"))], as_json)


def register(app: typer.Typer) -> None:
    """Add ``agents`` to ``app``."""
    app.add_typer(agents_app, name="agents")


__all__ = ["agents_app", "register"]
