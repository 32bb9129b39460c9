"""A generic tool-using agent loop wrapped by the repair executor: :class:`TriageAgent`.

The agent is three things: an LLM callable (``llm(messages, **params)`` → an assistant message in
OpenAI shape, with optional ``tool_calls``; it raises when the call fails), a tool registry
(name → callable taking the call's arguments as keywords; it raises when the tool fails — an
exception's ``retry_after`` attribute, if any, is honoured and written into the tool message as a
``Retry-After`` line, its ``status`` as ``HTTP <status>``), and the message list.

:meth:`TriageAgent.run` loops: ask the LLM, send its message to the session, run each tool call
and send its result, and after every message carry out what the service recommends
(:class:`~agent_triage_client.executor.RepairExecutor`). It ends on a final answer (an assistant
message without tool calls that the service leaves alone), on a handoff, or at ``max_steps`` LLM
turns (``report.capped``: an unbounded loop, as the closed-loop bench counts it).

- A tool that raises becomes a tool message ``Error: …`` with ``status: "error"``; a call whose
  arguments are not JSON is not run (its tool message says so).
- An LLM call that raises is sent as an ``error`` step; its repair (retry, adjust_parameters,
  fallback_model) repeats the call. With no repair (triage down, or a ladder that stops) the run
  ends with ``stopped="llm_error"``, as a plain loop would.
- An instruction the service asks to inject after an assistant message with tool calls is
  injected once that message's tool results are in (the chat protocol wants them together).

>>> from agent_triage_client import TriageClient
>>> llm = lambda messages, **p: {"role": "assistant", "content": "4"}
>>> agent = TriageAgent(llm, {}, client=TriageClient("http://127.0.0.1:9", budget_s=0.2), session_id="s")
>>> report = agent.run([{"role": "user", "content": "2+2?"}])   # triage down: the agent runs as if absent
>>> report.answer, report.finished, report.served
('4', True, False)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agent_triage_client._client import TriageClient
from agent_triage_client.executor import (
    LLM,
    HandoffCallback,
    Message,
    RepairContext,
    RepairExecutor,
    RepairResult,
    ReplanCallback,
    error_text,
    tool_message,
)
from agent_triage_client.models import Recommendation, SessionStep

Tool = Callable[..., Any]

#: Strategies that add messages; after an assistant message with tool calls they wait for its results.
_INJECTING = frozenset({"self_correct", "clarify", "refresh_context", "replan_local", "replan_global"})


@dataclass
class RunReport:
    """What one :meth:`TriageAgent.run` did.

    ``steps``: LLM turns taken (≤ ``max_steps``; ``capped`` when the cap was reached).
    ``llm_calls`` / ``tool_calls``: every call made; ``extra_llm_calls`` / ``extra_tool_calls``:
    those the repairs made themselves (retries, repeats with adjusted parameters, the equivalent
    tool, the fallback model, a context-refresh summary). ``handoffs``: ``human_handoff``
    recommendations carried out (``blocked``: content withheld); ``budget_hits``: recommendations
    that said a budget was spent (the service's) or repairs the executor stopped at a limit of its
    own (``max_wait_s``, the task's recovery time left); ``recovery_s``: time spent inside repairs,
    waits included. ``served``: triage answered every call (``False``: it failed open at least once).
    """

    answer: str | None = None
    finished: bool = False
    stopped: Literal["handoff", "blocked", "capped", "llm_error", "repair_failed"] | None = None
    steps: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    extra_llm_calls: int = 0
    extra_tool_calls: int = 0
    handoffs: int = 0
    blocked: bool = False
    budget_hits: int = 0
    capped: bool = False
    recovery_s: float = 0.0
    served: bool = True
    repairs: list[RepairResult] = field(default_factory=list)
    strategies: list[str] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    error: BaseException | None = None


class _Stop(Exception):
    def __init__(self, reason: Literal["handoff", "blocked", "llm_error", "repair_failed"]) -> None:
        self.reason = reason


class TriageAgent:
    """A tool-using agent loop whose failures triage diagnoses and the executor repairs.

    Parameters
    ----------
    llm:
        The agent's LLM: ``llm(messages, **params)`` → assistant message (OpenAI shape).
    tools:
        Tool registry: name → callable (``tool(**arguments)``), equivalents included.
    client, session_id:
        The triage client and the session (one per run).
    equivalents:
        Tool name → equivalent tools (in ``tools``), for ``switch_tool``.
    fallback_llms:
        Model name → LLM, in order of preference, for ``fallback_model``.
    on_replan, on_handoff:
        The executor's callbacks (:class:`~agent_triage_client.executor.Replan`,
        :class:`~agent_triage_client.executor.Handoff`).
    max_steps:
        The cap on LLM turns.
    llm_params:
        Parameters for every LLM call (``temperature``, ``max_tokens``, ``timeout``, …).
    tool_definitions:
        Tool definitions (name, description, parameters) sent to the session once.
    state:
        The agent's own state, snapshotted and rolled back with the messages.
    shadow:
        Send every step, carry nothing out (the run is as if triage were absent, but observed).
    executor_options:
        Passed to :class:`~agent_triage_client.executor.RepairExecutor` (``sleep``, ``clock``,
        ``rng``, ``max_wait_s``, ``language``, ``task_type``, …).
    """

    def __init__(
        self,
        llm: LLM,
        tools: Mapping[str, Tool],
        *,
        client: TriageClient,
        session_id: str,
        equivalents: Mapping[str, Sequence[str]] | None = None,
        fallback_llms: Mapping[str, LLM] | None = None,
        on_replan: ReplanCallback | None = None,
        on_handoff: HandoffCallback | None = None,
        max_steps: int = 50,
        llm_params: Mapping[str, Any] | None = None,
        tool_definitions: Sequence[Mapping[str, Any]] | None = None,
        state: Any = None,
        shadow: bool = False,
        **executor_options: Any,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps!r}")
        self.llm = llm
        self.tools = dict(tools)
        self.fallback_llms = dict(fallback_llms or {})
        self.max_steps = max_steps
        self.llm_params = dict(llm_params or {})
        self.executor = RepairExecutor(
            client, session_id, state=state, tools=tool_definitions, equivalents=equivalents,
            fallback_models=list(self.fallback_llms), on_replan=on_replan, on_handoff=on_handoff,
            shadow=shadow, **executor_options,
        )
        self._clock: Callable[[], float] = executor_options.get("clock", time.monotonic)
        self._seen_budget: set[str] = set()

    # -- calls -------------------------------------------------------------------------------------
    def _model(self, name: str | None) -> LLM:
        name = name or self.executor.model
        if name is not None and name in self.fallback_llms:
            return self.fallback_llms[name]
        return self.llm

    def call_llm(self, model: str | None, params: Mapping[str, Any], messages: list[Message] | None = None) -> Message:
        """One LLM call on ``messages`` (default: the conversation so far); raises when it fails."""
        msg = self._model(model)(list(messages if messages is not None else self.executor.messages), **dict(params))
        out = dict(msg)
        out.setdefault("role", "assistant")
        return out

    def call_tool(self, name: str, arguments: Mapping[str, Any]) -> Any:
        """Run tool ``name`` (after a ``switch_tool``, its replacement); raises when it fails."""
        name = self.executor.route(name)
        tool = self.tools.get(name)
        if tool is None:
            raise LookupError(f"no tool {name!r} (have {sorted(self.tools)})")
        return tool(**dict(arguments))

    # -- the loop ----------------------------------------------------------------------------------
    def run(self, messages: Sequence[Mapping[str, Any]]) -> RunReport:
        """Run the agent from ``messages`` (the user's request, any system prompt) to its end."""
        report = RunReport()
        ex = self.executor
        try:
            self._settle(ex.add(*messages), report)
            while True:
                if report.steps >= self.max_steps:
                    report.capped, report.stopped = True, "capped"
                    break
                report.steps += 1
                msg = self._turn(report)
                r = ex.add(msg)
                waiting: SessionStep | None = None
                if msg.get("tool_calls") and r.recommendation.strategy in _INJECTING:
                    waiting = r  # inject after this message's tool results
                else:
                    self._settle(r, report)
                current = ex.messages[-1] if ex.messages else {}
                if current.get("role") == "assistant":  # the turn's message (or the one a repair got instead)
                    for call in list(current.get("tool_calls") or []):
                        if not any(m is current for m in ex.messages):  # rolled back meanwhile
                            break
                        self._run_call(call, report)
                if waiting is not None:
                    self._settle(waiting, report)
                last = ex.messages[-1] if ex.messages else {}
                if last.get("role") == "assistant" and not last.get("tool_calls"):
                    report.finished, report.answer = True, str(last.get("content") or "")
                    break
        except _Stop as stop:
            report.stopped = stop.reason
            if stop.reason == "blocked":
                report.blocked = True
        ex.finish(report.finished)  # a repair still waiting when the run ends: judged by how it ended
        report.served = ex.served
        report.messages = ex.messages
        return report

    def context(self, r: SessionStep, error: BaseException | None = None) -> RepairContext:
        """The repair context for ``r``'s failure, found where it is in the conversation: a failed
        tool result (or a bad call) gives its tool, arguments and call id, so a repair repeats
        that call; anything else repeats the LLM turn."""
        ctx = RepairContext(error=error, call_tool=self.call_tool, call_llm=self._redo_llm, llm=self._model(None),
                            llm_params=dict(self.llm_params), failure=r.primary)
        f = r.primary
        position = self.executor.position(f.source_index) if f is not None and f.source_index is not None else None
        msgs = self.executor.messages
        ctx.check = _empty_answer
        call: Mapping[str, Any] | None = None
        m: Mapping[str, Any] = msgs[position] if position is not None and position < len(msgs) else {}
        named = r.recommendation.params.get("failed_tool") or r.recommendation.params.get("tool")
        if not m and not isinstance(named, str):
            return ctx
        if m.get("role") == "tool":
            call = next((c for a in reversed(msgs[:position]) for c in (a.get("tool_calls") or [])
                         if c.get("id") == m.get("tool_call_id")), None)
        elif m.get("role") == "assistant" and m.get("tool_calls"):
            call = (m.get("tool_calls") or [None])[0]
        if call is None and isinstance(named, str):  # the failure is elsewhere; the service names the tool
            call = next((c for a in reversed(msgs) for c in (a.get("tool_calls") or [])
                         if (c.get("function") or {}).get("name") == named), None)
        if call is not None:
            ctx.check = None  # a tool's failure is its exception
            fn = call.get("function") or {}
            ctx.tool, ctx.call_id = str(fn.get("name") or ""), call.get("id")
            ctx.arguments = _arguments(fn.get("arguments"))
        return ctx

    def _redo_llm(self, model: str | None, params: Mapping[str, Any]) -> Message:
        """Repeat the latest LLM turn: the conversation up to (not including) its assistant message."""
        msgs = list(self.executor.messages)
        if msgs and msgs[-1].get("role") == "assistant":
            msgs = msgs[:-1]
        return self.call_llm(model, params, msgs)

    def _turn(self, report: RunReport) -> Message:
        """One LLM call; a failure is sent as an error step and repaired (or the run stops)."""
        report.llm_calls += 1
        try:
            return self.call_llm(None, self.llm_params)
        except Exception as exc:
            r = self.executor.add_error(error_text(exc), error_type=type(exc).__name__)
            result = self._settle(r, report, error=exc, append=False)
            if result is not None and result.recovered and isinstance(result.value, Mapping):
                return dict(result.value)
            report.error = exc
            raise _Stop("llm_error") from exc

    def _run_call(self, call: Mapping[str, Any], report: RunReport) -> None:
        fn = call.get("function") or {}
        name = str(fn.get("name") or "")
        args = _arguments(fn.get("arguments"))
        if args is None:
            # Not run. No tool message either: the service reads the bad call itself (malformed_call,
            # whose repair gives the schema), and an error text would make it a tool_error instead.
            return
        report.tool_calls += 1
        error: BaseException | None = None
        try:
            msg = tool_message(call.get("id"), _content(self.call_tool(name, args)))
        except Exception as exc:
            error = exc
            msg = tool_message(call.get("id"), error_text(exc), error=True)
        self._settle(self.executor.add(msg), report, error=error)

    def _settle(self, r: SessionStep, report: RunReport, *, error: BaseException | None = None,
                append: bool = True, depth: int = 0) -> RepairResult | None:
        """Carry out ``r``'s recommendation (climbing while repairs fail); ``None`` on ``continue``.
        A repeated call's result (a tool result, or the LLM turn's new message) joins the
        conversation and is diagnosed in turn."""
        rec: Recommendation = r.recommendation
        self._count_budget(rec, report)
        if rec.strategy == "continue":
            return None
        ctx = self.context(r, error)
        t0 = self._clock()
        results = self.executor.repair(rec, ctx)
        report.recovery_s += self._clock() - t0
        for res in results:
            if res.status == "skipped":  # a standing recommendation, carried out already
                continue
            report.repairs.append(res)
            report.strategies.append(res.strategy)
            report.extra_llm_calls += res.llm_calls
            report.extra_tool_calls += res.tool_calls
            report.llm_calls += res.llm_calls
            report.tool_calls += res.tool_calls
            if res.budget is not None:
                report.budget_hits += 1
            self._count_budget(res.next, report)
            if res.strategy == "human_handoff":
                report.handoffs += 1
        last = results[-1] if results else None
        if last is None:
            return None
        if last.status == "stopped":
            raise _Stop("blocked" if last.blocked else "handoff")
        if not (append and last.recovered and last.value is not None) or depth >= self.max_steps:
            return last
        if ctx.tool is not None and ctx.call_id is not None:
            msg = tool_message(ctx.call_id, _content(last.value))
        elif isinstance(last.value, Mapping):
            msg = {"role": "assistant", **dict(last.value)}
        else:
            return last
        return self._settle(self.executor.add(msg), report, depth=depth + 1)

    def _count_budget(self, rec: Recommendation | None, report: RunReport) -> None:
        if rec is None or rec.strategy != "human_handoff" or rec.id in self._seen_budget:
            return
        reason = rec.params.get("reason")
        if isinstance(reason, str) and "budget" in reason:
            self._seen_budget.add(rec.id)
            report.budget_hits += 1


class AsyncTriageAgent:
    """:class:`TriageAgent` for an async agent: ``llm``, the tools and the callbacks may be
    coroutine functions. The loop and the executor run in a worker thread (``asyncio.to_thread``);
    each coroutine is run on the caller's event loop, which stays free while the run waits on
    triage, on a backoff or on a person.

    Same parameters as :class:`TriageAgent`; ``await agent.run(messages)`` → :class:`RunReport`.
    """

    def __init__(self, llm: Callable[..., Any], tools: Mapping[str, Callable[..., Any]], *, client: TriageClient,
                 session_id: str, fallback_llms: Mapping[str, Callable[..., Any]] | None = None,
                 on_replan: Callable[..., Any] | None = None, on_handoff: Callable[..., Any] | None = None,
                 **options: Any) -> None:
        self._parts = (llm, dict(tools), dict(fallback_llms or {}), on_replan, on_handoff)
        self._client, self._session_id, self._options = client, session_id, options
        self.agent: TriageAgent | None = None  # the last run's, for its executor

    async def run(self, messages: Sequence[Mapping[str, Any]]) -> RunReport:
        import asyncio
        import inspect

        loop = asyncio.get_running_loop()

        def bridged(fn: Any) -> Any:
            if fn is None or not inspect.iscoroutinefunction(fn):
                return fn

            def call(*args: Any, **kwargs: Any) -> Any:
                return asyncio.run_coroutine_threadsafe(fn(*args, **kwargs), loop).result()

            return call

        llm, tools, fallbacks, on_replan, on_handoff = self._parts
        self.agent = TriageAgent(
            bridged(llm), {k: bridged(v) for k, v in tools.items()}, client=self._client,
            session_id=self._session_id, fallback_llms={k: bridged(v) for k, v in fallbacks.items()},
            on_replan=bridged(on_replan), on_handoff=bridged(on_handoff), **self._options,
        )
        return await asyncio.to_thread(self.agent.run, messages)


def _empty_answer(value: Any) -> str | None:
    """Why a repeated LLM turn failed all the same: it is empty again."""
    if isinstance(value, Mapping) and not str(value.get("content") or "").strip() and not value.get("tool_calls"):
        return "the repeated answer is empty too"
    return None


def _arguments(raw: Any) -> dict[str, Any] | None:
    """A tool call's arguments as a dict; ``None`` when they are not a JSON object."""
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        args = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return None
    return args if isinstance(args, dict) else None


def _content(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


__all__ = ["AsyncTriageAgent", "RunReport", "Tool", "TriageAgent"]
