"""The console's label queue page (:func:`serve.services.label_queue.queue_page`: the next run to
label) and the JSON its keys post (a label, an undo)."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from model.core.errors import NotFoundError
from serve.auth import CSRF_HEADER
from serve.routers.ui_base import (
    Format,
    TraceId,
    check_csrf,
    console,
    http_error,
    label_request,
    post_label,
    respond,
    runscorer,
    session,
)
from serve.schemas import UndoLabelRequest
from serve.services.label_queue import DEFAULT_ORDER, Order, queue_page

router = APIRouter(prefix="/ui", include_in_schema=False)

# -- 5 label queue --------------------------------------------------------------------------------

@router.get("/queue")
def queue(request: Request, format: Format = "html", at: Annotated[int, Query(ge=0, le=100_000)] = 0,
          order: Order = DEFAULT_ORDER) -> Response:
    s = session(request, format)
    ctx = queue_page(console(request), s.principal.tenant, key_id=s.principal.key_id, at=at,
                     scorer=runscorer(request), order=order)
    return respond(request, "queue.html", ctx, s, format)


@router.post("/api/labels/undo")
async def undo_json(request: Request) -> Response:
    """The queue's ``u``: withdraw this key's newest label (``POST /v1/labels/undo``'s code)."""
    s = session(request, "json")
    check_csrf(s, request.headers.get(CSRF_HEADER))
    try:
        got = await run_in_threadpool(console(request).undo_label, s.principal.tenant, UndoLabelRequest(),
                                      key_id=s.principal.key_id)
    except NotFoundError as exc:
        raise http_error(404, ["body"], str(exc), "not_found") from None
    return JSONResponse(got.model_dump(mode="json"))


@router.post("/api/labels/{trace_id}")
async def label_json(request: Request, trace_id: TraceId) -> Response:
    """The queue's keys: a JSON LabelRequest (failed, kind, step) with the ``X-CSRF-Token`` header."""
    s = session(request, "json")
    check_csrf(s, request.headers.get(CSRF_HEADER))
    try:
        body = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError) as exc:
        raise http_error(422, ["body"], f"not JSON: {exc}", "json_invalid") from None
    if not isinstance(body, dict):
        raise http_error(422, ["body"], "a JSON object is expected", "object_type")
    return JSONResponse(await post_label(request, s, trace_id, label_request(body)))
