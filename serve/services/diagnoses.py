"""The diagnosis pipeline, written once: redact → degradation → score (under the model lock) → lock
the repair state → canary → recommend → store → export.

:meth:`Diagnoses.diagnose` runs it on a whole trace (``POST /v1/diagnose``);
:class:`serve.services.sessions.Sessions` runs the same stages on a session's steps as they arrive.
Everything here is synchronous (SQLAlchemy, onnxruntime); routes run it in the thread pool.

Storage rules (ARCHITECTURE.md, "Sessions" and "Streams"):

- Traces are **redacted before they are diagnosed** (:mod:`serve.redaction`), so the trace, the
  diagnosis, the recommendation, the repair-policy state and the response hold no secret (evidence
  is cut from redacted text). Session steps are redacted as they arrive, so the session's trace is
  diagnosed on the same (redacted) text every time and repeats stay equal.
- Repair-policy state (:mod:`model.diagnosis.repair_engine`) lives in the ``sessions`` row. A trace sent to
  ``/v1/diagnose`` with a ``session_id`` shares that session's state; one without uses
  ``trace:<trace id>`` as its own.
- Each write runs in one transaction that locks the session row, so concurrent appends and
  outcomes for one session run one after the other, whatever worker takes them.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from model.core.findings import DiagnosisResponse, Finding, ProbabilityBasis
from model.core.kinds import Strategy
from model.core.options import DiagnoseOptions
from model.core.schema import Trace
from model.diagnosis.diagnoser import Diagnoser
from model.diagnosis.otel_events import evaluation_events
from model.diagnosis.repair_engine import RepairEngine
from model.scoring.runscore.model import RunScorer
from serve.ratelimit import FairLock, RateLimiter, utc_day
from serve.redaction import Redactor
from serve.services.agent_models import (
    AGENT_MODEL_DETECTOR,
    AgentModels,
    Recentring,
    ServedAgent,
    add_failure,
    at_risk_failure,
    score_prefixes,
)
from serve.services.agents import Agents, Resolved
from serve.services.canary import Arm, session_arm
from serve.services.otel_export import EvaluationExporter
from serve.services.streams import Streams
from serve.store.agents import AgentStore
from serve.store.labels import LabelStore
from serve.store.sessions import SessionStore
from serve.store.streams import StreamStore
from serve.store.traces import TracePrior, TraceStore
from serve.validation import check_trace_fields

#: Recent runs the relative operating point reads, and how long a worker trusts its value.
RELATIVE_WINDOW = 500
RELATIVE_TTL_S = 30.0

#: Scores a run under the model lock: ``(degradation findings, the agent's served model) → diagnosis``.
Scorer = Callable[[list[Finding], ServedAgent | None], DiagnosisResponse]


class Diagnoses:
    """Diagnoser + repair engine + store, for one process (one per worker, built in the lifespan).

    Parameters
    ----------
    session_store, trace_store, label_store, agent_store, stream_store:
        The stores it reads and writes (a diagnosis's writes are one transaction).
    diagnoser, engine, redactor, streams:
        The parts (``streams``: the degradation findings of open alarms, and the autofeed).
    exporter:
        Sends each diagnosis to the user's OTLP endpoint (``None``: not configured).
    limiter:
        Counts steps against the tenant's daily quota (``None``: no quota).
    """

    def __init__(
        self,
        session_store: SessionStore,
        trace_store: TraceStore,
        label_store: LabelStore,
        agent_store: AgentStore,
        stream_store: StreamStore,
        diagnoser: Diagnoser,
        engine: RepairEngine,
        redactor: Redactor,
        streams: Streams,
        *,
        relative_min_runs: int = 50,
        exporter: EvaluationExporter | None = None,
        limiter: RateLimiter | None = None,
        canary_percent: float = 100.0,
        models: AgentModels | None = None,
        recentre_ttl_s: float = 60.0,
        agents: Agents | None = None,
    ) -> None:
        self.session_store = session_store
        self.trace_store = trace_store
        self.label_store = label_store
        self.agent_store = agent_store
        self.stream_store = stream_store
        self.diagnoser = diagnoser
        self.engine = engine
        self.redactor = redactor
        self.streams = streams
        self.canary_percent = canary_percent
        self.exporter = exporter
        self.limiter = limiter
        self.relative_min_runs = relative_min_runs
        self._relative_cache: dict[tuple[str, str], tuple[float, float | None]] = {}
        # One model inference at a time per worker: onnxruntime already uses the cores it was given
        # (TRIAGE_ORT_THREADS); concurrent runs only oversubscribe them and grow its memory arenas.
        # Granted round-robin over tenants: one tenant's burst cannot queue ahead of the others.
        self._model_lock = FairLock()
        # Each (tenant, agent)'s agent model (the rules, the classifier and the zero-shot run scorer
        # are shared): a request takes its pair's once, at its start, and finishes on it.
        self.models = models or AgentModels()
        self.recentring = Recentring(label_store.agent_labels, ttl_s=recentre_ttl_s)
        # Which agent a run belongs to (named, or inferred and matched against the tenant's agents)
        self.agents = agents or Agents(agent_store)

    def model_version(self, tenant: str) -> str:
        """What the tenant's responses name as ``model_version`` (:mod:`serve.services.agent_models`)."""
        return self.diagnoser.model_version

    def detector_versions(self) -> dict[str, str]:
        return {name: d.version for name, d in self.diagnoser.detectors.items()}

    # -- a whole trace ---------------------------------------------------------------------------
    def diagnose(
        self, tenant: str, trace: Trace, options: DiagnoseOptions
    ) -> DiagnosisResponse:
        """Diagnose a whole trace, apply the session's repair state, record it and feed its metrics
        into the agent's streams, in one transaction; return the response."""
        check_trace_fields(trace)
        # Redact first, then diagnose: evidence is cut from redacted text, so no cut secret (a key's
        # prefix) reaches the response, the store or the repair state.
        trace = self.redactor.redact_trace(trace)
        resolved = self.agents.resolve(tenant, trace, options, fixed=lambda: self.stored_agent(tenant, trace))
        agent = resolved.agent
        run_threshold = self.relative_threshold(tenant, agent, self.diagnoser.runscorer)

        def score(extra: list[Finding], served: ServedAgent | None) -> DiagnosisResponse:
            resp = self.diagnoser.diagnose(trace, options, extra_findings=extra, run_threshold=run_threshold)
            if served is not None:
                p0 = resp.failure_probability
                st, crossed, at = score_prefixes(served.model, trace.steps, p0)
                self.agent_answer(resp, served, served.model.score_state(st, prior=p0))
                if crossed is not None and at is not None:
                    add_failure(resp, at_risk_failure(trace, crossed, at, served))
            return resp

        resp = self.assess(tenant, trace, agent, score)
        self.name_agent(resp, resolved)
        session_key = trace.session_id or f"trace:{trace.id}"
        stored_trace = trace.model_dump(mode="json", exclude_none=True)
        response = self.redactor.redact(resp.model_dump(mode="json"))
        with self.session_store.write() as db:
            row = None
            prior: TracePrior | None | bool = True
            if trace.session_id:  # the session's repair state
                row = self.session_store.lock_session(db, tenant, session_key, create_trace_id=trace.id)
                assert row is not None
                state = copy.deepcopy(row.state or {})
                fix_session_agent(state, resolved)
            else:  # the trace's own
                prior = self.trace_store.lock_trace(db, tenant, trace.id)
                state = copy.deepcopy(prior.policy_state or {}) if prior is not None else {}
            decision, stored_arm, options = self.decide(state, tenant, session_key, trace, resp, options)
            response["arm"] = resp.arm
            response["recommendation"] = self.redactor.redact(decision.recommendation.model_dump(mode="json"))
            state = self.redactor.redact(state)
            self.trace_store.put_trace(
                db,
                tenant=tenant,
                trace_id=trace.id,
                trace=stored_trace,
                response=response,
                session_id=trace.session_id,
                task_type=trace.task_type,
                shadow=options.shadow,
                policy_state=None if row is not None else state,
                arm=stored_arm,
                agent=agent,
                prior=prior,
            )
            self.record_recommendation(db, tenant, decision, trace.id, trace.session_id)
            if row is not None:
                self.session_store.save_session_state(row, state)
            self.agents.record(db, tenant, resolved)
            # The rows every request of the tenant (usage) or of the agent (its streams) updates come
            # last: on PostgreSQL their locks are held from here to the commit only.
            if self.streams.autofeed:  # shadow mode observes too
                self.streams.feed(db, tenant, trace, resp, agent)
            self.spend_steps(db, tenant, len(trace.steps))
        self.export(trace, resp)
        return resp

    def stored_agent(self, tenant: str, trace: Trace) -> tuple[str, str | None] | None:
        """The agent the run's session was given at its first append, else the one a stored run of
        this trace id has; ``None`` when neither is stored (an unnamed run is then inferred)."""
        if trace.session_id:
            row = self.session_store.get_session(tenant, trace.session_id)
            fixed = session_agent(row.state if row is not None else None)
            if fixed is not None:
                return fixed
            if row is not None and row.trace_id != trace.id:  # a session stored before its agent was fixed
                stored = self.agent_store.stored_agent(tenant, row.trace_id)
                if stored is not None:
                    return stored
        return self.agent_store.stored_agent(tenant, trace.id)

    @staticmethod
    def name_agent(resp: DiagnosisResponse, resolved: Resolved) -> None:
        """The answer says which agent and how it was found (schema 1.4)."""
        resp.agent = resolved.agent
        resp.agent_source = resolved.source

    # -- the stages both whole traces and sessions go through ------------------------------------
    def assess(self, tenant: str, trace: Trace, agent: str, score: Scorer) -> DiagnosisResponse:
        """The run's diagnosis: ``score`` (the detectors; the agent model when the agent has one) runs
        under the model lock with the findings of the agent's open stream alarms; without an agent
        model the zero-shot probability is re-centred on the agent's labelled runs."""
        extra = self.streams.degradation_findings(tenant, trace, agent)
        served = self.models.get(tenant, agent)
        with self._model_lock.hold(tenant):
            resp = score(extra, served)
        if served is None:
            self.zero_shot_answer(resp, tenant, agent)
        return resp

    def decide(
        self, state: dict[str, Any], tenant: str, session_key: str, trace: Trace, resp: DiagnosisResponse,
        options: DiagnoseOptions,
    ) -> tuple[Any, Arm | None, DiagnoseOptions]:
        """The repair engine's decision on ``resp``'s failures (``state`` updated in place), set on
        ``resp`` with the run's canary arm; returns the decision, the arm as stored and the options the
        engine got (:meth:`_canary`)."""
        arm, stored_arm, options = self._canary(state, tenant, session_key, options)
        decision = self.engine.recommend(
            state, trace, resp.failures, session_key=session_key, now=time.time(), options=options
        )
        resp.recommendation = decision.recommendation
        resp.arm = arm
        return decision, stored_arm, options

    def record_recommendation(
        self, db: Any, tenant: str, decision: Any, trace_id: str, session_id: str | None
    ) -> None:
        """Store a new recommendation (redacted) so that an outcome can be reported on it."""
        rec = decision.recommendation
        if not decision.new or rec.strategy == Strategy.CONTINUE:  # nothing to report an outcome on
            return
        self.session_store.put_recommendation(
            db,
            tenant=tenant,
            rec=self.redactor.redact(rec.model_dump(mode="json")),
            trace_id=trace_id,
            session_id=session_id,
            failure_key=decision.failure_key,
            kind=decision.failure_key.split("@")[0] if decision.failure_key else None,
            rung=decision.rung,
            attempt=decision.attempt,
            status="open",
        )

    def spend_steps(self, db: Any, tenant: str, n: int) -> None:
        """Count ``n`` steps against the tenant's daily quota (this transaction); 429 past it."""
        limiter = self.limiter
        if limiter is None or limiter.daily_steps <= 0 or n <= 0:
            return
        day = utc_day()
        total = self.trace_store.add_usage(db, tenant, day, n)
        if total > limiter.daily_steps:
            limiter.note_usage(tenant, day, total - n)
            limiter.quota_refused(tenant)  # raises: the transaction rolls back, nothing is counted
        limiter.note_usage(tenant, day, total)

    def export(self, trace: Trace, resp: DiagnosisResponse) -> None:
        """Send the diagnosis to the user's OTLP endpoint, when one is set (after the commit)."""
        if self.exporter is not None:
            self.exporter.submit(evaluation_events(trace, resp))

    # -- the failure probability -----------------------------------------------------------------
    def relative_threshold(self, tenant: str, agent: str, scorer: RunScorer | None) -> float | None:
        """The operating point relative to this agent's own runs, once it has enough of them.

        The 90th percentile (1 − the scorer's target false-alarm share) of the last
        :data:`RELATIVE_WINDOW` ``failure_probability`` values auto-fed for the tenant's ``agent``,
        when there are at least ``runscore_relative_min_runs``; ``None`` (the scorer's fixed
        operating point) otherwise. A fixed threshold does not carry across agents: fitted on two
        real sets, it flagged 46 % and 86 % of the third's successful runs (reports/real.md).
        Cached per worker for :data:`RELATIVE_TTL_S`. ``scorer``: the tenant's run scorer.
        """
        if scorer is None or "failure_probability" not in self.streams.autofeed:
            return None
        key = (tenant, agent)
        now = time.monotonic()
        hit = self._relative_cache.get(key)
        if hit is not None and now - hit[0] < RELATIVE_TTL_S:
            return hit[1]
        values = [v for _, v in self.stream_store.stream_values(tenant, "failure_probability", key[1], last=RELATIVE_WINDOW)]
        thr = None
        if len(values) >= self.relative_min_runs:
            # strictly above the agent's 90th percentile: a run that scores like the agent's usual ones
            # is no alarm (a stream of identical runs would otherwise flag every one of them)
            thr = float(np.nextafter(np.quantile(values, 1 - scorer.target_false_alarm), 2.0))
        self._relative_cache[key] = (now, thr)
        return thr

    def agent_answer(self, resp: DiagnosisResponse, served: ServedAgent, probability: float) -> None:
        """The agent model's probability replaces the zero-shot one (kept in the basis)."""
        p0 = resp.failure_probability
        resp.failure_probability = probability
        resp.failure_probability_basis = ProbabilityBasis(
            model="agent", agent=served.agent, labelled_runs=served.labelled_runs, cv_auroc=served.cv_auroc,
            version=served.tag, zero_shot_probability=p0, learner=served.learner)
        resp.model_version = f"{resp.model_version}+{served.version}"  # the agent: in the basis (column of 100)
        resp.detector_versions[AGENT_MODEL_DETECTOR] = served.model.version

    def zero_shot_answer(self, resp: DiagnosisResponse, tenant: str, agent: str) -> None:
        """Zero-shot: the shipped recipe's probability (``version`` names it), re-centred on the agent's observed failure
        rate once it has labelled runs (:class:`serve.services.agent_models.Recentring`)."""
        p0 = resp.failure_probability
        n = 0
        if p0 is not None:
            n, offset = self.recentring.get(tenant, agent)
            if n:
                z = math.log(max(p0, 1e-6) / max(1 - p0, 1e-6)) + offset
                resp.failure_probability = 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))
        scorer = self.diagnoser.runscorer
        resp.failure_probability_basis = ProbabilityBasis(model="zero-shot", agent=agent, labelled_runs=n,
                                                          version=scorer.recipe if scorer is not None else None,
                                                          zero_shot_probability=p0)

    def _canary(
        self, state: dict[str, Any], tenant: str, session_key: str, options: DiagnoseOptions
    ) -> tuple[Arm, Arm | None, DiagnoseOptions]:
        """The run's arm as answered, as stored (``None``: the caller chose shadow itself, so the
        run counts in neither arm) and the options the repair engine gets (:mod:`serve.services.canary`)."""
        arm = session_arm(state, tenant, session_key, self.canary_percent)
        if options.shadow:
            return "shadow", None, options
        if arm == "shadow":
            return "shadow", "shadow", options.model_copy(update={"shadow": True})
        return "repair", "repair", options


def session_agent(state: dict[str, Any] | None) -> tuple[str, str | None] | None:
    """The agent a session was given at its first append, and how (from its state), or ``None``."""
    key = (state or {}).get("agent_key")
    return (str(key), (state or {}).get("agent_source")) if isinstance(key, str) and key else None


def fix_session_agent(state: dict[str, Any], resolved: Resolved) -> None:
    """Fix the session's agent at its first diagnosis (later unnamed appends keep it)."""
    if "agent_key" not in state:
        state["agent_key"], state["agent_source"] = resolved.agent, resolved.source


__all__ = ["RELATIVE_TTL_S", "RELATIVE_WINDOW", "Diagnoses", "fix_session_agent", "session_agent"]
