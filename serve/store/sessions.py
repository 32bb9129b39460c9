"""Sessions (their locked repair state), the recommendations given and the outcomes reported on them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from serve.store.base import StoreBase, before_commit, core
from serve.store.counters import count_labels, count_outcome, count_recommendation
from serve.store.prepared import Prepared, Tx, dialect_name, per_dialect
from serve.store.tables import LabelRow, OutcomeRow, RecommendationRow, SessionRow, utcnow

_INSERT_RECOMMENDATION = per_dialect(
    lambda ins: ins(core(RecommendationRow)).on_conflict_do_nothing().returning(core(RecommendationRow).c.id))


@dataclass(eq=False)
class LockedSession:
    """A session's row as :meth:`SessionStore.lock_session` locked it in transaction ``db``. What is
    changed of it (an attribute set, or :meth:`SessionStore.save_session_state`) is written as the
    transaction commits, as the ORM would (:func:`serve.store.base.before_commit`)."""

    tenant_id: str
    id: str
    trace_id: str
    created_at: datetime
    updated_at: datetime
    n_steps: int
    next_source_index: int
    version: int
    state: dict[str, Any] | None
    db: Tx = field(repr=False)
    dirty: bool = field(default=False, repr=False)  # saved: the state is written even if changed in place
    created: bool = field(default=False, repr=False)  # this transaction inserted the row (its trace is new)

    def __post_init__(self) -> None:
        self._loaded = self._values()
        before_commit(self.db, self._flush)

    def _values(self) -> tuple[Any, ...]:
        return (self.trace_id, self.n_steps, self.next_source_index, self.version, id(self.state), self.updated_at)

    def _flush(self) -> None:
        if self.dirty or self._values() != self._loaded:
            _SAVE_SESSION.execute(self.db, {
                "t": self.tenant_id, "i": self.id, "trace_id": self.trace_id, "state": self.state,
                "n_steps": self.n_steps, "next_source_index": self.next_source_index,
                "updated_at": self.updated_at, "version": self.version})


_S = core(SessionRow).c
_SESSION_KEY = (_S.tenant_id == bindparam("t")) & (_S.id == bindparam("i"))
_SESSION_NAMES = [f.name for f in fields(LockedSession) if f.name not in ("db", "dirty", "created")]
_SESSION_COLS = [_S[name] for name in _SESSION_NAMES]
_LOCK_SESSION = Prepared(select(*_SESSION_COLS).where(_SESSION_KEY))
_LOCK_SESSION_PG = Prepared(select(*_SESSION_COLS).where(_SESSION_KEY).with_for_update())
_SAVE_SESSION = Prepared(update(core(SessionRow)).where(_SESSION_KEY))
_CREATE_SESSION = per_dialect(lambda ins: ins(core(SessionRow)).on_conflict_do_nothing())


class SessionStore(StoreBase):
    """The ``sessions``, ``recommendations`` and ``outcomes`` tables."""

    # -- sessions ------------------------------------------------------------------------------
    def lock_session(
        self, db: Tx, tenant: str, session_id: str, *, create_trace_id: str | Callable[[], str] | None
    ) -> LockedSession | None:
        """The session row, locked for this transaction; created when ``create_trace_id`` is given (the new
        row's trace id, or what makes one: called only when the session is new; the row's ``created``).

        The row is read first: an append to a session that exists (all but its first) runs one statement.
        The insert is ``ON CONFLICT DO NOTHING`` so that two first appends racing on PostgreSQL
        both end up locking the one row instead of one failing on the primary key.
        """
        q = _LOCK_SESSION_PG if self.dialect == "postgresql" else _LOCK_SESSION
        key = {"t": tenant, "i": session_id}
        rows = q.execute(db, key)
        if not rows and create_trace_id is not None:
            now = utcnow()
            trace_id = create_trace_id if isinstance(create_trace_id, str) else create_trace_id()
            _CREATE_SESSION[self.dialect].execute(db, {
                "tenant_id": tenant, "id": session_id, "trace_id": trace_id, "created_at": now,
                "updated_at": now, "n_steps": 0, "next_source_index": 0, "version": 0, "state": {}})
            rows = q.execute(db, key)
            return LockedSession(**dict(zip(_SESSION_NAMES, rows[0], strict=True)), db=db,
                                 created=rows[0][_SESSION_NAMES.index("trace_id")] == trace_id)
        return LockedSession(**dict(zip(_SESSION_NAMES, rows[0], strict=True)), db=db) if rows else None

    @staticmethod
    def save_session_state(
        row: LockedSession, state: dict[str, Any], *, n_steps: int | None = None, next_source_index: int | None = None
    ) -> int:
        """Set a locked session's new repair state (and counters), written as its transaction commits
        (whole, also when it is the row's own dict changed in place); its new version."""
        row.state = state
        if n_steps is not None:
            row.n_steps = n_steps
        if next_source_index is not None:
            row.next_source_index = next_source_index
        row.updated_at = utcnow()
        row.version += 1
        row.dirty = True
        return row.version

    def get_session(self, tenant: str, session_id: str) -> SessionRow | None:
        with self.read() as db:
            return db.get(SessionRow, (tenant, session_id))

    # -- recommendations and outcomes ------------------------------------------------------------
    @staticmethod
    def put_recommendation(
        db: Tx,
        *,
        tenant: str,
        rec: dict[str, Any],
        trace_id: str,
        session_id: str | None,
        failure_key: str | None,
        kind: str | None,
        rung: int,
        attempt: int,
        status: str = "open",
    ) -> None:
        # Ids are deterministic (model.diagnosis.repair_engine): a second insert of one id is the same recommendation.
        res = _INSERT_RECOMMENDATION[dialect_name(db)].execute(db, {
            "tenant_id": tenant, "id": rec["id"], "trace_id": trace_id, "session_id": session_id,
            "failure_key": failure_key, "kind": kind, "strategy": rec["strategy"], "rung": rung,
            "attempt": attempt, "status": status, "created_at": utcnow(), "body": rec})
        count_recommendation(db, tenant, trace_id, rec["strategy"], len(res))  # 0: it was there

    @staticmethod
    def get_recommendation(db: Session, tenant: str, rec_id: str) -> RecommendationRow | None:
        return db.get(RecommendationRow, (tenant, rec_id))

    @staticmethod
    def refresh(db: Session, row: Any) -> None:
        """Re-read ``row`` in transaction ``db`` (its values as of the locks taken since it was read)."""
        db.refresh(row)

    @staticmethod
    def add_outcome(
        db: Session,
        *,
        tenant: str,
        rec: RecommendationRow,
        success: bool,
        duration_s: float | None,
        cost: float | None,
        note: str,
    ) -> OutcomeRow:
        now = utcnow()
        row = OutcomeRow(
            tenant_id=tenant,
            recommendation_id=rec.id,
            trace_id=rec.trace_id,
            strategy=rec.strategy,
            success=success,
            duration_s=duration_s,
            cost=cost,
            note=note,
            created_at=now,
        )
        db.add(row)
        count_outcome(db, tenant=tenant, trace_id=rec.trace_id, strategy=rec.strategy, success=success,
                      failure_key=rec.failure_key, at=now)
        return row

    @staticmethod
    def add_outcome_label(
        db: Session, *, tenant: str, trace_id: str, failed: bool, kind: str | None, step: int | None,
        source_index: int | None,
    ) -> None:
        """In transaction ``db``: the label an outcome posted with ``label`` gives its run (author
        ``outcome``, a human's)."""
        db.add(LabelRow(tenant_id=tenant, trace_id=trace_id, failed=failed, kind=kind, step=step,
                        source_index=source_index, author="outcome", author_type="human"))
        count_labels(db, tenant, trace_id)


__all__ = ["LockedSession", "SessionStore"]
