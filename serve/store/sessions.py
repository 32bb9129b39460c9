"""Sessions (their locked repair state), the recommendations given and the outcomes reported on them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import flag_modified

from serve.store.base import StoreBase, core
from serve.store.counters import count_labels, count_outcome, count_recommendation
from serve.store.prepared import Prepared
from serve.store.tables import LabelRow, OutcomeRow, RecommendationRow, SessionRow, utcnow

_INSERT_RECOMMENDATION = {
    name: Prepared(ins_of(core(RecommendationRow)).on_conflict_do_nothing().returning(core(RecommendationRow).c.id))
    for name, ins_of in (("sqlite", sqlite.insert), ("postgresql", postgresql.insert))
}


class SessionStore(StoreBase):
    """The ``sessions``, ``recommendations`` and ``outcomes`` tables."""

    # -- sessions ------------------------------------------------------------------------------
    def lock_session(
        self, db: Session, tenant: str, session_id: str, *, create_trace_id: str | None
    ) -> SessionRow | None:
        """The session row, locked for this transaction; created when ``create_trace_id`` is given.

        The insert is ``ON CONFLICT DO NOTHING`` so that two first appends racing on PostgreSQL
        both end up locking the one row instead of one failing on the primary key.
        """
        if create_trace_id is not None:
            now = utcnow()
            values = {
                "tenant_id": tenant,
                "id": session_id,
                "trace_id": create_trace_id,
                "created_at": now,
                "updated_at": now,
                "n_steps": 0,
                "next_source_index": 0,
                "version": 0,
                "state": {},
            }
            ins = (postgresql.insert if self.dialect == "postgresql" else sqlite.insert)(SessionRow)
            db.execute(ins.values(**values).on_conflict_do_nothing())
        q = select(SessionRow).where(SessionRow.tenant_id == tenant, SessionRow.id == session_id)
        if self.dialect == "postgresql":
            q = q.with_for_update()
        return db.scalar(q.execution_options(populate_existing=True))

    @staticmethod
    def save_session_state(
        row: SessionRow, state: dict[str, Any], *, n_steps: int | None = None, next_source_index: int | None = None
    ) -> int:
        """Write a locked session's new repair state (and counters) in its transaction; its new version.

        The state is written whole even when it is the row's own dict changed in place (which the
        ORM would not see)."""
        row.state = state
        flag_modified(row, "state")
        if n_steps is not None:
            row.n_steps = n_steps
        if next_source_index is not None:
            row.next_source_index = next_source_index
        row.updated_at = utcnow()
        row.version += 1
        return row.version

    def get_session(self, tenant: str, session_id: str) -> SessionRow | None:
        with self.read() as db:
            return db.get(SessionRow, (tenant, session_id))

    # -- recommendations and outcomes ------------------------------------------------------------
    @staticmethod
    def put_recommendation(
        db: Session,
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
        res = _INSERT_RECOMMENDATION[db.get_bind().dialect.name].execute(db, {
            "tenant_id": tenant, "id": rec["id"], "trace_id": trace_id, "session_id": session_id,
            "failure_key": failure_key, "kind": kind, "strategy": rec["strategy"], "rung": rung,
            "attempt": attempt, "status": status, "created_at": utcnow(), "body": rec})
        count_recommendation(db, tenant, rec["strategy"], len(res))  # 0: it was there

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


__all__ = ["SessionStore"]
