"""The reference repair executor: it carries out every strategy the service recommends.

The service recommends (retry after 1.1 s, switch to ``weather_alt``, roll back, inject this
system message, hand off); this module does it, for an agent that keeps its conversation as a
list of messages (OpenAI shape) and, beside it, any state of its own. Two layers:

- :class:`RepairExecutor` — framework-free; the adapters (LangChain middleware, OpenAI Agents SDK
  hooks) and :class:`~agent_triage_client.agent.TriageAgent` build on it.

  * ``add(*messages) -> SessionStep``: snapshot (messages + state) before each message, append it
    locally, send it to ``POST /v1/sessions/{id}/steps`` (with the equivalents and fallback models
    as options), and judge the repairs still waiting for their result (below).
  * ``add_error(content, error_type=…) -> SessionStep``: a failed LLM call, sent as a native
    ``error`` step (it is no message of the conversation).
  * ``handle(rec, context) -> RepairResult``: carry out **one** recommendation and report its
    outcome (``POST /v1/outcomes``); ``result.next`` is the ladder's next rung when it failed.
  * ``repair(rec, context) -> list[RepairResult]``: ``handle`` and climb while a repair fails and
    the service gives a next rung (bounded by the service's budgets, and locally by
    ``max_repairs``).
  * one method per strategy, callable on its own: :meth:`retry`, :meth:`adjust_parameters`,
    :meth:`switch_tool`, :meth:`inject` (``self_correct`` / ``clarify`` / ``refresh_context``),
    :meth:`rollback`, :meth:`replan` (``replan_local`` / ``replan_global``),
    :meth:`fallback_model`, :meth:`human_handoff`.

- What a strategy needs from the agent comes in a :class:`RepairContext`: the failed tool and its
  arguments, ``call_tool(name, arguments)`` and ``call_llm(model, params)`` to repeat a step (each
  raises on failure), the agent's LLM (for a context-refresh summary) and its current parameters.

The strategies
--------------
``retry``
    Wait (the service's ``delay_s``, never less than ``retry_after`` from the recommendation or
    the error's own ``retry_after`` attribute; full jitter when the service gave no delay), repeat
    the call, report; go on while the service answers ``retry`` (its ``attempt`` ≤
    ``max_attempts``) and the wait fits ``task_recovery_s_left`` and ``max_wait_s``. The last
    attempt's outcome is always reported, so nothing is left open.
``adjust_parameters``
    Repeat the call with lower temperature (``≤ params.max_temperature``), fewer tokens
    (``max_tokens × max_tokens_factor``), a longer timeout (``× timeout_factor``) and a smaller
    page (``limit`` / ``page_size`` / ``top_k`` / … ``× page_size_factor``) — the parameters come
    from the recommendation.
``switch_tool``
    Call ``params.switch_to`` (or the first of ``params.alternatives`` / the executor's
    ``equivalents`` that the agent has) with the same arguments; later calls of the failed tool go
    to it (:attr:`RepairExecutor.routes`).
``self_correct`` / ``clarify`` / ``refresh_context``
    Inject the instruction as a system message (``self_correct`` adds the tool's schema when the
    service sent one); ``refresh_context`` first asks the agent's own LLM to summarise the goal
    and constraints so far and injects that summary with the instruction.
``rollback``
    Restore the messages and state from before message ``params.to_source_index``.
``replan_local`` / ``replan_global``
    ``on_replan(Replan)`` returns what to inject (messages or a text); without a callback, or when
    it returns ``None``, the instruction is injected as a system message.
``fallback_model``
    Repeat the LLM call with ``params.model`` (or the first fallback); later calls use it too
    (:attr:`RepairExecutor.model`).
``human_handoff``
    ``on_handoff(Handoff)`` — it may block (wait for a person). It returns the person's reply
    (a text, injected as a user message; the run goes on, and from then on the executor carries
    nothing out: :attr:`RepairExecutor.handed_off`) or ``None`` (the run stops). With
    ``params.block`` the offending message's content is withheld first (a poisoned tool result, an
    unsafe answer): replaced by :data:`BLOCKED`, in the messages and in what the callback sees.

Outcomes
--------
A repair that repeats a call (retry, adjust_parameters, switch_tool, fallback_model with
``call_llm``) knows at once whether it worked: an exception is a failure, a value a success. An
injected instruction, a rollback or a replan can only be judged by what the agent does next, so
its outcome **waits**: ``add`` reports it failed as soon as a failure or signal of the same kind
shows up at or after the first message sent after the repair (for a loop: a repeat there; not in
the messages the repairs wrote themselves), or when the run's final answer only tells the user it
gave up (``details.handled == "told_user"``), and reports it successful once a whole turn (two
assistant messages, or a final answer) has passed without one.
While it waits, the service repeats the standing recommendation (same ``id``); ``handle`` does not
carry it out twice (status ``"pending"``). A failed outcome's next rung replaces the
recommendation of the ``SessionStep`` that ``add`` returns, so the agent acts on it.

Budgets and failing open
------------------------
Budgets are the service's (``rec.budgets``, and the ``human_handoff`` it answers once one is
spent); the executor never repeats a call on its own beyond them. When the service is down every
call falls back (``served=False``, recommendation ``continue``): the agent runs as if triage were
absent, a repair in progress stops after the attempt it was making.

Rollback and the service's session
----------------------------------
The session keeps every step it was sent: indices go on across a rollback, the undone messages
stay in its history (and in what its detectors read). A loop's later repeats therefore extend the
same finding (its ``details.repeats`` grows), which is how ``add`` sees that a rollback did not
hold. The executor's ``messages`` are what the agent's LLM sees: the undone messages are gone.

>>> from agent_triage_client import TriageClient
>>> ex = RepairExecutor(TriageClient("http://127.0.0.1:9", budget_s=0.2), "s1")  # nothing listens
>>> ex.add({"role": "user", "content": "hi"}).recommendation.strategy
'continue'
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agent_triage_client._client import TriageClient
from agent_triage_client._errors import TriageAPIError
from agent_triage_client.models import Failure, Outcome, Recommendation, SessionStep
from agent_triage_client.snapshots import Snapshots

#: What a blocked message's content becomes.
BLOCKED = "[withheld by triage: this content was blocked]"

#: Argument names read as a page size by ``adjust_parameters``.
PAGE_KEYS = ("limit", "page_size", "per_page", "max_results", "top_k", "k", "n", "count", "size")

#: Strategies whose outcome waits for what the agent does next.
DEFERRED = frozenset({"self_correct", "clarify", "refresh_context", "rollback", "replan_local", "replan_global"})

#: The instruction the agent's LLM gets to write a context refresh's summary.
SUMMARY_PROMPT = (
    "Summarise, for yourself, the user's goal and every constraint, preference and fact stated so far in "
    "this conversation, as a short list. Leave nothing out that still applies."
)

Status = Literal["recovered", "failed", "pending", "stopped", "skipped"]
Message = dict[str, Any]
#: An LLM: ``llm(messages, **params)`` → an assistant message in OpenAI shape
#: (``{"role": "assistant", "content": …, "tool_calls": [...]}``); it raises when the call fails.
LLM = Callable[..., Mapping[str, Any]]


class RepeatFailed(Exception):
    """A repeated call returned, but ``RepairContext.check`` rejected its value."""


@dataclass(frozen=True)
class Replan:
    """What ``on_replan`` gets: ``scope`` is ``"local"`` (the current sub-task) or ``"global"``."""

    scope: Literal["local", "global"]
    recommendation: Recommendation
    instruction: str
    messages: list[Message]
    state: Any


@dataclass(frozen=True)
class Handoff:
    """What ``on_handoff`` gets. ``blocked``: the offending content was withheld (``params.block``)."""

    recommendation: Recommendation
    reason: str
    blocked: bool
    messages: list[Message]
    state: Any
    failure: Failure | None = None


#: ``on_replan(Replan)`` → messages to inject, a text (a system message), or ``None`` (the instruction).
ReplanCallback = Callable[[Replan], "Sequence[Message] | str | None"]
#: ``on_handoff(Handoff)`` → the person's reply (a user message; the run may go on) or ``None`` (stop).
HandoffCallback = Callable[[Handoff], "str | None"]


@dataclass
class RepairContext:
    """What the agent gives a repair to work with; every field is optional (a strategy that needs
    a missing one fails, and its outcome says why).

    ``call_tool(name, arguments)`` and ``call_llm(model, params)`` repeat a step (``model=None``:
    the current one) and raise on failure; ``llm`` is the agent's LLM itself (a context refresh
    asks it for the summary); ``llm_params`` its current parameters (``temperature``,
    ``max_tokens``, ``timeout``); ``failure`` the response's ``primary`` (where to block);
    ``call_id`` the failed tool call's id (a repeated call's result answers it); ``check(value)``
    says why a repeated call's value is a failure all the same (an empty answer again), else ``None``.
    """

    tool: str | None = None
    arguments: dict[str, Any] | None = None
    call_id: str | None = None
    check: Callable[[Any], str | None] | None = None
    error: BaseException | None = None
    call_tool: Callable[[str, dict[str, Any]], Any] | None = None
    call_llm: Callable[[str | None, dict[str, Any]], Any] | None = None
    llm: LLM | None = None
    llm_params: dict[str, Any] = field(default_factory=dict)
    failure: Failure | None = None


@dataclass
class RepairResult:
    """What carrying out one recommendation did.

    ``status``: ``recovered`` (a repeated call worked: ``value`` is its result — a tool's return
    value or an assistant message — or an instruction waiting was judged to have worked),
    ``failed`` (``error`` / ``note`` say why; ``next`` is the ladder's next rung, ``None`` when the
    service is down or had none), ``pending`` (carried out; the outcome waits for the agent's next
    turn), ``stopped`` (handed off: the run stops), ``skipped`` (``continue``, or a standing
    recommendation already carried out). ``injected``: the messages this repair added to the
    conversation (an adapter copies them into its framework's list); ``rolled_back_to``: the
    message index the conversation was cut back to. ``llm_calls`` / ``tool_calls``: the calls the
    repair made itself (the extra calls). ``served``: ``False`` when triage could not be reached.
    """

    strategy: str
    status: Status
    recommendation_id: str = ""
    value: Any = None
    error: BaseException | None = None
    attempts: int = 0
    waited_s: float = 0.0
    next: Recommendation | None = None
    served: bool = True
    note: str = ""
    injected: list[Message] = field(default_factory=list)
    rolled_back_to: int | None = None
    llm_params: dict[str, Any] | None = None
    arguments: dict[str, Any] | None = None
    tool: str | None = None
    model: str | None = None
    reply: str | None = None
    blocked: bool = False
    budget: str | None = None
    llm_calls: int = 0
    tool_calls: int = 0

    @property
    def recovered(self) -> bool:
        return self.status == "recovered"


@dataclass
class _Pending:
    rec: Recommendation
    kind: str | None
    mark: int  # the first source_index sent after the repair
    turns: int = 0
    started: float = 0.0


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else None


def _latest_index(f: Failure) -> int:
    """The latest source_index a failure's evidence reaches (a loop's last repeat)."""
    latest = f.source_index if f.source_index is not None else -1
    repeats = f.details.get("repeats")
    if isinstance(repeats, list):
        for r in repeats:
            if isinstance(r, dict):
                for k in ("result_source_index", "call_source_index", "source_index"):
                    v = r.get(k)
                    if isinstance(v, int) and v > latest:
                        latest = v
    return latest


def _schema_of(tool: Mapping[str, Any]) -> tuple[str, Any]:
    """``(name, parameters)`` of a tool definition, flat or OpenAI's ``{"type": "function", "function": …}``."""
    inner = tool.get("function")
    fn: Mapping[str, Any] = inner if isinstance(inner, Mapping) else tool
    return str(fn.get("name") or ""), fn.get("parameters")


def error_text(exc: BaseException) -> str:
    r"""An exception as the service reads a failed call: ``Error: …``, ``HTTP <status>``,
    ``Retry-After: <s>`` (from the exception's ``status`` / ``status_code`` / ``retry_after``).

    >>> e = RuntimeError("Too Many Requests"); e.status = 429; e.retry_after = 2
    >>> error_text(e)
    'Error: Too Many Requests (HTTP 429)\nRetry-After: 2'
    """
    text = f"Error: {exc}" if str(exc) else f"Error: {type(exc).__name__}"
    status = getattr(exc, "status", None) or getattr(exc, "status_code", None)
    if isinstance(status, int) and f"{status}" not in text:
        text += f" (HTTP {status})"
    after = getattr(exc, "retry_after", None)
    if isinstance(after, int | float) and not isinstance(after, bool):
        text += f"\nRetry-After: {after:g}"
    return text


def tool_message(call_id: Any, content: str, *, error: bool = False) -> Message:
    """A ``role: tool`` message; ``error=True`` adds ``status: "error"`` (a failed call)."""
    msg: Message = {"role": "tool", "tool_call_id": call_id, "content": content}
    if error:
        msg["status"] = "error"
    return msg


def _budget_reason(rec: Recommendation | None) -> str | None:
    if rec is None or rec.strategy != "human_handoff":
        return None
    reason = rec.params.get("reason")
    return reason if isinstance(reason, str) and "budget" in reason else None


class RepairExecutor:
    """Keeps an agent's messages and state, streams them to a triage session, carries out repairs.

    Parameters
    ----------
    client:
        A :class:`~agent_triage_client.TriageClient` (fail-open, the default, keeps the agent
        running while triage is down).
    session_id:
        The session's id; the executor should own the session from its first message.
    state:
        The agent's own state beside the messages (snapshotted and rolled back with them).
    tools, language, task_type:
        Sent with the first append the service takes (tool definitions give ``self_correct`` the
        schema of a malformed call's tool).
    agent:
        The agent this executor serves, sent with every append (``options.agent``): the key of its
        agent model on the service.
    equivalents:
        Tool name → equivalent tools, in order of preference (the service's ``tool_equivalents``).
    fallback_models:
        Models to fall back to, in order (the service's ``fallback_models``).
    allowed_tools:
        The tools the agent may call (a call to any other is ``disallowed_tool``: a blocked handoff).
    options:
        Any other request options (``detectors``, ``speakers``, …), sent with every append.
    on_replan, on_handoff:
        Callbacks, see the module docstring.
    backoff_s, max_backoff_s:
        Own backoff for a ``retry`` without ``delay_s``: full jitter on ``backoff_s · 2^(attempt-1)``.
    max_wait_s:
        The longest single wait it accepts (a longer ``retry_after`` ends the retry as failed).
    max_repairs:
        A local safety cap on the rungs one :meth:`repair` climbs (the service's budgets come first).
    shadow:
        Send the steps, carry nothing out (``handle`` skips everything).
    sleep, clock, rng:
        Injectable for tests and simulations.
    """

    def __init__(
        self,
        client: TriageClient,
        session_id: str,
        *,
        state: Any = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        language: Literal["en", "zh"] | None = None,
        task_type: str | None = None,
        agent: str | None = None,
        equivalents: Mapping[str, Sequence[str]] | None = None,
        fallback_models: Sequence[str] = (),
        allowed_tools: Sequence[str] | None = None,
        options: Mapping[str, Any] | None = None,
        on_replan: ReplanCallback | None = None,
        on_handoff: HandoffCallback | None = None,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        max_wait_s: float = 60.0,
        max_repairs: int = 12,
        shadow: bool = False,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.messages: list[Message] = []
        self.state = state
        self.snapshots = Snapshots()
        self.equivalents = {k: list(v) for k, v in (equivalents or {}).items()}
        self.fallback_models = list(fallback_models)
        self.allowed_tools = list(allowed_tools) if allowed_tools is not None else None
        self.extra_options = dict(options or {})
        self.agent = agent
        self.on_replan = on_replan
        self.on_handoff = on_handoff
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_wait_s = max_wait_s
        self.max_repairs = max_repairs
        self.shadow = shadow
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()
        self._first: dict[str, Any] = {"tools": tools, "language": language, "task_type": task_type}
        self._position: dict[int, int] = {}  # the service's source_index → position in self.messages
        self._next_source: int | None = None  # the next source_index the service will give
        self._tool_schemas = {name: schema for name, schema in map(_schema_of, tools or []) if name}
        #: failed tool → the equivalent that replaced it (``switch_tool``)
        self.routes: dict[str, str] = {}
        #: the model in use after a ``fallback_model`` (``None``: the agent's own)
        self.model: str | None = None
        #: repairs carried out whose outcome waits for the agent's next turn
        self.pending: list[_Pending] = []
        #: every repair carried out or judged, in order
        self.history: list[RepairResult] = []
        self.last: SessionStep | None = None
        self.served = True  # False once any call to triage fell back
        self._reported: set[str] = set()  # recommendation ids whose outcome was reported (never twice)
        self._injected: set[int] = set()  # source indices of the messages repairs wrote
        #: a person took the run over (``on_handoff`` replied): nothing more is carried out
        self.handed_off = False
        self._blocked: list[Message] = []  # messages withheld, as they were (kept out of restores too)

    # -- messages ----------------------------------------------------------------------------------
    def options(self) -> dict[str, Any]:
        """The request options sent with every append: ``options=`` with the agent, the equivalents,
        the fallback models and the allowed tools laid over it."""
        out: dict[str, Any] = dict(self.extra_options)
        if self.agent is not None:
            out["agent"] = self.agent
        if self.allowed_tools is not None:
            out["allowed_tools"] = self.allowed_tools
        if self.equivalents:
            out["tool_equivalents"] = self.equivalents
        if self.fallback_models:
            out["fallback_models"] = self.fallback_models
        return out

    def _inject(self, *messages: Mapping[str, Any]) -> SessionStep:
        """Add messages a repair wrote; a failure the service finds in them (an instruction that
        quotes the failure's evidence) is not the agent's, so it judges no repair."""
        if self._next_source is not None:  # known before the append is judged
            self._injected.update(range(self._next_source, self._next_source + len(messages)))
        r = self.add(*messages)
        if r.served:
            self._injected.update(r.source_indices)
        return r

    def add(self, *messages: Mapping[str, Any]) -> SessionStep:
        """Append ``messages`` (snapshotting messages and state before each), send them to the
        session, judge the repairs waiting for their outcome, and return the session's diagnosis
        (a ``continue`` fallback when triage is down). When a waiting repair failed, the returned
        recommendation is the next rung the service gave for it."""
        start = len(self.messages)
        for m in messages:
            self.snapshots.take(len(self.messages), {"messages": self.messages, "state": self.state})
            self.messages.append(copy.deepcopy(dict(m)))
        first: dict[str, Any] = {k: v for k, v in self._first.items() if v is not None}
        r = self.client.append_steps(self.session_id, messages=[dict(m) for m in messages],
                                     options=self.options(), **first)
        positions = list(range(start, start + len(messages)))
        self._note(r, positions)
        assistants = [m for m in messages if m.get("role") == "assistant"]
        final = any(not m.get("tool_calls") for m in assistants)
        return self._judge(r, len(assistants), final)

    def add_error(self, content: str, *, error_type: str | None = None, tool: str | None = None) -> SessionStep:
        """Send a failed call that is no message of the conversation (the LLM call itself failed)
        as a native ``error`` step; a rollback to it keeps every message."""
        step: dict[str, Any] = {"kind": "error", "content": content, "status": "error"}
        if error_type:
            step["error_type"] = error_type
        if tool:
            step["tool_name"] = tool
        first: dict[str, Any] = {k: v for k, v in self._first.items() if v is not None}
        r = self.client.append_steps(self.session_id, steps=[step], options=self.options(), **first)
        self._note(r, [len(self.messages)])
        return self._judge(r, 0, False)

    def _note(self, r: SessionStep, positions: list[int]) -> None:
        self.last = r
        if not r.served:
            self.served = False
            return
        self._first = {}
        indices = list(r.source_indices)
        if not indices:  # an older service: count from where it stands
            base = self._next_source if self._next_source is not None else 0
            indices = list(range(base, base + len(positions)))
        self._position.update(zip(indices, positions, strict=False))
        if indices:
            self._next_source = indices[-1] + 1

    def _judge(self, r: SessionStep, assistants: int, final: bool) -> SessionStep:
        if not r.served or not self.pending:
            return r
        replaced: Recommendation | None = None
        for p in list(self.pending):
            # signals too: a repeat the service reports below its threshold is still the agent not
            # following the instruction (an empty result used anyway shows up as a signal only)
            recurred = next((f for f in [*r.failures, *r.signals] if f.kind == p.kind and _latest_index(f) >= p.mark
                             and _latest_index(f) not in self._injected), None)
            gave_up = final and next((f for f in [*r.failures, *r.signals]
                                      if f.kind == p.kind and f.details.get("handled") == "told_user"), None)
            p.turns += assistants
            if recurred is not None or gave_up:
                self.pending.remove(p)
                if recurred is not None:
                    note = (f"{p.kind} again at message {_latest_index(recurred)} after {p.rec.strategy} "
                            f"(carried out before message {p.mark})")
                else:
                    note = f"after {p.rec.strategy} the agent gave up on the {p.kind} and told the user"
                out = self.report(p.rec.id, False, duration_s=self._clock() - p.started, note=note)
                self.history.append(RepairResult(p.rec.strategy, "failed", p.rec.id, next=out.next,
                                                 served=out.served, note=note, budget=_budget_reason(out.next)))
                if out.next is not None:
                    replaced = out.next
            elif p.turns >= 2 or (final and p.turns >= 1):
                self.pending.remove(p)
                out = self.report(p.rec.id, True, duration_s=self._clock() - p.started,
                                  note=f"no {p.kind} after {p.rec.strategy} for a whole turn")
                self.history.append(RepairResult(p.rec.strategy, "recovered", p.rec.id, served=out.served,
                                                 note="held for a whole turn"))
        if replaced is not None:
            r = r.model_copy(update={"recommendation": replaced})
            self.last = r
        return r

    def _mark(self) -> int:
        return self._next_source if self._next_source is not None else 0

    def _kind(self, rec: Recommendation, ctx: RepairContext) -> str | None:
        """The failure kind ``rec`` repairs: its rationale starts with it (``"loop (high) at …"``)."""
        head = rec.rationale.split(" ", 1)[0] if rec.rationale else ""
        known = {f.kind for f in (self.last.failures if self.last else [])}
        if ctx.failure is not None:
            known.add(ctx.failure.kind)
        if head in known:
            return head
        if ctx.failure is not None:
            return ctx.failure.kind
        return self.last.primary.kind if self.last and self.last.primary else None

    def _defer(self, rec: Recommendation, ctx: RepairContext, result: RepairResult) -> RepairResult:
        kind = self._kind(rec, ctx)
        if rec.id != "unavailable":
            self.pending.append(_Pending(rec, kind, self._mark(), started=self._clock()))
        return result

    def report(self, rec_id: str, success: bool, *, duration_s: float | None = None, note: str = "") -> Outcome:
        """Report an outcome once per recommendation (a second report of one id is not sent)."""
        if rec_id in self._reported or rec_id == "unavailable":
            return Outcome(recommendation_id=rec_id, recorded=False, served=self.served)
        try:
            out = self.client.report_outcome(rec_id, success, duration_s=duration_s, note=note[:500])
        except TriageAPIError as exc:  # 404 / 409: the service will not take it; the run goes on
            self._reported.add(rec_id)
            return Outcome(recommendation_id=rec_id, recorded=False, client_error=str(exc))
        if out.served:
            self._reported.add(rec_id)
        else:
            self.served = False
        return out

    def finish(self, success: bool, note: str = "") -> None:
        """The run ended: report every repair still waiting for its outcome (``success``: the run
        ended with an answer the repairs got to)."""
        for p in list(self.pending):
            self.pending.remove(p)
            self.report(p.rec.id, success, duration_s=self._clock() - p.started,
                        note=note or ("the run ended with an answer" if success else "the run ended without one"))
            self.history.append(RepairResult(p.rec.strategy, "recovered" if success else "failed", p.rec.id,
                                             note="judged at the end of the run"))

    def _failed(self, rec: Recommendation, note: str, error: BaseException | None = None,
                attempts: int = 0, waited: float = 0.0, **extra: Any) -> RepairResult:
        out = self.report(rec.id, False, note=note)
        if not out.served:
            self.served = False
        budget = extra.pop("budget", None) or _budget_reason(out.next)
        return RepairResult(rec.strategy, "failed", rec.id, error=error, attempts=attempts, waited_s=waited,
                            next=out.next, served=out.served, note=note, budget=budget, **extra)

    def _succeeded(self, rec: Recommendation, value: Any, duration_s: float, note: str = "",
                   **extra: Any) -> RepairResult:
        out = self.report(rec.id, True, duration_s=duration_s, note=note)
        return RepairResult(rec.strategy, "recovered", rec.id, value=value, served=out.served, note=note, **extra)

    # -- dispatch ----------------------------------------------------------------------------------
    def handle(self, rec: Recommendation, context: RepairContext | None = None) -> RepairResult:
        """Carry out one recommendation and report its outcome (or leave it waiting, see the
        module docstring). ``continue`` and a standing recommendation already carried out are
        ``skipped``."""
        ctx = context or RepairContext()
        if rec.strategy == "continue" or self.shadow:
            return RepairResult(rec.strategy, "skipped", rec.id, note="shadow" if self.shadow else "")
        if any(p.rec.id == rec.id for p in self.pending):
            return RepairResult(rec.strategy, "skipped", rec.id, note="carried out already; its outcome waits")
        if self.handed_off:
            return RepairResult(rec.strategy, "skipped", rec.id, note="handed off: a person has the run")
        if rec.id in self._reported:  # carried out and judged already: the service repeats a standing one
            return RepairResult(rec.strategy, "skipped", rec.id, note="carried out already; outcome reported")
        s = rec.strategy
        if s == "retry":
            redo = self._redo(ctx)
            if redo is None:
                result = self._failed(rec, "retry: nothing to repeat (no call_tool / call_llm in the context)")
            else:
                result = self.retry(rec, self._checked(redo, ctx.check), ctx.error)
        elif s == "adjust_parameters":
            result = self.adjust_parameters(rec, ctx)
        elif s == "switch_tool":
            result = self.switch_tool(rec, ctx)
        elif s in ("self_correct", "clarify", "refresh_context"):
            result = self.inject(rec, ctx)
        elif s == "rollback":
            result = self.rollback(rec, ctx)
        elif s in ("replan_local", "replan_global"):
            result = self.replan(rec, ctx)
        elif s == "fallback_model":
            result = self.fallback_model(rec, ctx)
        elif s == "human_handoff":
            result = self.human_handoff(rec, ctx)
        else:  # a strategy newer than this client: say so, and let the ladder move on
            result = self._failed(rec, f"this executor cannot carry out {s!r}")
        self.history.append(result)
        return result

    def repair(self, rec: Recommendation, context: RepairContext | None = None) -> list[RepairResult]:
        """``handle`` ``rec``; while the repair fails and the service gives a next rung, handle that.
        Returns every result, the last one deciding (``recovered``, ``pending``, ``stopped`` or
        ``failed`` with nothing more to try)."""
        results: list[RepairResult] = []
        current: Recommendation | None = rec
        while current is not None and len(results) < self.max_repairs:
            result = self.handle(current, context)
            results.append(result)
            if result.status != "failed":
                break
            current = result.next
        return results

    @staticmethod
    def _checked(call: Callable[[], Any], check: Callable[[Any], str | None] | None) -> Callable[[], Any]:
        """``call`` whose value ``check`` rejects raises :class:`RepeatFailed` (a failed attempt)."""
        if check is None:
            return call

        def checked() -> Any:
            value = call()
            reason = check(value)
            if reason:
                raise RepeatFailed(reason)
            return value

        return checked

    @staticmethod
    def _redo(ctx: RepairContext) -> Callable[[], Any] | None:
        if ctx.tool is not None and ctx.call_tool is not None:
            call_tool, tool, args = ctx.call_tool, ctx.tool, dict(ctx.arguments or {})
            return lambda: call_tool(tool, args)
        if ctx.call_llm is not None:
            call_llm, params = ctx.call_llm, dict(ctx.llm_params)
            return lambda: call_llm(None, params)
        return None

    # -- retry -------------------------------------------------------------------------------------
    def delay_s(self, rec: Recommendation, error: BaseException | None = None) -> float:
        """How long to wait before the next attempt: the service's ``delay_s`` (its backoff with
        jitter) or the executor's own, and never less than ``retry_after`` (the recommendation's,
        or the error's own ``retry_after`` attribute, e.g. from a 429's header)."""
        attempt = int(rec.params.get("attempt", 1) or 1)
        delay = _number(rec.params.get("delay_s"))
        if delay is None:
            delay = self._rng.uniform(0, min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))
        for after in (rec.params.get("retry_after"), getattr(error, "retry_after", None)):
            a = _number(after)
            if a is not None and a > delay:
                delay = a
        return delay

    def retry(self, rec: Recommendation, call: Callable[[], Any],
              error: BaseException | None = None) -> RepairResult:
        """Carry out a ``retry``: wait, ``call()`` again, report; repeat while the service answers
        ``retry`` again within its ``max_attempts`` and the task's recovery time left. Every
        attempt's outcome is reported (the last one too), so no recommendation is left open.

        ``error`` is the failure being repaired, when the agent has it (its ``retry_after`` is
        honoured). An exception from ``call`` is a failed attempt; its value is a success.
        """
        attempts, waited = 0, 0.0
        while True:
            attempt = int(rec.params.get("attempt", 1) or 1)
            limit = int(rec.params.get("max_attempts", 1) or 1)
            if attempt > limit:
                return self._failed(rec, f"attempt {attempt} is past max_attempts {limit}", error, attempts, waited)
            wait = self.delay_s(rec, error)
            left = _number(rec.budgets.get("task_recovery_s_left"))
            refusal = None
            if left is not None and wait > left:
                refusal = ("task_recovery_s", f"wait {wait:g} s exceeds the task's recovery time left ({left:g} s)")
            elif wait > self.max_wait_s:
                refusal = ("max_wait_s", f"wait {wait:g} s exceeds max_wait_s {self.max_wait_s:g}")
            if refusal is not None:
                result = self._failed(rec, refusal[1], error, attempts, waited, budget=refusal[0])
                # the rung's later attempts would wait longer still: refused with it, one result
                while result.next is not None and result.next.strategy == "retry" and result.served:
                    nxt = self._failed(result.next, refusal[1], error, attempts, waited, budget=refusal[0])
                    result.next, result.served = nxt.next, nxt.served
                return result
            self._sleep(wait)
            waited += wait
            attempts += 1
            t0 = self._clock()
            try:
                value = call()
            except Exception as exc:  # a failed attempt: reported, and the ladder decides
                error = exc
                out = self.report(rec.id, False, duration_s=self._clock() - t0, note=f"{type(exc).__name__}: {exc}")
                if not out.served:  # fail-open: triage is gone, so no retry on its say-so
                    return RepairResult("retry", "failed", rec.id, error=exc, attempts=attempts, waited_s=waited,
                                        served=False, note=out.client_error or "", **self._calls(rec, attempts))
                if out.next is None or out.next.strategy != "retry":
                    return RepairResult("retry", "failed", rec.id, error=exc, attempts=attempts, waited_s=waited,
                                        next=out.next, budget=_budget_reason(out.next),
                                        note=f"{attempts} attempt(s) failed", **self._calls(rec, attempts))
                rec = out.next
                continue
            out = self.report(rec.id, True, duration_s=self._clock() - t0)
            return RepairResult("retry", "recovered", rec.id, value=value, attempts=attempts, waited_s=waited,
                                next=out.next, served=out.served, **self._calls(rec, attempts))

    @staticmethod
    def _calls(rec: Recommendation, n: int) -> dict[str, Any]:
        # a retry repeats a tool call when the service names a tool, else the LLM call
        return {"tool_calls": n} if rec.params.get("tool") else {"llm_calls": n}

    # -- adjust_parameters -------------------------------------------------------------------------
    @staticmethod
    def adjusted(rec: Recommendation, llm_params: Mapping[str, Any] | None = None,
                 arguments: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """The LLM parameters and tool arguments ``adjust_parameters`` would use: temperature down
        to ``max_temperature``, ``max_tokens`` and page sizes scaled down, timeouts scaled up."""
        p = rec.params
        tokens = _number(p.get("max_tokens_factor")) or 0.5
        page = _number(p.get("page_size_factor")) or 0.5
        slower = _number(p.get("timeout_factor")) or 2.0
        top_t = _number(p.get("max_temperature"))
        params = dict(llm_params or {})
        t = _number(params.get("temperature"))
        params["temperature"] = min(t if t is not None else 1.0, top_t if top_t is not None else 0.2)
        if _number(params.get("max_tokens")):
            params["max_tokens"] = max(16, int(params["max_tokens"] * tokens))
        if _number(params.get("timeout")):
            params["timeout"] = params["timeout"] * slower
        args = dict(arguments or {})
        for k in PAGE_KEYS:
            v = args.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > 1:
                args[k] = max(1, int(v * page))
        for k in ("timeout", "timeout_s"):
            if _number(args.get(k)):
                args[k] = args[k] * slower
        return params, args

    def adjust_parameters(self, rec: Recommendation, ctx: RepairContext) -> RepairResult:
        """Repeat the failed call with adjusted parameters (the tool's arguments for a tool call,
        the LLM's parameters for an LLM call)."""
        params, args = self.adjusted(rec, ctx.llm_params, ctx.arguments)
        t0 = self._clock()
        tool_call = ctx.tool is not None and ctx.call_tool is not None
        if not tool_call and ctx.call_llm is None:
            return self._failed(rec, "adjust_parameters: nothing to repeat (no call_tool / call_llm)")
        calls: dict[str, Any] = {"tool_calls": 1} if tool_call else {"llm_calls": 1}
        call_tool, call_llm = ctx.call_tool, ctx.call_llm
        try:
            if ctx.tool is not None and call_tool is not None:
                tool = ctx.tool
                value = self._checked(lambda: call_tool(tool, args), ctx.check)()
            else:
                assert call_llm is not None
                value = self._checked(lambda: call_llm(None, params), ctx.check)()
        except Exception as exc:
            return self._failed(rec, f"adjusted call failed: {type(exc).__name__}: {exc}", exc, 1,
                                llm_params=params, arguments=args, **calls)
        return self._succeeded(rec, value, self._clock() - t0, "adjusted", llm_params=params, arguments=args,
                               attempts=1, **calls)

    # -- switch_tool -------------------------------------------------------------------------------
    def switch_tool(self, rec: Recommendation, ctx: RepairContext) -> RepairResult:
        """Call the equivalent tool with the same arguments; later calls of the failed one go to it."""
        failed = rec.params.get("failed_tool") or ctx.tool
        choices = [rec.params.get("switch_to"), *(rec.params.get("alternatives") or []),
                   *self.equivalents.get(str(failed or ""), [])]
        target = next((c for c in choices if isinstance(c, str) and c and c != failed), None)
        if target is None:
            return self._failed(rec, f"switch_tool: no equivalent of {failed!r}")
        if ctx.call_tool is None:
            return self._failed(rec, "switch_tool: no call_tool in the context", tool=target)
        t0 = self._clock()
        try:
            call_tool, args = ctx.call_tool, dict(ctx.arguments or {})
            value = self._checked(lambda: call_tool(target, args), ctx.check)()
        except Exception as exc:
            return self._failed(rec, f"{target} failed too: {type(exc).__name__}: {exc}", exc, 1, tool=target,
                                tool_calls=1)
        if isinstance(failed, str):
            self.routes[failed] = target
        return self._succeeded(rec, value, self._clock() - t0, f"switched {failed} → {target}", tool=target,
                               attempts=1, tool_calls=1)

    def position(self, source_index: int) -> int | None:
        """Where the message the service numbers ``source_index`` is in :attr:`messages` (``None``:
        unknown, or undone by a rollback)."""
        return self._position.get(source_index)

    def route(self, tool: str) -> str:
        """The tool to call for ``tool`` (after a ``switch_tool``, its replacement)."""
        seen = {tool}
        while tool in self.routes and self.routes[tool] not in seen:
            tool = self.routes[tool]
            seen.add(tool)
        return tool

    # -- injected instructions ---------------------------------------------------------------------
    def inject(self, rec: Recommendation, ctx: RepairContext) -> RepairResult:
        """``self_correct`` / ``clarify`` / ``refresh_context``: the instruction as a system message
        (a context refresh: the agent's own LLM's summary with it)."""
        text = rec.instruction or f"({rec.strategy})"
        llm_calls = 0
        if rec.strategy == "self_correct":
            schema = rec.params.get("tool_schema")
            if schema is None and ctx.tool is not None:
                schema = self._tool_schemas.get(ctx.tool)
            if schema is not None:
                text += "\nThe tool's arguments must follow this JSON schema: " + json.dumps(schema, sort_keys=True)
        elif rec.strategy == "refresh_context":
            if ctx.llm is None:
                return self._failed(rec, "refresh_context: no LLM in the context to write the summary")
            try:
                answer = ctx.llm([*self.messages, {"role": "system", "content": SUMMARY_PROMPT}],
                                 **{k: v for k, v in ctx.llm_params.items() if k != "tools"})
            except Exception as exc:
                return self._failed(rec, f"the summary call failed: {type(exc).__name__}: {exc}", exc, llm_calls=1)
            llm_calls = 1
            summary = str(answer.get("content") or "").strip()
            if not summary:
                return self._failed(rec, "the summary came back empty", llm_calls=1)
            text = f"{text}\nSummary so far:\n{summary}"
        msg = {"role": "system", "content": text}
        result = RepairResult(rec.strategy, "pending", rec.id, injected=[msg], llm_calls=llm_calls)
        self._defer(rec, ctx, result)
        self._inject(msg)
        return result

    # -- rollback ----------------------------------------------------------------------------------
    def rollback(self, rec: Recommendation, ctx: RepairContext | None = None) -> RepairResult:
        """Restore the messages and state from before message ``params.to_source_index``; its
        outcome waits (a repeat of the failure after it is a failed rollback)."""
        target = rec.params.get("to_source_index")
        if not isinstance(target, int) or isinstance(target, bool):
            return self._failed(rec, "rollback without an integer params.to_source_index")
        position = self._position.get(target)
        if position is None:
            return self._failed(rec, f"no snapshot before message {target}")
        if position < len(self.messages):
            if position not in self.snapshots:
                return self._failed(rec, f"no snapshot before message {target}")
            restored = self.snapshots.restore(position)
            self.messages, self.state = restored["messages"], restored["state"]
            # the snapshots predate a block: what was withheld stays withheld
            self.messages = [self._withheld(m) if m in self._blocked else m for m in self.messages]
        self._position = {k: v for k, v in self._position.items() if v < position}
        result = RepairResult("rollback", "pending", rec.id, value=target, rolled_back_to=position,
                              note=f"rolled back to before message {target}")
        self._defer(rec, ctx or RepairContext(), result)
        if rec.params.get("then") == "replan_local":  # the ladder's "then": what to do instead of the undone
            then = rec.instruction.split(", then ", 1)[-1].strip() or rec.instruction
            msg = {"role": "system", "content": f"Your last steps were undone. Now {then}"}
            result.injected.append(msg)
            self._inject(msg)
        return result

    # -- replan ------------------------------------------------------------------------------------
    def replan(self, rec: Recommendation, ctx: RepairContext) -> RepairResult:
        """``replan_local`` / ``replan_global`` through ``on_replan``; without one (or when it
        returns ``None``) the instruction is injected as a system message."""
        scope: Literal["local", "global"] = "global" if rec.strategy == "replan_global" else "local"
        got: Sequence[Message] | str | None = None
        if self.on_replan is not None:
            try:
                got = self.on_replan(Replan(scope, rec, rec.instruction, copy.deepcopy(self.messages),
                                            copy.deepcopy(self.state)))
            except Exception as exc:
                return self._failed(rec, f"on_replan raised {type(exc).__name__}: {exc}", exc)
        if got is None:
            msgs: list[Message] = [{"role": "system", "content": rec.instruction}]
        elif isinstance(got, str):
            msgs = [{"role": "system", "content": got}]
        else:
            msgs = [dict(m) for m in got]
        result = RepairResult(rec.strategy, "pending", rec.id, injected=msgs)
        self._defer(rec, ctx, result)
        if msgs:
            self._inject(*msgs)
        return result

    # -- fallback_model ----------------------------------------------------------------------------
    def fallback_model(self, rec: Recommendation, ctx: RepairContext) -> RepairResult:
        """Repeat the LLM call with the fallback model (``call_llm(model, params)``); later calls
        use it too. Without ``call_llm`` the switch alone is made and its outcome waits."""
        model = rec.params.get("model") or next((m for m in self.fallback_models if m != self.model), None)
        if not isinstance(model, str) or not model:
            return self._failed(rec, "fallback_model: no fallback model named")
        self.model = model
        if ctx.call_llm is None or ctx.tool is not None:
            result = RepairResult("fallback_model", "pending", rec.id, model=model, note=f"now on {model}")
            return self._defer(rec, ctx, result)
        t0 = self._clock()
        try:
            call_llm, params = ctx.call_llm, dict(ctx.llm_params)
            value = self._checked(lambda: call_llm(model, params), ctx.check)()
        except Exception as exc:
            return self._failed(rec, f"{model} failed too: {type(exc).__name__}: {exc}", exc, 1, model=model,
                                llm_calls=1)
        return self._succeeded(rec, value, self._clock() - t0, f"answered by {model}", model=model, attempts=1,
                               llm_calls=1)

    # -- human_handoff -----------------------------------------------------------------------------
    def block(self, source_index: int | None) -> bool:
        """Withhold message ``source_index``: its content becomes :data:`BLOCKED` and its tool calls
        are dropped (they are not made), also in what a later rollback restores. ``False`` when the
        executor does not hold that message."""
        position = self._position.get(source_index) if source_index is not None else None
        if position is None or position >= len(self.messages):
            return False
        self._blocked.append(copy.deepcopy(self.messages[position]))
        self.messages[position] = self._withheld(self.messages[position])
        return True

    @staticmethod
    def _withheld(message: Message) -> Message:
        kept = {k: v for k, v in message.items() if k != "tool_calls"}  # a blocked call is not made either
        return {**kept, "content": BLOCKED}

    def human_handoff(self, rec: Recommendation, ctx: RepairContext) -> RepairResult:
        """Hand the run to a person through ``on_handoff`` (it may block); ``params.block``
        withholds the offending content first. The reply, if any, is added as a user message."""
        blocked = False
        if rec.params.get("block"):
            si = ctx.failure.source_index if ctx.failure is not None else None
            if si is None and self.last is not None and self.last.primary is not None:
                si = self.last.primary.source_index
            blocked = self.block(si)
        reason = str(rec.params.get("reason") or rec.rationale or "")
        budget = reason if "budget" in reason else None
        if self.on_handoff is None:
            out = self.report(rec.id, False, note="no on_handoff callback: the run stops")
            return RepairResult("human_handoff", "stopped", rec.id, served=out.served, blocked=blocked,
                                note="no on_handoff callback", budget=budget)
        t0 = self._clock()
        try:
            reply = self.on_handoff(Handoff(rec, reason, blocked, copy.deepcopy(self.messages),
                                            copy.deepcopy(self.state), ctx.failure))
        except Exception as exc:
            out = self.report(rec.id, False, note=f"on_handoff raised {type(exc).__name__}: {exc}")
            return RepairResult("human_handoff", "stopped", rec.id, error=exc, served=out.served, blocked=blocked,
                                budget=budget)
        out = self.report(rec.id, True, duration_s=self._clock() - t0,
                          note="handed off; the person replied" if reply else "handed off; stopped")
        result = RepairResult("human_handoff", "recovered" if reply else "stopped", rec.id, reply=reply,
                              served=out.served, blocked=blocked, budget=budget)
        if reply:
            self.handed_off = True  # the person's reply is the way on; repairs would second-guess it
            msg = {"role": "user", "content": reply}
            result.injected.append(msg)
            self._inject(msg)
        return result


__all__ = [
    "BLOCKED",
    "error_text",
    "tool_message",
    "LLM",
    "Handoff",
    "HandoffCallback",
    "RepairContext",
    "RepairExecutor",
    "RepairResult",
    "RepeatFailed",
    "Replan",
    "ReplanCallback",
    "Snapshots",
]
