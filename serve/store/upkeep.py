"""The store's background upkeep: the backfills of revisions 0015 and 0018 and per-tenant retention.

Both work in small batches, each its own short transaction, so that diagnoses keep being written
while they run (SQLite has one writer at a time: a batch holds it for tens of milliseconds), and both
can stop at any moment and resume where they stopped.

**Backfill** (:meth:`UpkeepStore.backfill_verdicts`): rows stored before revision 0015 have a NULL
``verdict`` (:mod:`serve.store.verdict`); the backfill reads a batch of them (their ids from the
partial index ``ix_traces_unfilled``, their responses outside any write transaction), then writes
their columns in one transaction, only where ``verdict`` is still NULL (a diagnosis written meanwhile
keeps its own). Until a row is filled, the pages read its verdict from its JSON
(:mod:`serve.store.console`), so they are right while it runs; once it is done the partial index is
empty and that check costs one index probe.

The label queue's keys of revision 0018 (``review_key``: :func:`serve.store.verdict.queue_key` of
the run's id) are filled the same way (:meth:`UpkeepStore.backfill_keys`, from ``ix_traces_unkeyed``;
no response to read); until a tenant's are all filled, the queue orders its runs in Python by the same
keys (:mod:`serve.services.label_queue`).

**Retention** (:meth:`UpkeepStore.purge_tenant`): a tenant's ``retention_days`` (``tenants``, NULL:
keep; :meth:`UpkeepStore.set_retention`) deletes the runs *created* more than that many days ago,
oldest first, :data:`PURGE_BATCH` a transaction, with everything derived from them — failures,
recommendations, outcomes, labels, steps, step vectors (:func:`serve.store.traces._delete_traces`,
which also takes them out of the ``/metrics``, canary and agents' counters), the session of each run —
and the tenant's stream observations older than the same age (the values the runs fed, and those posted
then). Streams' detector state is not rewound (it summarises what it saw); an agent's ``n_runs`` (the
runs its profile learned from) is kept. The hourly count rows (canary, console overview) of the hours
before the cutoff that the deletions left at zero are deleted too; the whole-history ``/metrics`` totals
keep their rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import bindparam, delete, func, select, update
from sqlalchemy.orm import Session

from model.core.errors import InputError
from serve.store.base import StoreBase, core, rowcount
from serve.store.counters import CANARY_FIELDS, OVERVIEW_FIELDS, hour_of
from serve.store.tables import (
    CanaryCountRow,
    ObservationRow,
    OverviewCountRow,
    SessionRow,
    Tenant,
    TraceRow,
    utcnow,
)
from serve.store.traces import _delete_traces
from serve.store.verdict import queue_key, run_columns

#: Rows the backfill fills per transaction.
BACKFILL_BATCH = 5000
#: Runs retention deletes per transaction (each with its failures, recommendations, … and counters).
PURGE_BATCH = 500
#: Observations retention deletes per transaction.
OBSERVATION_BATCH = 5000


@dataclass(frozen=True)
class Purged:
    """What one retention pass of a tenant deleted."""

    tenant: str
    cutoff: datetime
    runs: int
    observations: int
    count_rows: int = 0  # hourly count rows (canary, overview) of hours before the cutoff left all zero


#: The columns the backfills fill: the verdict's (revision 0015), the queue's key (revision 0018).
Filled = Literal["verdict", "review_key"]


def has_unfilled(db: Session, tenant: str, column: Filled = "verdict") -> bool:
    """Whether the tenant has a run whose ``column`` is not backfilled yet, inside ``db`` (one probe of
    ``ix_traces_unfilled`` or ``ix_traces_unkeyed``): the pages and the label queue read those runs'
    JSON (verdict), or order them in Python (key), until it is."""
    t = core(TraceRow).c
    return db.scalar(select(t.id).where(t.tenant_id == tenant, t[column].is_(None)).limit(1)) is not None


class UpkeepStore(StoreBase):
    """The verdict backfill and retention (module docstring)."""

    # -- the verdict backfill --------------------------------------------------------------------------
    def unfilled(self, tenant: str | None = None, column: Filled = "verdict") -> int:
        """Rows (of ``tenant``; ``None``: every tenant's) whose ``column`` is not filled yet."""
        t = core(TraceRow).c
        q = select(func.count()).select_from(core(TraceRow)).where(t[column].is_(None))
        if tenant is not None:
            q = q.where(t.tenant_id == tenant)
        with self.read() as db:
            return int(db.scalar(q) or 0)

    def backfill_verdicts(self, *, batch: int = BACKFILL_BATCH, max_batches: int | None = None) -> int:
        """Fill the verdict columns of rows stored before revision 0015, ``batch`` rows a transaction,
        until none is left (or ``max_batches`` batches); returns the rows filled. Resumable, and safe
        beside writers and other backfills (module docstring)."""
        t = core(TraceRow).c
        return self._fill("verdict", (t.response,), {
            "verdict": bindparam("verdict"), "failure_probability": bindparam("failure_probability"),
            "judged_threshold": bindparam("judged_threshold"), "finding_margin": bindparam("finding_margin")},
            lambda row: run_columns(row[2] or {}), batch=batch, max_batches=max_batches)

    def backfill_keys(self, *, batch: int = BACKFILL_BATCH, max_batches: int | None = None) -> int:
        """Fill the label queue's ``review_key`` of rows stored before revision 0018, as
        :meth:`backfill_verdicts` fills theirs; returns the rows filled."""
        return self._fill("review_key", (), {"review_key": bindparam("review_key")},
                          lambda row: {"review_key": queue_key(row[1])}, batch=batch, max_batches=max_batches)

    def _fill(self, column: Filled, read: Sequence[Any], values: dict[str, Any],
              columns_of: Callable[[Sequence[Any]], dict[str, Any]], *, batch: int, max_batches: int | None) -> int:
        """The backfills' loop: read a batch of the rows whose ``column`` is NULL (tenant, id and the
        columns ``read``), then write ``columns_of(row)`` in one transaction where ``column`` is still NULL."""
        if batch < 1:
            raise InputError(f"batch must be at least 1; got {batch}", path="batch")
        t = core(TraceRow).c
        stmt = (update(core(TraceRow))
                .where(t.tenant_id == bindparam("k_tenant"), t.id == bindparam("k_id"), t[column].is_(None))
                .values(**values))
        filled = done = 0
        while max_batches is None or done < max_batches:
            with self.read() as db:
                rows = db.execute(select(t.tenant_id, t.id, *read).where(t[column].is_(None))
                                  .order_by(t.tenant_id, t.id).limit(batch)).all()
            if not rows:
                break
            params = [{"k_tenant": row[0], "k_id": row[1], **columns_of(row)} for row in rows]
            with self.write() as db:
                filled += rowcount(db.execute(stmt, params))
            done += 1
        return filled

    # -- retention -------------------------------------------------------------------------------------
    def set_retention(self, tenant: str, days: float | None) -> None:
        """Keep the tenant's runs ``days`` days (``None``: keep them all); the tenant must exist."""
        if days is not None and not days > 0:
            raise InputError(f"retention days must be above 0 (or none: keep); got {days}", path="days")
        with self.write() as db:
            got = db.execute(update(Tenant).where(Tenant.id == tenant).values(retention_days=days))
            if rowcount(got) == 0:
                raise InputError(f"no tenant {tenant!r}", path="tenant")

    def retentions(self) -> dict[str, float | None]:
        """Every tenant's retention in days (``None``: keep)."""
        with self.read() as db:
            return {str(k): v for k, v in db.execute(select(Tenant.id, Tenant.retention_days)).all()}

    def purge_tenant(self, tenant: str, days: float, *, now: datetime | None = None,
                     batch: int = PURGE_BATCH) -> Purged:
        """Delete the tenant's runs created more than ``days`` days before ``now`` and what derives from
        them, and its older observations, in batches (module docstring)."""
        cutoff = (now or utcnow()) - timedelta(days=days)
        t = core(TraceRow).c
        runs = 0
        while True:
            with self.write() as db:
                old = list(db.execute(select(t.id, t.session_id).where(t.tenant_id == tenant, t.created_at < cutoff)
                                            .order_by(t.created_at).limit(batch)).all())
                if not old:
                    break
                ids = [r[0] for r in old]
                sessions = sorted({r[1] for r in old if r[1] is not None})
                runs += _delete_traces(db, tenant, ids)
                if sessions:  # the session of a deleted run (a session is one run: sessions.trace_id)
                    db.execute(delete(SessionRow).where(SessionRow.tenant_id == tenant, SessionRow.id.in_(sessions),
                                                        SessionRow.trace_id.in_(ids)))
            if len(old) < batch:
                break
        o = core(ObservationRow).c
        observations = 0
        while True:
            with self.write() as db:
                ids = list(db.scalars(select(o.id).where(o.tenant_id == tenant, o.created_at < cutoff)
                                      .order_by(o.id).limit(OBSERVATION_BATCH)))
                if ids:
                    observations += rowcount(db.execute(delete(core(ObservationRow)).where(o.id.in_(ids))))
            if len(ids) < OBSERVATION_BATCH:
                break
        return Purged(tenant, cutoff, runs, observations, self._drop_empty_hours(tenant, cutoff))

    def _drop_empty_hours(self, tenant: str, cutoff: datetime) -> int:
        """Delete the tenant's hourly count rows (``canary_counts``, ``overview_counts``) of the hours before
        ``cutoff``'s whose every count is zero: their runs are gone, and a window reads an absent hour as
        zero, so they only grew the tables. A count that a writer raises meanwhile keeps its row (the delete
        asks for zero again under the row's lock; an hour written after the delete gets a new row)."""
        before = hour_of(cutoff)
        n = 0
        with self.write() as db:
            # (the canary's recovery_s, a sum of floats, is left with a rounding's residue: its recovered runs'
            # count says it is empty)
            counts = [f for f in CANARY_FIELDS if f != "recovery_s"]
            for row, fields in ((CanaryCountRow, counts), (OverviewCountRow, OVERVIEW_FIELDS)):
                c = core(row).c
                zero = [c[f] == 0 for f in fields]
                n += rowcount(db.execute(delete(core(row)).where(c.tenant_id == tenant, c.hour < before, *zero)))
        return n

    def apply_retention(self, *, default_days: float | None = None, now: datetime | None = None) -> list[Purged]:
        """One retention pass over every tenant: its own ``retention_days``, else ``default_days`` (the
        service-wide setting; ``None``: keep); what each tenant lost."""
        out = []
        own = self.retentions()
        if default_days is not None:  # every tenant with runs (one without a tenants row too: auth off)
            with self.read() as db:
                own = {**dict.fromkeys(db.scalars(select(TraceRow.tenant_id).distinct())), **own}
        for tenant, days in sorted(own.items()):
            keep = days if days is not None else default_days
            if keep is not None:
                out.append(self.purge_tenant(tenant, keep, now=now))
        return out


__all__ = ["BACKFILL_BATCH", "OBSERVATION_BATCH", "PURGE_BATCH", "Filled", "Purged", "UpkeepStore", "has_unfilled"]
