"""The services of one worker, built together: :class:`TriageService` holds one of each and answers
for them where a caller needs a single object (the diagnose route, the console, the heavy lane's
helper process, the offline tools). Routes that need one resource take its service
(:mod:`serve.deps`): the work is done there.

=================  ===========================================  ====================================
service            module                                       what
=================  ===========================================  ====================================
``diagnoses``      :mod:`serve.services.diagnoses`              the pipeline; ``POST /v1/diagnose``
``sessions``       :mod:`serve.services.sessions`               appends (steps, OTLP spans), reads
``outcomes``       :mod:`serve.services.outcomes`               ``POST /v1/outcomes``
``history``        :mod:`serve.services.history`                stored traces and their labels
``streams``        :mod:`serve.services.streams`                observations, change points, autofeed
``models``         :mod:`serve.services.agent_models`           each (tenant, agent)'s agent model
``agents``         :mod:`serve.services.agents`                 which agent a run is; rename, merge, split
``activations``    :mod:`serve.services.activations`            promote, roll back, each agent's model
``patterns``       :mod:`serve.services.patterns`               ``GET /v1/patterns``
=================  ===========================================  ====================================

Each service is handed the per-resource stores it uses (:class:`serve.store.Stores`, opened by the
wiring: :func:`serve.wiring.build_service`); the composed writes of a diagnosis, a session step and
an outcome run in one transaction of the stores' shared database.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from model.core.findings import DiagnosisResponse
from model.core.options import DiagnoseOptions
from model.core.schema import Trace
from model.diagnosis.diagnoser import Diagnoser
from model.scoring.agent_registry import Registry
from model.scoring.runscore.model import RunScorer
from serve.ratelimit import RateLimiter
from serve.redaction import Redactor
from serve.schemas import (
    AppendStepsRequest,
    ChangepointsResponse,
    LabelRequest,
    LabelResponse,
    ObservationsRequest,
    ObservationsResponse,
    OutcomeRequest,
    SessionStepResponse,
    TraceDetail,
    UndoLabelRequest,
    UndoLabelResponse,
)
from serve.services.activations import ModelActivations
from serve.services.agent_models import AgentModels
from serve.services.agents import Agents
from serve.services.diagnoses import Diagnoses
from serve.services.history import History
from serve.services.otel_export import EvaluationExporter
from serve.services.outcomes import Outcome, Outcomes
from serve.services.patterns import Patterns
from serve.services.sessions import Sessions
from serve.services.streams import Streams
from serve.store import Stores


class TriageService:
    """One worker's services over one database's stores (built once, in the lifespan:
    :func:`serve.wiring.build_service`).

    Parameters
    ----------
    stores, diagnoser, redactor:
        The parts: each service gets the stores of ``stores`` it uses. ``session_exclude`` names detectors that make no sense on a run still going
        (``incomplete``: the run has not ended yet).
    """

    def __init__(
        self,
        stores: Stores,
        diagnoser: Diagnoser,
        redactor: Redactor,
        *,
        max_steps: int = 5000,
        session_exclude: Sequence[str] = ("incomplete",),
        stream_detector: str = "cusum",
        stream_autofeed: Sequence[str] = (),
        alarm_cache_s: float = 1.0,
        stream_feed_s: float = 0.0,
        patterns_max_stale_s: float = 0.0,
        relative_min_runs: int = 50,
        exporter: EvaluationExporter | None = None,
        limiter: RateLimiter | None = None,
        session_window: int = 64,
        canary_percent: float = 100.0,
        models: AgentModels | None = None,
        recentre_ttl_s: float = 60.0,
        registry: Registry | None = None,
    ) -> None:
        #: The stores, for the process's lifecycle (``stores.db.dispose()``) and the callers still to
        #: be given a service of their own (the console's routers: serve/routers/ui*.py, serve/ui/data.py).
        self.stores = stores
        self.streams = Streams(stores.streams, diagnoser, detector=stream_detector, autofeed=stream_autofeed,
                               alarm_ttl_s=alarm_cache_s, feed_s=stream_feed_s)
        if stream_feed_s > 0:  # a diagnosis's count changes wait in the count feed too, for the same feeder
            stores.db.defer_counts = True
            stores.db.on_counts_deferred = _weakly(self.streams.wake)
        self.agents = Agents(stores.agents, registry, apply_feed=self.streams.apply_waiting_in)
        self.diagnoses = Diagnoses(
            stores.sessions, stores.traces, stores.labels, stores.agents, stores.streams,
            diagnoser, redactor, self.streams, relative_min_runs=relative_min_runs,
            exporter=exporter, limiter=limiter, canary_percent=canary_percent, models=models,
            recentre_ttl_s=recentre_ttl_s, agents=self.agents, encoding_store=stores.encodings,
        )
        self.sessions = Sessions(self.diagnoses, stores.sessions, stores.traces, stores.agents, max_steps=max_steps,
                                 session_exclude=session_exclude, window=session_window)
        self.outcomes = Outcomes(self.diagnoses, stores.sessions, stores.traces)
        self.history = History(stores.traces, stores.labels, redactor, self.diagnoses)
        self.activations = ModelActivations(stores.activations)
        self.patterns = Patterns(stores.reports, max_stale_s=patterns_max_stale_s)

    @property
    def diagnoser(self) -> Diagnoser:
        return self.diagnoses.diagnoser

    @property
    def models(self) -> AgentModels:
        return self.diagnoses.models

    @property
    def limiter(self) -> RateLimiter | None:
        return self.diagnoses.limiter

    @property
    def exporter(self) -> EvaluationExporter | None:
        return self.diagnoses.exporter

    def store_ready(self) -> bool:
        """True when the database answers a trivial query (``/readyz``)."""
        return self.stores.db.ping()

    def close(self) -> None:
        """Apply the streams' waiting feed, stop the patterns' helper process, then release the database's
        connections (the lifespan's end, a CLI command's)."""
        self.streams.close()
        self.patterns.close()
        self.stores.limits.close()
        self.stores.db.dispose()

    def model_version(self, tenant: str) -> str:
        return self.diagnoses.model_version(tenant)

    def detector_versions(self) -> dict[str, str]:
        return self.diagnoses.detector_versions()

    # -- what callers holding the one object use -------------------------------------------------
    def diagnose(
        self, tenant: str, trace: Trace, options: DiagnoseOptions
    ) -> DiagnosisResponse:
        """:meth:`serve.services.diagnoses.Diagnoses.diagnose`."""
        return self.diagnoses.diagnose(tenant, trace, options)

    def relative_threshold(self, tenant: str, agent: str, scorer: RunScorer | None) -> float | None:
        """:meth:`serve.services.diagnoses.Diagnoses.relative_threshold`."""
        return self.diagnoses.relative_threshold(tenant, agent, scorer)

    def append_steps(self, tenant: str, session_id: str, req: AppendStepsRequest) -> SessionStepResponse:
        """:meth:`serve.services.sessions.Sessions.append_steps`."""
        return self.sessions.append_steps(tenant, session_id, req)

    def append_spans(self, tenant: str, document: dict[str, Any]) -> dict[str, SessionStepResponse | None]:
        """:meth:`serve.services.sessions.Sessions.append_spans`."""
        return self.sessions.append_spans(tenant, document)

    def report_outcome(self, tenant: str, req: OutcomeRequest) -> Outcome:
        """:meth:`serve.services.outcomes.Outcomes.report_outcome`."""
        return self.outcomes.report_outcome(tenant, req)

    def get_trace(self, tenant: str, trace_id: str) -> TraceDetail:
        """:meth:`serve.services.history.History.get_trace`."""
        return self.history.get_trace(tenant, trace_id)

    def add_label(self, tenant: str, trace_id: str, req: LabelRequest, *, key_id: str | None = None) -> LabelResponse:
        """:meth:`serve.services.history.History.add_label`."""
        return self.history.add_label(tenant, trace_id, req, key_id=key_id)

    def undo_label(self, tenant: str, req: UndoLabelRequest, *, key_id: str | None = None) -> UndoLabelResponse:
        """:meth:`serve.services.history.History.undo_label`."""
        return self.history.undo_label(tenant, req, key_id=key_id)

    def stored_trace(self, tenant: str, trace_id: str) -> Trace:
        """:meth:`serve.services.history.History.stored_trace`."""
        return self.history.stored_trace(tenant, trace_id)

    def purge(self, retention: timedelta | None = None) -> int:
        """:meth:`serve.services.history.History.purge`."""
        return self.history.purge(retention)

    def backfill(self) -> int:
        """:meth:`serve.services.history.History.backfill`."""
        return self.history.backfill()

    def observe(self, tenant: str, stream: str, req: ObservationsRequest) -> ObservationsResponse:
        """:meth:`serve.services.streams.Streams.observe`."""
        return self.streams.observe(tenant, stream, req)

    def changepoints(
        self, tenant: str, stream: str, agent: str | None, method: str | None, *, task_type: str = ""
    ) -> ChangepointsResponse:
        """:meth:`serve.services.streams.Streams.changepoints`."""
        return self.streams.changepoints(tenant, stream, agent, method, task_type=task_type)


def _weakly(method: Callable[[], None]) -> Callable[[], None]:
    """``method`` (a bound method) called through a weak reference: a no-op once its object is gone (the
    store's database outlives a service dropped without ``close()``, whose feeder then ends)."""
    ref = weakref.WeakMethod(method)

    def call() -> None:
        m = ref()
        if m is not None:
            m()

    return call


__all__ = ["TriageService"]
