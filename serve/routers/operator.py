"""Operator-only calls: ``POST /v1/operator/models/promote`` and ``…/rollback`` — the code of
``triage model promote`` / ``rollback`` (:func:`serve.retrain.promote_version`,
:func:`serve.retrain.rollback_version`), on the tenant the operator names in ``X-Triage-Tenant``
(else the key's own)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from model.errors import InputError
from model.registry import Registry
from serve.auth import OperatorDep
from serve.body import body_openapi, parse_body
from serve.deps import SettingsDep
from serve.routers._common import CONFLICT, ERRORS, call
from serve.store import Store

router = APIRouter(prefix="/v1/operator", tags=["operator"])


class PromoteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._+\-]+$")] = Field(
        description="A version `triage model list` shows (or the shipped model's name).")


class ActivationOut(BaseModel):
    version: str
    activated_at: datetime
    actor: str
    action: Literal["promote", "rollback"]


class ModelActionOut(BaseModel):
    tenant: str
    action: Literal["promote", "rollback"]
    active: str = Field(description="The version the tenant serves from now on.")
    history: list[ActivationOut] = Field(description="The tenant's activations, newest first.")


def _registry(settings: SettingsDep) -> Registry:
    return Registry(settings.resolved_model_registry)


@router.post(
    "/models/promote",
    response_model=ModelActionOut,
    summary="Promote a model version (operators)",
    responses=ERRORS,
    openapi_extra=body_openapi(PromoteRequest, {"promote": {"summary": "Serve a registered version",
                                                            "value": {"version": "v3-20261201T120000Z"}}}),
)
async def promote(request: Request, principal: OperatorDep, settings: SettingsDep) -> ModelActionOut:
    """Load and smoke-check the version, then serve it for the tenant (workers swap it in within
    `TRIAGE_MODEL_POLL_S`); 422 naming `version` when the registry has no such version or it fails the check."""
    from serve.retrain import promote_version

    body = await parse_body(request, PromoteRequest)
    store: Store = request.app.state.store
    actor = f"key:{principal.key_id}" if principal.key_id else "api"
    await call(promote_version, store, _registry(settings), principal.tenant, body.version, actor=actor)
    return await call(_answer, store, principal.tenant, "promote", body.version)


@router.post(
    "/models/rollback",
    response_model=ModelActionOut,
    summary="Roll back to the previous model version (operators)",
    responses={**ERRORS, **CONFLICT},
)
async def rollback(request: Request, principal: OperatorDep, settings: SettingsDep) -> ModelActionOut:
    """Serve the version active before the current one (promotions stack, rollbacks pop); 409 when
    the tenant serves the shipped model and there is nothing to roll back."""
    from serve.retrain import rollback_version

    store: Store = request.app.state.store
    actor = f"key:{principal.key_id}" if principal.key_id else "api"
    try:
        target = await call(rollback_version, store, _registry(settings), principal.tenant, actor=actor)
    except InputError as exc:
        if exc.path != "tenant":
            raise
        raise HTTPException(status_code=409, detail=[{"loc": ["header", "x-triage-tenant"], "msg": exc.message,
                                                      "type": "conflict"}]) from None
    return await call(_answer, store, principal.tenant, "rollback", target)


def _answer(store: Store, tenant: str, action: Literal["promote", "rollback"], active: str) -> ModelActionOut:
    history = [ActivationOut.model_validate(h) for h in store.model_history(tenant)]
    return ModelActionOut(tenant=tenant, action=action, active=active, history=history)
