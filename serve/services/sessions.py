"""Real-time sessions: steps (or OTLP spans) appended as the agent takes them, each append diagnosed
through the pipeline of :mod:`serve.services.diagnoses` on the session so far.

The cost of an append does not grow with the session: the new steps are written as rows of their
own, the session's trace stays in this worker's cache (re-read from the store only when another
worker appended meanwhile), and the detectors read a window of the newest steps
(:mod:`model.diagnosis.incremental`). An agent model that reads the encoder block encodes only the new
steps (redacted first), and their vectors are stored with the run (:mod:`serve.store.encodings`): a
worker that re-reads the session takes the earlier steps' vectors from there.
"""

from __future__ import annotations

import functools
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, overload

import orjson

from model.core.agents import AGENT_METADATA_KEY
from model.core.errors import InputError, NotFoundError, TooLargeError
from model.core.findings import DiagnosisResponse
from model.core.kinds import FailureKind
from model.core.options import DiagnoseOptions
from model.core.schema import Step, StepKind, ToolDefinition, Trace
from model.diagnosis.agent_answer import Prefix, SessionPrefix
from model.diagnosis.diagnoser import RUNSCORE
from model.diagnosis.incremental import IncrementalDiagnoser, SessionWindow
from model.importers import genai, load_trace, openinference
from model.importers.live import LiveSpans
from model.importers.spans import collect_spans, group_runs
from serve.schemas import AppendStepsRequest, FailureState, SessionStepResponse, SessionView
from serve.services.diagnoses import Diagnoses, fix_session_agent, session_agent
from serve.store.agents import AgentStore
from serve.store.sessions import SessionStore
from serve.store.tables import SessionRow
from serve.store.traces import TraceStore
from serve.validation import check_id, check_index

#: Agent-model prefix states a worker keeps between appends (a session whose state was dropped reads
#: its steps once on its next append).
MAX_PREFIX_STATES = 20_000
#: OTLP sessions whose last chat input a worker keeps (the least recently fed go first).
MAX_CONVERSATIONS = 1_000
MAX_CONVERSATION_MESSAGES = 200_000
_FINAL_BLOCKERS = {StepKind.TOOL_CALL, StepKind.TOOL_RESULT, StepKind.USER_INPUT, StepKind.ERROR}
#: Importer of an append: ``(session state, first source index) → (new steps, next source index)``.
Importer = Callable[[dict[str, Any], int], tuple[list[Step], int]]


class Sessions:
    """Appends, reads and deletes sessions. ``session_exclude`` names detectors that make no sense on
    a run still going (``incomplete``: the run has not ended yet); ``window``: the steps the
    detectors read per append."""

    def __init__(self, diagnoses: Diagnoses, session_store: SessionStore, trace_store: TraceStore,
                 agent_store: AgentStore, *, max_steps: int = 5000,
                 session_exclude: Sequence[str] = ("incomplete",), window: int = 64) -> None:
        self.diagnoses = diagnoses
        self.session_store = session_store
        self.trace_store = trace_store
        self.agent_store = agent_store
        self.redactor = diagnoses.redactor
        self.max_steps = max_steps
        self.session_exclude = frozenset(session_exclude)
        self.incremental = IncrementalDiagnoser(diagnoses.diagnoser, window=window)
        # This worker's agent-model prefix state per session: (tenant, session) → (model, steps, state);
        # taken out for an append's transaction and put back after its commit (as the session cache).
        self._prefix: dict[tuple[str, str], Prefix] = {}
        self._prefix_lock = threading.Lock()
        self._cache = SessionCache()
        self._redacted = RedactedFindings(self.redactor)
        # OTLP sessions: the last chat input each read (model.importers.live.LiveSpans.last)
        self._conversations: dict[tuple[str, str], Any] = {}

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
        arrival order (within one export, by start time); each session keeps what the import needs
        to go on (:mod:`model.importers.live`: the span tree's links, the conversation's fingerprints,
        the tool calls), not the spans, so an export costs only its own spans and chat spans repeating
        the conversation add only what is new. Runs without GenAI or
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
                    if self.session_store.get_session(tenant, tid_key) is not None:
                        key = tid_key
                        break
            out[key] = self._append(
                tenant, key, DiagnoseOptions(), functools.partial(self._import_spans, (tenant, key), payload), field="spans",
            )
        return out

    def get_session(self, tenant: str, session_id: str) -> SessionView:
        row = self.session_store.get_session(tenant, session_id)
        if row is None:
            raise NotFoundError(f"no session {session_id!r} for this tenant")
        trace_row = self.trace_store.get_trace(tenant, row.trace_id)
        last = DiagnosisResponse.model_validate(trace_row.response) if trace_row is not None else None
        return SessionView(
            model_version=self.diagnoses.model_version(tenant),
            detector_versions=self.diagnoses.detector_versions(),
            session_id=row.id,
            trace_id=row.trace_id,
            agent=trace_row.agent if trace_row is not None else (session_agent(row.state) or (None,))[0],
            created_at=row.created_at,
            updated_at=row.updated_at,
            steps=row.n_steps,
            next_source_index=row.next_source_index,
            failures=_failure_states(row),
            replan_global_used=int((row.state or {}).get("replan_global", 0)),
            last=last,
        )

    def delete_session(self, tenant: str, session_id: str) -> None:
        self._cache.drop(tenant, session_id)
        with self._prefix_lock:
            self._conversations.pop((tenant, session_id), None)
        if not self.trace_store.delete_session(tenant, session_id):
            raise NotFoundError(f"no session {session_id!r} for this tenant")

    # -- an append -------------------------------------------------------------------------------
    def _append(
        self,
        tenant: str,
        session_id: str,
        options: DiagnoseOptions,
        importer: Importer,
        *,
        field: str,
        task_type: str | None = None,
        language: str | None = None,
        tools: list[ToolDefinition] | None = None,
        agent: str | None = None,
    ) -> SessionStepResponse | None:
        """Lock the session, import the new steps (``importer(state, offset)``), diagnose, store.

        ``agent``: the agent this append names (the session keeps the latest named;
        :meth:`serve.services.agents.Agents.resolve` falls back on the spans, the task type when the
        options ask, the agent fixed at the session's first append, else infers one).
        """
        check_id(session_id, path="path.session_id")
        diagnoses = self.diagnoses
        diagnoser = diagnoses.diagnoser
        wanted = [n for n in (options.detectors or list(diagnoser.detectors)) if n not in self.session_exclude]
        if options.detectors is None and diagnoser.runscorer is not None and RUNSCORE not in self.session_exclude:
            wanted.append(RUNSCORE)  # failure_probability and attribution so far (they decide nothing mid-run)
        with self.session_store.unit() as db:  # the driver's connection (an ORM session only where a read needs one)
            row = self.session_store.lock_session(db, tenant, session_id, create_trace_id=_new_trace_id)
            assert row is not None
            # Taken out of the cache for the transaction: put back only once it has committed.
            trace, in_rows = self._cache.take(tenant, session_id, row.trace_id, row.version)
            if trace is None:
                # a session this append created has a new trace id: nothing stored under it yet
                stored = None if row.created else self.trace_store.read_trace(db, tenant, row.trace_id)
                if stored is not None:
                    trace, in_rows = Trace.model_validate(stored[0]), stored[1]
                else:
                    trace, in_rows = Trace(id=row.trace_id, session_id=session_id), True
            # (a session first seen through /v1/diagnose has a whole trace but no counters yet)
            offset = max(row.next_source_index, max((st.source_index + 1 for st in trace.steps[-1:]), default=0))
            state = row.state or {}  # this transaction's row: changed in place, written whole (or rolled back)
            new_steps, next_source = importer(state, offset)
            check_index(next_source, path=field)
            if len(trace.steps) + len(new_steps) > self.max_steps:
                raise TooLargeError(
                    f"session would have {len(trace.steps) + len(new_steps)} steps; the limit is {self.max_steps}",
                    path=field,
                )
            if not new_steps:  # nothing to diagnose yet; keep what the importer kept
                self.session_store.save_session_state(row, state, next_source_index=next_source)
                return None
            diagnoses.spend_steps(db, tenant, len(new_steps))
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
            resolved = diagnoses.agents.resolve(
                tenant, trace, options.model_copy(update={"agent": state.get("agent")}),
                # fixed at the first append; a session stored before that (revision 0013): its run's agent
                fixed=lambda: session_agent(state) or (self.agent_store.stored_agent(tenant, row.trace_id) if first else None),
                db=db)
            fix_session_agent(state, resolved)
            ctx = diagnoses.context(tenant, trace, resolved.agent, options, run_verdict=False)
            with self._prefix_lock:
                kept = self._prefix.pop((tenant, session_id), None)
            ctx.window = SessionWindow(self.incremental, state, detectors=wanted)
            if ctx.served is not None:
                encodings = diagnoses.encoding_store
                ctx.prefix = SessionPrefix(
                    kept=kept, first=first, relabelled=sum(1 for i in changed if i < first),
                    memo=state.get("agent_model") or {},
                    # a re-read (another worker appended, or a new model) takes the earlier steps' stored vectors
                    stored=None if encodings is None else
                    functools.partial(encodings.read_run, db, tenant, trace.id, first))
            verdict, stored_arm, options = diagnoses.decide(tenant, session_id, trace, ctx, state)
            diag, decision = verdict.response, verdict.decision
            diagnoses.name_agent(diag, resolved)
            state = self._redacted.state(state)
            resp = _step_response(diag, session_id=session_id, appended=list(range(first, len(trace.steps))),
                                  source_indices=list(range(offset, next_source)), session_steps=len(trace.steps))
            # Only the new steps, and the earlier ones the append re-linked, are written.
            written = range(len(trace.steps)) if not in_rows else [*sorted(changed), *range(first, len(trace.steps))]
            self.trace_store.put_steps(
                db, tenant, trace.id, {i: trace.steps[i].model_dump(mode="json", exclude_none=True) for i in written}
            )
            self.trace_store.put_trace(
                db,
                tenant=tenant,
                trace_id=trace.id,
                # steps already redacted; the header only (its steps are rows of their own)
                trace=trace.model_dump(mode="json", exclude_none=True, exclude={"steps"}) | {"steps": []},
                response=self._redacted.response(diag.model_dump(mode="json")),
                session_id=session_id,
                task_type=trace.task_type,
                shadow=options.shadow,
                n_steps=len(trace.steps),
                steps_in_rows=True,
                arm=stored_arm,
                agent=resolved.agent,
                step_tools=StepTools(trace.steps),
            )
            diagnoses.store_encoding(db, tenant, trace.id, verdict.prefix)  # the new steps' vectors only
            diagnoses.record_recommendation(db, tenant, decision, trace.id, session_id)
            diagnoses.agents.record(db, tenant, resolved)
            version = self.session_store.save_session_state(
                row, state, n_steps=len(trace.steps), next_source_index=next_source
            )
        self._cache.put(tenant, session_id, trace, version)
        if verdict.prefix is not None:
            with self._prefix_lock:
                self._prefix[(tenant, session_id)] = verdict.prefix.kept()
                while len(self._prefix) > MAX_PREFIX_STATES:  # the oldest sessions' go first (rebuilt if needed)
                    self._prefix.pop(next(iter(self._prefix)))
        diagnoses.export(trace, resp)
        return resp

    # -- importers -------------------------------------------------------------------------------
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

    def _import_spans(
        self, session_key: tuple[str, str], payload: list[dict[str, Any]], state: dict[str, Any], offset: int
    ) -> tuple[list[Step], int]:
        """The steps the new spans add to the session's run: the import continues from what the
        session keeps of its earlier spans (:mod:`model.importers.live`), reading only these."""
        with self._prefix_lock:
            last = self._conversations.pop(session_key, None)
        live = LiveSpans(state.get("otlp"), base=offset, last=last)
        if live.spans + len(payload) > self.max_steps:
            raise TooLargeError(
                f"session would have {live.spans + len(payload)} spans; the limit is {self.max_steps}", path="spans"
            )
        new = live.add(payload, max_steps=self.max_steps)
        state["otlp"] = live.state()
        if live.last is not None:  # kept even if this append rolls back: it stands for its messages only
            with self._prefix_lock:
                self._conversations[session_key] = live.last
                held = sum(len(c[0]) for c in self._conversations.values())
                while held > MAX_CONVERSATION_MESSAGES or len(self._conversations) > MAX_CONVERSATIONS:
                    held -= len(self._conversations.pop(next(iter(self._conversations)))[0])
        if live.root_agent and live.steps:  # the session's root agent span: its agent (model/core/agents.py)
            state["span_agent"] = live.root_agent
        return new, live.next_source_index


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


class RedactedFindings:
    """What an append stores, redacted, with each finding redacted once per worker: a session's
    findings are mostly those earlier appends found (frozen, or the classifier's), and its repair
    state's failure records (``failures``: key → record) mostly those earlier appends kept, so the
    redactor's output is remembered by the finding's (the record's) JSON (at most ``size`` of them, the
    oldest forgotten)."""

    _FINDINGS = ("failures", "signals", "findings", "frozen", "recent")

    def __init__(self, redactor: Any, size: int = 20_000) -> None:
        self.redactor = redactor
        self.size = size
        self._memo: OrderedDict[bytes, bytes | None] = OrderedDict()  # None: unchanged
        self._lock = threading.Lock()

    def response(self, resp: dict[str, Any]) -> dict[str, Any]:
        """A diagnosis (JSON) as stored."""
        return self._dict(resp)

    def state(self, state: dict[str, Any]) -> dict[str, Any]:
        """A session's state as stored: ``otlp`` as it is (read from spans already redacted in
        :meth:`Sessions.append_spans`: ids, digests), the detectors' findings through the memo."""
        otlp = state.get("otlp")
        out = self._dict({k: v for k, v in state.items() if k != "otlp"}, deep=("classifier", "rules"))
        if otlp is not None:
            out["otlp"] = otlp
        return out

    def _dict(self, value: dict[str, Any], deep: tuple[str, ...] = ()) -> dict[str, Any]:
        plain = self.redactor.redact({k: v for k, v in value.items() if k not in self._FINDINGS and k not in deep})
        out: dict[str, Any] = {}
        for k, v in value.items():
            if k in deep and isinstance(v, dict):
                out[k] = self._dict(v)
            elif k in self._FINDINGS and isinstance(v, list):
                out[k] = [self._finding(f) for f in v]
            elif k in self._FINDINGS and isinstance(v, dict):  # a session's repair state: failure key → its record
                out[k] = {rk: rv for item in v.items() for rk, rv in self._finding(dict([item])).items()}
            elif k in self._FINDINGS or k in deep:
                out[k] = self.redactor.redact({k: v})[k]
            else:
                out[k] = plain[k]
        return out

    def _finding(self, finding: Any) -> Any:
        """``finding`` redacted: remembered by its JSON (orjson's: a few hundred a long session's append),
        the redacted JSON kept only where the redactor changed something. A hit must equal its key's
        value read back (a NaN, which orjson writes as ``null``, or a tuple never takes another value's
        redaction); a finding the redactor leaves as it is comes back itself."""
        try:
            key = orjson.dumps(finding, default=str)
        except (TypeError, orjson.JSONEncodeError):  # what orjson refuses (an int past 64 bits, a lone surrogate)
            return self.redactor.redact(finding)
        with self._lock:
            known = key in self._memo
            if known:
                self._memo.move_to_end(key)
                hit = self._memo[key]
        if known and orjson.loads(key) == finding:
            return finding if hit is None else orjson.loads(hit)  # a copy: the caller's to change
        done = self.redactor.redact(finding)
        with self._lock:
            self._memo[key] = None if done == finding else orjson.dumps(done)
            while len(self._memo) > self.size:
                self._memo.popitem(last=False)
        return done


class StepTools(Sequence[str | None]):
    """Each step's tool name, read when asked (the store reads those of the steps failures name),
    so that storing a diagnosis does not walk the whole session."""

    def __init__(self, steps: list[Step]) -> None:
        self._steps = steps

    def __len__(self) -> int:
        return len(self._steps)

    @overload
    def __getitem__(self, i: int) -> str | None: ...

    @overload
    def __getitem__(self, i: slice) -> list[str | None]: ...

    def __getitem__(self, i: int | slice) -> str | None | list[str | None]:
        if isinstance(i, slice):
            return [s.tool_name for s in self._steps[i]]
        return self._steps[i].tool_name


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


def _new_trace_id() -> str:
    return uuid.uuid4().hex


def _step_response(diag: DiagnosisResponse, **session: Any) -> SessionStepResponse:
    """``diag`` as the session step's answer, its failures with their reach: validated from its fields as
    they are (half the time of a dump validated again; ``model_construct`` takes longer still)."""
    return SessionStepResponse.model_validate({
        **diag.__dict__, "failures": [f.__dict__ for f in diag.failures], "signals": [f.__dict__ for f in diag.signals],
        "primary": None if diag.primary is None else diag.primary.__dict__, **session})


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


__all__ = ["MAX_CONVERSATIONS", "MAX_PREFIX_STATES", "SessionCache", "Sessions"]
