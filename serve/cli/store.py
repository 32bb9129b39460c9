"""``triage store backfill`` (fill the verdict columns of runs stored before revision 0015),
``triage store retention`` (a tenant's retention in days) and ``triage store purge`` (one retention
pass now): the store's upkeep, :mod:`serve.store.upkeep`. The server runs both by itself too (the
backfill at start-up, retention hourly); these commands run them at once, e.g. after an upgrade."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from model.core.errors import TriageError
from serve.cli.output import console, fail
from serve.settings import get_settings

store_app = typer.Typer(help="Store upkeep: verdict backfill, retention.",
                        no_args_is_help=True)

Store = Annotated[str | None, typer.Option(
    "--store", metavar="URL", help="The store's database URL (default: the service's, TRIAGE_DATABASE_URL).")]


def _stores(url: str | None) -> Any:
    """The stores (imported on use: SQLAlchemy and Alembic cost every command ~0.5 s), migrated to head."""
    from serve.store import Stores, open_stores

    if url is None:
        return open_stores(get_settings())
    stores = Stores.at(url)
    stores.db.upgrade()
    return stores


def _say(text: str) -> None:
    console().print(text, highlight=False, markup=False)


@store_app.command("backfill")
def backfill(
    store: Store = None,
    batch: Annotated[int, typer.Option("--batch", min=1, max=100_000, metavar="N",
                                       help="Rows filled per transaction.")] = 5000,
) -> None:
    """Fill the verdict of runs stored before revision 0015, and the label queue's key of those stored before 0018.

    A batch a transaction. Safe while the service runs (a diagnosis written meanwhile keeps its own columns) and resumable:
    stopped, it carries on where it stopped. The console reads the verdict of a row not filled yet
    from its JSON, so its pages are right meanwhile.
    """
    try:
        stores = _stores(store)
        before, keys_before = stores.upkeep.unfilled(), stores.upkeep.unfilled(column="review_key")
        filled = stores.upkeep.backfill_verdicts(batch=batch)
        keys = stores.upkeep.backfill_keys(batch=batch)
        left, keys_left = stores.upkeep.unfilled(), stores.upkeep.unfilled(column="review_key")
    except TriageError as exc:
        raise fail(str(exc)) from None
    _say(f"filled {filled} of {before} runs; {left} left")
    _say(f"label queue keys: filled {keys} of {keys_before} runs; {keys_left} left")


@store_app.command("retention")
def retention(
    tenant: Annotated[str, typer.Option("--tenant", metavar="TENANT", help="The tenant.")],
    days: Annotated[float | None, typer.Option("--days", metavar="DAYS",
                                               help="Delete the tenant's runs created longer ago than this.")] = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the tenant's runs (no retention of its own).")] = False,
) -> None:
    """Set a tenant's retention in days.

    Its runs older than --days are deleted with everything derived from them (failures, recommendations, outcomes, labels, steps, step vectors, sessions, and its older
    stream observations), hourly by the server and at once by 'triage store purge'. --keep removes it
    (the service-wide TRIAGE_RETENTION_DAYS, when set, still applies)."""
    if (days is None) == (not keep):
        raise fail("give --days DAYS or --keep")
    try:
        _stores(None).upkeep.set_retention(tenant, None if keep else days)
    except TriageError as exc:
        raise fail(str(exc)) from None
    _say(f"tenant {tenant!r}: " + ("runs kept" if keep else f"runs deleted {days:g} days after they started"))


@store_app.command("purge")
def purge(store: Store = None) -> None:
    """Run one retention pass now.

    Each tenant's runs past its retention (else past TRIAGE_RETENTION_DAYS, when set) are deleted, in
    batches."""
    try:
        stores = _stores(store)
        done = stores.upkeep.apply_retention(default_days=get_settings().retention_days)
    except TriageError as exc:
        raise fail(str(exc)) from None
    if not done:
        _say("no tenant has a retention: nothing deleted")
    for p in done:
        _say(f"{p.tenant}: deleted {p.runs} runs and {p.observations} observations created before "
             f"{p.cutoff.isoformat(timespec='seconds')}"
             + (f", and {p.count_rows} hourly count rows they left empty" if p.count_rows else ""))


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.add_typer(store_app, name="store")


__all__ = ["register", "store_app"]
