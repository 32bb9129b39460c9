"""``GET /metrics``: Prometheus text format (see serve/services/metrics.py for what is in it)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from serve.auth import UNAUTHORIZED_RESPONSES, CredentialsDep, get_principal
from serve.deps import SettingsDep
from serve.services.metrics import Metrics

router = APIRouter(tags=["health"])


@router.get("/metrics", summary="Prometheus metrics", response_class=Response, responses=UNAUTHORIZED_RESPONSES)
async def metrics(request: Request, settings: SettingsDep, credentials: CredentialsDep) -> Response:
    """Traces diagnosed, failures by kind, recommendations by strategy, repair success rate per
    strategy, mean time to recovery, request latency histograms.

    A tenant's key sees its own history; an operator's key (`triage keys create --operator`, or a
    key of a tenant in `TRIAGE_OPERATOR_TENANTS`) sees every
    tenant's and this worker's figures (so does anyone with `TRIAGE_METRICS_PUBLIC=true`)."""
    tenant: str | None = None
    if not settings.metrics_public:
        principal = await get_principal(request, credentials)
        operators = {t.strip() for t in settings.operator_tenants.split(",") if t.strip()}
        if principal.key_id is not None and not principal.operator and principal.tenant not in operators:
            tenant = principal.tenant
    m: Metrics = request.app.state.metrics
    body, content_type = await run_in_threadpool(m.render, tenant)
    return Response(content=body, media_type=content_type)



