"""Read-only aggregates over the history: failure patterns' inputs, ``/metrics``, row counts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, func, select, true
from sqlalchemy.exc import SQLAlchemyError

from model.core.agents import POOL_AGENT
from model.diagnosis.patterns import Occurrence, RepairEvent
from serve.store.base import store_error
from serve.store.streams import Streams
from serve.store.tables import FailureRow, LabelRow, OutcomeRow, RecommendationRow, TraceRow
from serve.store.traces import trace_json

#: The label columns :func:`serve.services.run_labels.effective_label` reads (plain rows, not ORM objects).
_LABEL_KEYS = ("id", "tenant_id", "trace_id", "kind", "step", "source_index", "author", "failed", "author_type",
               "created_at")


class Reports(Streams):
    """Aggregates for ``/metrics``, ``/v1/patterns``, the canary's figures and the console."""

    # -- failure patterns (model/diagnosis/patterns.py groups what this reads) ------------------------------
    def pattern_version(self, tenant: str) -> tuple[int, int, int]:
        """What the tenant's patterns depend on, cheaply: (failure rows, newest failure row id,
        newest outcome id). A diagnosis rewrites failure rows (new ids), a deletion lowers the count,
        an outcome adds a row: each changes it."""
        try:
            with self.engine.connect() as conn:
                n, top = conn.execute(select(func.count(), func.max(FailureRow.id))
                                      .where(FailureRow.tenant_id == tenant)).one()
                out = conn.execute(select(func.max(OutcomeRow.id)).where(OutcomeRow.tenant_id == tenant)).scalar()
        except SQLAlchemyError as exc:
            raise store_error(exc, "reading") from exc
        return int(n or 0), int(top or 0), int(out or 0)

    def pattern_inputs(
        self, tenant: str, *, since: datetime, until: datetime
    ) -> tuple[list[Occurrence], list[RepairEvent]]:
        """The failures and signals of the tenant's runs created in ``[since, until)``, and the
        recommendations given since ``since`` with their outcomes (:func:`model.diagnosis.patterns.group_patterns`
        matches them to the runs). An occurrence's agent is its run's resolved agent (``traces.agent``:
        :func:`model.core.agents.resolve_agent`), ``None`` for the tenant's pool.

        One table each: failure rows carry their run's ``created_at`` and agent (migration 0010)."""
        occ_q = (
            select(FailureRow.trace_id, FailureRow.created_at, FailureRow.agent, FailureRow.kind,
                   FailureRow.severity, FailureRow.is_signal, FailureRow.detector, FailureRow.step,
                   FailureRow.tool, FailureRow.evidence)
            .where(FailureRow.tenant_id == tenant, FailureRow.created_at >= since, FailureRow.created_at < until)
        )
        ok = func.max(case((OutcomeRow.success.is_(True), 1), else_=0))
        rec_q = (
            select(RecommendationRow.trace_id, RecommendationRow.kind, RecommendationRow.strategy,
                   func.count(OutcomeRow.id), ok)
            .outerjoin(OutcomeRow, and_(OutcomeRow.tenant_id == RecommendationRow.tenant_id,
                                        OutcomeRow.recommendation_id == RecommendationRow.id))
            .where(RecommendationRow.tenant_id == tenant, RecommendationRow.created_at >= since)
            .group_by(RecommendationRow.id, RecommendationRow.trace_id, RecommendationRow.kind,
                      RecommendationRow.strategy)
        )
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(occ_q).all()
                repairs = [
                    RepairEvent(str(tid), kind, str(strategy), int(n), bool(good) if n else None)
                    for tid, kind, strategy, n, good in conn.execute(rec_q).all()
                ]
        except SQLAlchemyError as exc:
            raise store_error(exc, "reading") from exc
        # rows written before failures.tool: the tool of their step, read from the trace
        old = sorted({r[0] for r in rows if r[8] is None and r[7] is not None})
        tools: dict[str, list[str | None]] = {}
        if old:
            with self.read() as db:
                for i in range(0, len(old), 500):
                    for tr in db.scalars(select(TraceRow).where(TraceRow.tenant_id == tenant,
                                                                TraceRow.id.in_(old[i : i + 500]))):
                        tools[tr.id] = [s.get("tool_name") for s in trace_json(db, tr).get("steps") or []]
        occurrences = []
        for tid, created, agent, kind, severity, is_signal, detector, step, tool, evidence in rows:
            if created is None:  # not in a window (the query's range excludes NULL)
                continue
            if tool is None:
                steps = tools.get(tid, [])
                tool = steps[step] if step is not None and 0 <= step < len(steps) else None
            occurrences.append(Occurrence(tid, created, None if agent == POOL_AGENT else agent, kind, severity, bool(is_signal), detector, step,
                                          tool or None, evidence or ""))
        return occurrences, repairs

    def metrics_snapshot(self, tenant: str | None = None) -> dict[str, Any]:
        """Aggregates for ``/metrics``, read from the store so that every worker reports the same;
        ``tenant``: that tenant's only (``None``: every tenant's)."""

        def mine(q: Any, table: Any) -> Any:
            return q if tenant is None else q.where(table.tenant_id == tenant)

        with self.read() as db:
            traces = int(db.scalar(mine(select(func.count()).select_from(TraceRow), TraceRow)) or 0)
            failures = dict(
                db.execute(
                    mine(select(FailureRow.kind, func.count()), FailureRow)
                    .where(FailureRow.is_signal.is_(False))
                    .group_by(FailureRow.kind)
                ).all()
            )
            recs = dict(
                db.execute(
                    mine(select(RecommendationRow.strategy, func.count()), RecommendationRow).group_by(
                        RecommendationRow.strategy
                    )
                ).all()
            )
            outcomes: dict[tuple[str, bool], int] = {
                (s, bool(ok)): int(n)
                for s, ok, n in db.execute(
                    mine(select(OutcomeRow.strategy, OutcomeRow.success, func.count()), OutcomeRow).group_by(
                        OutcomeRow.strategy, OutcomeRow.success
                    )
                ).all()
            }
            first = {
                (t, sid, fk): ts
                for t, sid, fk, ts in db.execute(
                    select(
                        RecommendationRow.tenant_id,
                        RecommendationRow.session_id,
                        RecommendationRow.failure_key,
                        func.min(RecommendationRow.created_at),
                    )
                    .where(RecommendationRow.failure_key.is_not(None))
                    .where(true() if tenant is None else RecommendationRow.tenant_id == tenant)
                    .group_by(
                        RecommendationRow.tenant_id,
                        RecommendationRow.session_id,
                        RecommendationRow.failure_key,
                    )
                ).all()
            }
            recovered = db.execute(
                select(
                    OutcomeRow.created_at,
                    RecommendationRow.tenant_id,
                    RecommendationRow.session_id,
                    RecommendationRow.failure_key,
                )
                .join(
                    RecommendationRow,
                    and_(
                        RecommendationRow.tenant_id == OutcomeRow.tenant_id,
                        RecommendationRow.id == OutcomeRow.recommendation_id,
                    ),
                )
                .where(OutcomeRow.success.is_(True), RecommendationRow.failure_key.is_not(None))
                .where(true() if tenant is None else OutcomeRow.tenant_id == tenant)
                .order_by(OutcomeRow.id.desc())
                .limit(10_000)
            ).all()
        durations = []
        for done, t, sid, fk in recovered:
            start = first.get((t, sid, fk))
            if start is not None:
                start = start if start.tzinfo else start.replace(tzinfo=done.tzinfo)
                durations.append(max(0.0, (done - start).total_seconds()))
        return {
            "traces": traces,
            "open_alarms": self.all_open_alarms(tenant),
            "failures": {str(k): int(v) for k, v in failures.items()},
            "recommendations": {str(k): int(v) for k, v in recs.items()},
            "outcomes": outcomes,
            "recoveries": len(durations),
            "mttr_s": (sum(durations) / len(durations)) if durations else None,
        }

    def count_rows(self, table: type[Any], tenant: str | None = None) -> int:
        with self.read() as db:
            q = select(func.count()).select_from(table)
            if tenant is not None:
                q = q.where(table.tenant_id == tenant)
            return int(db.scalar(q) or 0)

    def arm_runs(
        self, tenant: str | None = None
    ) -> tuple[list[tuple[str | None, int, int, int]], dict[tuple[str | None, str, str], list[dict[str, Any]]]]:
        """The canary's inputs (serve/services/canary.py), in one read: per arm, its runs, those some
        diagnosis found failed and those of them whose latest diagnosis is healthy; and the labels (not
        withdrawn; the columns :func:`serve.services.run_labels.effective_label` reads) of runs in an
        arm by (arm, tenant, trace). ``tenant=None``: every tenant's runs."""
        failed = TraceRow.failed_at.is_not(None)
        with self.read() as db:
            q = (
                select(
                    TraceRow.arm,
                    func.count(),
                    func.sum(case((failed, 1), else_=0)),
                    func.sum(case((failed & TraceRow.healthy.is_(True), 1), else_=0)),
                )
                .where(TraceRow.arm.is_not(None))
                .group_by(TraceRow.arm)
            )
            if tenant is not None:
                q = q.where(TraceRow.tenant_id == tenant)
            counts = [(arm, int(runs), int(n_failed or 0), int(n_recovered or 0))
                      for arm, runs, n_failed, n_recovered in db.execute(q).all()]
            # Labels of runs in an arm (few next to traces): the effective label is decided per run.
            cols = [c for c in LabelRow.__table__.columns if c.key in _LABEL_KEYS]
            lq = (
                select(TraceRow.arm, *cols)
                .join(TraceRow, (TraceRow.tenant_id == LabelRow.tenant_id) & (TraceRow.id == LabelRow.trace_id))
                .where(TraceRow.arm.is_not(None), LabelRow.withdrawn_at.is_(None))
            )
            if tenant is not None:
                lq = lq.where(LabelRow.tenant_id == tenant)
            by_run: dict[tuple[str | None, str, str], list[dict[str, Any]]] = {}
            for row in db.execute(lq).mappings():
                by_run.setdefault((row["arm"], row["tenant_id"], row["trace_id"]), []).append(dict(row))
        return counts, by_run


__all__ = ["Reports"]
