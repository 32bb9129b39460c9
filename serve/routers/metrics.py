"""``GET /metrics``: Prometheus text format (see serve/metrics.py for what is in it)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from serve.metrics import Metrics

router = APIRouter(tags=["health"])


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    """Traces diagnosed, failures by kind, recommendations by strategy, repair success rate per
    strategy, mean time to recovery, request latency histograms."""
    m: Metrics = request.app.state.metrics
    body, content_type = await run_in_threadpool(m.render)
    return Response(content=body, media_type=content_type)
