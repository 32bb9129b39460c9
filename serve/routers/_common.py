"""What the stateful routers share: the thread-pool call, the error responses they document."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from serve.auth import UNAUTHORIZED_RESPONSES
from serve.fairshare import in_thread

T = TypeVar("T")


ERRORS: dict[int | str, dict[str, Any]] = {
    **UNAUTHORIZED_RESPONSES,
    422: {"description": "Unreadable input; `detail[].loc` names the field"},
    503: {"description": "The store is unreachable or stayed locked past TRIAGE_DB_BUSY_TIMEOUT_S; retry"},
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "Not found for this tenant"}}
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"description": "Contradicts the recorded outcome, or a success after a handoff"}
}
TOO_LARGE: dict[int | str, dict[str, Any]] = {
    413: {"description": "Body larger than TRIAGE_MAX_BODY_BYTES, or more steps than TRIAGE_MAX_STEPS"}
}


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a (blocking: SQL, onnxruntime) service call in the thread pool (its errors become
    responses in serve/error_handlers.py: NotFoundError → 404, ConflictError → 409, …)."""
    return await run_in_threadpool(in_thread(fn), *args, **kwargs)  # in_thread: the queue wait ends


def json_response(model: BaseModel) -> Response:
    """The model as JSON, serialised once by pydantic (the route's ``response_model`` documents it;
    FastAPI would otherwise validate and serialise the returned model a second time)."""
    return Response(content=model.model_dump_json(), media_type="application/json")
