"""Operator-only calls: ``POST /v1/operator/models/promote`` and ``…/rollback`` — the code of
``triage model promote`` / ``rollback`` (:class:`serve.services.activations.ModelActivations`) for one
agent's model (body field ``agent``), on the tenant the operator names in ``X-Triage-Tenant`` (else
the key's own)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request

from model.core.errors import InputError
from model.scoring.agent_registry import Registry
from serve.auth import OperatorDep
from serve.body import body_openapi, parse_body
from serve.deps import ActivationsDep, SettingsDep
from serve.routers._common import CONFLICT, ERRORS, call
from serve.schemas import ModelActionOut, PromoteRequest, RollbackRequest

router = APIRouter(prefix="/v1/operator", tags=["operator"])


def _registry(settings: SettingsDep) -> Registry:
    return Registry(settings.resolved_model_registry)


@router.post(
    "/models/promote",
    response_model=ModelActionOut,
    summary="Promote a model version (operators)",
    responses=ERRORS,
    openapi_extra=body_openapi(PromoteRequest, {"promote": {"summary": "Serve a registered version",
                                                            "value": {"agent": "billing-bot",
                                                                      "version": "v3-20261201T120000Z"}}}),
)
async def promote(request: Request, principal: OperatorDep, settings: SettingsDep,
                  activations: ActivationsDep) -> ModelActionOut:
    """Load and smoke-check the agent's version, then serve it for the agent (workers swap it in within
    `TRIAGE_MODEL_POLL_S`); 422 naming `agent` when it is missing or malformed, `version` when the agent's
    registry has no such version or it fails the check."""
    body = await parse_body(request, PromoteRequest)
    actor = f"key:{principal.key_id}" if principal.key_id else "api"
    return await call(activations.promote, _registry(settings), principal.tenant, body.agent, body.version,
                      actor=actor)


@router.post(
    "/models/rollback",
    response_model=ModelActionOut,
    summary="Roll back to the previous model version (operators)",
    responses={**ERRORS, **CONFLICT},
    openapi_extra=body_openapi(RollbackRequest, {"rollback": {"summary": "Roll an agent's model back",
                                                              "value": {"agent": "billing-bot"}}}),
)
async def rollback(request: Request, principal: OperatorDep, settings: SettingsDep,
                   activations: ActivationsDep) -> ModelActionOut:
    """Serve the agent's version active before the current one (promotions stack, rollbacks pop; past
    the first promotion: zero-shot); 422 naming `agent` when it is missing or malformed; 409 when the
    agent is answered zero-shot and there is nothing to roll back."""
    body = await parse_body(request, RollbackRequest)
    actor = f"key:{principal.key_id}" if principal.key_id else "api"
    try:
        return await call(activations.rollback, _registry(settings), principal.tenant, body.agent, actor=actor)
    except InputError as exc:
        if exc.path != "agent":
            raise
        raise HTTPException(status_code=409, detail=[{"loc": ["body", "agent"], "msg": exc.message,
                                                      "type": "conflict"}]) from None
