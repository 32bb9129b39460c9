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
    summary="Ready: models loaded, store answering, not draining",
    responses={503: {"description": "Not ready: what is missing is listed"}},
)
async def readyz(request: Request) -> JSONResponse:
    """Ready when the detectors (and the classifier, when configured) are loaded, the store answers, and
    the worker is not draining (after SIGTERM, for ``TRIAGE_DRAIN_S``: serve/supervise.py). A worker
    answers nothing before its models are loaded (uvicorn accepts its connections after the lifespan's
    start), so a balancer's check of this path fails until then too."""
    state = request.app.state
    checks: dict[str, Any] = dict(getattr(state, "readiness", {}))
    checks["not_draining"] = not getattr(state, "draining", False)
    service = getattr(request.app.state, "service", None)
    if service is not None:
        checks["store"] = await run_in_threadpool(service.store_ready)
    ready = all(bool(v) for v in checks.values())
    return JSONResponse(status_code=200 if ready else 503, content={"ready": ready, "checks": checks})
