"""The failure history: ``GET /v1/traces``, ``GET`` / ``DELETE /v1/traces/{id}``, ``GET /v1/traces/{id}/graph``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BeforeValidator

from model.core.graph import ExecutionGraph
from model.core.kinds import FailureKind
from serve.auth import PrincipalDep
from serve.body import body_openapi, parse_body
from serve.deps import HistoryDep
from serve.routers._common import ERRORS, NOT_FOUND, call
from serve.schemas import GraphOut, LabelRequest, LabelResponse, TraceDetail, TracePageOut
from serve.validation import ID_PATTERN, TEXT_PARAM_PATTERN, iso_datetime_text

router = APIRouter(prefix="/v1/traces", tags=["traces"])

TraceId = Annotated[str, Path(pattern=ID_PATTERN, description="`[A-Za-z0-9._:@-]{1,128}`")]


@router.get("", response_model=TracePageOut, summary="List stored traces", responses=ERRORS)
async def list_traces(
    principal: PrincipalDep,
    history: HistoryDep,
    kind: Annotated[FailureKind | None, Query(description="Only traces with a failure of this kind.")] = None,
    since: Annotated[
        datetime | None,
        BeforeValidator(iso_datetime_text),
        Query(description="Only traces created at or after this time (ISO 8601)."),
    ] = None,
    session: Annotated[str | None, Query(pattern=ID_PATTERN, description="Only this session's traces.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[
        str | None,
        Query(max_length=300, pattern=TEXT_PARAM_PATTERN, description="`next_cursor` of the previous page."),
    ] = None,
) -> TracePageOut:
    """Newest first, this tenant's only; page with `cursor`."""
    return await call(
        history.list_traces,
        principal.tenant,
        kind=kind,
        since=since,
        session=session,
        limit=limit,
        cursor=cursor,
    )


@router.get(
    "/{trace_id}",
    response_model=TraceDetail,
    summary="One trace with its history",
    responses={**ERRORS, **NOT_FOUND},
)
async def get_trace(trace_id: TraceId, principal: PrincipalDep, history: HistoryDep) -> TraceDetail:
    """The stored (redacted) trace, its latest diagnosis, the recommendations given and the outcomes."""
    return await call(history.get_trace, principal.tenant, trace_id)


@router.delete("/{trace_id}", status_code=204, summary="Delete a trace", responses={**ERRORS, **NOT_FOUND})
async def delete_trace(trace_id: TraceId, principal: PrincipalDep, history: HistoryDep) -> Response:
    """Delete the trace with its diagnosis, recommendations, outcomes and labels."""
    await call(history.delete_trace, principal.tenant, trace_id)
    return Response(status_code=204)


@router.get(
    "/{trace_id}/graph",
    response_model=GraphOut,
    summary="The execution graph",
    responses={**ERRORS, **NOT_FOUND},
)
async def get_graph(
    trace_id: TraceId,
    principal: PrincipalDep,
    history: HistoryDep,
    format: Annotated[Literal["json", "mermaid", "both"], Query(description="What to return.")] = "both",
) -> GraphOut:
    """Nodes are steps; edges `followed_by`, `result_of`, `retry_of`, `uses_result_of`. `mermaid` is
    text to paste into any Mermaid renderer."""
    trace = await call(history.stored_trace, principal.tenant, trace_id)
    graph = ExecutionGraph.from_trace(trace)
    return GraphOut(
        model_version=history.diagnoses.model_version(principal.tenant),
        detector_versions=history.diagnoses.detector_versions(),
        trace_id=trace_id,
        graph=graph.to_json() if format in ("json", "both") else None,
        mermaid=graph.to_mermaid() if format in ("mermaid", "both") else None,
    )


_LABEL_EXAMPLES = {
    "failed": {
        "summary": "A task checker: the run failed",
        "value": {"failed": True, "author": "tau-bench-reward", "author_type": "checker"},
    },
    "hallucination": {
        "summary": "A reviewer: the answer at step 8 is made up",
        "value": {"failed": True, "kind": "hallucination", "step": 8, "author": "reviewer@example.com"},
    },
    "healthy": {
        "summary": "A reviewer: nothing was wrong",
        "value": {"failed": False, "author": "reviewer@example.com"},
    },
}


@router.post(
    "/{trace_id}/labels",
    response_model=LabelResponse,
    summary="Label a run: failed or not, and what went wrong where",
    responses={**ERRORS, **NOT_FOUND},
    openapi_extra=body_openapi(LabelRequest, _LABEL_EXAMPLES),
)
async def add_label(
    trace_id: TraceId, request: Request, principal: PrincipalDep, history: HistoryDep
) -> LabelResponse:
    """One author's verdict on the run: `failed` (a task checker's or a reviewer's), optionally the
    failure `kind` and its `step` or `source_index`. Per author the newest label wins; a human's
    (`author_type` `human`, the default) outranks a checker's. The answer and `GET /v1/traces/{id}`
    carry the effective label; `triage datasets export --from-store` writes it as `labels.failed`,
    ahead of repair outcomes and rule votes. Without `author`, the author is the API key
    (`key:<key id>`)."""
    body = await parse_body(request, LabelRequest)
    return await call(history.add_label, principal.tenant, trace_id, body, key_id=principal.key_id)
