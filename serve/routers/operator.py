"""Operator-only calls: ``POST /v1/operator/models/promote`` and ``…/rollback`` — the code of
``triage model promote`` / ``rollback`` (:func:`serve.services.retrain.promote_version`,
:func:`serve.services.retrain.rollback_version`) for one agent's model (body field ``agent``), on the tenant
the operator names in ``X-Triage-Tenant`` (else the key's own)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from model.core.agents import MAX_AGENT_LENGTH
from model.core.errors import InputError
from model.scoring.agent_registry import POOLED, ZERO_SHOT, Registry
from serve.auth import OperatorDep
from serve.body import body_openapi, parse_body
from serve.deps import SettingsDep
from serve.routers._common import CONFLICT, ERRORS, call
from serve.store import Store

router = APIRouter(prefix="/v1/operator", tags=["operator"])


#: An agent's name as runs resolve to it (model/core/agents.py): no control character, no outer blank.
AgentName = Annotated[str, StringConstraints(min_length=1, max_length=MAX_AGENT_LENGTH,
                                             pattern=r"^[^\x00-\x20\x7f]([^\x00-\x1f\x7f]*[^\x00-\x20\x7f])?$")]
_AGENT_HELP = (f"The agent whose model this acts on (the run's agent, `triage model list` shows them; "
               f"`{POOLED}`: the tenant's pooled model).")


class RollbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: AgentName = Field(description=_AGENT_HELP)


class PromoteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: AgentName = Field(description=_AGENT_HELP)
    version: Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._+\-]+$")] = Field(
        description="A version `triage model list` shows (or the shipped model's name).")


class ActivationOut(BaseModel):
    agent: str | None = Field(description="Its agent; null: a tenant-wide run scorer's (before agent models).")
    version: str
    activated_at: datetime
    actor: str
    action: Literal["promote", "rollback"]


class ModelActionOut(BaseModel):
    tenant: str
    agent: str
    action: Literal["promote", "rollback"]
    active: str = Field(description=f"The version the tenant serves for the agent from now on (`{ZERO_SHOT}`: no "
                        "agent model, the shipped zero-shot scorer).")
    history: list[ActivationOut] = Field(description="The agent's activations, newest first.")


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
async def promote(request: Request, principal: OperatorDep, settings: SettingsDep) -> ModelActionOut:
    """Load and smoke-check the agent's version, then serve it for the agent (workers swap it in within
    `TRIAGE_MODEL_POLL_S`); 422 naming `agent` when it is missing or malformed, `version` when the agent's
    registry has no such version or it fails the check."""
    from serve.services.retrain import promote_version

    body = await parse_body(request, PromoteRequest)
    store: Store = request.app.state.store
    actor = f"key:{principal.key_id}" if principal.key_id else "api"
    await call(promote_version, store, _registry(settings), principal.tenant, body.agent, body.version, actor=actor)
    return await call(_answer, store, principal.tenant, body.agent, "promote", body.version)


@router.post(
    "/models/rollback",
    response_model=ModelActionOut,
    summary="Roll back to the previous model version (operators)",
    responses={**ERRORS, **CONFLICT},
    openapi_extra=body_openapi(RollbackRequest, {"rollback": {"summary": "Roll an agent's model back",
                                                              "value": {"agent": "billing-bot"}}}),
)
async def rollback(request: Request, principal: OperatorDep, settings: SettingsDep) -> ModelActionOut:
    """Serve the agent's version active before the current one (promotions stack, rollbacks pop; past
    the first promotion: zero-shot); 422 naming `agent` when it is missing or malformed; 409 when the
    agent is answered zero-shot and there is nothing to roll back."""
    from serve.services.retrain import rollback_version

    body = await parse_body(request, RollbackRequest)
    store: Store = request.app.state.store
    actor = f"key:{principal.key_id}" if principal.key_id else "api"
    try:
        target = await call(rollback_version, store, _registry(settings), principal.tenant, body.agent, actor=actor)
    except InputError as exc:
        if exc.path != "agent":
            raise
        raise HTTPException(status_code=409, detail=[{"loc": ["body", "agent"], "msg": exc.message,
                                                      "type": "conflict"}]) from None
    return await call(_answer, store, principal.tenant, body.agent, "rollback", target or ZERO_SHOT)


def _answer(store: Store, tenant: str, agent: str, action: Literal["promote", "rollback"],
            active: str) -> ModelActionOut:
    history = [ActivationOut.model_validate(h) for h in store.model_history(tenant, agent)]
    return ModelActionOut(tenant=tenant, agent=agent, action=action, active=active, history=history)
