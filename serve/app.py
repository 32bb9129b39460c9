"""The FastAPI application: ``create_app(settings)``; models are loaded once, in the lifespan."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from model.detectors import TRACE_DETECTORS, make_detector
from model.detectors.base import TraceDetector
from model.diagnosis import OPT_IN_DETECTORS, Diagnoser, package_version
from model.repair import Policy
from serve.body import install_openapi_schemas
from serve.errors import install_error_handlers
from serve.limits import BodySizeLimit
from serve.routers import diagnose, health
from serve.settings import Settings, get_settings

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
    diagnoser = Diagnoser(
        detectors, policy=Policy.load(settings.policy_path), max_steps=settings.max_steps
    )
    readiness: dict[str, Any] = {"rules": True}
    if settings.classifier:
        readiness["classifier"] = classifier is not None
    return diagnoser, readiness


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app. ``settings`` default: :func:`get_settings` (environment, ``TRIAGE_`` prefix)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.diagnoser, app.state.readiness = build_diagnoser(settings)
        yield

    app = FastAPI(
        title="agent-triage",
        version=package_version(),
        summary="Diagnose LLM-agent failures while they run, and recommend how to recover.",
        lifespan=lifespan,
    )
    app.dependency_overrides[get_settings] = lambda: settings
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    install_error_handlers(app)
    install_openapi_schemas(app)
    app.include_router(health.router)
    app.include_router(diagnose.router)
    return app


__all__ = ["build_diagnoser", "create_app", "load_classifier"]
