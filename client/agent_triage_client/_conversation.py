"""The executor's half that keeps the conversation: the agent's messages and state (snapshotted
before each message), mirrored to a triage session, and the repairs waiting for their outcome
(judged on each append, reported once). :class:`~agent_triage_client.executor.RepairExecutor`
adds the strategies on top; the module docstring there says how outcomes are judged."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agent_triage_client._client import TriageClient
from agent_triage_client._errors import TriageAPIError
from agent_triage_client._repair_types import BLOCKED, Message, RepairContext, RepairResult, budget_reason
from agent_triage_client.models import Failure, Outcome, Recommendation, SessionStep
from agent_triage_client.snapshots import Snapshots


@dataclass
class _Pending:
    rec: Recommendation
    kind: str | None
    mark: int  # the first source_index sent after the repair
    turns: int = 0
    started: float = 0.0



def _reach(f: Failure) -> int:
    """The latest message a failure's evidence reaches (a loop: its last repeat), as the service
    says (``reach_source_index``); its own message from a service that does not say; -1: none."""
    reach = f.reach_source_index if f.reach_source_index is not None else f.source_index
    return reach if reach is not None else -1


def _schema_of(tool: Mapping[str, Any]) -> tuple[str, Any]:
    """``(name, parameters)`` of a tool definition, flat or OpenAI's ``{"type": "function", "function": …}``."""
    inner = tool.get("function")
    fn: Mapping[str, Any] = inner if isinstance(inner, Mapping) else tool
    return str(fn.get("name") or ""), fn.get("parameters")



class Conversation:
    """An agent's messages and state, streamed to a triage session, with the repairs whose outcome
    waits (see :class:`~agent_triage_client.executor.RepairExecutor` for the parameters)."""

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
        clock: Callable[[], float] = time.monotonic,
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
        self._clock = clock
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
            recurred = next((f for f in [*r.failures, *r.signals] if f.kind == p.kind and _reach(f) >= p.mark
                             and _reach(f) not in self._injected), None)
            gave_up = final and next((f for f in [*r.failures, *r.signals]
                                      if f.kind == p.kind and f.details.get("handled") == "told_user"), None)
            p.turns += assistants
            if recurred is not None or gave_up:
                self.pending.remove(p)
                if recurred is not None:
                    note = (f"{p.kind} again at message {_reach(recurred)} after {p.rec.strategy} "
                            f"(carried out before message {p.mark})")
                else:
                    note = f"after {p.rec.strategy} the agent gave up on the {p.kind} and told the user"
                out = self.report(p.rec.id, False, duration_s=self._clock() - p.started, note=note)
                self.history.append(RepairResult(p.rec.strategy, "failed", p.rec.id, next=out.next,
                                                 served=out.served, note=note, budget=budget_reason(out.next)))
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
        budget = extra.pop("budget", None) or budget_reason(out.next)
        return RepairResult(rec.strategy, "failed", rec.id, error=error, attempts=attempts, waited_s=waited,
                            next=out.next, served=out.served, note=note, budget=budget, **extra)

    def _succeeded(self, rec: Recommendation, value: Any, duration_s: float, note: str = "",
                   **extra: Any) -> RepairResult:
        out = self.report(rec.id, True, duration_s=duration_s, note=note)
        return RepairResult(rec.strategy, "recovered", rec.id, value=value, served=out.served, note=note, **extra)


    # -- where messages are ----------------------------------------------------------------------
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

