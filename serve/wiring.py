"""The app's wiring: the diagnoser and the stateful service, built from :class:`~serve.settings.Settings`.

``serve.app`` builds them in its lifespan; the heavy lane's helper process, the CLI, the offline
tools, the benchmarks and the tests build them here too, without importing the app.
"""

from __future__ import annotations

import gc
import logging
from typing import Any

from model.detectors.base import TraceDetector
from model.detectors.catalog import TRACE_DETECTORS, default_detectors, make_detector
from model.diagnosis.diagnoser import Diagnoser
from model.diagnosis.repair_engine import RepairEngine
from model.scoring.agent_registry import Registry
from model.scoring.runscore.model import ARTIFACT as RUNSCORE_FILE
from model.scoring.runscore.model import RunScorer
from serve.ratelimit import RateLimiter
from serve.redaction import Redactor
from serve.services.agent_models import build_models
from serve.services.otel_export import EvaluationExporter, parse_headers
from serve.services.triage import TriageService
from serve.settings import Settings
from serve.store import Stores, open_stores

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
    detectors: list[TraceDetector] = default_detectors()
    classifier = load_classifier(settings)
    if classifier is not None:
        detectors.append(classifier)
    runscorer = load_runscorer(settings)
    diagnoser = Diagnoser(
        detectors, engine=RepairEngine.load(settings.policy_path), max_steps=settings.max_steps, runscorer=runscorer
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


def build_service(settings: Settings, diagnoser: Diagnoser, stores: Stores | None = None) -> TriageService:
    """The stateful services over ``stores`` (default: :func:`~serve.store.open_stores`, migrated),
    redaction, the agents' models over ``diagnoser`` (its repair engine carries the policy's ladders
    and budgets)."""
    stores = stores or open_stores(settings)
    redactor = Redactor.from_names(settings.redact.split(","), mode=settings.redact_mode, salt=settings.redact_salt)
    exporter = None
    if settings.eval_export_endpoint:
        exporter = EvaluationExporter(settings.eval_export_endpoint, headers=parse_headers(settings.eval_export_headers),
                                      timeout_s=settings.eval_export_timeout_s)
    return TriageService(
        stores,
        diagnoser,
        redactor,
        exporter=exporter,
        max_steps=settings.max_steps,
        session_exclude=[n.strip() for n in settings.session_detectors_exclude.split(",") if n.strip()],
        stream_detector=settings.stream_detector,
        alarm_cache_s=settings.alarm_cache_s,
        stream_feed_s=settings.stream_feed_s,
        patterns_max_stale_s=settings.patterns_max_stale_s,
        stream_autofeed=[n.strip() for n in settings.stream_autofeed.split(",") if n.strip()],
        relative_min_runs=settings.runscore_relative_min_runs,
        limiter=RateLimiter.from_settings(settings, stores.limits),
        session_window=settings.session_window_steps,
        canary_percent=settings.repair_canary_percent,
        models=build_models(settings, stores.activations),
        recentre_ttl_s=settings.zero_shot_recentre_ttl_s,
        registry=Registry(settings.resolved_model_registry),
    )


def settle() -> None:
    """A worker's start is done: what it built and keeps (the models, the tokenizer's tables, the compiled
    statements: ~200,000 objects) leaves the garbage collector's generations. Its full collections
    otherwise walk them all every few hundred requests: 0.35-0.4 ms of CPU a diagnosis, a share of it
    inside the store's write transaction (``bench/request_path.py``). :func:`unsettle` at the worker's end."""
    gc.collect()
    gc.freeze()


def unsettle() -> None:
    """Give :func:`settle`'s objects back to the collector (a worker's end; a test's app)."""
    gc.unfreeze()


__all__ = ["build_diagnoser", "build_service", "load_classifier", "load_runscorer", "settle", "unsettle"]
