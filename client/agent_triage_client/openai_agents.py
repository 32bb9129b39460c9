"""An OpenAI Agents SDK ``TracingProcessor`` that streams each run's steps to agent-triage.

Needs ``openai-agents`` (``pip install 'agent-triage-client[openai-agents]'``); importing this
module imports it, importing :mod:`agent_triage_client` does not.

>>> from agents import add_trace_processor                                        # doctest: +SKIP
>>> from agent_triage_client import TriageClient                                  # doctest: +SKIP
>>> from agent_triage_client.openai_agents import TriageTracingProcessor          # doctest: +SKIP
>>> add_trace_processor(TriageTracingProcessor(TriageClient(api_key="trg_…")))    # doctest: +SKIP

One session per trace: the trace's ``group_id`` (the conversation id the SDK lets you set with
``RunConfig(group_id=…)``), else its ``trace_id``; its agent (the key of its agent model on the
service) is the ``agent=`` given, else the name of the run's first ``Agent``. What is sent, as spans end:

- a model call (``response`` span, Responses API; ``generation`` span, Chat Completions): the
  input items not sent before (user and system messages; earlier tool calls and their outputs
  are recognised by ``call_id`` and not repeated), then the model's text and its function calls;
- a tool (``function`` span): its output, linked to the call of that name, or, when the span
  carries an error, a ``tool_result`` with status ``error``.

Beside it, :class:`TriageRepair` *carries out* the repairs (the processor only reports). The SDK's
interception points are the model and the tools, so that is where it sits: ``repair.model(model)``
wraps any :class:`agents.Model` and ``repair.tool(tool)`` / ``repair.tools([...])`` any
:class:`agents.FunctionTool`, over :class:`~agent_triage_client.executor.RepairExecutor` (through
:class:`agent_triage_client._bridge.Bridge`, as the LangChain middleware does); ``repair.hooks``
(:class:`agents.RunHooks`) reports, when the agent ends, the repairs whose outcome waited for it::

    repair = TriageRepair(TriageClient(api_key="trg_…"), "conv-42", equivalents={"weather": ["weather_alt"]})
    agent = Agent(name="a", model=repair.model(model), tools=repair.tools([weather, weather_alt]))
    result = await Runner.run(agent, "Weather in Paris?", hooks=repair.hooks)

A model call that raises (a provider's 503) is repeated as the service says (``retry``,
``adjust_parameters`` through ``ModelSettings``, ``fallback_model`` with a model of
``fallback_models``); a tool that raises — declare tools with ``failure_error_function=None`` so
the exception, its ``status`` and ``retry_after`` reach triage; the SDK's default turns every
error into one fixed sentence — or returns that sentence is repeated (``retry``,
``adjust_parameters``, ``switch_tool`` to an equivalent given to ``tools``). A loop is rolled back:
the model's next input is the conversation before the loop with the service's instruction (the
runner's own items keep every call: the run's log). A handoff that stops the run makes the model
answer with a note saying so; a blocked tool output reaches the model withheld. With ``continue``
(a canary's shadow arm, triage unreachable) everything is left as it was, exceptions included.
Not for server-side conversation state (``previous_response_id`` / ``conversation_id``): the
service's repairs change the input the model is given. Streaming (``Runner.run_streamed``) is not
repaired.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

try:
    from agents import FunctionTool, Model, ModelResponse, ModelSettings, RunHooks, Usage
    from agents.tracing import (
        AgentSpanData,
        FunctionSpanData,
        GenerationSpanData,
        ResponseSpanData,
        Span,
        Trace,
        TracingProcessor,
    )
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "agent_triage_client.openai_agents needs openai-agents: pip install 'agent-triage-client[openai-agents]'"
    ) from exc

from agent_triage_client._bridge import Bridge, ToolFailed
from agent_triage_client._client import TriageClient
from agent_triage_client.executor import BLOCKED, HandoffCallback, Message, RepairExecutor, ReplanCallback
from agent_triage_client.stream import StepStream, tool_call


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(_get(p, "text", "") or _get(p, "refusal", "") or "") for p in content)
    return str(content)


class _Run:
    """One trace's stream and what it has sent (by call id, for the Responses items)."""

    def __init__(self, stream: StepStream) -> None:
        self.stream = stream
        self.calls: set[str] = set()
        self.results: set[str] = set()
        self.pending: dict[str, list[str]] = {}  # tool name → call ids not yet answered

    def items_to_messages(self, items: Iterable[Any]) -> list[dict[str, Any]]:
        """Responses API items (or chat messages) → chat messages, leaving out calls and results
        already sent."""
        out: list[dict[str, Any]] = []
        for item in items:
            kind = _get(item, "type")
            role = _get(item, "role")
            if kind == "function_call":
                cid = str(_get(item, "call_id") or _get(item, "id") or "")
                if cid in self.calls:
                    continue
                self._call(cid, str(_get(item, "name")))
                out.append({"role": "assistant", "content": None,
                            "tool_calls": [tool_call(cid, str(_get(item, "name")), _get(item, "arguments") or "{}")]})
            elif kind == "function_call_output":
                cid = str(_get(item, "call_id") or "")
                if cid in self.results:
                    continue
                self.results.add(cid)
                out.append({"role": "tool", "tool_call_id": cid, "content": _text(_get(item, "output"))})
            elif role == "tool":  # chat completions
                cid = str(_get(item, "tool_call_id") or "")
                if cid in self.results:
                    continue
                self.results.add(cid)
                out.append({"role": "tool", "tool_call_id": cid, "content": _text(_get(item, "content"))})
            elif role in ("user", "system", "developer", "assistant") and kind in (None, "message"):
                text = _text(_get(item, "content"))
                calls = _get(item, "tool_calls") or []
                if text or not calls:
                    out.append({"role": "system" if role == "developer" else role, "content": text})
                fresh = []
                for c in calls:
                    fn = _get(c, "function", {})
                    cid = str(_get(c, "id") or "")
                    if cid in self.calls:
                        continue
                    self._call(cid, str(_get(fn, "name")))
                    fresh.append(tool_call(cid, str(_get(fn, "name")), _get(fn, "arguments") or "{}"))
                if fresh:
                    out.append({"role": "assistant", "content": None, "tool_calls": fresh})
            # reasoning, file search, web search and other items carry nothing the detectors read
        return out

    def _call(self, call_id: str, name: str) -> None:
        self.calls.add(call_id)
        self.pending.setdefault(name, []).append(call_id)

    def answer(self, name: str) -> str | None:
        ids = self.pending.get(name) or []
        cid = ids.pop(0) if ids else None
        if cid is not None:
            self.results.add(cid)
        return cid


class TriageTracingProcessor(TracingProcessor):
    """Streams every traced run to ``/v1/sessions/{group_id or trace_id}/steps``.

    Parameters
    ----------
    client:
        A :class:`~agent_triage_client.TriageClient`.
    session_id:
        One fixed session for every trace (default: each trace's ``group_id``, else its id).
    **stream_options:
        Passed to :class:`~agent_triage_client.StepStream` (``background`` defaults to ``True``
        here: the SDK asks processors not to block).
    """

    def __init__(self, client: TriageClient, *, session_id: str | None = None, **stream_options: Any) -> None:
        self.client = client
        self.session_id = session_id
        self.stream_options = {"background": True, **stream_options}
        self._runs: dict[str, _Run] = {}
        self._lock = threading.Lock()

    def _run(self, trace_id: str, group_id: str | None = None) -> _Run:
        with self._lock:
            run = self._runs.get(trace_id)
            if run is None:
                session = self.session_id or group_id or trace_id
                run = self._runs[trace_id] = _Run(StepStream(self.client, session, **self.stream_options))
            return run

    def streams(self) -> list[StepStream]:
        with self._lock:
            return [r.stream for r in self._runs.values()]

    # -- TracingProcessor ----------------------------------------------------------------------------
    def on_trace_start(self, trace: Trace) -> None:
        group = getattr(trace, "group_id", None)
        if group is None:
            group = (trace.export() or {}).get("group_id")
        self._run(trace.trace_id, str(group) if group else None)

    def on_trace_end(self, trace: Trace) -> None:
        with self._lock:
            run = self._runs.pop(trace.trace_id, None)
        if run is not None:
            run.stream.close()

    def on_span_start(self, span: Span[Any]) -> None:
        data = span.span_data
        if isinstance(data, AgentSpanData) and data.name:
            run = self._run(span.trace_id)
            if run.stream.agent is None:  # the run's outermost agent starts first: the session's agent
                run.stream.agent = str(data.name)

    def on_span_end(self, span: Span[Any]) -> None:
        run = self._run(span.trace_id)
        data = span.span_data
        if isinstance(data, ResponseSpanData):
            items: list[Any] = []
            if isinstance(data.input, str):
                items.append({"role": "user", "content": data.input})
            elif data.input:
                items.extend(data.input)
            new = run.items_to_messages(items)
            if new:
                run.stream.inputs(new)
            output = list(_get(data.response, "output", None) or [])
            texts = [_text(_get(o, "content")) for o in output if _get(o, "type") == "message"]
            if any(texts):
                run.stream.inputs([{"role": "assistant", "content": "\n".join(t for t in texts if t)}])
            calls = run.items_to_messages([o for o in output if _get(o, "type") == "function_call"])
            if calls:
                run.stream.inputs(calls)
        elif isinstance(data, GenerationSpanData):
            new = run.items_to_messages([*(data.input or []), *(data.output or [])])
            if new:
                run.stream.inputs(new)
        elif isinstance(data, FunctionSpanData):
            cid = run.answer(data.name)
            if span.error:
                message = _get(span.error, "message", "") or "the tool failed"
                detail = _get(span.error, "data")
                text = f"{message}: {json.dumps(detail, default=str)}" if detail else str(message)
                run.stream.tool_error(cid, text, name=data.name)
            else:
                run.stream.tool_result(cid, _text(data.output), name=data.name)

    def shutdown(self) -> None:
        for stream in self.streams():
            stream.close()

    def force_flush(self) -> None:
        for stream in self.streams():
            stream.flush()


# -- repairs ---------------------------------------------------------------------------------------------
#: What the SDK's default ``failure_error_function`` makes of every tool exception.
SDK_TOOL_ERROR = "An error occurred while running the tool."


def items_to_chat(items: Sequence[Any]) -> list[tuple[str, Message]]:
    """Responses input items → ``(key, chat message)``, one per item the detectors read. Keys: a
    call's ``call_id`` (``call:`` / ``out:``), else the item's position (the runner's input is
    the original input followed by the items generated since, in order)."""
    out: list[tuple[str, Message]] = []
    for i, item in enumerate(items):
        kind, role = _get(item, "type"), _get(item, "role")
        if kind == "function_call":
            cid = str(_get(item, "call_id") or "")
            out.append((f"call:{cid}", {"role": "assistant", "content": None, "tool_calls": [
                tool_call(cid, str(_get(item, "name")), _get(item, "arguments") or "{}")]}))
        elif kind == "function_call_output":
            cid = str(_get(item, "call_id") or "")
            out.append((f"out:{cid}", {"role": "tool", "tool_call_id": cid, "content": _text(_get(item, "output"))}))
        elif role in ("user", "system", "developer", "assistant") and kind in (None, "message"):
            out.append((f"pos:{i}", {"role": "system" if role == "developer" else role,
                                     "content": _text(_get(item, "content"))}))
    return out


def chat_to_items(messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Chat messages (the executor's) → Responses input items."""
    out: list[Any] = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            out.append({"type": "function_call_output", "call_id": str(m.get("tool_call_id") or ""),
                        "output": str(m.get("content") or "")})
            continue
        if m.get("content") or not m.get("tool_calls"):
            out.append({"role": role, "content": str(m.get("content") or "")})
        for c in m.get("tool_calls") or []:
            fn = c.get("function") or {}
            out.append({"type": "function_call", "call_id": str(c.get("id") or ""), "name": str(fn.get("name")),
                        "arguments": fn.get("arguments") or "{}"})
    return out


def output_to_chat(output: Sequence[Any]) -> Message:
    """A model response's output items → one assistant chat message (text and function calls)."""
    texts = [_text(_get(o, "content")) for o in output if _get(o, "type") == "message"]
    calls = [tool_call(str(_get(o, "call_id") or ""), str(_get(o, "name")), _get(o, "arguments") or "{}")
             for o in output if _get(o, "type") == "function_call"]
    msg: Message = {"role": "assistant", "content": "\n".join(t for t in texts if t) or None}
    if calls:
        msg["tool_calls"] = calls
    return msg


def text_response(text: str) -> ModelResponse:
    """A model response that is only ``text`` (what a stopped run answers)."""
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    message = ResponseOutputMessage(id=f"msg_triage_{uuid.uuid4().hex[:12]}", role="assistant", status="completed",
                                    type="message", content=[ResponseOutputText(type="output_text", text=text,
                                                                                annotations=[])])
    return ModelResponse(output=[message], usage=Usage(), response_id=None)


class _Hooks(RunHooks[Any]):
    def __init__(self, repair: TriageRepair) -> None:
        self.repair = repair

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        executor = self.repair.executor
        name = getattr(agent, "name", None)
        if executor.agent is None and name:  # the first agent of the run names the session's agent
            executor.agent = str(name)

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        bridge = self.repair.bridge
        await asyncio.to_thread(bridge.finish, bridge.stopped is None)


class TriageRepair:
    """Carries out agent-triage's repairs in an OpenAI Agents SDK run (see the module docstring).

    Parameters
    ----------
    client, session_id:
        The triage client and the run's session (one ``TriageRepair`` per conversation).
    equivalents:
        Tool name → equivalent tools (give them to :meth:`tools` too), for ``switch_tool``.
    fallback_models:
        Model name → :class:`agents.Model`, in order of preference, for ``fallback_model``.
    on_replan, on_handoff, max_redo, **executor_options:
        As :class:`~agent_triage_client.langchain_middleware.TriageMiddleware`'s.
    """

    def __init__(
        self,
        client: TriageClient,
        session_id: str,
        *,
        equivalents: Mapping[str, Sequence[str]] | None = None,
        fallback_models: Mapping[str, Model] | None = None,
        on_replan: ReplanCallback | None = None,
        on_handoff: HandoffCallback | None = None,
        max_redo: int = 8,
        **executor_options: Any,
    ) -> None:
        self.fallback_models = dict(fallback_models or {})
        self.known_tools: dict[str, FunctionTool] = {}
        self.executor = RepairExecutor(
            client, session_id, equivalents=equivalents, fallback_models=list(self.fallback_models),
            on_replan=on_replan, on_handoff=on_handoff, **executor_options,
        )
        self.bridge = Bridge(self.executor, max_redo=max_redo)
        self.hooks: RunHooks[Any] = _Hooks(self)

    def model(self, inner: Model) -> Model:
        """``inner``, its calls repaired."""
        return _RepairingModel(self, inner)

    def tools(self, tools: Sequence[FunctionTool]) -> list[FunctionTool]:
        """Each tool, its calls repaired (and known to ``switch_tool`` by name)."""
        for t in tools:
            self.known_tools[t.name] = t
        return [self.tool(t) for t in tools]

    def tool(self, t: FunctionTool) -> FunctionTool:
        """``t``, its calls repaired."""
        self.known_tools.setdefault(t.name, t)
        repair = self

        async def on_invoke_tool(ctx: Any, input_json: str) -> Any:
            loop = asyncio.get_running_loop()
            call_id = str(getattr(ctx, "tool_call_id", "") or "")
            try:
                args = json.loads(input_json or "{}")
            except ValueError:
                args = {"input": input_json}

            def run(name: str, arguments: dict[str, Any]) -> tuple[Any, Message]:
                target = repair.known_tools.get(name)
                if target is None:
                    raise LookupError(f"no tool {name!r} (have {sorted(repair.known_tools)})")
                async def invoke() -> Any:
                    return await target.on_invoke_tool(ctx, json.dumps(arguments))

                out: Any = asyncio.run_coroutine_threadsafe(invoke(), loop).result()
                msg: Message = {"role": "tool", "tool_call_id": call_id, "content": _text(out)}
                if isinstance(out, str) and out.startswith(SDK_TOOL_ERROR):
                    msg["status"] = "error"
                    raise ToolFailed(out, msg)
                return out, msg

            turn = await asyncio.to_thread(repair.bridge.tool_call, t.name, args if isinstance(args, dict) else {},
                                           call_id, run, lambda _out: f"out:{call_id}")
            if turn.blocked:
                return BLOCKED
            if turn.result is None:
                if turn.error is not None and turn.stopped is None and not turn.waiting:
                    raise turn.error  # nothing repaired it: as without triage
                return str((turn.message or {}).get("content") or "")
            if turn.error is not None and not isinstance(turn.error, ToolFailed):
                raise turn.error
            return turn.result

        wrapped = copy.copy(t)
        wrapped.on_invoke_tool = on_invoke_tool
        return wrapped


class _RepairingModel(Model):
    """A model whose calls :class:`TriageRepair` repairs."""

    def __init__(self, repair: TriageRepair, inner: Model) -> None:
        self.repair = repair
        self.inner = inner

    async def get_response(self, system_instructions: str | None, input: Any, model_settings: ModelSettings,
                           tools: list[Any], output_schema: Any, handoffs: list[Any], tracing: Any, *,
                           previous_response_id: str | None = None, conversation_id: str | None = None,
                           prompt: Any = None) -> ModelResponse:
        loop = asyncio.get_running_loop()
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        base = {k: v for k in ("temperature", "max_tokens") if (v := getattr(model_settings, k)) is not None}
        repair = self.repair

        def call(messages: list[Message] | None, model: str | None, params: dict[str, Any]) -> tuple[Any, Message]:
            inner = self.inner
            if model is not None:
                if model not in repair.fallback_models:
                    raise LookupError(f"no fallback model {model!r} (have {sorted(repair.fallback_models)})")
                inner = repair.fallback_models[model]
            given = input if messages is None else chat_to_items(messages)
            settings = model_settings
            changed = {k: params[k] for k in ("temperature", "max_tokens") if k in params and params[k] != base.get(k)}
            if changed:
                settings = dataclasses.replace(model_settings, **changed)
            response = asyncio.run_coroutine_threadsafe(inner.get_response(
                system_instructions, given, settings, tools, output_schema, handoffs, tracing,
                previous_response_id=previous_response_id, conversation_id=conversation_id, prompt=prompt), loop).result()
            return response, output_to_chat(response.output)

        def keys(response: Any) -> list[str]:
            out = []
            for j, o in enumerate(response.output):  # where the runner will put these items in the next input
                cid = _get(o, "call_id")
                out.append(f"call:{cid}" if _get(o, "type") == "function_call" else f"pos:{len(items) + j}")
            return out

        def work() -> Any:
            repair.bridge.forward(items_to_chat(items))
            return repair.bridge.model_call(call, keys, params=dict(base))

        turn = await asyncio.to_thread(work)
        if turn.stopped is not None:
            return text_response(repair.bridge.handoff_text())
        if turn.error is not None:
            raise turn.error
        response: ModelResponse = turn.result
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("TriageRepair does not repair streamed runs (Runner.run_streamed); use Runner.run")


__all__ = ["SDK_TOOL_ERROR", "TriageRepair", "TriageTracingProcessor", "chat_to_items", "items_to_chat"]
