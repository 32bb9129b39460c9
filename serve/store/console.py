"""What the console's pages read (serve/ui/data.py shapes it): runs in a window with their repairs,
outcomes and failure kinds; a filtered page of runs; the tenant's agents and streams.

A run's verdict is the ``traces.verdict`` column (:mod:`serve.store.verdict`), read through the
console's covering index (``ix_traces_console``) without touching the rows. A row stored before
revision 0015 and not backfilled yet (:mod:`serve.store.upkeep`) has it NULL: its verdict is then read
from its stored response, so that the pages are right while the backfill runs (the partial index
``ix_traces_unfilled`` says in one probe whether a tenant has such rows)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import and_, case, exists, func, or_, select

from serve.store.base import StoreBase
from serve.store.tables import (
    FailureRow,
    LabelRow,
    ObservationRow,
    OutcomeRow,
    RecommendationRow,
    StreamRow,
    TraceRow,
)

_HEALTHY = TraceRow.response["healthy"].as_boolean()
#: The verdict read from the stored response (rows not backfilled yet).
_JSON_VERDICT = case((_HEALTHY.is_(None), "unknown"), (_HEALTHY.is_(True), "healthy"), else_="failed")
_PROBABILITY = TraceRow.response["failure_probability"].as_float()
_BASIS = TraceRow.response["failure_probability_basis"]


def _in_window(q: Any, since: datetime, until: datetime) -> Any:
    return q.where(TraceRow.created_at >= since, TraceRow.created_at < until)


class WindowRun(NamedTuple):
    """A run of the overview's window."""

    id: str
    created_at: datetime
    agent: str
    verdict: str  # failed / healthy / unknown
    primary_kind: str | None


class ConsoleStore(StoreBase):
    """Reads of the console (tenant-scoped); rows come back as named tuples."""

    def has_unfilled(self, db: Any, tenant: str) -> bool:
        """Whether the tenant has a run whose verdict is not backfilled yet (one probe of ``ix_traces_unfilled``)."""
        return db.scalar(select(TraceRow.id).where(TraceRow.tenant_id == tenant, TraceRow.verdict.is_(None))
                         .limit(1)) is not None

    def json_verdicts(self, db: Any, tenant: str, ids: list[str]) -> dict[str, str]:
        """The verdicts of these runs read from their stored responses, by id."""
        out: dict[str, str] = {}
        for i in range(0, len(ids), 500):
            out.update({str(k): str(v) for k, v in db.execute(
                select(TraceRow.id, _JSON_VERDICT).where(TraceRow.tenant_id == tenant,
                                                         TraceRow.id.in_(ids[i : i + 500]))).all()})
        return out

    def window_rows(
        self, tenant: str, *, since: datetime, until: datetime, agent: str | None
    ) -> tuple[list[WindowRun], list[Any], list[Any]]:
        """The runs created in ``[since, until)`` (of ``agent``; ``None``: every agent's) as
        :class:`WindowRun`; and of the tenant's runs in the window, the repairs given (``id, trace_id,
        strategy``; ``continue`` left out) and the outcomes (``recommendation_id, trace_id, success``)."""
        q = _in_window(select(TraceRow.id, TraceRow.created_at, TraceRow.agent, TraceRow.verdict,
                              TraceRow.primary_kind).where(TraceRow.tenant_id == tenant), since, until)
        if agent is not None:
            q = q.where(TraceRow.agent == agent)
        with self.read() as db:
            rows = db.execute(q).all()
            unfilled = [r[0] for r in rows if r[3] is None]
            late = self.json_verdicts(db, tenant, unfilled) if unfilled else {}
            runs = [WindowRun(r[0], r[1], r[2], r[3] if r[3] is not None else late.get(r[0], "unknown"), r[4])
                    for r in rows]
            recs = list(db.execute(_in_window(
                select(RecommendationRow.id, RecommendationRow.trace_id, RecommendationRow.strategy)
                .join(TraceRow, and_(TraceRow.tenant_id == RecommendationRow.tenant_id,
                                     TraceRow.id == RecommendationRow.trace_id))
                .where(RecommendationRow.tenant_id == tenant, RecommendationRow.strategy != "continue"),
                since, until)).all())
            outs = list(db.execute(_in_window(
                select(OutcomeRow.recommendation_id, OutcomeRow.trace_id, OutcomeRow.success)
                .join(TraceRow, and_(TraceRow.tenant_id == OutcomeRow.tenant_id, TraceRow.id == OutcomeRow.trace_id))
                .where(OutcomeRow.tenant_id == tenant), since, until)).all())
        return runs, recs, outs

    def run_page(
        self, tenant: str, *, agent: str | None = None, verdict: str | None = None, kind: str | None = None,
        since: datetime | None = None, until: datetime | None = None, labelled: bool | None = None,
        page: int, per_page: int,
    ) -> tuple[int, list[Any]]:
        """How many runs pass the filters (each ``None``: any; ``verdict``: ``failed``, ``healthy`` or
        ``unknown``), and page ``page`` of them, newest first, as ``id, created_at, n_steps,
        primary_kind, task_type, agent, verdict, p, basis``."""
        q = select(TraceRow.id, TraceRow.created_at, TraceRow.n_steps, TraceRow.primary_kind, TraceRow.task_type,
                   TraceRow.agent.label("agent"), func.coalesce(TraceRow.verdict, _JSON_VERDICT).label("verdict"),
                   _PROBABILITY.label("p"), _BASIS.label("basis")).where(TraceRow.tenant_id == tenant)
        if agent is not None:
            q = q.where(TraceRow.agent == agent)
        if kind is not None:
            q = q.where(exists().where(FailureRow.tenant_id == tenant, FailureRow.trace_id == TraceRow.id,
                                       FailureRow.kind == kind, FailureRow.is_signal.is_(False)))
        if since is not None:
            q = q.where(TraceRow.created_at >= since)
        if until is not None:
            q = q.where(TraceRow.created_at < until)
        if labelled is not None:
            has = exists().where(LabelRow.tenant_id == tenant, LabelRow.trace_id == TraceRow.id,
                                 LabelRow.withdrawn_at.is_(None))
            q = q.where(has if labelled else ~has)
        with self.read() as db:
            if verdict is not None:
                # the JSON only while the backfill has rows to fill: the column alone lets the count
                # read the index
                q = q.where(or_(TraceRow.verdict == verdict, and_(TraceRow.verdict.is_(None), _JSON_VERDICT.in_([verdict])))
                            if self.has_unfilled(db, tenant) else TraceRow.verdict == verdict)
            total = int(db.scalar(select(func.count()).select_from(q.with_only_columns(TraceRow.id).subquery())) or 0)
            rows = list(db.execute(q.order_by(TraceRow.created_at.desc(), TraceRow.id.desc())
                                   .offset((page - 1) * per_page).limit(per_page)).all())
        return total, rows

    def agent_names(self, tenant: str) -> list[str]:
        """The agents the tenant's runs resolved to, by name."""
        with self.read() as db:
            q = select(TraceRow.agent).where(TraceRow.tenant_id == tenant).distinct()
            return sorted(str(a) for a in db.scalars(q))

    def labelled_count(self, tenant: str, agent: str | None) -> int:
        """Runs of this agent (``None``: every run) that carry a label (not withdrawn)."""
        q = select(func.count(func.distinct(LabelRow.trace_id))).where(LabelRow.tenant_id == tenant,
                                                                      LabelRow.withdrawn_at.is_(None))
        if agent is not None:
            q = q.join(TraceRow, and_(TraceRow.tenant_id == LabelRow.tenant_id, TraceRow.id == LabelRow.trace_id)) \
                .where(TraceRow.agent == agent)
        with self.read() as db:
            return int(db.scalar(q) or 0)

    def stream_list(self, tenant: str) -> list[Any]:
        """The tenant's streams as ``name, agent, detector, n, alarm_open``, by name and agent."""
        with self.read() as db:
            return list(db.execute(select(StreamRow.name, StreamRow.agent, StreamRow.detector, StreamRow.n,
                                          StreamRow.alarm_open).where(StreamRow.tenant_id == tenant)
                                   .order_by(StreamRow.name, StreamRow.agent)).all())

    def stream_observations(self, tenant: str, stream: str, agent: str, *, last: int) -> list[Any]:
        """The stream's last ``last`` observations as ``seq, value, alarm``, oldest first."""
        with self.read() as db:
            rows = db.execute(select(ObservationRow.seq, ObservationRow.value, ObservationRow.alarm)
                              .where(ObservationRow.tenant_id == tenant, ObservationRow.stream == stream,
                                     ObservationRow.agent == agent)
                              .order_by(ObservationRow.seq.desc()).limit(last)).all()
        return list(reversed(rows))


__all__ = ["ConsoleStore", "WindowRun"]
