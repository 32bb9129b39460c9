"""The stateful service: diagnose and record, session steps, outcomes, history, streams.

Routes stay thin: they parse, call a :class:`TriageService` method, and map errors to status
codes. Everything here is synchronous (SQLAlchemy, onnxruntime); routes run it in the thread pool.

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
import functools
import importlib.metadata
import logging
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import numpy as np
from sqlalchemy import insert

from model.core.agents import AGENT_METADATA_KEY, POOL_AGENT, clean_agent_name, resolve_agent
from model.core.errors import InputError, TooLargeError, TraceImportError, TriageError
from model.core.findings import DiagnosisResponse, Finding, ProbabilityBasis
from model.core.kinds import FailureKind, Strategy
from model.core.options import DiagnoseOptions
from model.core.schema import Step, StepKind, ToolDefinition, Trace
from model.diagnosis.diagnoser import DEFAULT_THRESHOLDS, RUNSCORE, Diagnoser
from model.diagnosis.incremental import IncrementalDiagnoser
from model.diagnosis.otel_events import evaluation_events
from model.diagnosis.repair_engine import RepairEngine
from model.importers import genai, load_trace, openinference
from model.importers.spans import collect_spans, group_runs, import_spans, uses_openinference
from model.scoring.runscore.model import RunScorer
from model.streams import Alarm, detect_changepoints
from model.streams.catalog import make_stream_detector
from model.streams.metrics import extract_metrics
from serve.ratelimit import FairLock, RateLimiter, utc_day
from serve.redaction import Redactor
from serve.schemas import (
    AlarmOut,
    AppendStepsRequest,
    ChangepointsResponse,
    FailureState,
    LabelRequest,
    LabelResponse,
    LocatedFailureOut,
    ObservationsRequest,
    ObservationsResponse,
    OutcomeOut,
    OutcomeRequest,
    OutcomeResponse,
    RecommendationOut,
    RunLabelOut,
    SegmentOut,
    SessionStepResponse,
    SessionView,
    TraceDetail,
    TracePageOut,
    TraceSummary,
    UndoLabelRequest,
    UndoLabelResponse,
    WithdrawnLabelOut,
)
from serve.services.agent_models import (
    AGENT_MODEL_DETECTOR,
    AgentModels,
    Recentring,
    ServedAgent,
    add_failure,
    at_risk_failure,
    relabel_final_outputs,
    score_prefixes,
)
from serve.services.canary import Arm, session_arm
from serve.services.otel_export import EvaluationExporter
from serve.services.run_labels import addressed_place, effective_label
from serve.store import Store
from serve.store.tables import LabelRow, ObservationRow, SessionRow, TraceRow, utcnow
from serve.validation import check_id, check_index, check_trace_fields

log = logging.getLogger("triage.service")

#: Observations looked at by ``GET /v1/streams/{name}/changepoints`` (MEASUREMENTS.md: Binseg l2
#: on 2,000 points ≈ 80 ms).
CHANGEPOINT_WINDOW = 2000
_RUPTURES_VERSION = importlib.metadata.version("ruptures")
#: Recent runs the relative operating point reads, and how long a worker trusts its value.
RELATIVE_WINDOW = 500
RELATIVE_TTL_S = 30.0
#: Confidence of a stream alarm on a trace whose own value is not out of band: a signal (half the
#: ``degradation`` threshold), reported and not acted on.
DEGRADATION_SIGNAL_CONFIDENCE = 0.5 * DEFAULT_THRESHOLDS[FailureKind.DEGRADATION]
#: Agent-model prefix states a worker keeps between appends (a session whose state was dropped reads
#: its steps once on its next append).
MAX_PREFIX_STATES = 20_000
_FINAL_BLOCKERS = {StepKind.TOOL_CALL, StepKind.TOOL_RESULT, StepKind.USER_INPUT, StepKind.ERROR}


class NotFoundError(TriageError, LookupError):
    """The tenant has no such session / trace / recommendation / stream (→ 404)."""


class ConflictError(TriageError):
    """An outcome that contradicts the one already recorded, or a success reported after the
    failure was handed off to a human (→ 409)."""


def _repeated_outcome(rec: Any, state: dict[str, Any] | None, success: bool) -> str | None:
    """Outcomes are idempotent per recommendation: ``None`` when this one is new; a note when it
    repeats the recorded one (acknowledged, not stored again); :class:`ConflictError` when it
    contradicts it, or claims success for a failure already handed off to a human."""
    if rec.status in ("succeeded", "failed"):
        before = rec.status == "succeeded"
        if before == success:
            return f"this recommendation's outcome ({rec.status}) was already recorded"
        raise ConflictError(
            f"recommendation {rec.id!r} already has the outcome {rec.status!r}; an outcome can't be changed"
        )
    fs = ((state or {}).get("failures") or {}).get(rec.failure_key or "") or {}
    if success and fs.get("status") == "handoff" and rec.strategy != Strategy.HUMAN_HANDOFF.value:
        raise ConflictError(
            f"the failure of recommendation {rec.id!r} was handed off to a human; report the handoff's outcome"
        )
    return None


class TriageService:
    """Diagnoser + repair engine + store, for one process (one per worker, built in the lifespan).

    Parameters
    ----------
    store, diagnoser, engine, redactor:
        The parts. ``session_exclude`` names detectors that make no sense on a run still going
        (``incomplete``: the run has not ended yet).
    """

    def __init__(
        self,
        store: Store,
        diagnoser: Diagnoser,
        engine: RepairEngine,
        redactor: Redactor,
        *,
        max_steps: int = 5000,
        session_exclude: Sequence[str] = ("incomplete",),
        stream_detector: str = "cusum",
        stream_autofeed: Sequence[str] = (),
        relative_min_runs: int = 50,
        exporter: EvaluationExporter | None = None,
        limiter: RateLimiter | None = None,
        session_window: int = 64,
        canary_percent: float = 100.0,
        models: AgentModels | None = None,
        recentre_ttl_s: float = 60.0,
    ) -> None:
        self.store = store
        self.canary_percent = canary_percent
        self.exporter = exporter
        self.diagnoser = diagnoser
        self.engine = engine
        self.redactor = redactor
        self.max_steps = max_steps
        self.session_exclude = frozenset(session_exclude)
        self.stream_detector = stream_detector
        self.stream_autofeed = tuple(sorted(set(stream_autofeed)))  # sorted: one lock order
        # One model inference at a time per worker: onnxruntime already uses the cores it was given
        # (TRIAGE_ORT_THREADS); concurrent runs only oversubscribe them and grow its memory arenas.
        # Granted round-robin over tenants: one tenant's burst cannot queue ahead of the others.
        self._model_lock = FairLock()
        self.relative_min_runs = relative_min_runs
        self._relative_cache: dict[tuple[str, str], tuple[float, float | None]] = {}
        self.limiter = limiter
        # Each tenant's models (its run scorer; the rules and classifier are shared): a request
        # takes its tenant's once, at its start, and finishes on them whatever is swapped in meanwhile.
        # Each (tenant, agent)'s agent model (the rules, the classifier and the zero-shot run scorer
        # are shared): a request takes its pair's once, at its start, and finishes on it.
        self.models = models or AgentModels()
        self.incremental = IncrementalDiagnoser(diagnoser, window=session_window)
        self.recentring = Recentring(store.agent_labels, ttl_s=recentre_ttl_s)
        # This worker's agent-model prefix state per session: (tenant, session) → (model, steps, state);
        # taken out for an append's transaction and put back after its commit (as the session cache).
        self._prefix: dict[tuple[str, str], tuple[str, int, Any]] = {}
        self._prefix_lock = threading.Lock()
        self._sessions = SessionCache()

    def model_version(self, tenant: str) -> str:
        """What the tenant's responses name as ``model_version`` (:mod:`serve.services.agent_models`)."""
        return self.diagnoser.model_version

    def detector_versions(self) -> dict[str, str]:
        return {name: d.version for name, d in self.diagnoser.detectors.items()}

    # -- diagnose --------------------------------------------------------------------------------
    def diagnose(
        self, tenant: str, trace: Trace, options: DiagnoseOptions, *, feed_streams: bool = True
    ) -> DiagnosisResponse:
        """Diagnose a whole trace, apply the session's repair state, record it; return the response.

        ``feed_streams=False`` leaves feeding the tenant's metric streams to the caller
        (:meth:`feed_streams`; the HTTP route does it after answering).
        """
        check_trace_fields(trace)
        # Redact first, then diagnose: evidence is cut from redacted text, so no cut secret (a key's
        # prefix) reaches the response, the store or the repair state.
        trace = self.redactor.redact_trace(trace)
        agent = resolve_agent(trace, options.agent)
        served = self.models.get(tenant, agent)
        extra = self.degradation_findings(tenant, trace, agent)
        run_threshold = self.relative_threshold(tenant, agent, self.diagnoser.runscorer)
        with self._model_lock.hold(tenant):
            resp = self.diagnoser.diagnose(trace, options, extra_findings=extra, run_threshold=run_threshold)
            if served is not None:
                p0 = resp.failure_probability
                st, crossed, at = score_prefixes(served.model, trace.steps, p0)
                self._agent_answer(resp, served, served.model.score_state(st, prior=p0))
                if crossed is not None and at is not None:
                    add_failure(resp, at_risk_failure(trace, crossed, at, served))
        if served is None:
            self._zero_shot_answer(resp, tenant, agent)
        session_key = trace.session_id or f"trace:{trace.id}"
        stored_trace = trace.model_dump(mode="json", exclude_none=True)
        response = self.redactor.redact(resp.model_dump(mode="json"))
        with self.store.write() as db:
            self._spend_steps(db, tenant, len(trace.steps))
            row = None
            if trace.session_id:  # the session's repair state
                row = self.store.lock_session(db, tenant, session_key, create_trace_id=trace.id)
                assert row is not None
                state = copy.deepcopy(row.state or {})
            else:  # the trace's own
                state = copy.deepcopy(self.store.lock_trace_state(db, tenant, trace.id) or {})
            arm, stored_arm, options = self._canary(state, tenant, session_key, options)
            decision = self.engine.recommend(
                state, trace, resp.failures, session_key=session_key, now=time.time(), options=options
            )
            resp.recommendation = decision.recommendation
            resp.arm = response["arm"] = arm
            response["recommendation"] = self.redactor.redact(decision.recommendation.model_dump(mode="json"))
            state = self.redactor.redact(state)
            self.store.put_trace(
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
            )
            self._put_rec(db, tenant, decision, trace.id, trace.session_id)
            if row is not None:
                row.state = state
                row.updated_at = utcnow()
                row.version += 1
            if self.stream_autofeed and feed_streams:  # shadow mode observes too
                self._feed_streams(db, tenant, trace, resp, agent)
        self._export(trace, resp)
        return resp

    def relative_threshold(self, tenant: str, agent: str, scorer: RunScorer | None) -> float | None:
        """The operating point relative to this agent's own runs, once it has enough of them.

        The 90th percentile (1 − the scorer's target false-alarm share) of the last
        :data:`RELATIVE_WINDOW` ``failure_probability`` values auto-fed for the tenant's ``agent``,
        when there are at least ``runscore_relative_min_runs``; ``None`` (the scorer's fixed
        operating point) otherwise. A fixed threshold does not carry across agents: fitted on two
        real sets, it flagged 46 % and 86 % of the third's successful runs (reports/real.md).
        Cached per worker for :data:`RELATIVE_TTL_S`. ``scorer``: the tenant's run scorer.
        """
        if scorer is None or "failure_probability" not in self.stream_autofeed:
            return None
        key = (tenant, agent)
        now = time.monotonic()
        hit = self._relative_cache.get(key)
        if hit is not None and now - hit[0] < RELATIVE_TTL_S:
            return hit[1]
        values = [v for _, v in self.store.stream_values(tenant, "failure_probability", key[1], last=RELATIVE_WINDOW)]
        thr = None
        if len(values) >= self.relative_min_runs:
            # strictly above the agent's 90th percentile: a run that scores like the agent's usual ones
            # is no alarm (a stream of identical runs would otherwise flag every one of them)
            thr = float(np.nextafter(np.quantile(values, 1 - scorer.target_false_alarm), 2.0))
        self._relative_cache[key] = (now, thr)
        return thr

    def _export(self, trace: Trace, resp: DiagnosisResponse) -> None:
        """Send the diagnosis to the user's OTLP endpoint, when one is set (after the commit)."""
        if self.exporter is not None:
            self.exporter.submit(evaluation_events(trace, resp))

    def feed_streams(self, tenant: str, trace: Trace, resp: DiagnosisResponse, options: DiagnoseOptions) -> None:
        """Feed a diagnosed trace's metrics into its agent's streams, in a transaction of its own
        (``trace`` and ``options`` as :meth:`diagnose` got them)."""
        if not self.stream_autofeed:
            return
        # the agent as diagnose() resolved it: from the redacted trace (its task type and metadata)
        agent = resolve_agent(self.redactor.redact_trace(trace), options.agent)
        with self.store.write() as db:
            self._feed_streams(db, tenant, trace, resp, agent)

    def _feed_streams(self, db: Any, tenant: str, trace: Trace, resp: DiagnosisResponse, agent: str) -> None:
        """Feed this trace's per-trace metrics into the streams of its agent (same transaction).

        Keyed (tenant, agent, stream): each agent warms up a baseline of its own, so that one
        agent's runs are never judged against another's. Alarms raised here show up as
        ``degradation`` in the agent's next diagnoses, not this one.
        """
        prob = resp.failure_probability
        if prob is None and "classifier" in resp.detector_versions:
            scores = [
                f.confidence
                for f in [*resp.failures, *resp.signals]
                if "classifier" in (f.detectors or [f.detector])
            ]
            prob = max(scores, default=0.0)
        metrics = extract_metrics(trace, failure_prob=prob)
        values = {}
        for name in self.stream_autofeed:
            value = metrics.per_trace.get(name)
            if value is not None and math.isfinite(value) and abs(value) <= 1e12:
                values[name] = float(value)
        if not values:
            return
        rows = self.store.lock_streams(db, tenant, agent, sorted(values), detector=self.stream_detector)
        now = utcnow()
        observations = []
        changes = []
        for name, value in sorted(values.items()):
            row = rows[name]
            det = make_stream_detector(row["detector"], **row["params"])
            if row["state"]:
                det.set_state(row["state"])
            alarm = det.update(value)
            observations.append(
                {
                    "tenant_id": tenant,
                    "stream": name,
                    "agent": agent,
                    "seq": row["n"],
                    "value": value,
                    "trace_id": trace.id,
                    "alarm": alarm is not None,
                    "created_at": now,
                }
            )
            changes.append(
                {
                    "name": name,
                    "n": row["n"] + 1,
                    "state": det.get_state(),
                    "alarm_open": _episode_open(det, bool(row["alarm_open"]) or alarm is not None),
                    "alarm": alarm.model_dump() if alarm is not None else row["alarm"],
                }
            )

        db.execute(insert(ObservationRow), observations)
        self.store.update_streams(db, tenant, agent, changes)

    # -- sessions --------------------------------------------------------------------------------
    def append_steps(self, tenant: str, session_id: str, req: AppendStepsRequest) -> SessionStepResponse:
        """Append steps to session ``session_id`` (created on first use) and diagnose it so far."""
        resp = self._append(
            tenant, session_id, req.options, lambda state, offset: self._import_steps(req, offset=offset),
            field="steps" if req.steps is not None else "messages",
            task_type=req.task_type, language=req.language, tools=req.tools, agent=req.agent or req.options.agent,
        )
        assert resp is not None  # _import_steps never returns no steps
        return resp

    def append_spans(self, tenant: str, document: dict[str, Any]) -> dict[str, SessionStepResponse | None]:
        """Feed OTLP/JSON spans (the OTLP receiver) into live sessions: one per run, keyed by
        ``gen_ai.conversation.id`` / ``session.id`` (else the trace id; a trace whose first spans
        named no session stays in the trace id's session). Spans are numbered in
        arrival order (within one export, by start time); each session keeps its spans (redacted)
        so that chat spans repeating the conversation add only what is new. Runs without GenAI or
        OpenInference spans are left out. Returns session id → its diagnosis (``None`` when the
        export added spans but no step, e.g. a parent agent span)."""
        out: dict[str, SessionStepResponse | None] = {}
        for trace_id, session, group in group_runs(collect_spans(document)):
            if not any(genai.is_genai(sp) or openinference.KIND in sp.attrs for sp in group):
                continue
            group.sort(key=lambda sp: (sp.start_ns is None, sp.start_ns or 0, sp.span_id or ""))
            payload = [self.redactor.redact(sp.to_json()) for sp in group]
            # a session id from the spans, made a valid id (GET /v1/sessions/{id} reads it back)
            key = re.sub(r"[^A-Za-z0-9._:@\-]", "_", session or trace_id)[:128]
            if session is not None:
                # spans of a trace that arrived before any of them named the session (children end
                # before the parent that carries the conversation id) stay in that trace's session
                for tid in dict.fromkeys(sp.trace_id for sp in group):
                    tid_key = re.sub(r"[^A-Za-z0-9._:@\-]", "_", tid)[:128]
                    if self.store.get_session(tenant, tid_key) is not None:
                        key = tid_key
                        break
            out[key] = self._append(
                tenant, key, DiagnoseOptions(),
                functools.partial(self._import_spans, payload), field="spans",
            )
        return out

    def _import_spans(
        self, payload: list[dict[str, Any]], state: dict[str, Any], offset: int
    ) -> tuple[list[Step], int]:
        """The steps the new spans add to the session's run (rebuilt from every span it has)."""
        log = state.setdefault("otlp", {"spans": [], "steps": 0, "base": offset})
        log["spans"].extend(payload)
        if len(log["spans"]) > self.max_steps:
            raise TooLargeError(
                f"session would have {len(log['spans'])} spans; the limit is {self.max_steps}", path="spans"
            )
        fmt = "openinference" if uses_openinference(log["spans"]) else "otel"
        try:
            runs = import_spans(log["spans"], fmt=fmt, max_steps=self.max_steps, in_order=True)
        except TraceImportError as exc:
            if "none of its" in exc.message:  # no readable span yet (e.g. only an agent span)
                return [], log["base"] + len(log["spans"])
            raise
        assert len(runs) == 1  # the log holds one session's (or one trace's) spans
        steps = runs[0].steps
        root_agent = runs[0].metadata.get(AGENT_METADATA_KEY)
        if root_agent:  # the session's root agent span: its agent (model/core/agents.py)
            state["span_agent"] = root_agent
        new = steps[log["steps"]:]
        log["steps"] = len(steps)
        by_span = runs[0].metadata.get("span_trace_ids") or {}
        for st in new:
            st.source_index += log["base"]
            # the span's own trace id, for gen_ai.evaluation.result events parented to it
            st.metadata["otel.trace_id"] = by_span.get(st.span_id, runs[0].id)
        return new, log["base"] + len(log["spans"])

    def _append(
        self,
        tenant: str,
        session_id: str,
        options: DiagnoseOptions,
        importer: Callable[[dict[str, Any], int], tuple[list[Step], int]],
        *,
        field: str,
        task_type: str | None = None,
        language: str | None = None,
        tools: list[ToolDefinition] | None = None,
        agent: str | None = None,
    ) -> SessionStepResponse | None:
        """Lock the session, import the new steps (``importer(state, offset)``), diagnose, store.

        The cost does not grow with the session: the new steps are written as rows of their own,
        the session's trace stays in this worker's cache (re-read from the store only when another
        worker appended meanwhile), and the detectors read a window of the newest steps
        (:mod:`model.diagnosis.incremental`). ``agent``: the agent this append names (the session keeps the
        latest named; :func:`model.core.agents.resolve_agent` falls back on the spans, the task type, the pool).
        """
        check_id(session_id, path="path.session_id")
        wanted = [
            n for n in (options.detectors or list(self.diagnoser.detectors)) if n not in self.session_exclude
        ]
        if options.detectors is None and self.diagnoser.runscorer is not None and RUNSCORE not in self.session_exclude:
            wanted.append(RUNSCORE)  # failure_probability and attribution so far (they decide nothing mid-run)
        run_options = options.model_copy(update={"detectors": wanted})
        with self.store.write() as db:
            row = self.store.lock_session(db, tenant, session_id, create_trace_id=_new_id())
            assert row is not None
            # Taken out of the cache for the transaction: put back only once it has committed.
            trace, in_rows = self._sessions.take(tenant, session_id, row.trace_id, row.version)
            if trace is None:
                trace_row = db.get(TraceRow, (tenant, row.trace_id))
                if trace_row is not None:
                    trace = Trace.model_validate(self.store.trace_json(db, trace_row))
                    in_rows = trace_row.steps_in_rows
                else:
                    trace, in_rows = Trace(id=row.trace_id, session_id=session_id), True
            # (a session first seen through /v1/diagnose has a whole trace but no counters yet)
            offset = max(row.next_source_index, max((st.source_index + 1 for st in trace.steps[-1:]), default=0))
            state = copy.deepcopy(row.state or {})
            new_steps, next_source = importer(state, offset)
            check_index(next_source, path=field)
            if len(trace.steps) + len(new_steps) > self.max_steps:
                raise TooLargeError(
                    f"session would have {len(trace.steps) + len(new_steps)} steps; the limit is {self.max_steps}",
                    path=field,
                )
            if not new_steps:  # nothing to diagnose yet; keep what the importer kept
                row.state = state
                row.next_source_index = next_source
                row.updated_at = utcnow()
                row.version += 1
                return None
            self._spend_steps(db, tenant, len(new_steps))
            first = len(trace.steps)
            trace.steps.extend(new_steps)
            changed = _link_across_calls(trace.steps, first)
            if task_type:
                trace.task_type = task_type
            if language:
                trace.language = language
            if tools:
                known = {t.name for t in trace.tools}
                trace.tools.extend(t for t in tools if t.name not in known)
            if agent:
                state["agent"] = agent
            if state.get("span_agent"):
                trace.metadata[AGENT_METADATA_KEY] = state["span_agent"]
            session_agent = resolve_agent(trace, state.get("agent"))
            extra = self.degradation_findings(tenant, trace, session_agent)
            served = self.models.get(tenant, session_agent)
            with self._model_lock.hold(tenant):
                diag = self.incremental.diagnose(trace, state, run_options, extra_findings=extra)
                prefix = self._session_prefix(tenant, session_id, trace, first, changed, diag, state, served)
            if served is None:
                self._zero_shot_answer(diag, tenant, session_agent)
            arm, stored_arm, options = self._canary(state, tenant, session_id, options)
            decision = self.engine.recommend(
                state, trace, diag.failures, session_key=session_id, now=time.time(), options=options
            )
            diag.recommendation = decision.recommendation
            diag.arm = arm
            state = self.redactor.redact(state)
            resp = SessionStepResponse(
                **diag.model_dump(),
                session_id=session_id,
                appended=list(range(first, len(trace.steps))),
                source_indices=list(range(offset, next_source)),
                session_steps=len(trace.steps),
            )
            # Only the new steps, and the earlier ones the append re-linked, are written.
            written = range(len(trace.steps)) if not in_rows else [*sorted(changed), *range(first, len(trace.steps))]
            self.store.put_steps(
                db,
                tenant,
                trace.id,
                {i: trace.steps[i].model_dump(mode="json", exclude_none=True) for i in written},
            )
            self.store.put_trace(
                db,
                tenant=tenant,
                trace_id=trace.id,
                # steps already redacted; the header only (its steps are rows of their own)
                trace=trace.model_dump(mode="json", exclude_none=True, exclude={"steps"}) | {"steps": []},
                response=self.redactor.redact(diag.model_dump(mode="json")),
                session_id=session_id,
                task_type=trace.task_type,
                shadow=options.shadow,
                n_steps=len(trace.steps),
                steps_in_rows=True,
                arm=stored_arm,
                agent=session_agent,
                step_tools=[s.tool_name for s in trace.steps],
            )
            self._put_rec(db, tenant, decision, trace.id, session_id)
            row.state = state
            row.n_steps = len(trace.steps)
            row.next_source_index = next_source
            row.updated_at = utcnow()
            row.version += 1
            version = row.version
        self._sessions.put(tenant, session_id, trace, version)
        if prefix is not None:
            with self._prefix_lock:
                self._prefix[(tenant, session_id)] = prefix
                while len(self._prefix) > MAX_PREFIX_STATES:  # the oldest sessions' go first (rebuilt if needed)
                    self._prefix.pop(next(iter(self._prefix)))
        self._export(trace, resp)
        return resp

    # -- the agent model's answer ------------------------------------------------------------------
    def _agent_answer(self, resp: DiagnosisResponse, served: ServedAgent, probability: float) -> None:
        p0 = resp.failure_probability
        resp.failure_probability = probability
        resp.failure_probability_basis = ProbabilityBasis(
            model="agent", agent=served.agent, labelled_runs=served.labelled_runs, cv_auroc=served.cv_auroc,
            version=served.tag, zero_shot_probability=p0)
        resp.model_version = f"{resp.model_version}+{served.version}"  # the agent: in the basis (column of 100)
        resp.detector_versions[AGENT_MODEL_DETECTOR] = served.model.version

    def _zero_shot_answer(self, resp: DiagnosisResponse, tenant: str, agent: str) -> None:
        """Zero-shot: the shipped run scorer's probability, re-centred on the agent's observed failure
        rate once it has labelled runs (:class:`serve.services.agent_models.Recentring`)."""
        p0 = resp.failure_probability
        n = 0
        if p0 is not None:
            n, offset = self.recentring.get(tenant, agent)
            if n:
                z = math.log(max(p0, 1e-6) / max(1 - p0, 1e-6)) + offset
                resp.failure_probability = 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))
        resp.failure_probability_basis = ProbabilityBasis(model="zero-shot", agent=agent, labelled_runs=n,
                                                          zero_shot_probability=p0)

    def _session_prefix(self, tenant: str, session_id: str, trace: Trace, first: int, changed: list[int],
                        diag: DiagnosisResponse, state: dict[str, Any], served: ServedAgent | None) -> Any:
        """The session's prefix score under its agent model (O(1) per new step: the prefix state stays
        in this worker between appends, rebuilt from the steps only after another worker appended or
        the model changed); ``at_risk`` from the step where it first reached the early-warning point.
        Returns what to keep for the next append (``None``: no agent model)."""
        with self._prefix_lock:
            kept = self._prefix.pop((tenant, session_id), None)
        if served is None:
            state.pop("agent_model", None)
            return None
        mine = state.get("agent_model") or {}
        if mine.get("model") != served.tag:
            mine = {"model": served.tag, "crossed": None, "p": None}
        p0 = diag.failure_probability
        if kept is not None and kept[0] == served.tag and kept[1] == first:
            relabel_final_outputs(kept[2], sum(1 for i in changed if i < first))
            st, crossed, at = score_prefixes(served.model, trace.steps[first:], p0, kept[2], first, mine["crossed"])
        else:  # another worker appended meanwhile, or a new model: read the session once
            st, crossed, at = score_prefixes(served.model, trace.steps, p0, None, 0, mine["crossed"])
        if mine["crossed"] is None and crossed is not None:
            mine.update(crossed=crossed, p=at)
        state["agent_model"] = mine
        self._agent_answer(diag, served, served.model.score_state(st, prior=p0))
        if mine["crossed"] is not None and mine["crossed"] < len(trace.steps):
            add_failure(diag, at_risk_failure(trace, int(mine["crossed"]), float(mine["p"]), served))
        return (served.tag, len(trace.steps), st)

    def _spend_steps(self, db: Any, tenant: str, n: int) -> None:
        """Count ``n`` steps against the tenant's daily quota (this transaction); 429 past it."""
        limiter = self.limiter
        if limiter is None or limiter.daily_steps <= 0 or n <= 0:
            return
        day = utc_day()
        total = self.store.add_usage(db, tenant, day, n)
        if total > limiter.daily_steps:
            limiter.note_usage(tenant, day, total - n)
            limiter.quota_refused(tenant)  # raises: the transaction rolls back, nothing is counted
        limiter.note_usage(tenant, day, total)

    def _import_steps(self, req: AppendStepsRequest, *, offset: int) -> tuple[list[Step], int]:
        if req.messages is not None:
            field = "messages"
            try:
                part = load_trace(
                    {"messages": req.messages},
                    format="openai",
                    speakers=req.options.speakers or None,
                    max_steps=self.max_steps,
                )
            except InputError as exc:
                if exc.path and exc.path.split(".")[0] == "speakers":  # an option, not a message
                    exc.path = f"options.{exc.path}"
                raise
            steps = part.steps
            for s in steps:
                s.source_index += offset
            count = len(req.messages)
        else:
            field = "steps"
            part = load_trace({"steps": req.steps}, format="native", max_steps=self.max_steps)
            steps = part.steps
            one_each = len(steps) > 1 and all(s.source_index == 0 for s in steps)
            for i, s in enumerate(steps):
                s.source_index = offset + (i if one_each else s.source_index)
            count = (max(s.source_index for s in steps) - offset + 1) if steps else 0
        if not steps:
            raise InputError("these messages make no steps", path=field)
        return self.redactor.redact_steps(steps), offset + count

    def get_session(self, tenant: str, session_id: str) -> SessionView:
        row = self.store.get_session(tenant, session_id)
        if row is None:
            raise NotFoundError(f"no session {session_id!r} for this tenant")
        trace_row = self.store.get_trace(tenant, row.trace_id)
        last = DiagnosisResponse.model_validate(trace_row.response) if trace_row is not None else None
        return SessionView(
            model_version=self.model_version(tenant),
            detector_versions=self.detector_versions(),
            session_id=row.id,
            trace_id=row.trace_id,
            agent=trace_row.agent if trace_row is not None else POOL_AGENT,
            created_at=row.created_at,
            updated_at=row.updated_at,
            steps=row.n_steps,
            next_source_index=row.next_source_index,
            failures=_failure_states(row),
            replan_global_used=int((row.state or {}).get("replan_global", 0)),
            last=last,
        )

    def delete_session(self, tenant: str, session_id: str) -> None:
        self._sessions.drop(tenant, session_id)
        if not self.store.delete_session(tenant, session_id):
            raise NotFoundError(f"no session {session_id!r} for this tenant")

    # -- outcomes --------------------------------------------------------------------------------
    def report_outcome(self, tenant: str, req: OutcomeRequest) -> OutcomeResponse:
        """Record an outcome; a failed one moves its failure up and returns the next recommendation."""
        with self.store.write() as db:
            rec = self.store.get_recommendation(db, tenant, req.recommendation_id)
            if rec is None:
                raise NotFoundError(f"no recommendation {req.recommendation_id!r} for this tenant")
            session_key = rec.session_id or f"trace:{rec.trace_id}"
            decision = None
            if rec.session_id is not None:
                row = self.store.lock_session(db, tenant, rec.session_id, create_trace_id=None)
                raw_state = row.state if row is not None else None
            else:
                row = None
                raw_state = self.store.lock_trace_state(db, tenant, rec.trace_id)
            db.refresh(rec)  # its status as of the lock: a concurrent outcome may have set it
            repeat = _repeated_outcome(rec, raw_state, req.success)
            if repeat is not None:
                return OutcomeResponse(
                    model_version=self.model_version(tenant),
                    detector_versions=self.detector_versions(),
                    recommendation_id=req.recommendation_id,
                    recorded=False,
                    escalated=False,
                    session_id=rec.session_id,
                    note=repeat,
                )
            trace_row = db.get(TraceRow, (tenant, rec.trace_id))
            if raw_state is not None and trace_row is not None:
                trace = Trace.model_validate(self.store.trace_json(db, trace_row))
                state = copy.deepcopy(raw_state)
                decision = self.engine.on_outcome(
                    state, rec.id, success=req.success, trace=trace, session_key=session_key, now=time.time()
                )
                state = self.redactor.redact(state)
                if row is not None:
                    row.state = state
                    row.updated_at = utcnow()
                    row.version += 1
                else:
                    self.store.set_trace_state(db, tenant, rec.trace_id, state)
                if decision is not None:
                    self._put_rec(db, tenant, decision, rec.trace_id, rec.session_id)
            self.store.add_outcome(
                db,
                tenant=tenant,
                rec=rec,
                success=req.success,
                duration_s=req.duration_s,
                cost=req.cost,
                note=self.redactor.redact_text(req.note),
            )
            if rec.status == "open":
                rec.status = "succeeded" if req.success else "failed"
            if req.label is not None:
                failed = req.label != "healthy"
                step, source_index = addressed_place(rec.failure_key, raw_state) if failed else (None, None)
                db.add(
                    LabelRow(
                        tenant_id=tenant,
                        trace_id=rec.trace_id,
                        failed=failed,
                        kind=str(req.label) if failed else None,
                        step=step,
                        source_index=source_index,
                        author="outcome",
                        author_type="human",
                    )
                )
        return OutcomeResponse(
            model_version=self.model_version(tenant),
            detector_versions=self.detector_versions(),
            recommendation_id=req.recommendation_id,
            escalated=decision is not None,
            next=decision.recommendation if decision is not None else None,
            session_id=rec.session_id,
        )

    # -- history ---------------------------------------------------------------------------------
    def list_traces(
        self,
        tenant: str,
        *,
        kind: FailureKind | None,
        since: Any,
        session: str | None,
        limit: int,
        cursor: str | None,
    ) -> TracePageOut:
        page = self.store.list_traces(
            tenant,
            kind=kind.value if kind else None,
            since=since,
            session=session,
            limit=limit,
            cursor=cursor,
        )
        return TracePageOut(
            model_version=self.model_version(tenant),
            detector_versions=self.detector_versions(),
            items=[_summary(r) for r in page.items],
            next_cursor=page.next_cursor,
        )

    def get_trace(self, tenant: str, trace_id: str) -> TraceDetail:
        got = self.store.get_trace_json(tenant, trace_id)
        if got is None:
            raise NotFoundError(f"no trace {trace_id!r} for this tenant")
        row, trace_json = got
        recs, outs = self.store.trace_history(tenant, trace_id)
        return TraceDetail(
            **_summary(row).model_dump(),
            model_version=row.model_version,
            detector_versions=dict((row.response or {}).get("detector_versions") or {}),
            trace=trace_json,
            diagnosis=row.response,
            recommendations=[
                RecommendationOut(
                    id=r.id,
                    strategy=r.strategy,
                    kind=r.kind,
                    rung=r.rung,
                    attempt=r.attempt,
                    created_at=r.created_at,
                    body=r.body,
                )
                for r in recs
            ],
            outcomes=[
                OutcomeOut(
                    recommendation_id=o.recommendation_id,
                    strategy=o.strategy,
                    success=o.success,
                    duration_s=o.duration_s,
                    cost=o.cost,
                    note=o.note,
                    created_at=o.created_at,
                )
                for o in outs
            ],
            label=_run_label(self.store.trace_labels(tenant, trace_id)),
        )

    def add_label(
        self, tenant: str, trace_id: str, req: LabelRequest, *, key_id: str | None = None
    ) -> LabelResponse:
        """A label on a stored trace: one author's verdict on the run (see :mod:`serve.services.run_labels`);
        without ``author``, the API key that posted it (``key:<id>``) is the author."""
        failed = req.verdict()
        author = self.redactor.redact_text(req.author) or (f"key:{key_id}" if key_id else "")
        rows = self.store.add_label(
            tenant,
            trace_id,
            failed=failed,
            kind=None if req.kind in (None, "healthy") else str(req.kind),
            step=req.step,
            source_index=req.source_index,
            author=author,
            author_type=req.author_type,
        )
        if rows is None:
            raise NotFoundError(f"no trace {trace_id!r} for this tenant")
        label = _run_label(rows)
        assert label is not None  # the label just added
        return LabelResponse(
            model_version=self.model_version(tenant),
            detector_versions=self.detector_versions(),
            trace_id=trace_id,
            labels=len(rows),
            label=label,
        )

    def undo_label(self, tenant: str, req: UndoLabelRequest, *, key_id: str | None = None) -> UndoLabelResponse:
        """Withdraw the author's newest label (``POST /v1/labels/undo``; :mod:`serve.services.run_labels`):
        the author is named as :meth:`add_label` names it (``key:<id>`` without one)."""
        author = self.redactor.redact_text(req.author) or (f"key:{key_id}" if key_id else "")
        got = self.store.withdraw_label(tenant, author, trace_id=req.trace_id)
        if got is None:
            where = f" on trace {req.trace_id!r}" if req.trace_id else ""
            raise NotFoundError(f"no label by {author!r}{where} left to withdraw for this tenant")
        row, rows = got
        return UndoLabelResponse(
            model_version=self.model_version(tenant),
            detector_versions=self.detector_versions(),
            trace_id=row["trace_id"],
            withdrawn=WithdrawnLabelOut.model_validate(row),
            labels=len(rows),
            label=_run_label(rows),
        )

    def stored_trace(self, tenant: str, trace_id: str) -> Trace:
        got = self.store.get_trace_json(tenant, trace_id)
        if got is None:
            raise NotFoundError(f"no trace {trace_id!r} for this tenant")
        return Trace.model_validate(got[1])

    def delete_trace(self, tenant: str, trace_id: str) -> None:
        if not self.store.delete_trace(tenant, trace_id):
            raise NotFoundError(f"no trace {trace_id!r} for this tenant")

    def purge(self, retention: timedelta) -> int:
        n = self.store.purge_older_than(retention)
        if n:
            log.info("retention: deleted %d traces older than %s", n, retention)
        return n

    # -- streams ---------------------------------------------------------------------------------
    def observe(self, tenant: str, stream: str, req: ObservationsRequest) -> ObservationsResponse:
        """Feed values to the stream's detector (state in the store); alarms are returned and kept.

        The stream is keyed (tenant, agent, name): ``req.agent``, else ``req.task_type`` (what a
        run that names no agent resolves to), else ``""`` (every agent of the tenant).
        """
        _check_stream_name(stream)
        agent = _stream_agent(req.agent, req.task_type)
        params = dict(req.params or {})
        # Validate the parameters before touching the store (a bad one is the caller's error).
        try:
            make_stream_detector(self.stream_detector, **params)
        except InputError as exc:
            exc.path = f"params.{exc.path}" if exc.path and exc.path != "detectors" else "params"
            raise
        except (TypeError, ValueError) as exc:
            raise InputError(
                f"not a setting of the {self.stream_detector} detector: {exc}", path="params"
            ) from None
        except ArithmeticError as exc:  # e.g. an ARL0 so large that the decision interval overflows
            raise InputError(
                f"these {self.stream_detector} settings can't be computed ({exc}); use a smaller arl0 / shift",
                path="params",
            ) from None
        alarms: list[Alarm] = []
        with self.store.write() as db:
            row = self.store.lock_stream(
                db, tenant, stream, agent, detector=self.stream_detector, params=params
            )
            if req.params is not None and row.n > 0 and req.params != row.params:
                raise InputError(
                    f"stream {stream!r} already runs with params {row.params}; its settings are fixed "
                    "once it has observations",
                    path="params",
                )
            det = make_stream_detector(row.detector, **row.params)
            if row.state:
                det.set_state(row.state)
            if req.rebaseline:
                history = [
                    v
                    for _, v in self.store.stream_values(tenant, stream, agent, last=CHANGEPOINT_WINDOW)
                ]
                start = int((row.alarm or {}).get("start", 0))
                window = history[max(0, start - (row.n - len(history))) :] if row.alarm_open else history
                det.rebaseline(values=window or None)  # type: ignore[attr-defined]
                row.alarm_open = False
            rows = []
            for i, v in enumerate(req.values):
                a = det.update(float(v))
                if a is not None:
                    alarms.append(a)
                rows.append(
                    ObservationRow(
                        tenant_id=tenant,
                        stream=stream,
                        agent=agent,
                        seq=row.n + i,
                        value=float(v),
                        alarm=a is not None,
                    )
                )
            db.add_all(rows)
            row.n += len(req.values)
            row.state = det.get_state()
            row.alarm_open = _episode_open(det, row.alarm_open or bool(alarms))
            if alarms:
                row.alarm = alarms[-1].model_dump()
            row.updated_at = utcnow()
            n, alarm_open = row.n, row.alarm_open
            monitoring = bool(getattr(det, "monitoring", True))
        return ObservationsResponse(
            model_version=self.model_version(tenant),
            detector_versions={det.name: det.version},
            stream=stream,
            agent=agent,
            task_type=agent,
            n=n,
            alarms=[AlarmOut(**a.model_dump()) for a in alarms],
            alarm_open=alarm_open,
            monitoring=monitoring,
        )

    def changepoints(
        self, tenant: str, stream: str, agent: str | None, method: str | None, *, task_type: str = ""
    ) -> ChangepointsResponse:
        """Offline change points (ruptures, l2) over the stream's last observations (its agent as
        in :meth:`observe`)."""
        agent = _stream_agent(agent, task_type, where="query.")
        row = self.store.get_stream(tenant, stream, agent)
        if row is None:
            raise NotFoundError(f"no stream {stream!r} of agent {agent!r} for this tenant")
        pairs = self.store.stream_values(tenant, stream, agent, last=CHANGEPOINT_WINDOW)
        offset = pairs[0][0] if pairs else 0
        values = [v for _, v in pairs]
        if len(values) < 10:
            cps: list[int] = []
            segments = (
                [SegmentOut(start=offset, end=offset + len(values), mean=_mean(values))] if values else []
            )
            used = method or "binseg"
        else:
            found = detect_changepoints(values, method=method, max_points=None)  # type: ignore[arg-type]
            cps = [c + offset for c in found.changepoints]
            segments = [
                SegmentOut(start=s.start + offset, end=s.end + offset, mean=s.mean) for s in found.segments
            ]
            used = found.method
        return ChangepointsResponse(
            model_version=self.model_version(tenant),
            detector_versions={"ruptures": _RUPTURES_VERSION},
            stream=stream,
            agent=agent,
            task_type=agent,
            n=row.n,
            changepoints=cps,
            segments=segments,
            method=used,
        )

    def degradation_findings(self, tenant: str, trace: Trace, agent: str) -> list[Finding]:
        """Open stream alarms of this tenant, of the run's ``agent`` or of every agent, as findings.

        An alarm is about the agent: a ``degradation`` *signal* on each of its runs while the
        episode is open. It is a failure of this run only when the alarm is on this agent's own
        stream and the run's own value for it (its per-trace metric of that name, e.g.
        ``latency_ms`` or ``meta.<key>``) lies beyond the alarm's bound, the agent's baseline
        ``mean ± shift · std`` in the alarm's direction. A stream posted for every agent (``""``)
        has no baseline of this agent's: a signal at most.
        """
        alarms = self.store.open_alarms(tenant, agent)
        if not alarms:
            return []
        own: dict[str, float | None] = {}
        if any((s["alarm"] or {}).get("bound") is not None for s in alarms):
            own = extract_metrics(trace).per_trace  # failure_probability: not known yet (None)
        out = []
        for s in alarms:
            alarm = s["alarm"] or {}
            mine = s["agent"] == agent
            value = own.get(s["name"])
            beyond, note = _own_value(alarm, value)
            direction = alarm.get("direction", "?")
            where = f" of agent {s['agent']!r}" if mine else " of every agent"
            out.append(
                Finding(
                    detector=f"stream:{s['detector']}",
                    kind=FailureKind.DEGRADATION,
                    confidence=1.0 if beyond and mine else DEGRADATION_SIGNAL_CONFIDENCE,
                    evidence=f"stream {s['name']!r}{where} drifted {direction} from observation "
                    f"{alarm.get('start', '?')} (alarm at {alarm.get('index', '?')}){note}",
                    details={
                        "stream": s["name"],
                        "agent": s["agent"],
                        "alarm": alarm,
                        "value": value,
                        "beyond": beyond,
                    },
                )
            )
        return out

    # -- internals -------------------------------------------------------------------------------
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

    def _put_rec(self, db: Any, tenant: str, decision: Any, trace_id: str, session_id: str | None) -> None:
        rec = decision.recommendation
        if not decision.new or rec.strategy == Strategy.CONTINUE:  # nothing to report an outcome on
            return
        self.store.put_recommendation(
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


def _own_value(alarm: dict[str, Any], value: float | None) -> tuple[bool, str]:
    """Whether a trace's own ``value`` is beyond the alarm's bound in its direction, and a note."""
    bound = alarm.get("bound")
    if value is None or not isinstance(bound, int | float):
        return False, ""
    beyond = value > bound if alarm.get("direction") == "up" else value < bound
    return beyond, f"; this trace's {value:g} is {'beyond' if beyond else 'within'} its bound {bound:g}"


def _episode_open(det: Any, fallback: bool) -> bool:
    """The detector's own word on whether its alarm episode is still open (a detector without
    episodes: open from its first alarm until a re-baseline)."""
    value = getattr(det, "alarm_open", None)
    return bool(value) if isinstance(value, bool) else fallback


class SessionCache:
    """This worker's sessions as last written: ``(tenant, session) → (trace id, version, Trace)``.

    An entry is used only when the session row's ``version`` is the one this worker wrote (no other
    worker appended since); an append takes it out for its transaction and puts it back after the
    commit, so a rolled-back append leaves nothing behind. At most ``max_steps`` steps are kept
    (least recently used sessions go first).
    """

    def __init__(self, max_steps: int = 200_000) -> None:
        self.max_steps = max_steps
        self._entries: OrderedDict[tuple[str, str], tuple[str, int, Trace]] = OrderedDict()
        self._steps = 0
        self._lock = threading.Lock()

    def take(self, tenant: str, session_id: str, trace_id: str, version: int) -> tuple[Trace | None, bool]:
        """The cached trace when current (and ``True``: its steps are in rows), else ``(None, False)``."""
        with self._lock:
            hit = self._entries.pop((tenant, session_id), None)
            if hit is not None:
                self._steps -= len(hit[2].steps)
        if hit is None or hit[0] != trace_id or hit[1] != version:
            return None, False
        return hit[2], True

    def put(self, tenant: str, session_id: str, trace: Trace, version: int) -> None:
        with self._lock:
            old = self._entries.pop((tenant, session_id), None)
            if old is not None:
                self._steps -= len(old[2].steps)
            self._entries[(tenant, session_id)] = (trace.id, version, trace)
            self._steps += len(trace.steps)
            while self._steps > self.max_steps and len(self._entries) > 1:
                _, (_, _, gone) = self._entries.popitem(last=False)
                self._steps -= len(gone.steps)

    def drop(self, tenant: str, session_id: str) -> None:
        with self._lock:
            old = self._entries.pop((tenant, session_id), None)
            if old is not None:
                self._steps -= len(old[2].steps)


def _new_id() -> str:
    import uuid

    return uuid.uuid4().hex


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _stream_agent(agent: str | None, task_type: str, *, where: str = "") -> str:
    """The agent a posted stream belongs to: ``agent``; else ``task_type`` (streams were keyed by
    it before, and a run naming no agent resolves to its task type); else ``""``, every agent.
    Names are cleaned as a run's are (:func:`model.core.agents.clean_agent_name`: outer blanks off).
    Both given and different: an :class:`InputError` naming ``task_type`` (``where``: its prefix)."""
    task = clean_agent_name(task_type) or ""
    if agent is None:
        return task
    name = clean_agent_name(agent) or ""
    if task and task != name:
        raise InputError(
            f"agent {agent!r} and task_type {task_type!r} name two streams; give the agent only",
            path=f"{where}task_type",
        )
    return name


def _check_stream_name(name: str) -> None:
    if not name or len(name) > 200 or not name.isprintable():
        raise InputError("a stream name is 1-200 printable characters", path="path.name")


def _link_across_calls(steps: list[Step], first: int) -> list[int]:
    """Join what one call appended (``steps[first:]``) to what earlier calls did; the indices of
    earlier steps it changed.

    A tool result naming a call made in an earlier append gets that call's tool name; an earlier
    ``final_output`` that more work now follows is an ``llm_output`` again (the importer marked
    it final only because its batch ended there). Reads back only as far as it has to: to the
    named call, and to the last step that already had work after it when earlier appends ran.
    """
    calls: dict[str, str | None] = {}
    back = first - 1
    for s in steps[first:]:
        if s.kind == StepKind.TOOL_RESULT and s.tool_name is None and s.call_id:
            while s.call_id not in calls and back >= 0:
                b = steps[back]
                if b.kind == StepKind.TOOL_CALL and b.call_id and b.call_id not in calls:
                    calls[b.call_id] = b.tool_name
                back -= 1
            s.tool_name = calls.get(s.call_id)
        elif s.kind == StepKind.TOOL_CALL and s.call_id:
            calls[s.call_id] = s.tool_name
    changed = []
    later_blocker = False
    for i in range(len(steps) - 1, -1, -1):
        if steps[i].kind == StepKind.FINAL_OUTPUT and later_blocker:
            steps[i].kind = StepKind.LLM_OUTPUT
            if i < first:
                changed.append(i)
        if steps[i].kind in _FINAL_BLOCKERS:
            if i < first and later_blocker:
                break  # earlier appends already re-marked everything before this step
            later_blocker = True
    return changed


def _summary(r: TraceRow) -> TraceSummary:
    return TraceSummary(
        id=r.id,
        session_id=r.session_id,
        task_type=r.task_type,
        created_at=r.created_at,
        updated_at=r.updated_at,
        steps=r.n_steps,
        healthy=r.healthy,
        primary_kind=r.primary_kind,
        shadow=r.shadow,
        agent=r.agent,
    )


def _failure_states(row: SessionRow) -> list[FailureState]:
    out = []
    for key, fs in ((row.state or {}).get("failures") or {}).items():
        out.append(
            FailureState(
                key=key,
                kind=FailureKind(fs["kind"]),
                source_index=fs.get("source_index"),
                step=fs.get("step"),
                status=fs["status"],
                rung=int(fs.get("rung", 0)),
                attempt=int(fs.get("attempt", 1)),
                recommendation=fs.get("rec"),
            )
        )
    return out


__all__ = ["CHANGEPOINT_WINDOW", "ConflictError", "NotFoundError", "TriageService"]


def _run_label(rows: list[dict[str, Any]]) -> RunLabelOut | None:
    eff = effective_label(rows)
    if eff is None:
        return None
    return RunLabelOut(
        failed=eff.failed,
        author=eff.author,
        author_type="checker" if eff.author_type == "checker" else "human",
        created_at=eff.created_at,
        failures=[LocatedFailureOut(kind=f.kind, step=f.step, source_index=f.source_index) for f in eff.failures],
        labels=eff.labels,
    )
