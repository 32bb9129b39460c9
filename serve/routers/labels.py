"""``POST /v1/labels/undo``: withdraw one's own newest label (serve/services/history.py; the rules:
serve/services/run_labels.py). Labels are posted on a trace (``POST /v1/traces/{id}/labels``,
serve/routers/traces.py)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from serve.auth import PrincipalDep
from serve.body import body_openapi, parse_body
from serve.deps import HistoryDep
from serve.routers._common import ERRORS, NOT_FOUND, call
from serve.schemas import UndoLabelRequest, UndoLabelResponse

router = APIRouter(prefix="/v1/labels", tags=["traces"])

_UNDO_EXAMPLES = {
    "mine": {"summary": "My newest label, on any trace (the key's, when posted without author)", "value": {}},
    "reviewer": {"summary": "A reviewer's newest label on one trace",
                 "value": {"author": "reviewer@example.com", "trace_id": "run-42"}},
}


@router.post(
    "/undo",
    response_model=UndoLabelResponse,
    summary="Withdraw your newest label",
    responses={**ERRORS, **NOT_FOUND},
    openapi_extra=body_openapi(UndoLabelRequest, _UNDO_EXAMPLES),
)
async def undo_label(request: Request, principal: PrincipalDep, history: HistoryDep) -> UndoLabelResponse:
    """The author's newest label of this tenant (on `trace_id` only, when given) is withdrawn: the
    row is kept, marked withdrawn, and counts nowhere any more (the effective label, the export,
    retraining, the review queue). Without `author`, the author is the API key (`key:<key id>`), as
    when labels are posted without one. Call again to withdraw the one before. 404 when the author
    has no label left to withdraw."""
    body = await parse_body(request, UndoLabelRequest)
    return await call(history.undo_label, principal.tenant, body, key_id=principal.key_id)
