"""What a repair gets and gives: :class:`RepairContext` in, :class:`RepairResult` out, the callbacks'
arguments (:class:`Replan`, :class:`Handoff`) and the message helpers. Re-exported by
:mod:`agent_triage_client.executor`, where they are documented."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agent_triage_client.models import Failure, Recommendation

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



def nonneg_number(value: Any) -> float | None:
    """``value`` as a float when it is a number ≥ 0 (a bool is not), else None: how a repair reads the
    service's numeric params and budgets."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else None



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


def budget_reason(rec: Recommendation | None) -> str | None:
    """Why the service handed the run to a person when a repair budget ran out (its handoff's
    ``reason``), else None (no recommendation, another strategy, or a handoff for another reason)."""
    if rec is None or rec.strategy != "human_handoff":
        return None
    reason = rec.params.get("reason")
    return reason if isinstance(reason, str) and "budget" in reason else None
