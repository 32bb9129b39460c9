"""Outcomes: what happened when the agent carried out a recommendation (``POST /v1/outcomes``).

A failed outcome moves its failure one rung up its ladder (or to the next attempt of a retry) and
returns the recommendation to carry out now; the session's (or the trace's) repair state is locked
for the transaction, so concurrent outcomes of one failure escalate it once.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

from model.core.errors import ConflictError, NotFoundError
from model.core.findings import Recommendation
from model.core.kinds import Strategy
from model.core.schema import Trace
from serve.schemas import OutcomeRequest
from serve.services.diagnoses import Diagnoses
from serve.services.run_labels import addressed_place
from serve.store.sessions import SessionStore
from serve.store.traces import TraceStore


@dataclass(frozen=True)
class Outcome:
    """What reporting an outcome did (``POST /v1/outcomes`` answers it with the versions)."""

    recommendation_id: str
    escalated: bool
    session_id: str | None
    next: Recommendation | None = None
    recorded: bool = True
    note: str | None = None


class Outcomes:
    """Records outcomes on the recommendations :class:`~serve.services.diagnoses.Diagnoses` gave."""

    def __init__(self, diagnoses: Diagnoses, session_store: SessionStore, trace_store: TraceStore) -> None:
        self.diagnoses = diagnoses
        self.session_store = session_store
        self.trace_store = trace_store

    def report_outcome(self, tenant: str, req: OutcomeRequest) -> Outcome:
        """Record an outcome; a failed one moves its failure up and returns the next recommendation."""
        diagnoses, session_store, trace_store = self.diagnoses, self.session_store, self.trace_store
        with session_store.write() as db:
            rec = session_store.get_recommendation(db, tenant, req.recommendation_id)
            if rec is None:
                raise NotFoundError(f"no recommendation {req.recommendation_id!r} for this tenant")
            session_key = rec.session_id or f"trace:{rec.trace_id}"
            decision = None
            if rec.session_id is not None:
                row = session_store.lock_session(db, tenant, rec.session_id, create_trace_id=None)
                raw_state = row.state if row is not None else None
            else:
                row = None
                raw_state = trace_store.lock_trace_state(db, tenant, rec.trace_id)
            session_store.refresh(db, rec)  # its status as of the lock: a concurrent outcome may have set it
            repeat = _repeated_outcome(rec, raw_state, req.success)
            if repeat is not None:
                return Outcome(recommendation_id=req.recommendation_id, recorded=False, escalated=False,
                               session_id=rec.session_id, note=repeat)
            stored = trace_store.read_trace(db, tenant, rec.trace_id)
            if raw_state is not None and stored is not None:
                trace = Trace.model_validate(stored[0])
                state = copy.deepcopy(raw_state)
                decision = diagnoses.diagnoser.engine.on_outcome(
                    state, rec.id, success=req.success, trace=trace, session_key=session_key, now=time.time()
                )
                state = diagnoses.redactor.redact(state)
                if row is not None:
                    session_store.save_session_state(row, state)
                else:
                    trace_store.set_trace_state(db, tenant, rec.trace_id, state)
                if decision is not None:
                    diagnoses.record_recommendation(db, tenant, decision, rec.trace_id, rec.session_id)
            session_store.add_outcome(
                db,
                tenant=tenant,
                rec=rec,
                success=req.success,
                duration_s=req.duration_s,
                cost=req.cost,
                note=diagnoses.redactor.redact_text(req.note),
            )
            if rec.status == "open":
                rec.status = "succeeded" if req.success else "failed"
            if req.label is not None:
                failed = req.label != "healthy"
                step, source_index = addressed_place(rec.failure_key, raw_state) if failed else (None, None)
                session_store.add_outcome_label(db, tenant=tenant, trace_id=rec.trace_id, failed=failed,
                                        kind=str(req.label) if failed else None, step=step,
                                        source_index=source_index)
        return Outcome(
            recommendation_id=req.recommendation_id,
            escalated=decision is not None,
            next=decision.recommendation if decision is not None else None,
            session_id=rec.session_id,
        )


def _repeated_outcome(rec: Any, state: dict[str, Any] | None, success: bool) -> str | None:
    """Outcomes are idempotent per recommendation: ``None`` when this one is new; a note when it
    repeats the recorded one (acknowledged, not stored again); :class:`ConflictError` when it
    contradicts it, or claims success for a failure already handed off to a human."""
    if rec.status in ("succeeded", "failed"):
        before = rec.status == "succeeded"
        if before == success:
            return f"this recommendation's outcome ({rec.status}) was already recorded"
        raise ConflictError(
            f"recommendation {rec.id!r} already has the outcome {rec.status!r}; an outcome can't be changed"
        )
    fs = ((state or {}).get("failures") or {}).get(rec.failure_key or "") or {}
    if success and fs.get("status") == "handoff" and rec.strategy != Strategy.HUMAN_HANDOFF.value:
        raise ConflictError(
            f"the failure of recommendation {rec.id!r} was handed off to a human; report the handoff's outcome"
        )
    return None


__all__ = ["Outcome", "Outcomes"]
