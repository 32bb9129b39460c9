"""Labels posted on runs, and the history as training and export read it (runs with their
recommendations, outcomes and labels)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import and_, case, exists, func, literal, or_, select

from model.core.errors import InputError
from serve.store.base import StoreBase, core, group_rows, id_batches
from serve.store.counters import count_labels
from serve.store.tables import (
    FailureRow,
    LabelRow,
    MetricTotalRow,
    OutcomeRow,
    RecommendationRow,
    TraceRow,
    as_utc,
    fast_time,
    utcnow,
)
from serve.store.traces import trace_json
from serve.store.upkeep import has_unfilled
from serve.store.verdict import queue_key, run_columns


class ReviewRow(NamedTuple):
    """One run the label queue may ask about: its id, creation time, agent and the verdict columns
    its margin is made of (:func:`serve.store.verdict.run_columns`)."""

    trace_id: str
    created_at: datetime
    agent: str
    failure_probability: float | None
    judged_threshold: float | None
    finding_margin: float | None


class LabelStore(StoreBase):
    """The ``labels`` table, and whole runs with everything recorded on them."""

    def add_label(
        self,
        tenant: str,
        trace_id: str,
        *,
        failed: bool,
        kind: str | None = None,
        step: int | None = None,
        source_index: int | None = None,
        author: str = "",
        author_type: str = "human",
    ) -> list[dict[str, Any]] | None:
        """Add a label (one author's verdict on the run); returns the trace's labels, oldest first,
        or None when there is no such trace. ``source_index`` locates the label at the first step
        of that input element; ``step`` at that step."""
        with self.write() as db:
            trace = db.get(TraceRow, (tenant, trace_id))
            if trace is None:
                return None
            if step is not None and step >= trace.n_steps:
                raise InputError(
                    f"step {step} is past the trace's last step ({trace.n_steps - 1})", path="step"
                )
            if step is not None or source_index is not None:
                steps = trace_json(db, trace).get("steps") or []
                if step is not None:
                    source_index = int(steps[step].get("source_index", 0))
                else:
                    step = next((i for i, s in enumerate(steps) if s.get("source_index", 0) == source_index), None)
                    if step is None:
                        last = max((int(s.get("source_index", 0)) for s in steps), default=0)
                        raise InputError(
                            f"no step of the trace has source_index {source_index} (the last is {last})",
                            path="source_index",
                        )
            db.add(
                LabelRow(
                    tenant_id=tenant,
                    trace_id=trace_id,
                    failed=failed,
                    kind=kind,
                    step=step,
                    source_index=source_index,
                    author=author,
                    author_type=author_type,
                )
            )
            db.flush()
            count_labels(db, tenant, trace_id)
            return group_rows(db, LabelRow, [(tenant, trace_id)]).get((tenant, trace_id), [])

    def withdraw_label(
        self, tenant: str, author: str, *, trace_id: str | None = None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """Withdraw ``author``'s newest label (on ``trace_id`` only, when given): the row stays,
        marked ``withdrawn_at``, and no reader counts it any more. Returns the withdrawn row and the
        trace's labels still counted, or None when the author has no label left to withdraw."""
        with self.write() as db:
            q = select(LabelRow).where(LabelRow.tenant_id == tenant, LabelRow.author == author,
                                       LabelRow.withdrawn_at.is_(None))
            if trace_id is not None:
                q = q.where(LabelRow.trace_id == trace_id)
            row = db.scalars(q.order_by(LabelRow.created_at.desc(), LabelRow.id.desc()).limit(1)).first()
            if row is None:
                return None
            row.withdrawn_at = utcnow()
            db.flush()
            count_labels(db, tenant, row.trace_id)
            withdrawn = {c.key: getattr(row, c.key) for c in LabelRow.__table__.columns}
            return withdrawn, group_rows(db, LabelRow, [(tenant, row.trace_id)]).get((tenant, row.trace_id), [])

    def trace_labels(self, tenant: str, trace_id: str) -> list[dict[str, Any]]:
        """The trace's labels (those not withdrawn), oldest first."""
        with self.read() as db:
            return group_rows(db, LabelRow, [(tenant, trace_id)]).get((tenant, trace_id), [])

    def records_of(self, tenant: str, trace_ids: Sequence[str]) -> dict[str, dict[str, list[dict[str, Any]]]]:
        """The recommendations, outcomes and labels of these traces (one query each), by trace id."""
        keys = [(tenant, t) for t in trace_ids]
        out: dict[str, dict[str, list[dict[str, Any]]]] = {
            t: {"recommendations": [], "outcomes": [], "labels": []} for t in trace_ids}
        if not keys:
            return out
        with self.read() as db:
            for name, table in (("recommendations", RecommendationRow), ("outcomes", OutcomeRow),
                                ("labels", LabelRow)):
                for (_, tid), rows in group_rows(db, table, keys).items():
                    out[tid][name] = rows
        return out

    def iter_history(self, tenant: str | None = None, batch: int = 500) -> Iterator[dict[str, Any]]:
        """Every stored trace with its recommendations, outcomes and labels (not withdrawn; for export)."""
        last: tuple[str, str] = ("", "")
        while True:
            with self.read() as db:
                q = select(TraceRow).where(
                    or_(
                        TraceRow.tenant_id > last[0],
                        and_(TraceRow.tenant_id == last[0], TraceRow.id > last[1]),
                    )
                )
                if tenant is not None:
                    q = q.where(TraceRow.tenant_id == tenant)
                rows = list(db.scalars(q.order_by(TraceRow.tenant_id, TraceRow.id).limit(batch)))
                if not rows:
                    return
                keys = [(r.tenant_id, r.id) for r in rows]
                traces = {(r.tenant_id, r.id): trace_json(db, r) for r in rows}
                recs = group_rows(db, RecommendationRow, keys)
                outs = group_rows(db, OutcomeRow, keys)
                labels = group_rows(db, LabelRow, keys)
            for r in rows:
                k = (r.tenant_id, r.id)
                yield {
                    "tenant": r.tenant_id,
                    "agent": r.agent,
                    "trace": traces[k],
                    "response": r.response,
                    "created_at": r.created_at,
                    "recommendations": recs.get(k, []),
                    "outcomes": outs.get(k, []),
                    "labels": labels.get(k, []),
                }
            last = keys[-1]

    def review_rows(self, tenant: str, author: str) -> tuple[list[ReviewRow], int]:
        """What the label queue orders, from the console's index (``ix_traces_console``), never the
        stored responses: the tenant's runs without a label by ``author`` (not withdrawn) as
        :class:`ReviewRow`, in no particular order, and how many runs that author has labelled. A row
        whose verdict columns are not backfilled yet (revision 0015) gets them from its response."""
        t = core(TraceRow).c
        with self.read() as db:
            mine = set(db.scalars(select(LabelRow.trace_id).where(
                LabelRow.tenant_id == tenant, LabelRow.author == author, LabelRow.withdrawn_at.is_(None)).distinct()))
            # SQLite's times as the stored text, parsed below by fromisoformat: SQLAlchemy's parser of
            # SQLite datetimes costs 5x more, and this reads every run of the tenant
            created = fast_time(t.created_at, self.dialect)
            rows = db.execute(select(t.id, created, t.agent, t.verdict, t.failure_probability,
                                     t.judged_threshold, t.finding_margin).where(t.tenant_id == tenant)).all()
        unfilled = [r[0] for r in rows if r[3] is None and r[0] not in mine]
        cols = {tid: run_columns(response) for tid, response in self.responses(tenant, unfilled).items()}
        out = []
        done = 0
        for tid, created, agent, verdict, p, judged, near in rows:
            if tid in mine:
                done += 1
                continue
            if verdict is None and tid in cols:
                c = cols[tid]
                p, judged, near = c["failure_probability"], c["judged_threshold"], c["finding_margin"]
            out.append(ReviewRow(str(tid), as_utc(created), str(agent), p, judged, near))
        return out, done

    def review_head(self, tenant: str, author: str, *, order: str, thresholds: dict[str, float],
                    default: float, limit: int) -> tuple[list[ReviewRow], int, int] | None:
        """The first ``limit`` runs of the label queue of ``author`` in ``order``, with the runs left to
        label and those the author labelled. ``random``: by ``review_key`` from the author's start
        (:func:`serve.store.verdict.queue_key` of the author) round to it again, then id: a LIMIT read
        of ``ix_traces_review``; ``margin``: smallest margin, newest, id —
        :func:`serve.store.verdict.run_columns`'s parts against ``thresholds[agent]``, else
        ``default``, ordered by the database over the console's index. ``None`` while the tenant has
        runs the backfills have not filled (the caller orders them itself then)."""
        self.counts_current()  # the count feed's waiting rows first (serve/store/counters.py)
        t = core(TraceRow).c
        mine = exists().where(LabelRow.tenant_id == tenant, LabelRow.trace_id == t.id, LabelRow.author == author,
                              LabelRow.withdrawn_at.is_(None))
        with self.read() as db:
            if has_unfilled(db, tenant) or (order == "random" and has_unfilled(db, tenant, "review_key")):
                return None
            q = select(t.id, t.created_at, t.agent, t.failure_probability, t.judged_threshold,
                       t.finding_margin).where(t.tenant_id == tenant, ~mine)
            if order == "random":
                start = queue_key(author)
                rows = list(db.execute(q.where(t.review_key >= start).order_by(t.review_key, t.id).limit(limit)).all())
                if len(rows) < limit:  # round the order to the author's start again
                    rows += db.execute(q.where(t.review_key < start).order_by(t.review_key, t.id)
                                       .limit(limit - len(rows))).all()
            else:
                thr = case(thresholds, value=t.agent, else_=default) if thresholds else literal(default)
                near = func.coalesce(t.finding_margin, 2.0)  # above any probability's distance (≤ 1)
                prob = case((t.failure_probability.is_(None), 1.0),
                            else_=func.abs(t.failure_probability - func.coalesce(t.judged_threshold, thr)))
                margin = case((near < prob, near), else_=prob)
                rows = list(db.execute(q.order_by(margin, t.created_at.desc(), t.id).limit(limit)).all())
            done = int(db.scalar(select(func.count(func.distinct(LabelRow.trace_id))).where(
                LabelRow.tenant_id == tenant, LabelRow.author == author, LabelRow.withdrawn_at.is_(None))) or 0)
            # the tenant's runs: the count kept on write (serve/store/counters.py), not a count of 1,000,000 index entries
            total = int(db.scalar(select(MetricTotalRow.n).where(
                MetricTotalRow.tenant_id == tenant, MetricTotalRow.name == "traces", MetricTotalRow.key == "")) or 0)
        return [ReviewRow(str(r[0]), as_utc(r[1]), str(r[2]), r[3], r[4], r[5]) for r in rows], total - done, done

    def responses(self, tenant: str, trace_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The stored responses of these runs, by id (:data:`~serve.store.base.IN_BATCH` ids a query)."""
        t = core(TraceRow).c
        out: dict[str, dict[str, Any]] = {}
        ids = list(trace_ids)
        with self.read() as db:
            for batch in id_batches(ids):
                out.update({str(k): v or {} for k, v in db.execute(
                    select(t.id, t.response).where(t.tenant_id == tenant, t.id.in_(batch))).all()})
        return out

    def findings_of(self, tenant: str, trace_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """The failures then signals of these runs' latest diagnoses as stored in ``failures`` (``kind,
        confidence, detector``; in the response's order), by id: what a margin's words need, without
        reading the responses."""
        out: dict[str, list[dict[str, Any]]] = {t: [] for t in trace_ids}
        ids = list(trace_ids)
        with self.read() as db:
            for batch in id_batches(ids):
                for tid, kind, conf, det in db.execute(
                        select(FailureRow.trace_id, FailureRow.kind, FailureRow.confidence, FailureRow.detector)
                        .where(FailureRow.tenant_id == tenant, FailureRow.trace_id.in_(batch))
                        .order_by(FailureRow.id)).all():
                    out[str(tid)].append({"kind": kind, "confidence": conf, "detector": det})
        return out

    def agent_labels(self, tenant: str, agent: str, *, limit: int = 2000) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
        """The agent's newest labelled traces (at most ``limit``): each trace's stored response and its
        label rows, oldest first (the zero-shot re-centring reads them; serve/services/agent_models.py)."""
        with self.read() as db:
            ids = list(db.scalars(
                select(LabelRow.trace_id)
                .join(TraceRow, and_(TraceRow.tenant_id == LabelRow.tenant_id, TraceRow.id == LabelRow.trace_id))
                .where(LabelRow.tenant_id == tenant, TraceRow.agent == agent)
                .group_by(LabelRow.trace_id)
                .order_by(func.max(LabelRow.id).desc())
                .limit(limit)
            ))
            if not ids:
                return []
            responses: dict[str, Any] = dict(db.execute(
                select(TraceRow.id, TraceRow.response).where(TraceRow.tenant_id == tenant, TraceRow.id.in_(ids))
            ).all())
            labels = group_rows(db, LabelRow, [(tenant, i) for i in ids])
        return [(responses.get(i) or {}, labels.get((tenant, i), [])) for i in ids]


__all__ = ["LabelStore", "ReviewRow"]
