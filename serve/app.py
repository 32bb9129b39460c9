"""The FastAPI application: ``create_app(settings)``; models are loaded once, in the lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI

from model.detectors.base import TraceDetector
from model.detectors.catalog import TRACE_DETECTORS, make_detector
from model.diagnosis.diagnoser import OPT_IN_DETECTORS, Diagnoser, package_version
from model.diagnosis.ladders import Ladders
from model.diagnosis.repair_engine import RepairEngine, load_budgets
from model.scoring.runscore.model import ARTIFACT as RUNSCORE_FILE
from model.scoring.runscore.model import RunScorer
from serve.auth import KeyCache, warn_auth_off
from serve.body import install_openapi_schemas
from serve.errors import install_error_handlers
from serve.heavy import HeavyLane
from serve.limits import BodySizeLimit
from serve.ratelimit import RATE_LIMITED_RESPONSES, FairGate, RateLimiter, RateLimitMiddleware, rate_limit
from serve.redaction import Redactor
from serve.routers import (
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
from serve.services.agent_models import build_models
from serve.services.metrics import LatencyMiddleware, Metrics
from serve.services.otel_export import EvaluationExporter, parse_headers
from serve.services.triage import TriageService
from serve.settings import Settings, get_settings
from serve.store import open_store
from serve.supervise import watch_master

log = logging.getLogger("triage.serve")


def load_classifier(settings: Settings) -> TraceDetector | None:
    """The classifier detector, when enabled and its artefact is present; else ``None`` (rules only)."""
    if not settings.classifier or "classifier" not in TRACE_DETECTORS:
        return None
    params: dict[str, Any] = {"threads": settings.ort_threads}
    if settings.model_path is not None:
        params["path"] = settings.model_path
    det = make_detector("classifier", **params)
    available = getattr(det, "available", None)
    if callable(available) and not available():
        log.warning("classifier artefact not found; serving with rules only")
        return None
    load = getattr(det, "load", None)
    if callable(load):
        load()
    return det


def build_diagnoser(settings: Settings) -> tuple[Diagnoser, dict[str, Any]]:
    """The detectors and policy the app serves with, and its readiness checks."""
    detectors: list[TraceDetector] = [
        make_detector(n) for n in sorted(TRACE_DETECTORS) if n not in OPT_IN_DETECTORS
    ]
    classifier = load_classifier(settings)
    if classifier is not None:
        detectors.append(classifier)
    runscorer = load_runscorer(settings)
    diagnoser = Diagnoser(
        detectors, ladders=Ladders.load(settings.policy_path), max_steps=settings.max_steps, runscorer=runscorer
    )
    readiness: dict[str, Any] = {"rules": True}
    if settings.classifier:
        readiness["classifier"] = classifier is not None
    if settings.runscore:
        readiness["runscore"] = runscorer is not None
    return diagnoser, readiness


def load_runscorer(settings: Settings) -> RunScorer | None:
    """The run scorer, when enabled and ``runscore.json`` is in the model folder; else ``None``."""
    if not settings.runscore:
        return None
    path = (settings.model_path / RUNSCORE_FILE.name) if settings.model_path is not None else RUNSCORE_FILE
    if not path.is_file():
        log.warning("run scorer %s not found; serving without failure_probability", path)
        return None
    return RunScorer.load(path)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app. ``settings`` default: :func:`get_settings` (environment, ``TRIAGE_`` prefix)."""
    settings = settings or get_settings()

    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        watch_master()  # a worker of `triage serve --workers N` stops when its master dies
        app.state.diagnoser, app.state.readiness = build_diagnoser(settings)
        # The failure-history store, migrated to head; the stateful service on top of it.
        service = build_service(settings, app.state.diagnoser)
        app.state.store = service.store
        app.state.service = service
        app.state.auth_enabled = settings.auth == "on"
        app.state.key_cache = KeyCache(settings.auth_cache_s)
        app.state.rate_limiter = service.limiter
        app.state.heavy = HeavyLane(settings)
        app.state.gate = FairGate(settings.cpu_slots)
        metrics.attach_limiter(service.limiter)
        metrics.attach_store(service.store, canary_percent=settings.repair_canary_percent)
        metrics.attach_models(service.models)
        service.models.start()  # follow promotions / rollbacks of the tenants this worker serves
        if not app.state.auth_enabled:
            warn_auth_off()
        log.info("store: %s", service.store.engine.url.render_as_string(hide_password=True))
        retention = asyncio.create_task(_retention_loop(service, settings)) if settings.retention_days else None
        try:
            yield
        finally:
            service.models.stop()
            if retention is not None:
                retention.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await retention
            if service.exporter is not None:
                service.exporter.close()
            app.state.heavy.close()
            service.store.dispose()

    app = FastAPI(
        title="agent-triage",
        version=package_version(),
        summary="Diagnose LLM-agent failures while they run, and recommend how to recover.",
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc: the offline pages of serve/routers/ui_docs.py
        redoc_url=None,
    )
    app.dependency_overrides[get_settings] = lambda: settings
    app.state.metrics = metrics
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(RateLimitMiddleware)  # outside the size limit: refusals come first
    app.add_middleware(LatencyMiddleware, metrics=metrics)
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
    app.include_router(metrics_router.router)
    app.include_router(otlp.router, dependencies=limited, responses=RATE_LIMITED_RESPONSES)
    install_ui(app, settings)
    return app


def build_service(settings: Settings, diagnoser: Diagnoser) -> TriageService:
    """The stateful service: store (migrated), repair engine with budgets, redaction."""
    store = open_store(settings)
    engine = RepairEngine(diagnoser.ladders, load_budgets(settings.policy_path))
    redactor = Redactor.from_names(settings.redact.split(","), mode=settings.redact_mode, salt=settings.redact_salt)
    exporter = None
    if settings.eval_export_endpoint:
        exporter = EvaluationExporter(settings.eval_export_endpoint, headers=parse_headers(settings.eval_export_headers),
                                      timeout_s=settings.eval_export_timeout_s)
    return TriageService(
        store,
        diagnoser,
        engine,
        redactor,
        exporter=exporter,
        max_steps=settings.max_steps,
        session_exclude=[n.strip() for n in settings.session_detectors_exclude.split(",") if n.strip()],
        stream_detector=settings.stream_detector,
        stream_autofeed=[n.strip() for n in settings.stream_autofeed.split(",") if n.strip()],
        relative_min_runs=settings.runscore_relative_min_runs,
        limiter=RateLimiter.from_settings(settings),
        session_window=settings.session_window_steps,
        canary_percent=settings.repair_canary_percent,
        models=build_models(settings, store),
        recentre_ttl_s=settings.zero_shot_recentre_ttl_s,
    )


async def _retention_loop(service: TriageService, settings: Settings) -> None:
    """Retention: purge history older than ``retention_days`` at start-up, then hourly."""
    from datetime import timedelta

    assert settings.retention_days is not None
    ttl = timedelta(days=settings.retention_days)
    while True:
        try:
            await asyncio.to_thread(service.purge, ttl)
        except Exception:  # never let retention take the service down; say so
            log.exception("retention purge failed")
        await asyncio.sleep(3600)


__all__ = ["build_diagnoser", "build_service", "create_app", "load_classifier", "load_runscorer"]
