"""Liveness and readiness."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Alive")
async def healthz() -> dict[str, str]:
    """The process answers."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Ready: model loaded",
    responses={503: {"description": "Not ready: what is missing is listed"}},
)
async def readyz(request: Request) -> JSONResponse:
    """Ready when the detectors (and the classifier, when configured) are loaded and the store answers."""
    checks: dict[str, Any] = dict(getattr(request.app.state, "readiness", {}))
    service = getattr(request.app.state, "service", None)
    if service is not None:
        checks["store"] = await run_in_threadpool(service.store_ready)
    ready = all(bool(v) for v in checks.values())
    return JSONResponse(status_code=200 if ready else 503, content={"ready": ready, "checks": checks})
