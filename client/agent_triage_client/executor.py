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
same finding (its ``details.repeats`` grows, and with it the ``reach_source_index`` the service
sends), which is how ``add`` sees that a rollback did not hold. The executor's ``messages`` are what the agent's LLM sees: the undone messages are gone.

The conversation half (messages, snapshots, the session, outcomes that wait) is
:class:`agent_triage_client._conversation.Conversation`; what a repair gets and gives
(:class:`RepairContext`, :class:`RepairResult`, …) is defined in ``agent_triage_client._repair_types``
and exported from here.

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
from typing import Any, Literal

from agent_triage_client._client import TriageClient
from agent_triage_client._conversation import Conversation
from agent_triage_client._repair_types import (
    BLOCKED,
    DEFERRED,
    LLM,
    PAGE_KEYS,
    SUMMARY_PROMPT,
    Handoff,
    HandoffCallback,
    Message,
    RepairContext,
    RepairResult,
    RepeatFailed,
    Replan,
    ReplanCallback,
    Status,
    budget_reason,
    error_text,
    nonneg_number,
    tool_message,
)
from agent_triage_client.models import Recommendation
from agent_triage_client.snapshots import Snapshots


class RepairExecutor(Conversation):
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
        super().__init__(client, session_id, state=state, tools=tools, language=language, task_type=task_type,
                         agent=agent, equivalents=equivalents, fallback_models=fallback_models,
                         allowed_tools=allowed_tools, options=options, clock=clock)
        self.on_replan = on_replan
        self.on_handoff = on_handoff
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_wait_s = max_wait_s
        self.max_repairs = max_repairs
        self.shadow = shadow
        self._sleep = sleep
        self._rng = rng or random.Random()

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
        delay = nonneg_number(rec.params.get("delay_s"))
        if delay is None:
            delay = self._rng.uniform(0, min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))
        for after in (rec.params.get("retry_after"), getattr(error, "retry_after", None)):
            a = nonneg_number(after)
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
            left = nonneg_number(rec.budgets.get("task_recovery_s_left"))
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
                                        next=out.next, budget=budget_reason(out.next),
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
        tokens = nonneg_number(p.get("max_tokens_factor")) or 0.5
        page = nonneg_number(p.get("page_size_factor")) or 0.5
        slower = nonneg_number(p.get("timeout_factor")) or 2.0
        top_t = nonneg_number(p.get("max_temperature"))
        params = dict(llm_params or {})
        t = nonneg_number(params.get("temperature"))
        params["temperature"] = min(t if t is not None else 1.0, top_t if top_t is not None else 0.2)
        if nonneg_number(params.get("max_tokens")):
            params["max_tokens"] = max(16, int(params["max_tokens"] * tokens))
        if nonneg_number(params.get("timeout")):
            params["timeout"] = params["timeout"] * slower
        args = dict(arguments or {})
        for k in PAGE_KEYS:
            v = args.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > 1:
                args[k] = max(1, int(v * page))
        for k in ("timeout", "timeout_s"):
            if nonneg_number(args.get(k)):
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
    "DEFERRED",
    "LLM",
    "PAGE_KEYS",
    "SUMMARY_PROMPT",
    "Handoff",
    "HandoffCallback",
    "Message",
    "RepairContext",
    "RepairExecutor",
    "RepairResult",
    "RepeatFailed",
    "Replan",
    "ReplanCallback",
    "Snapshots",
    "Status",
    "error_text",
    "tool_message",
]
