"""What the framework adapters share: one model call and one tool call, repaired by the executor.

A framework (LangChain's agent graph, the OpenAI Agents SDK's runner) owns its loop and its own
message history; :class:`Bridge` sits at its two interception points and leaves the loop alone:

- :meth:`Bridge.forward` sends the framework's messages to the executor's session, each once
  (keyed by the framework's message id), so the executor's messages are the framework's history.
- :meth:`Bridge.model_call` wraps one model call: an exception becomes an ``error`` step and is
  repaired (``retry``, ``adjust_parameters``, ``fallback_model`` repeat the call); an answer is
  sent and its recommendation carried out — a repeated call's answer replaces it, an injected
  instruction or a rollback makes the model answer again on the repaired conversation.
- :meth:`Bridge.tool_call` wraps one tool call: an exception (or an error result) is sent as a
  tool message with status ``error`` and repaired (``retry``, ``adjust_parameters``,
  ``switch_tool`` repeat the call; a repaired result is sent too and replaces the failed one).
- Once a repair has changed the conversation (a rollback, an injected message), the model is given
  the executor's messages instead of the framework's (:attr:`Bridge.view`); the framework's state
  keeps every message (the run's log), the model sees the repaired conversation.
- A handoff that stops the run (no ``on_handoff``, or it returned ``None``) sets
  :attr:`Bridge.stopped`: the adapter ends the run with :meth:`Bridge.handoff_text` instead of
  calling the model again; a blocked tool result is withheld (:data:`BLOCKED`) before the
  framework sees it.

Without a recommendation (``continue``, the shadow arm, triage unreachable) a call is left as the
framework made it, exceptions included: the agent runs as if triage were absent. The executor
never repeats a call beyond the service's budgets; the bridge adds its own cap,
``max_redo``, on how often one call is re-asked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_triage_client.executor import (
    BLOCKED,
    Message,
    RepairContext,
    RepairExecutor,
    RepairResult,
    error_text,
)
from agent_triage_client.models import Recommendation, SessionStep

#: Strategies that repeat the failed call (the others inject, roll back, replan or hand off).
REPEATS = frozenset({"retry", "adjust_parameters", "switch_tool", "fallback_model"})
#: Strategies that add messages: after an assistant message with tool calls they wait for its results.
INJECTS = frozenset({"self_correct", "clarify", "refresh_context", "replan_local", "replan_global"})

#: ``call(messages, model, params)`` → (the framework's answer, its assistant message, OpenAI shape).
#: ``messages=None``: the framework's own input; ``model=None``: the model in use. Raises on failure.
ModelCall = Callable[[list[Message] | None, str | None, dict[str, Any]], tuple[Any, Message]]
#: ``run(tool, arguments)`` → (the framework's result, its tool message). Raises on failure
#: (:class:`ToolFailed` for a result the framework made of an error).
ToolRun = Callable[[str, dict[str, Any]], tuple[Any, Message]]


class ToolFailed(Exception):
    """A tool call whose result is an error (the framework returned it rather than raising)."""

    def __init__(self, result: Any, message: Message) -> None:
        super().__init__(str(message.get("content") or "tool error"))
        self.result = result
        self.message = message


@dataclass
class Turn:
    """What one wrapped call came to: the framework's ``result`` and its OpenAI-shape ``message``;
    ``error``: the exception to re-raise (nothing repaired it); ``stopped``: a handoff ended the run
    (``blocked``: the result's content was withheld); ``repairs``: what was carried out."""

    result: Any = None
    message: Message | None = None
    error: BaseException | None = None
    stopped: RepairResult | None = None
    blocked: bool = False
    repairs: list[RepairResult] = field(default_factory=list)

    @property
    def waiting(self) -> bool:
        """A repair was carried out whose effect is the model's next call (an instruction, a
        rollback): a failed call is then handed back as a failed result, not raised."""
        return any(x.status == "pending" for x in self.repairs)


class Bridge:
    """One run's repairs at a framework's model and tool calls (thread-safe: tool calls may run in
    parallel threads; they are sent and repaired one at a time).

    Parameters
    ----------
    executor:
        The run's :class:`~agent_triage_client.executor.RepairExecutor` (its session, callbacks,
        equivalents and fallback models).
    max_redo:
        How often one model or tool call may be repeated or re-asked, whatever the service says.
    """

    def __init__(self, executor: RepairExecutor, *, max_redo: int = 8) -> None:
        self.executor = executor
        self.max_redo = max_redo
        self.lock = threading.RLock()
        #: True once a repair changed the conversation: the model gets the executor's messages
        self.view = False
        #: the handoff that stopped the run, if one did
        self.stopped: RepairResult | None = None
        #: every repair carried out, in order
        self.repairs: list[RepairResult] = []
        #: the ``human_handoff`` recommendation carried out, if one was
        self.handoff: Recommendation | None = None
        self._sent: set[str] = set()
        self._handled: set[str] = set()
        self._waiting: SessionStep | None = None  # an instruction to inject once tool results are in

    # -- messages ----------------------------------------------------------------------------------
    def forward(self, items: Sequence[tuple[str, Message]]) -> None:
        """Send the framework's messages (``(key, message)``) not sent before, in order; then carry out
        what needs no repeated call (an instruction waiting for tool results, a rollback, a handoff)."""
        with self.lock:
            new = [m for k, m in items if k not in self._sent]
            self._sent.update(k for k, _ in items)
            if new:
                r = self.executor.add(*new)
                if self._waiting is None and r.recommendation.strategy not in REPEATS:
                    self._settle(r, RepairContext(failure=r.primary))
            if self._waiting is not None and not self._tool_results_missing():
                waiting, self._waiting = self._waiting, None
                self._settle(waiting, RepairContext(failure=waiting.primary))

    def mark_sent(self, key: str) -> None:
        """A message of the framework's that is not to be sent (the bridge's own handoff answer)."""
        with self.lock:
            self._sent.add(key)

    def _mark(self, keys: str | Sequence[str]) -> None:
        self._sent.update([keys] if isinstance(keys, str) else keys)

    def messages(self) -> list[Message] | None:
        """What the model should be given: the executor's messages once a repair changed them, else
        ``None`` (the framework's own input)."""
        with self.lock:
            return [dict(m) for m in self.executor.messages] if self.view else None

    def _tool_results_missing(self) -> bool:
        msgs = self.executor.messages
        last_ai = next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].get("role") == "assistant"), None)
        if last_ai is None:
            return False
        wanted = {c.get("id") for c in msgs[last_ai].get("tool_calls") or []}
        have = {m.get("tool_call_id") for m in msgs[last_ai + 1 :] if m.get("role") == "tool"}
        return bool(wanted - have)

    # -- one model call ----------------------------------------------------------------------------
    def model_call(self, call: ModelCall, key: Callable[[Any], str | Sequence[str]], *, params: Mapping[str, Any] | None = None,
                   llm: Callable[..., Mapping[str, Any]] | None = None) -> Turn:
        """Make one model call through ``call`` and repair it; ``key(result)`` names the answer
        (its key or keys are marked sent). ``params``: the call's parameters (what ``adjust_parameters`` lowers);
        ``llm(messages, **params)``: the model as a plain function (a context refresh's summary)."""
        p = dict(params or {})
        with self.lock:
            turn = Turn()
            if self.stopped is not None:
                turn.stopped = self.stopped
                return turn
            try:
                turn.result, turn.message = call(self.messages(), self.executor.model, p)
            except Exception as exc:
                r = self.executor.add_error(error_text(exc), error_type=type(exc).__name__)
                ctx = RepairContext(error=exc, call_llm=lambda model, q: call(self.messages(), model, q),
                                    llm=llm, llm_params=p, failure=r.primary)
                last = self._settle(r, ctx, turn)
                if last is not None and last.recovered and isinstance(last.value, tuple):
                    turn.result, turn.message = last.value
                elif last is not None and last.status == "stopped":
                    return turn
                elif last is not None and last.status in ("pending", "recovered"):  # re-asked on the repaired view
                    try:
                        turn.result, turn.message = call(self.messages(), self.executor.model, p)
                    except Exception as again:
                        turn.error = again
                        return turn
                else:
                    turn.error = exc
                    return turn
            assert turn.message is not None
            for _ in range(self.max_redo):
                self._mark(key(turn.result))
                r = self.executor.add(turn.message)
                rec = r.recommendation
                if rec.strategy == "continue" or rec.id in self._handled:
                    break
                if turn.message.get("tool_calls") and rec.strategy in INJECTS:
                    self._waiting = r  # the chat protocol wants the tool results right after their call
                    break

                def redo(model: str | None, q: dict[str, Any]) -> tuple[Any, Message]:
                    msgs = [dict(m) for m in self.executor.messages]
                    if msgs and msgs[-1].get("role") == "assistant":  # the answer being repaired
                        msgs.pop()
                    return call(msgs, model, q)

                ctx = RepairContext(call_llm=redo, llm=llm, llm_params=p, failure=r.primary)
                last = self._settle(r, ctx, turn)
                if last is None or last.status in ("failed", "skipped"):
                    break
                if last.status == "stopped":
                    return turn
                if last.recovered and isinstance(last.value, tuple):
                    turn.result, turn.message = last.value  # the repeated call's answer, diagnosed next
                    continue
                # an instruction injected, a rollback, a person's reply: the model answers again
                try:
                    turn.result, turn.message = call(self.messages(), self.executor.model, p)
                except Exception as exc:
                    turn.error = exc
                    return turn
            return turn

    # -- one tool call -----------------------------------------------------------------------------
    def tool_call(self, name: str, arguments: Mapping[str, Any], call_id: str | None, run: ToolRun,
                  key: Callable[[Any], str | Sequence[str]]) -> Turn:
        """Run tool ``name`` (after a ``switch_tool``, its replacement) through ``run`` and repair it;
        ``key(result)`` names the result's message (it is marked sent)."""
        args = dict(arguments)
        with self.lock:
            turn = Turn()
            tool = self.executor.route(name)
            try:
                turn.result, turn.message = run(tool, args)
            except ToolFailed as failed:
                turn.result, turn.message, turn.error = failed.result, failed.message, failed
            except Exception as exc:
                turn.error = exc
                turn.message = {"role": "tool", "tool_call_id": call_id, "content": error_text(exc), "status": "error"}
            for _ in range(self.max_redo):
                if turn.result is not None:
                    self._mark(key(turn.result))
                r = self.executor.add(turn.message)
                rec = r.recommendation
                if rec.strategy == "continue" or rec.id in self._handled:
                    break
                ctx = RepairContext(tool=tool, arguments=args, error=turn.error, call_id=call_id,
                                    call_tool=lambda t, a: run(self.executor.route(t), a), failure=r.primary)
                last = self._settle(r, ctx, turn)
                if last is None or last.status in ("failed", "skipped"):
                    break
                if last.status == "stopped":
                    if last.blocked:  # withheld from the framework too, not only from the executor's messages
                        turn.blocked = True
                        turn.message = {**turn.message, "content": BLOCKED}
                    break
                if last.recovered and isinstance(last.value, tuple):
                    turn.result, turn.message = last.value  # the repaired result, sent and diagnosed next
                    turn.error = None
                    continue
                break  # injected / rolled back: the model's next call sees it
            return turn

    # -- carrying out ------------------------------------------------------------------------------
    def _settle(self, r: SessionStep, ctx: RepairContext, turn: Turn | None = None) -> RepairResult | None:
        """Carry out ``r``'s recommendation (climbing while repairs fail); ``None`` on ``continue``
        or a recommendation already carried out."""
        rec = r.recommendation
        if rec.strategy == "continue" or rec.id in self._handled:
            return None
        self._handled.add(rec.id)
        results = self.executor.repair(rec, ctx)
        self._handled.update(x.recommendation_id for x in results)
        self.repairs.extend(results)
        current = rec
        for x in results:  # the recommendation each result carried out: the first, then each one's next
            if x.strategy == "human_handoff":
                self.handoff = current
            if x.next is not None:
                current = x.next
        if turn is not None:
            turn.repairs.extend(results)
        last = results[-1] if results else None
        if any(x.status == "pending" or x.rolled_back_to is not None or x.injected for x in results):
            self.view = True
        if last is not None and last.status == "stopped":
            self.stopped = last
            if turn is not None:
                turn.stopped = last
                turn.blocked = last.blocked
        return last

    def handoff_text(self) -> str:
        """The answer a stopped run ends with (the adapters put it where the model's answer goes)."""
        if self.stopped is None:
            return ""
        rec = self.handoff
        reason = str((rec.params.get("reason") if rec else None) or (rec.rationale if rec else "") or "")
        blocked = " The offending content was withheld." if self.stopped.blocked else ""
        return f"[agent-triage handed this run off to a person: {reason or 'no reason given'}.{blocked}]"

    def finish(self, success: bool) -> None:
        """Report the repairs still waiting for their outcome, judged by how the run ended."""
        with self.lock:
            self.executor.finish(success)


__all__ = ["INJECTS", "REPEATS", "Bridge", "ModelCall", "ToolFailed", "ToolRun", "Turn"]
