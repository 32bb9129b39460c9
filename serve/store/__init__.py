"""The failure-history store: SQLAlchemy tables, Alembic migrations, and one store per resource,
every read and write the services make, tenant-scoped. Only this package (and the migrations) speak SQL.

Every store is built on one :class:`~serve.store.base.Database` (the engine, :meth:`~Database.write`,
:meth:`~Database.upgrade`, :meth:`~Database.ping`):

- ``keys``: :class:`~serve.store.keys.KeyStore`, tenants, API keys, console sessions;
- ``traces``: :class:`~serve.store.traces.TraceStore`, runs, their steps, usage, deletion;
- ``encodings``: :class:`~serve.store.encodings.EncodingStore`, the runs' step vectors (the encoder block);
- ``labels``: :class:`~serve.store.labels.LabelStore`, labels; the history training and export read;
- ``sessions``: :class:`~serve.store.sessions.SessionStore`, sessions, recommendations, outcomes;
- ``activations``: :class:`~serve.store.activations.ActivationStore`, which model version each agent serves;
- ``agents``: :class:`~serve.store.agents.AgentStore`, agent rows, renames, merges, splits;
- ``streams``: :class:`~serve.store.streams.StreamStore`, streams, observations, alarms;
- ``reports``: :class:`~serve.store.reports.ReportStore`, aggregates: patterns, metrics, canary;
- ``console``: :class:`~serve.store.console.ConsoleStore`, the console's reads;
- ``limits``: :class:`~serve.store.limits.LimitStore`, the request-rate buckets replicas share (PostgreSQL);
- ``upkeep``: :class:`~serve.store.upkeep.UpkeepStore`, the verdict backfill and per-tenant retention.

Simple operations open their own transaction; composed ones (a session step: lock the session, read
its trace, write the diagnosis, the recommendation and the new policy state) run inside one
:meth:`Database.write` (any store's ``write()`` is the database's), whose session each store's method
takes. On SQLite it begins with ``BEGIN IMMEDIATE``; on PostgreSQL it relies on
:meth:`SessionStore.lock_session`'s ``SELECT … FOR UPDATE``. Either way two appends to one session
run one after the other: no step is lost and no failure escalates twice.

:class:`Stores` holds one of each; only the wiring (:mod:`serve.wiring`, the app's lifespan, the CLI)
uses it, to hand each service the stores it needs.

>>> from serve.settings import Settings
>>> stores = open_stores(Settings(database_url="sqlite://"))
>>> stores.db.ping()
True
>>> stores.keys.ensure_tenant("acme").id
'acme'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from serve.store.activations import ActivationStore
from serve.store.agents import AgentStore
from serve.store.base import Database, check_tenant_name
from serve.store.console import ConsoleStore
from serve.store.encodings import EncodingStore
from serve.store.keys import KeyStore
from serve.store.labels import LabelStore
from serve.store.limits import LimitStore
from serve.store.reports import ReportStore
from serve.store.sessions import SessionStore
from serve.store.streams import StreamStore
from serve.store.traces import TracePage, TraceStore
from serve.store.upkeep import UpkeepStore

if TYPE_CHECKING:
    from serve.settings import Settings


@dataclass(frozen=True)
class Stores:
    """One store per resource over the shared database ``db`` (built by :meth:`at` or :func:`open_stores`)."""

    db: Database
    keys: KeyStore
    traces: TraceStore
    labels: LabelStore
    sessions: SessionStore
    activations: ActivationStore
    agents: AgentStore
    streams: StreamStore
    reports: ReportStore
    console: ConsoleStore
    encodings: EncodingStore
    limits: LimitStore
    upkeep: UpkeepStore

    @classmethod
    def at(cls, url: str, *, busy_timeout_s: float = 10.0) -> Stores:
        """The stores of the database at ``url`` (``sqlite:///path`` or ``postgresql://…``), not migrated."""
        db = Database(url, busy_timeout_s=busy_timeout_s)
        streams = StreamStore(db)
        return cls(db=db, keys=KeyStore(db), traces=TraceStore(db), labels=LabelStore(db),
                   sessions=SessionStore(db), activations=ActivationStore(db), agents=AgentStore(db),
                   streams=streams, reports=ReportStore(db, streams), console=ConsoleStore(db),
                   encodings=EncodingStore(db), limits=LimitStore(db), upkeep=UpkeepStore(db))


def open_stores(settings: Settings, *, migrate: bool = True) -> Stores:
    """The stores of the database the settings name, migrated to head (what the app and the CLI use)."""
    stores = Stores.at(settings.resolved_database_url, busy_timeout_s=settings.db_busy_timeout_s)
    if migrate:
        stores.db.upgrade()
    return stores


__all__ = [
    "ActivationStore", "AgentStore", "ConsoleStore", "Database", "EncodingStore", "KeyStore", "LabelStore",
    "LimitStore", "ReportStore", "SessionStore", "StreamStore", "Stores", "TracePage", "TraceStore",
    "UpkeepStore", "check_tenant_name", "open_stores",
]
