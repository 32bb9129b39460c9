"""The diagnosis pipeline: redact → load the context → decide once → store → export.

The decision — failures, primary, probability, the recommendation and the new repair state — is
:meth:`model.diagnosis.diagnoser.Diagnoser.decide`'s alone; this service loads what it reads (the
agent's served model or its zero-shot re-centring, the relative operating point, open stream alarms,
the repair state, the canary arm: :meth:`Diagnoses.context`, :meth:`Diagnoses.decide`), then stores
the verdict. :meth:`Diagnoses.diagnose` runs it on a whole trace (``POST /v1/diagnose``, the heavy
lane); :class:`serve.services.sessions.Sessions` on a session's steps as they arrive. Everything here
is synchronous (SQLAlchemy, onnxruntime); routes run it in the thread pool.

Storage rules (docs/architecture.md, "The stateful service"):

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
import dataclasses
import time
from typing import Any

import numpy as np

from model.core.findings import DiagnosisResponse
from model.core.kinds import Strategy
from model.core.options import DiagnoseOptions
from model.core.schema import Trace
from model.diagnosis.agent_answer import Prefix
from model.diagnosis.decision import Context, Verdict
from model.diagnosis.diagnoser import RUNSCORE, Diagnoser
from model.diagnosis.otel_events import evaluation_events
from model.diagnosis.repair_engine import Decision
from model.scoring.runscore.model import RunScorer
from serve.ratelimit import FairLock, RateLimiter, utc_day
from serve.redaction import Redactor
from serve.services.agent_models import AgentModels, Recentring
from serve.services.agents import Agents, Resolved
from serve.services.canary import Arm, session_arm
from serve.services.otel_export import EvaluationExporter
from serve.services.streams import Streams
from serve.store.agents import AgentStore
from serve.store.encodings import EncodingStore
from serve.store.labels import LabelStore
from serve.store.sessions import SessionStore
from serve.store.streams import StreamStore
from serve.store.tables import SessionRow
from serve.store.traces import StoredRun, TracePrior, TraceRows, TraceStore
from serve.validation import check_trace_fields

#: Recent runs the relative operating point reads, and how long a worker trusts its value.
RELATIVE_WINDOW = 500
RELATIVE_TTL_S = 30.0

@dataclasses.dataclass(frozen=True)
class Written:
    """What a whole trace's diagnosis writes, made before its transaction (:meth:`Diagnoses.written`):
    the answer and the repair state (redacted JSON), the new recommendation (``None``: none to store)
    and the values fed into the agent's streams."""

    response: dict[str, Any]
    state: dict[str, Any]
    recommendation: dict[str, Any] | None
    observed: dict[str, float]


class Diagnoses:
    """Diagnoser (with its repair engine) + store, for one process (one per worker, built in the lifespan).

    Parameters
    ----------
    session_store, trace_store, label_store, agent_store, stream_store:
        The stores it reads and writes (a diagnosis's writes are one transaction).
    encoding_store:
        Where the step vectors of an agent model's encoder block are kept with the run
        (:mod:`serve.store.encodings`); ``None``: not kept.
    diagnoser, redactor, streams:
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
        encoding_store: EncodingStore | None = None,
    ) -> None:
        self.session_store = session_store
        self.trace_store = trace_store
        self.label_store = label_store
        self.agent_store = agent_store
        self.stream_store = stream_store
        self.diagnoser = diagnoser
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
        # The step vectors an agent model's encoder block read, kept with the run (None: not kept)
        self.encoding_store = encoding_store

    def model_version(self, tenant: str) -> str:
        """What the tenant's responses name as ``model_version`` (:mod:`serve.services.agent_models`)."""
        return self.diagnoser.model_version

    def detector_versions(self) -> dict[str, str]:
        return {name: d.version for name, d in self.diagnoser.detectors.items()}

    # -- a whole trace ---------------------------------------------------------------------------
    def diagnose(
        self, tenant: str, trace: Trace, options: DiagnoseOptions
    ) -> DiagnosisResponse:
        """Diagnose a whole trace with its agent's context and its session's repair state, record it
        and feed its metrics into the agent's streams; return the response.

        The decision (:meth:`model.diagnosis.diagnoser.Diagnoser.decide`) runs before the write
        transaction, on the repair state as read then; if the state locked in the transaction differs
        (another request of the same session or trace came between), it runs again on that one."""
        check_trace_fields(trace)
        # Redact first, then diagnose: evidence is cut from redacted text, so no cut secret (a key's
        # prefix) reaches the response, the store or the repair state.
        trace = self.redactor.redact_trace(trace)
        # what is stored of the run, read once before deciding: its session's row, else the trace id's own
        # (a session-less trace id posted again: a client re-sending a growing run)
        session = self.session_store.get_session(tenant, trace.session_id) if trace.session_id else None
        stored = None if trace.session_id else self.trace_store.stored_run(tenant, trace.id)
        resolved = self.agents.resolve(tenant, trace, options,
                                       fixed=lambda: self.stored_agent(tenant, trace, session, stored))
        agent = resolved.agent
        session_key = trace.session_id or f"trace:{trace.id}"
        ctx = self.context(tenant, trace, agent, options)
        seen = copy.deepcopy((session.state if session is not None else stored.policy_state if stored else None) or {})
        if trace.session_id:
            fix_session_agent(seen, resolved)
        verdict, stored_arm, options = self.decide(tenant, session_key, trace, ctx, copy.deepcopy(seen))
        stored_trace = trace.model_dump(mode="json", exclude_none=True)
        # What the transaction writes is made before it: the transaction holds store work only (on SQLite
        # every writer of the database waits for it), and is made again only when the state moved.
        out = self.written(trace, verdict, resolved)

        def rows() -> TraceRows:  # a session's repair state is its row's, not the trace's
            return self.trace_store.trace_rows(
                tenant=tenant, trace_id=trace.id, trace=stored_trace, response=out.response,
                session_id=trace.session_id, task_type=trace.task_type, shadow=options.shadow,
                policy_state=None if trace.session_id else out.state, arm=stored_arm, agent=agent)

        made = rows()
        with self.session_store.unit() as db:  # the driver's connection: every statement is prepared
            row = None
            prior: TracePrior | None | bool = True

            def put(only_new: bool = False) -> bool:
                return self.trace_store.write_trace(db, made, prior=prior, only_new=only_new)

            written = False
            if trace.session_id:  # the session's repair state
                row = self.session_store.lock_session(db, tenant, session_key, create_trace_id=trace.id)
                assert row is not None
                state = copy.deepcopy(row.state or {})
                fix_session_agent(state, resolved)
            else:  # the trace's own: a run read as new is inserted (decided on no state, as a new row has)
                # unless a row came meanwhile, which is then locked (and decided on again if its state moved)
                written = stored is None and put(only_new=True)
                if not written:
                    prior = self.trace_store.lock_trace(db, tenant, trace.id)
                    state = copy.deepcopy(prior.policy_state or {}) if prior is not None else {}
            if not written:
                if state != seen:  # it moved since it was read: decide again on the locked state
                    verdict, stored_arm, options = self.decide(tenant, session_key, trace, ctx, state)
                    out = self.written(trace, verdict, resolved)
                    made = rows()
                put()
            # a whole run: write_trace has deleted the run's old vectors (a new run on SQLite has none)
            self.store_encoding(db, tenant, trace.id, verdict.prefix, replace=False)
            self.put_recommendation(db, tenant, verdict.decision, out.recommendation, trace.id, trace.session_id)
            if row is not None:
                self.session_store.save_session_state(row, out.state)
            self.agents.record(db, tenant, resolved)
            # The rows every request of the tenant (usage) or of the agent (its streams) updates come
            # last: on PostgreSQL their locks are held from here to the commit only.
            if out.observed:  # shadow mode observes too
                self.streams.feed_values(db, tenant, trace.id, agent, out.observed)
            self.spend_steps(db, tenant, len(trace.steps))
        resp = verdict.response
        self.export(trace, resp)
        return resp

    def written(self, trace: Trace, verdict: Verdict, resolved: Resolved) -> Written:
        """What a diagnosis of a whole ``trace`` stores of ``verdict`` (the answer named with its agent)."""
        resp, decision = verdict.response, verdict.decision
        self.name_agent(resp, resolved)
        return Written(
            response=self.redactor.redact(resp.model_dump(mode="json")),
            state=self.redactor.redact(verdict.state),
            recommendation=self.new_recommendation(decision),
            observed=self.streams.observed(trace, resp) if self.streams.autofeed else {},
        )

    def context(self, tenant: str, trace: Trace, agent: str, options: DiagnoseOptions, *,
                run_verdict: bool = True) -> Context:
        """What a decision on ``trace`` reads besides it (:class:`~model.diagnosis.decision.Context`): the
        agent's served model, else the zero-shot re-centring on its labelled runs; the operating point
        relative to its runs (``run_verdict``: a whole run, whose probability may decide); the findings
        of its open stream alarms."""
        served = self.models.get(tenant, agent)
        scorer = self.diagnoser.runscorer
        # the zero-shot probability is re-centred only where the run scorer runs (a request may leave it out)
        scored = scorer is not None and (options.detectors is None or RUNSCORE in options.detectors)
        return Context(
            options=options, served=served, agent=agent,
            recentring=self.recentring.get(tenant, agent) if served is None and scored else (0, 0.0),
            run_threshold=self.relative_threshold(tenant, agent, scorer) if run_verdict else None,
            alarms=self.streams.degradation_findings(tenant, trace, agent),
        )

    def decide(self, tenant: str, session_key: str, trace: Trace, ctx: Context, state: dict[str, Any]
               ) -> tuple[Verdict, Arm | None, DiagnoseOptions]:
        """The one decision on ``trace`` (under the worker's model lock) with ``state`` as the repair
        state (updated in place): the verdict, with the run's canary arm on its response; the arm as
        stored; the options the decision got (:meth:`_canary`)."""
        arm, stored_arm, options = self._canary(state, tenant, session_key, ctx.options)
        ctx = dataclasses.replace(ctx, options=options, state=state, session_key=session_key, now=time.time())
        with self._model_lock.hold(tenant):
            verdict = self.diagnoser.decide(trace, ctx)
        verdict.response.arm = arm
        return verdict, stored_arm, options

    def stored_agent(self, tenant: str, trace: Trace, session: SessionRow | None, stored: StoredRun | None
                     ) -> tuple[str, str | None] | None:
        """The agent the run's ``session`` (its row as read) was given at its first append, else the one
        a stored run of this trace id has (``stored``: a session-less one's, as read); ``None`` when
        neither is stored (an unnamed run is then inferred)."""
        if not trace.session_id:
            return (stored.agent, stored.agent_source) if stored is not None else None
        fixed = session_agent(session.state if session is not None else None)
        if fixed is not None:
            return fixed
        if session is not None and session.trace_id != trace.id:  # a session stored before its agent was fixed
            earlier = self.agent_store.stored_agent(tenant, session.trace_id)
            if earlier is not None:
                return earlier
        return self.agent_store.stored_agent(tenant, trace.id)

    @staticmethod
    def name_agent(resp: DiagnosisResponse, resolved: Resolved) -> None:
        """The answer says which agent and how it was found (schema 1.4)."""
        resp.agent = resolved.agent
        resp.agent_source = resolved.source

    # -- what both whole traces and sessions store -------------------------------------------------
    def record_recommendation(
        self, db: Any, tenant: str, decision: Decision, trace_id: str, session_id: str | None
    ) -> None:
        """Store a new recommendation (redacted) so that an outcome can be reported on it."""
        self.put_recommendation(db, tenant, decision, self.new_recommendation(decision), trace_id, session_id)

    def new_recommendation(self, decision: Decision) -> dict[str, Any] | None:
        """``decision``'s recommendation as stored (redacted JSON), or ``None`` when there is none to store:
        not new, or ``continue`` (nothing to report an outcome on)."""
        rec = decision.recommendation
        if not decision.new or rec.strategy == Strategy.CONTINUE:
            return None
        stored: dict[str, Any] = self.redactor.redact(rec.model_dump(mode="json"))
        return stored

    def put_recommendation(self, db: Any, tenant: str, decision: Decision, rec: dict[str, Any] | None,
                           trace_id: str, session_id: str | None) -> None:
        """Store ``decision``'s new recommendation, ``rec`` (redacted JSON; ``None``: none to store)."""
        if rec is None:
            return
        self.session_store.put_recommendation(
            db,
            tenant=tenant,
            rec=rec,
            trace_id=trace_id,
            session_id=session_id,
            failure_key=decision.failure_key,
            kind=decision.failure_key.split("@")[0] if decision.failure_key else None,
            rung=decision.rung,
            attempt=decision.attempt,
            status="open",
        )

    def store_encoding(self, db: Any, tenant: str, trace_id: str, prefix: Prefix | None, *,
                       replace: bool = True) -> None:
        """Keep the step vectors the agent model encoded for this answer with the run (this transaction):
        a retrain, and a later read of the session, then never encode those steps again. ``replace=False``:
        the run's vectors were deleted in this transaction already (:meth:`EncodingStore.put`)."""
        if self.encoding_store is None or prefix is None or prefix.encoded is None or prefix.encoder is None:
            return
        first, vectors = prefix.encoded
        self.encoding_store.put(db, tenant, trace_id, first, prefix.encoder, vectors, replace=replace)

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


__all__ = ["RELATIVE_TTL_S", "RELATIVE_WINDOW", "Diagnoses", "Written", "fix_session_agent", "session_agent"]
