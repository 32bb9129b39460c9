"""Langfuse's span attributes (``langfuse.observation.*``, SDK v3+) read as GenAI attributes.

A span with ``langfuse.observation.type``:

- ``generation``: ``langfuse.observation.input`` (chat messages, or ``{"messages", "tools"}`` as
  its OpenAI drop-in writes it) → ``gen_ai.input.messages`` (and ``gen_ai.tool.definitions``),
  ``langfuse.observation.output`` (a message, or text) → ``gen_ai.output.messages``,
  ``langfuse.observation.model.name`` → ``gen_ai.request.model``;
- ``tool``: the span's name, ``input`` (arguments) and ``output`` → ``execute_tool``;
- ``agent``: → ``invoke_agent`` named after the span.

Attributes the span already has win; ``session.id`` / ``langfuse.session.id`` name the session.
Content that a ``mask`` replaced (``"[REDACTED]"``) stays as the placeholder it is.

>>> a = to_genai({"langfuse.observation.type": "tool", "langfuse.observation.input": '{"q": "x"}',
...               "langfuse.observation.output": "none"}, "search")
>>> a["gen_ai.operation.name"], a["gen_ai.tool.name"], a["gen_ai.tool.call.result"]
('execute_tool', 'search', 'none')
"""

from __future__ import annotations

import json
from typing import Any

TYPE = "langfuse.observation.type"


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def to_genai(attrs: dict[str, Any], name: str) -> dict[str, Any]:
    """GenAI attributes for a Langfuse span (see the module docstring); others unchanged."""
    kind = attrs.get(TYPE)
    if kind is None or "gen_ai.operation.name" in attrs:
        return attrs
    out = dict(attrs)
    raw_in, raw_out = attrs.get("langfuse.observation.input"), attrs.get("langfuse.observation.output")
    if kind == "generation":
        out["gen_ai.operation.name"] = "chat"
        data = _json(raw_in)
        messages = data.get("messages") if isinstance(data, dict) else data
        if isinstance(data, dict) and isinstance(data.get("tools"), list):
            out["gen_ai.tool.definitions"] = json.dumps(data["tools"], ensure_ascii=False)
        if isinstance(messages, list):
            out["gen_ai.input.messages"] = json.dumps(messages, ensure_ascii=False, default=str)
        if raw_out is not None:
            answer = _json(raw_out)
            msg = answer if isinstance(answer, dict) and "role" in answer else {"role": "assistant",
                                                                                 "content": _text(answer)}
            out["gen_ai.output.messages"] = json.dumps([msg], ensure_ascii=False, default=str)
        model = attrs.get("langfuse.observation.model.name")
        if model is not None:
            out["gen_ai.request.model"] = str(model)
    elif kind == "tool":
        out["gen_ai.operation.name"] = "execute_tool"
        out["gen_ai.tool.name"] = name
        if raw_in is not None:
            out["gen_ai.tool.call.arguments"] = _text(raw_in)
        if raw_out is not None:
            out["gen_ai.tool.call.result"] = _text(raw_out)
    elif kind == "agent":
        out["gen_ai.operation.name"] = "invoke_agent"
        out["gen_ai.agent.name"] = name
    if "langfuse.session.id" in attrs and "session.id" not in attrs:
        out["session.id"] = attrs["langfuse.session.id"]
    return out


__all__ = ["TYPE", "to_genai"]
