"""``POST /v1/outcomes``: what happened when the agent carried out a recommendation."""

from __future__ import annotations

from fastapi import APIRouter, Request

from serve.auth import PrincipalDep
from serve.body import body_openapi, parse_body
from serve.deps import OutcomesDep
from serve.examples_service import OUTCOME_EXAMPLES
from serve.routers._common import CONFLICT, ERRORS, NOT_FOUND, TOO_LARGE, call
from serve.schemas import OutcomeRequest, OutcomeResponse

router = APIRouter(prefix="/v1", tags=["outcomes"])


@router.post(
    "/outcomes",
    response_model=OutcomeResponse,
    summary="Report the outcome of a recommendation",
    responses={**ERRORS, **NOT_FOUND, **TOO_LARGE, **CONFLICT},
    openapi_extra=body_openapi(OutcomeRequest, OUTCOME_EXAMPLES),
)
async def report_outcome(
    request: Request,
    principal: PrincipalDep,
    outcomes: OutcomesDep,
) -> OutcomeResponse:
    """A failed outcome moves that failure one rung up its ladder (or to the next attempt of a
    retry) and returns the recommendation to carry out now in `next`; a spent budget gives
    `human_handoff`. Outcomes are idempotent per recommendation: the same outcome again is
    acknowledged (`recorded: false`) and not stored twice; a contradicting one, or a success for a
    failure already handed off, is a 409. Outcomes label the
    failure history (see `triage datasets export --from-store`).
    """
    body = await parse_body(request, OutcomeRequest)
    done = await call(outcomes.report_outcome, principal.tenant, body)
    versions = outcomes.diagnoses
    return OutcomeResponse(
        model_version=versions.model_version(principal.tenant),
        detector_versions=versions.detector_versions(),
        recommendation_id=done.recommendation_id,
        recorded=done.recorded,
        note=done.note,
        escalated=done.escalated,
        next=done.next,
        session_id=done.session_id,
    )
