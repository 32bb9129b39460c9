"""Real-time sessions: ``POST /v1/sessions/{session_id}/steps``, ``GET`` / ``DELETE /v1/sessions/{id}``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from serve.auth import PrincipalDep
from serve.body import body_openapi, parse_body
from serve.deps import SessionsDep
from serve.direct import DirectRoute
from serve.examples_service import APPEND_EXAMPLES
from serve.routers._common import ERRORS, NOT_FOUND, TOO_LARGE, call, json_response
from serve.schemas import AppendStepsRequest, SessionStepResponse, SessionView
from serve.validation import ID_PATTERN

router = APIRouter(prefix="/v1/sessions", tags=["sessions"], route_class=DirectRoute)  # serve/direct.py

SessionId = Annotated[
    str, Path(pattern=ID_PATTERN, description="The agent's own session id, `[A-Za-z0-9._:@-]{1,128}`.")
]


@router.post(
    "/{session_id}/steps",
    response_model=SessionStepResponse,
    summary="Append steps and get an incremental diagnosis",
    responses={**ERRORS, **TOO_LARGE},
    openapi_extra=body_openapi(AppendStepsRequest, APPEND_EXAMPLES),
)
async def append_steps(
    session_id: SessionId,
    request: Request,
    principal: PrincipalDep,
    sessions: SessionsDep,
) -> Response:
    """Append one or more steps (OpenAI messages or native steps) as the agent takes them; the
    first append creates the session. The answer diagnoses the session so far: a loop is caught on
    the result of its third repeat. While a failure stays open the same recommendation (same `id`)
    comes back and no budget is spent.
    """
    async with request.app.state.gate.slot(principal.tenant):  # CPU work, shared fairly by tenants
        body = await parse_body(request, AppendStepsRequest)
        return json_response(await call(sessions.append_steps, principal.tenant, session_id, body))


@router.get(
    "/{session_id}",
    response_model=SessionView,
    summary="A session's state",
    responses={**ERRORS, **NOT_FOUND},
)
async def get_session(session_id: SessionId, principal: PrincipalDep, sessions: SessionsDep) -> SessionView:
    """Step counters, every failure with its rung and standing recommendation, the last diagnosis."""
    return await call(sessions.get_session, principal.tenant, session_id)


@router.delete(
    "/{session_id}",
    status_code=204,
    summary="Delete a session and its traces",
    responses={**ERRORS, **NOT_FOUND},
)
async def delete_session(session_id: SessionId, principal: PrincipalDep, sessions: SessionsDep) -> Response:
    """Delete the session, its repair state and every trace recorded under it (retention on demand)."""
    await call(sessions.delete_session, principal.tenant, session_id)
    return Response(status_code=204)
