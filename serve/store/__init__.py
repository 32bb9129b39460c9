"""The failure-history store: SQLAlchemy tables, Alembic migrations, and :class:`Store`, every read
and write the services make, tenant-scoped. Only this package (and the migrations) speak SQL.

:class:`Store` owns the engine (:mod:`serve.store.base`) and gathers one class per table group:
keys (:mod:`~serve.store.keys`), traces (:mod:`~serve.store.traces`), sessions, recommendations and
outcomes (:mod:`~serve.store.sessions`), labels (:mod:`~serve.store.labels`), model activations
(:mod:`~serve.store.activations`), agents (:mod:`~serve.store.agents`), streams (:mod:`~serve.store.streams`), read-only aggregates
(:mod:`~serve.store.reports`) and the console's reads (:mod:`~serve.store.console`). Simple operations open their own transaction; composed ones (a
session step: lock the session, read its trace, write the diagnosis, the recommendation and the
new policy state) run inside :meth:`Store.write`, which on SQLite begins with ``BEGIN IMMEDIATE``
and on PostgreSQL relies on :meth:`Store.lock_session`'s ``SELECT … FOR UPDATE``. Either way two
appends to one session run one after the other: no step is lost and no failure escalates twice.

>>> from serve.settings import Settings
>>> store = open_store(Settings(database_url="sqlite://"))
>>> store.ping()
True
>>> store.ensure_tenant("acme").id
'acme'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from serve.store.activations import Activations
from serve.store.agents import Agents
from serve.store.base import check_tenant_name
from serve.store.console import Console
from serve.store.keys import Keys
from serve.store.labels import Labels
from serve.store.reports import Reports
from serve.store.sessions import Sessions
from serve.store.traces import TracePage

if TYPE_CHECKING:
    from serve.settings import Settings


class Store(Keys, Labels, Sessions, Activations, Agents, Reports, Console):
    """The failure-history store at ``url`` (``sqlite:///path`` or ``postgresql://…``).

    Parameters
    ----------
    url:
        SQLAlchemy URL; ``postgresql://`` uses psycopg 3.
    busy_timeout_s:
        How long a SQLite writer waits for the lock before failing.
    """


def open_store(settings: Settings, *, migrate: bool = True) -> Store:
    """The store the settings name, migrated to head (what the app and the CLI use)."""
    store = Store(settings.resolved_database_url, busy_timeout_s=settings.db_busy_timeout_s)
    if migrate:
        store.upgrade()
    return store


__all__ = ["Store", "TracePage", "check_tenant_name", "open_store"]
