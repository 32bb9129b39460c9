"""``triage keys create --tenant NAME [--operator]``, ``triage keys list``, ``triage keys revoke KEY_ID``,
``triage keys local`` (the git-ignored key `make run` uses)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from model.core.errors import TriageError
from serve.cli.output import console, fail
from serve.settings import get_settings

keys_app = typer.Typer(help="API keys: create one (shown once), list them, revoke one.", no_args_is_help=True)


def open_keys(settings: Any) -> Any:
    """The keys' store (:class:`serve.store.keys.KeyStore`), imported on use: SQLAlchemy and Alembic
    cost every `triage` command ~0.5 s otherwise."""
    from serve.store import open_stores

    return open_stores(settings).keys


@keys_app.command("create")
def create(
    tenant: Annotated[str, typer.Option(
        "--tenant", metavar="TENANT", help="The tenant the key belongs to (created when new).")],
    label: Annotated[str, typer.Option("--label", metavar="TEXT", help="A note to recognise the key by.")] = "",
    operator: Annotated[bool, typer.Option(
        "--operator", help="An operator key: may act on any tenant (header X-Triage-Tenant) and promote or "
                           "roll back models over the API.")] = False,
) -> None:
    """Create an API key and print it, once: only its hash is stored."""
    try:
        store = open_keys(get_settings())
        from serve.auth import create_key

        key, key_id = create_key(store, tenant, label, operator=operator)
    except TriageError as exc:
        raise fail(str(exc)) from None
    typer.echo(key)
    what = "operator key" if operator else "key"
    console(stderr=True).print(
        f"{what} id {key_id} for tenant {tenant!r}; store it now, it cannot be shown again", highlight=False,
        markup=False,
    )


@keys_app.command("list")
def list_keys(
    tenant: Annotated[str | None, typer.Option("--tenant", metavar="TENANT", help="Only this tenant's keys.")]
    = None,
) -> None:
    """List the API keys (never a key itself).

    Each key's id, tenant, whether it is an operator key, label, when it was created and revoked.
    """
    try:
        rows = open_keys(get_settings()).list_api_keys(tenant)
    except TriageError as exc:
        raise fail(str(exc)) from None
    table = Table()
    for col in ("id", "tenant", "operator", "label", "created", "revoked"):
        table.add_column(col, overflow="fold")  # a narrow terminal folds an id; it is never cut short
    for r in rows:
        table.add_row(*(Text(v) for v in (  # Text: a label is never read as rich markup
            r.id,
            r.tenant_id,
            "yes" if r.operator else "",
            r.label,
            r.created_at.isoformat(timespec="seconds"),
            r.revoked_at.isoformat(timespec="seconds") if r.revoked_at else "",
        )))
    console().print(table)


@keys_app.command("revoke")
def revoke(key_id: Annotated[str, typer.Argument(
        metavar="KEY_ID", help="The key's id (from 'triage keys list').")]) -> None:
    """Revoke an API key: calls with it are refused (401).

    A running service may accept it for up to TRIAGE_AUTH_CACHE_S seconds more.
    """
    try:
        ok = open_keys(get_settings()).revoke_api_key(key_id)
    except TriageError as exc:
        raise fail(str(exc)) from None
    if not ok:
        raise fail(f"no active key with id {key_id!r}")
    typer.echo(f"revoked {key_id}")


@keys_app.command("local")
def local() -> None:
    """Print the local API key and the database it opens.

    The key is made on first use and kept in a git-ignored file; 'make run' prints it the same way.
    """
    settings = get_settings()
    try:
        store = open_keys(settings)
        from serve.auth import ensure_local_key

        key, created = ensure_local_key(store, settings.resolved_key_file)
    except TriageError as exc:
        raise fail(str(exc)) from None
    url = store.engine.url.render_as_string(hide_password=True)
    typer.echo(f"database: {url}")
    typer.echo(f"API key ({'new' if created else 'kept'} in {settings.resolved_key_file}): {key}")
    typer.echo(f"try:  curl -H 'Authorization: Bearer {key}' http://{settings.host}:{settings.port}/v1/traces")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.add_typer(keys_app, name="keys")
