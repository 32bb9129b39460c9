"""The FastAPI application: ``create_app(settings)``; models are loaded once, in the lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from model.core.errors import TriageError
from model.diagnosis.diagnoser import package_version
from serve.auth import KeyCache, warn_auth_off
from serve.body import install_openapi_schemas
from serve.direct import shortcut
from serve.error_handlers import install_error_handlers
from serve.fairshare import FairShareMiddleware, FloodLane, queue_wait_histogram
from serve.heavy import HeavyLane
from serve.limits import BodySizeLimit
from serve.ratelimit import RATE_LIMITED_RESPONSES, FairGate, RateLimitMiddleware, compile_routes, rate_limit
from serve.routers import (
    agents,
    diagnose,
    health,
    labels,
    operator,
    otlp,
    outcomes,
    patterns,
    sessions,
    streams,
    traces,
)
from serve.routers import metrics as metrics_router
from serve.routers.ui import install_ui
from serve.services.metrics import LatencyMiddleware, Metrics
from serve.services.triage import TriageService
from serve.settings import Settings, get_settings
from serve.supervise import drain_on_sigterm, pin_worker, watch_master
from serve.wiring import build_diagnoser, build_service, settle, unsettle

log = logging.getLogger("triage.serve")


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app. ``settings`` default: :func:`get_settings` (environment, ``TRIAGE_`` prefix)."""
    settings = settings or get_settings()

    metrics = Metrics()
    flood = FloodLane(HeavyLane(settings), hold_s=settings.flood_lane_s)  # its helper starts on first use

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        watch_master()  # a worker of `triage serve --workers N` stops when its master dies
        if settings.worker_cpus:  # `triage serve` found this machine's CPUs its own: one each (serve/supervise.py)
            pin_worker([int(c) for c in settings.worker_cpus.split(",")])
        app.state.diagnoser, app.state.readiness = build_diagnoser(settings)
        # The failure-history stores, migrated to head; the stateful services on top of them.
        service = build_service(settings, app.state.diagnoser)
        app.state.service = service
        app.state.key_store = service.stores.keys  # the API keys serve.auth checks
        app.state.auth_enabled = settings.auth == "on"
        app.state.key_cache = KeyCache(settings.auth_cache_s)
        app.state.rate_limiter = service.limiter
        app.state.heavy = HeavyLane(settings)
        app.state.flood_lane = flood
        app.state.gate = FairGate(settings.cpu_slots)
        metrics.attach_limiter(service.limiter)
        metrics.attach_store(service.stores.reports, canary_percent=settings.repair_canary_percent,
                             canary_window=settings.canary_window)
        metrics.attach_models(service.models)
        app.state.draining = False
        drain_on_sigterm(app.state, settings.drain_s)  # SIGTERM: /readyz 503 for TRIAGE_DRAIN_S, then stop
        service.models.start()  # follow promotions / rollbacks of the tenants this worker serves
        if not app.state.auth_enabled:
            warn_auth_off()
        log.info("store: %s", service.stores.db.engine.url.render_as_string(hide_password=True))
        retention = asyncio.create_task(_upkeep_loop(service, settings))
        compile_routes(app)  # the 429s' route labels (the OpenAPI schema), built before the first request
        settle()  # what the start built leaves the garbage collector's full collections
        try:
            yield
        finally:
            unsettle()
            service.models.stop()
            if retention is not None:
                retention.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await retention
            if service.exporter is not None:
                service.exporter.close()
            app.state.heavy.close()
            if flood.lane is not None:
                flood.lane.close()
            service.close()

    app = FastAPI(
        title="agent-triage",
        version=package_version(),
        summary="Diagnose LLM-agent failures while they run, and recommend how to recover.",
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc: the offline pages of serve/routers/ui_docs.py
        redoc_url=None,
    )
    app.state.settings = settings  # what SettingsDep gives routes (serve/deps.py)
    app.state.metrics = metrics
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(RateLimitMiddleware)  # outside the size limit: refusals come first
    app.add_middleware(LatencyMiddleware, metrics=metrics)
    app.add_middleware(  # outermost: the receipt stamp, the per-tenant in-flight cap (serve/fairshare.py)
        FairShareMiddleware, histogram=queue_wait_histogram(metrics.registry), flood=flood,
        inflight=settings.tenant_inflight,
    )
    install_error_handlers(app)
    install_openapi_schemas(app)
    limited = [Depends(rate_limit)]
    app.include_router(health.router)
    app.include_router(diagnose.router, dependencies=limited, responses=RATE_LIMITED_RESPONSES)
    app.include_router(sessions.router, dependencies=limited, responses=RATE_LIMITED_RESPONSES)
    app.include_router(outcomes.router, dependencies=limited, responses=RATE_LIMITED_RESPONSES)
    app.include_router(traces.router, dependencies=limited, responses=RATE_LIMITED_RESPONSES)
    app.include_router(streams.router, dependencies=limited, responses=RATE_LIMITED_RESPONSES)
    app.include_router(labels.router, dependencies=limited, responses=RATE_LIMITED_RESPONSES)
    app.include_router(patterns.router, dependencies=limited, responses=RATE_LIMITED_RESPONSES)
    app.include_router(operator.router, dependencies=limited, responses=RATE_LIMITED_RESPONSES)
    app.include_router(agents.router, dependencies=limited, responses=RATE_LIMITED_RESPONSES)
    app.include_router(metrics_router.router)
    app.include_router(otlp.router, dependencies=limited, responses=RATE_LIMITED_RESPONSES)
    install_ui(app, settings)
    shortcut(app)  # the diagnose and sessions routes ahead of FastAPI's included-router walk (serve/direct.py)
    return app


async def _upkeep_loop(service: TriageService, settings: Settings) -> None:
    """The store's upkeep (serve/store/upkeep.py): the verdict backfill of revision 0015 at start-up,
    then the streams' feed left by a stopped worker and retention (each tenant's ``retention_days``, else
    ``retention_days``) at start-up and hourly.
    Every worker runs the loop; each piece runs in the worker that holds the store's ``upkeep`` lock
    (:meth:`serve.store.base.Database.alone`), the others skip it: N workers do it once."""
    from datetime import timedelta

    ttl = timedelta(days=settings.retention_days) if settings.retention_days else None

    def alone(work: Callable[[], object]) -> None:
        with service.stores.db.alone("upkeep") as mine:
            if mine:
                work()

    try:
        await asyncio.to_thread(alone, service.backfill)
    except TriageError:  # the store failed: say so (it resumes at the next start, or `triage store backfill`)
        log.exception("verdict backfill failed")
    while True:
        try:  # runs' values left in the streams' feed by a worker that stopped before applying them
            await asyncio.to_thread(service.streams.drain_waiting)
        except Exception:
            log.exception("stream feed: applying the waiting values failed")
        try:
            await asyncio.to_thread(alone, lambda: service.purge(ttl))
        except Exception:  # never let retention take the service down; say so
            log.exception("retention purge failed")
        await asyncio.sleep(3600)


__all__ = ["create_app"]
