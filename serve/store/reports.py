"""Read-only aggregates over the history: failure patterns' inputs, ``/metrics``, row counts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, func, select
from sqlalchemy.exc import SQLAlchemyError

from model.core.agents import POOL_AGENT
from model.diagnosis.patterns import Occurrence, RepairEvent
from serve.store.base import Database, StoreBase, id_batches, store_error
from serve.store.counters import CANARY_FIELDS, hour_of
from serve.store.streams import StreamStore
from serve.store.tables import (
    AgentRow,
    CanaryCountRow,
    FailureRow,
    MetricTotalRow,
    OutcomeRow,
    RecommendationRow,
    TraceRow,
    as_utc,
    fast_time,
)
from serve.store.traces import trace_json


class ReportStore(StoreBase):
    """Aggregates for ``/metrics``, ``/v1/patterns``, the canary's figures and the console; the
    open alarms it counts are ``streams``'."""

    def __init__(self, db: Database, streams: StreamStore) -> None:
        super().__init__(db)
        self.streams = streams

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
        """The failures and signals of the tenant's runs created in ``[since, until)`` (in the order of
        their time, then row id), and the recommendations given since ``since`` with their outcomes
        (:func:`model.diagnosis.patterns.group_patterns` matches them to the runs). An occurrence's agent
        is its run's resolved agent (``traces.agent``: :func:`model.core.agents.resolve_agent`), ``None``
        for the tenant's pool.

        One table each: failure rows carry their run's ``created_at`` and agent (migration 0010)."""
        rows = self.failure_rows(tenant, since=since, until=until)
        return [o for _, o in rows], self.repair_events(tenant, since=since)

    def failure_state(self, tenant: str, *, since: datetime) -> tuple[int, int, int, int]:
        """The tenant's failure rows created since ``since`` and the newest of their ids (one statement:
        one snapshot); its agents and old keys (a rename, merge or split changes them).
        What an incremental reader of :meth:`failure_rows` checks its copy against."""
        try:
            with self.engine.connect() as conn:
                n, top = conn.execute(select(func.count(), func.max(FailureRow.id)).where(
                    FailureRow.tenant_id == tenant, FailureRow.created_at >= since)).one()
                agents, aliases = conn.execute(select(func.count(), func.count(AgentRow.alias_of))
                                               .where(AgentRow.tenant_id == tenant)).one()
        except SQLAlchemyError as exc:
            raise store_error(exc, "reading") from exc
        return int(n or 0), int(top or 0), int(agents or 0), int(aliases or 0)

    def failure_rows(
        self, tenant: str, *, since: datetime, until: datetime | None = None, after_id: int | None = None,
        upto_id: int | None = None,
    ) -> list[tuple[int, Occurrence]]:
        """The tenant's failure rows created in ``[since, until)`` (``until`` None: since ``since``) with
        ids in ``(after_id, upto_id]`` when given, as ``(row id, occurrence)``, by time then id."""
        q = (select(FailureRow.id, FailureRow.trace_id, fast_time(FailureRow.created_at, self.dialect), FailureRow.agent,
                    FailureRow.kind, FailureRow.severity, FailureRow.is_signal, FailureRow.detector, FailureRow.step,
                    FailureRow.tool, FailureRow.evidence)
             .where(FailureRow.tenant_id == tenant, FailureRow.created_at >= since))
        if until is not None:
            q = q.where(FailureRow.created_at < until)
        if after_id is not None:
            q = q.where(FailureRow.id > after_id)
        if upto_id is not None:
            q = q.where(FailureRow.id <= upto_id)
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(q).all()
        except SQLAlchemyError as exc:
            raise store_error(exc, "reading") from exc
        # rows written before failures.tool: the tool of their step, read from the trace
        old = sorted({r[1] for r in rows if r[9] is None and r[8] is not None})
        tools: dict[str, list[str | None]] = {}
        if old:
            with self.read() as db:
                for batch in id_batches(old):
                    for tr in db.scalars(select(TraceRow).where(TraceRow.tenant_id == tenant, TraceRow.id.in_(batch))):
                        tools[tr.id] = [s.get("tool_name") for s in trace_json(db, tr).get("steps") or []]
        out = []
        times: dict[Any, datetime] = {}  # a run's failure rows share its time: parsed once
        for rid, tid, created, agent, kind, severity, is_signal, detector, step, tool, evidence in rows:
            if created is None:  # not in a window (the query's range excludes NULL)
                continue
            if tool is None:
                steps = tools.get(tid, [])
                tool = steps[step] if step is not None and 0 <= step < len(steps) else None
            when = times.get(created)
            if when is None:
                when = times[created] = as_utc(created)
            out.append((int(rid), Occurrence(tid, when, None if agent == POOL_AGENT else agent, kind, severity,
                                             bool(is_signal), detector, step, tool or None, evidence or "")))
        out.sort(key=lambda r: (r[1].created_at, r[0]))
        return out

    def repair_events(self, tenant: str, *, since: datetime) -> list[RepairEvent]:
        """The recommendations given since ``since`` with their outcomes (how many, whether one worked)."""
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
                return [RepairEvent(str(tid), kind, str(strategy), int(n), bool(good) if n else None)
                        for tid, kind, strategy, n, good in conn.execute(rec_q).all()]
        except SQLAlchemyError as exc:
            raise store_error(exc, "reading") from exc

    def metrics_snapshot(self, tenant: str | None = None) -> dict[str, Any]:
        """Aggregates for ``/metrics``, read from the store so that every worker reports the same;
        ``tenant``: that tenant's only (``None``: every tenant's). The counts are kept on write
        (:mod:`serve.store.counters`): a few rows per tenant, whatever the history's size."""
        self.counts_current()  # the count feed's waiting rows first (serve/store/counters.py)
        q = select(MetricTotalRow.name, MetricTotalRow.key, func.sum(MetricTotalRow.n), func.sum(MetricTotalRow.total))
        if tenant is not None:
            q = q.where(MetricTotalRow.tenant_id == tenant)
        with self.read() as db:
            rows = db.execute(q.group_by(MetricTotalRow.name, MetricTotalRow.key)).all()
        by: dict[str, dict[str, tuple[int, float]]] = {}
        for name, key, n, total in rows:
            if n:
                by.setdefault(str(name), {})[str(key)] = (int(n), float(total or 0.0))
        outcomes = {(s, ok): n for ok, name in ((True, "outcomes_ok"), (False, "outcomes_failed"))
                    for s, (n, _) in by.get(name, {}).items()}
        n_rec, secs = by.get("recoveries", {}).get("", (0, 0.0))
        return {
            "traces": by.get("traces", {}).get("", (0, 0.0))[0],
            "open_alarms": self.streams.all_open_alarms(tenant),
            "failures": {k: n for k, (n, _) in by.get("failures", {}).items()},
            "recommendations": {k: n for k, (n, _) in by.get("recommendations", {}).items()},
            "outcomes": outcomes,
            "recoveries": n_rec,
            "mttr_s": secs / n_rec if n_rec else None,
        }

    def count_rows(self, table: type[Any], tenant: str | None = None) -> int:
        with self.read() as db:
            q = select(func.count()).select_from(table)
            if tenant is not None:
                q = q.where(table.tenant_id == tenant)
            return int(db.scalar(q) or 0)

    def canary_counts(self, tenant: str | None, since: datetime) -> dict[str, dict[str, float]]:
        """The canary's counts per arm (:data:`serve.store.counters.CANARY_FIELDS`) of the runs started
        since the top of the hour of ``since`` (kept on write per hour: at most one row per hour of the
        window and arm); ``tenant=None``: every tenant's runs."""
        self.counts_current()  # the count feed's waiting rows first (serve/store/counters.py)
        cols = [func.sum(getattr(CanaryCountRow, f)) for f in CANARY_FIELDS]
        q = select(CanaryCountRow.arm, *cols).where(CanaryCountRow.hour >= hour_of(since))
        if tenant is not None:
            q = q.where(CanaryCountRow.tenant_id == tenant)
        with self.read() as db:
            rows = db.execute(q.group_by(CanaryCountRow.arm)).all()
        return {str(arm): {f: float(v or 0) for f, v in zip(CANARY_FIELDS, vals, strict=True)}
                for arm, *vals in rows}


__all__ = ["ReportStore"]
