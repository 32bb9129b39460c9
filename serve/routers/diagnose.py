"""``POST /v1/diagnose``: a whole trace in any supported format → diagnosis + recommendation."""

from __future__ import annotations

import logging
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response

from model.core.findings import DiagnosisResponse
from model.core.options import DiagnoseRequest
from serve.auth import UNAUTHORIZED_RESPONSES, PrincipalDep
from serve.body import body_openapi
from serve.deps import ServiceDep, SettingsDep
from serve.direct import DirectRoute
from serve.examples import DIAGNOSE_EXAMPLES
from serve.fairshare import FloodLane
from serve.heavy import HeavyLane
from serve.intake import take
from serve.routers._common import call, json_response
from serve.services.triage import TriageService

log = logging.getLogger("triage.serve")

router = APIRouter(prefix="/v1", tags=["diagnose"], route_class=DirectRoute)  # serve/direct.py

ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    413: {"description": "Body larger than TRIAGE_MAX_BODY_BYTES, or more steps than TRIAGE_MAX_STEPS"},
    422: {"description": "Unreadable input; `detail[].loc` names the field"},
    **UNAUTHORIZED_RESPONSES,
    503: {"description": "The store is unreachable or stayed locked past TRIAGE_DB_BUSY_TIMEOUT_S; retry"},
}


@router.post(
    "/diagnose",
    response_model=DiagnosisResponse,
    summary="Diagnose a whole trace",
    responses=ERROR_RESPONSES,
    openapi_extra=body_openapi(DiagnoseRequest, DIAGNOSE_EXAMPLES),
)
async def diagnose(
    request: Request,
    settings: SettingsDep,
    principal: PrincipalDep,
    service: ServiceDep,
    format: Annotated[
        Literal["auto", "native", "openai", "otel", "openinference"] | None,
        Query(description="For a bare trace body: its format (the envelope's `format` otherwise)."),
    ] = None,
    session: Annotated[
        str | None,
        Query(min_length=1, max_length=200, description="For a bare trace body: `options.session`."),
    ] = None,
) -> Response:
    """Import the trace (native, OpenAI messages, OTLP/JSON or span list; auto-detected), run the
    detectors, fuse their findings and recommend the first repair on the primary failure's ladder.

    Body: `DiagnoseRequest` — `{"trace": …, "format": "auto", "options": {…}}` — or the bare trace
    (any body without a `trace` key), including OpenTelemetry's file-exporter JSON Lines (one
    export batch a line, merged by trace id). Spans group into one run by `session.id` /
    `gen_ai.conversation.id`, or by `options.session`; the spans of several traces that name no
    session are one run (in time order), and a warning says so.
    """
    raw = await request.body()
    heavy: HeavyLane = request.app.state.heavy
    flood: FloodLane = request.app.state.flood_lane
    # A large body, or a tenant over its limits (serve/fairshare.py): served whole by a helper process
    lane = heavy if heavy.wants(len(raw)) else flood.lane if flood.wants(principal.tenant) else None
    if lane is not None:
        content = await lane.diagnose(principal.tenant, raw, format, session)
        return Response(content=content, media_type="application/json")
    async with request.app.state.gate.slot(principal.tenant):  # CPU work, shared fairly by tenants
        # One trip to the thread pool: read the body, diagnose, store (the trace redacted, its
        # metrics fed into the agent's streams in the same transaction: alarms show in later diagnoses).
        resp = await call(_diagnose, service, principal.tenant, raw, settings.max_steps, format, session)
    return json_response(resp)


def _diagnose(
    service: TriageService, tenant: str, raw: bytes, max_steps: int, format: str | None, session: str | None
) -> DiagnosisResponse:
    body, trace = take(raw, max_steps=max_steps, format=format, options=None if session is None else {"session": session})
    return service.diagnose(tenant, trace, body.options)
