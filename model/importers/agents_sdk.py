"""The OpenAI Agents SDK's native trace export → spans the GenAI reader reads.

The SDK's exporter posts ``{"data": [item, …]}``; an item is a trace (``"object": "trace"``) or a
span (``"object": "trace.span"``: ``id``, ``trace_id``, ``parent_id``, ``started_at`` /
``ended_at`` ISO 8601, ``error`` ``{"message", "data"}``, ``span_data`` by ``type``):

- ``generation`` (Chat Completions): ``input`` / ``output`` chat messages, ``model``, ``usage`` →
  a GenAI ``chat`` span (``gen_ai.input.messages`` / ``gen_ai.output.messages``);
- ``function``: ``name``, ``input`` (JSON arguments), ``output`` → an ``execute_tool`` span, an
  error making it a failed result;
- ``agent``: ``name`` → an ``invoke_agent`` span (the speaker of the spans below it);
- ``response`` (Responses API) carries only the response id in this export, so it adds no step.

The trace item's ``group_id`` (the conversation id set with ``RunConfig(group_id=…)``) becomes
every span's ``gen_ai.conversation.id``.

>>> spans = to_spans({"data": [{"object": "trace.span", "id": "s1", "trace_id": "t1",
...     "started_at": "2026-01-01T00:00:00+00:00", "span_data": {"type": "function", "name": "search",
...     "input": "{}", "output": "none"}}]})
>>> spans[0]["attributes"]["gen_ai.tool.name"], spans[0]["attributes"]["gen_ai.tool.call.result"]
('search', 'none')
"""

from __future__ import annotations

import json
from typing import Any

_OBJECTS = ("trace", "trace.span")


def is_agents_export(data: Any) -> bool:
    """Whether ``data`` is the SDK's export (``{"data": [...]}`` or its item list)."""
    items = data.get("data") if isinstance(data, dict) and set(data) <= {"data"} else data
    return isinstance(items, list) and bool(items) and all(
        isinstance(x, dict) and x.get("object") in _OBJECTS for x in items[:20]
    )


def _chat(messages: Any) -> str:
    return json.dumps(messages if isinstance(messages, list) else [], ensure_ascii=False, default=str)


def to_spans(data: Any) -> list[dict[str, Any]]:
    """The export's spans as a span list (see the module docstring)."""
    items = data["data"] if isinstance(data, dict) else data
    groups = {x.get("id"): x.get("group_id") for x in items if x.get("object") == "trace" and x.get("group_id")}
    out: list[dict[str, Any]] = []
    for item in items:
        if item.get("object") != "trace.span":
            continue
        sd = item.get("span_data") if isinstance(item.get("span_data"), dict) else {}
        kind = sd.get("type")
        attrs: dict[str, Any] = {}
        if kind == "generation":
            attrs = {"gen_ai.operation.name": "chat"}
            # absent with RunConfig(trace_include_sensitive_data=False): not recorded, not empty
            if sd.get("input") is not None:
                attrs["gen_ai.input.messages"] = _chat(sd["input"])
            if sd.get("output") is not None:
                attrs["gen_ai.output.messages"] = _chat(sd["output"])
            if sd.get("model"):
                attrs["gen_ai.request.model"] = str(sd["model"])
            usage = sd.get("usage")
            for key in ("input_tokens", "output_tokens"):
                if isinstance(usage, dict) and isinstance(usage.get(key), int):
                    attrs[f"gen_ai.usage.{key}"] = usage[key]
        elif kind == "function":
            attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": str(sd.get("name") or "tool")}
            if sd.get("input") is not None:
                attrs["gen_ai.tool.call.arguments"] = sd["input"]
            if sd.get("output") is not None:
                attrs["gen_ai.tool.call.result"] = str(sd["output"])
        elif kind == "agent":
            attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": str(sd.get("name") or "agent")}
        else:
            continue  # response ids, turns, handoffs, guardrails: nothing the detectors read
        group = groups.get(item.get("trace_id"))
        if group:
            attrs["gen_ai.conversation.id"] = str(group)
        span: dict[str, Any] = {"trace_id": item.get("trace_id"), "span_id": item.get("id"),
                                "parent_span_id": item.get("parent_id"), "name": f"{kind} {sd.get('name', '')}".strip(),
                                "start_time": item.get("started_at"), "end_time": item.get("ended_at"),
                                "attributes": attrs}
        error = item.get("error")
        if isinstance(error, dict):
            message = str(error.get("message") or "error")
            if error.get("data"):
                message += f": {json.dumps(error['data'], ensure_ascii=False, default=str)}"
            span["status"] = {"code": "ERROR", "message": message}
        out.append(span)
    return out


__all__ = ["is_agents_export", "to_spans"]
