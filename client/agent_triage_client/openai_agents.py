"""An OpenAI Agents SDK ``TracingProcessor`` that streams each run's steps to agent-triage.

Needs ``openai-agents`` (``pip install 'agent-triage-client[openai-agents]'``); importing this
module imports it, importing :mod:`agent_triage_client` does not.

>>> from agents import add_trace_processor                                        # doctest: +SKIP
>>> from agent_triage_client import TriageClient                                  # doctest: +SKIP
>>> from agent_triage_client.openai_agents import TriageTracingProcessor          # doctest: +SKIP
>>> add_trace_processor(TriageTracingProcessor(TriageClient(api_key="trg_…")))    # doctest: +SKIP

One session per trace: the trace's ``group_id`` (the conversation id the SDK lets you set with
``RunConfig(group_id=…)``), else its ``trace_id``. What is sent, as spans end:

- a model call (``response`` span, Responses API; ``generation`` span, Chat Completions): the
  input items not sent before (user and system messages; earlier tool calls and their outputs
  are recognised by ``call_id`` and not repeated), then the model's text and its function calls;
- a tool (``function`` span): its output, linked to the call of that name, or, when the span
  carries an error, a ``tool_result`` with status ``error``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any

try:
    from agents.tracing import (
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

from agent_triage_client._client import TriageClient
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
        return None

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


__all__ = ["TriageTracingProcessor"]
