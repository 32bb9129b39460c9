"""The failure history: stored traces (list, read, delete, retention) and the labels posted on them
(:mod:`serve.services.run_labels` says how a trace's labels make its effective label)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from model.core.errors import NotFoundError
from model.core.kinds import FailureKind
from model.core.schema import Trace
from serve.redaction import Redactor
from serve.schemas import (
    LabelRequest,
    LabelResponse,
    LocatedFailureOut,
    OutcomeOut,
    RecommendationOut,
    RunLabelOut,
    TraceDetail,
    TracePageOut,
    TraceSummary,
    UndoLabelRequest,
    UndoLabelResponse,
    WithdrawnLabelOut,
)
from serve.services.diagnoses import Diagnoses
from serve.services.run_labels import effective_label
from serve.store.labels import LabelStore
from serve.store.traces import TraceStore
from serve.store.upkeep import UpkeepStore

log = logging.getLogger("triage.service")


class History:
    """Reads, deletes and labels the tenant's stored traces."""

    def __init__(self, trace_store: TraceStore, label_store: LabelStore, redactor: Redactor,
                 diagnoses: Diagnoses) -> None:
        self.trace_store = trace_store
        self.label_store = label_store
        self.redactor = redactor
        self.diagnoses = diagnoses
        self.upkeep = UpkeepStore(trace_store.db)  # the backfill and retention (serve/store/upkeep.py)

    # -- traces ----------------------------------------------------------------------------------
    def list_traces(
        self, tenant: str, *, kind: FailureKind | None, since: Any, session: str | None, limit: int, cursor: str | None,
    ) -> TracePageOut:
        page = self.trace_store.list_traces(
            tenant, kind=kind.value if kind else None, since=since, session=session, limit=limit, cursor=cursor
        )
        return TracePageOut(
            model_version=self.diagnoses.model_version(tenant),
            detector_versions=self.diagnoses.detector_versions(),
            items=[_summary(r) for r in page.items],
            next_cursor=page.next_cursor,
        )

    def get_trace(self, tenant: str, trace_id: str) -> TraceDetail:
        got = self.trace_store.get_trace_json(tenant, trace_id)
        if got is None:
            raise NotFoundError(f"no trace {trace_id!r} for this tenant")
        row, trace_json = got
        recs, outs = self.trace_store.trace_history(tenant, trace_id)
        return TraceDetail(
            **_summary(row).model_dump(),
            model_version=row.model_version,
            detector_versions=dict((row.response or {}).get("detector_versions") or {}),
            trace=trace_json,
            diagnosis=row.response,
            recommendations=[
                RecommendationOut(id=r.id, strategy=r.strategy, kind=r.kind, rung=r.rung, attempt=r.attempt,
                                  created_at=r.created_at, body=r.body)
                for r in recs
            ],
            outcomes=[
                OutcomeOut(recommendation_id=o.recommendation_id, strategy=o.strategy, success=o.success,
                           duration_s=o.duration_s, cost=o.cost, note=o.note, created_at=o.created_at)
                for o in outs
            ],
            label=_run_label(self.label_store.trace_labels(tenant, trace_id)),
        )

    def stored_trace(self, tenant: str, trace_id: str) -> Trace:
        got = self.trace_store.get_trace_json(tenant, trace_id)
        if got is None:
            raise NotFoundError(f"no trace {trace_id!r} for this tenant")
        return Trace.model_validate(got[1])

    def delete_trace(self, tenant: str, trace_id: str) -> None:
        if not self.trace_store.delete_trace(tenant, trace_id):
            raise NotFoundError(f"no trace {trace_id!r} for this tenant")

    def purge(self, retention: timedelta | None = None) -> int:
        """One retention pass (:meth:`serve.store.upkeep.UpkeepStore.apply_retention`): each tenant's
        runs past its own retention, else past ``retention`` (the service-wide setting; ``None``: keep);
        the runs deleted."""
        default = None if retention is None else retention.total_seconds() / 86400
        n = 0
        for p in self.upkeep.apply_retention(default_days=default):
            n += p.runs
            if p.runs or p.observations or p.count_rows:
                log.info("retention: tenant %s: deleted %d runs and %d observations created before %s "
                         "(and %d hourly count rows left empty)",
                         p.tenant, p.runs, p.observations, p.cutoff.isoformat(timespec="seconds"), p.count_rows)
        return n

    def backfill(self) -> int:
        """Fill the verdict columns of runs stored before revision 0015 and the label queue's keys of
        those stored before 0018 (:meth:`serve.store.upkeep.UpkeepStore.backfill_verdicts`,
        :meth:`~serve.store.upkeep.UpkeepStore.backfill_keys`); the rows filled, both counted."""
        n = self.upkeep.backfill_verdicts()
        if n:
            log.info("backfill: filled the verdict of %d runs stored before revision 0015", n)
        k = self.upkeep.backfill_keys()
        if k:
            log.info("backfill: filled the label queue's key of %d runs stored before revision 0018", k)
        return n + k

    # -- labels ----------------------------------------------------------------------------------
    def add_label(
        self, tenant: str, trace_id: str, req: LabelRequest, *, key_id: str | None = None
    ) -> LabelResponse:
        """A label on a stored trace: one author's verdict on the run (see :mod:`serve.services.run_labels`);
        without ``author``, the API key that posted it (``key:<id>``) is the author."""
        failed = req.verdict()
        author = self.redactor.redact_text(req.author) or (f"key:{key_id}" if key_id else "")
        rows = self.label_store.add_label(
            tenant,
            trace_id,
            failed=failed,
            kind=None if req.kind in (None, "healthy") else str(req.kind),
            step=req.step,
            source_index=req.source_index,
            author=author,
            author_type=req.author_type,
        )
        if rows is None:
            raise NotFoundError(f"no trace {trace_id!r} for this tenant")
        label = _run_label(rows)
        assert label is not None  # the label just added
        return LabelResponse(
            model_version=self.diagnoses.model_version(tenant),
            detector_versions=self.diagnoses.detector_versions(),
            trace_id=trace_id,
            labels=len(rows),
            label=label,
        )

    def undo_label(self, tenant: str, req: UndoLabelRequest, *, key_id: str | None = None) -> UndoLabelResponse:
        """Withdraw the author's newest label (``POST /v1/labels/undo``; :mod:`serve.services.run_labels`):
        the author is named as :meth:`add_label` names it (``key:<id>`` without one)."""
        author = self.redactor.redact_text(req.author) or (f"key:{key_id}" if key_id else "")
        got = self.label_store.withdraw_label(tenant, author, trace_id=req.trace_id)
        if got is None:
            where = f" on trace {req.trace_id!r}" if req.trace_id else ""
            raise NotFoundError(f"no label by {author!r}{where} left to withdraw for this tenant")
        row, rows = got
        return UndoLabelResponse(
            model_version=self.diagnoses.model_version(tenant),
            detector_versions=self.diagnoses.detector_versions(),
            trace_id=row["trace_id"],
            withdrawn=WithdrawnLabelOut.model_validate(row),
            labels=len(rows),
            label=_run_label(rows),
        )


def _summary(r: Any) -> TraceSummary:
    return TraceSummary(
        id=r.id,
        session_id=r.session_id,
        task_type=r.task_type,
        created_at=r.created_at,
        updated_at=r.updated_at,
        steps=r.n_steps,
        healthy=r.healthy,
        primary_kind=r.primary_kind,
        shadow=r.shadow,
        agent=r.agent,
    )


def _run_label(rows: list[dict[str, Any]]) -> RunLabelOut | None:
    eff = effective_label(rows)
    if eff is None:
        return None
    return RunLabelOut(
        failed=eff.failed,
        author=eff.author,
        author_type="checker" if eff.author_type == "checker" else "human",
        created_at=eff.created_at,
        failures=[LocatedFailureOut(kind=f.kind, step=f.step, source_index=f.source_index) for f in eff.failures],
        labels=eff.labels,
    )


__all__ = ["History"]
