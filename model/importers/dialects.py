"""Message logs that are not OpenAI chat messages but say the same, read as if they were.

- **OpenAI Responses API items** (what the Agents SDK's ``result.to_input_list()`` and many
  agents log): ``{"type": "message", "role", "content": [{"type": "input_text" | "output_text",
  "text"}]}`` (or ``{"role", "content"}`` without a type), ``{"type": "function_call",
  "call_id", "name", "arguments"}`` → an assistant tool call, ``{"type": "function_call_output",
  "call_id", "output"}`` → a tool result, ``{"type": "reasoning", "summary": [...]}`` → reasoning;
  other items (web / file search calls…) → an empty assistant step is not made: they are skipped
  as no-ops (an assistant message with no text and no calls would be an empty answer).
- **LangChain messages**: ``messages_to_dict`` (``{"type": "human" | "ai" | "tool" | "system",
  "data": {...}}``) and ``model_dump()`` (``{"type", "content", "tool_calls": [{"name", "args",
  "id"}], "tool_call_id", "status"}``); a tool message with ``status: "error"`` is a failed result.

One item stays one message, so ``source_index`` is the item's position.

>>> to_chat([{"type": "function_call", "call_id": "c1", "name": "search", "arguments": "{}"},
...          {"type": "function_call_output", "call_id": "c1", "output": "none"}])[1]
{'role': 'tool', 'tool_call_id': 'c1', 'content': 'none'}
>>> to_chat([{"type": "human", "data": {"content": "hi", "type": "human"}}])
[{'role': 'user', 'content': 'hi'}]
"""

from __future__ import annotations

import json
from typing import Any

RESPONSES_TYPES = frozenset({"message", "function_call", "function_call_output", "reasoning", "computer_call",
                             "computer_call_output", "file_search_call", "web_search_call", "item_reference",
                             "custom_tool_call", "custom_tool_call_output", "mcp_call"})
#: marks a chat message made from a reasoning item (an answer of its own comes in another item)
REASONING_ITEM = "x-triage-reasoning-item"
LANGCHAIN_TYPES = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system", "function": "tool",
                   "HumanMessage": "user", "AIMessage": "assistant", "ToolMessage": "tool",
                   "SystemMessage": "system", "AIMessageChunk": "assistant", "chat": "user"}


def is_dialect_item(item: Any) -> bool:
    """Whether a list item is a Responses API item or a LangChain message dict (not a chat message)."""
    if not isinstance(item, dict) or "role" in item and item.get("type") in (None, "message"):
        return False
    kind = item.get("type")
    return kind in RESPONSES_TYPES or (kind in LANGCHAIN_TYPES and ("data" in item or "content" in item))


def _text(content: Any) -> Any:
    if isinstance(content, list):
        parts = [p.get("text", p.get("content")) if isinstance(p, dict) else p for p in content]
        return "\n".join(str(p) for p in parts if isinstance(p, str))
    return content


def _args(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _responses(item: dict[str, Any]) -> dict[str, Any] | None:
    kind = item.get("type")
    if kind == "message":
        return {"role": item.get("role", "assistant"), "content": _text(item.get("content"))}
    if kind in ("function_call", "custom_tool_call"):
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": item.get("call_id") or item.get("id"), "type": "function",
            "function": {"name": item.get("name"), "arguments": _args(item.get("arguments", item.get("input", "")))}}]}
    if kind in ("function_call_output", "custom_tool_call_output", "computer_call_output"):
        out = item.get("output")
        return {"role": "tool", "tool_call_id": item.get("call_id"),
                "content": out if isinstance(out, str) else _text(out) if isinstance(out, list) else _args(out)}
    if kind == "reasoning":
        summary = item.get("summary") or item.get("content") or []
        text = _text(summary) if isinstance(summary, list) else str(summary)
        return {"role": "assistant", "content": None, "reasoning_content": text, REASONING_ITEM: True} if text else None
    return None  # search / computer calls and references: nothing the detectors read


def _langchain(item: dict[str, Any]) -> dict[str, Any]:
    data = item["data"] if isinstance(item.get("data"), dict) else item
    role = LANGCHAIN_TYPES[str(item.get("type"))]
    msg: dict[str, Any] = {"role": role, "content": _text(data.get("content"))}
    if role == "assistant":
        calls = data.get("tool_calls") or []
        if calls:
            msg["tool_calls"] = [{"id": c.get("id"), "type": "function",
                                  "function": {"name": c.get("name"), "arguments": _args(c.get("args", {}))}}
                                 for c in calls if isinstance(c, dict)]
        reasoning = (data.get("additional_kwargs") or {}).get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            msg["reasoning_content"] = reasoning
    elif role == "tool":
        msg["tool_call_id"] = data.get("tool_call_id")
        if data.get("status") == "error":
            msg["status"] = "error"
    if isinstance(data.get("name"), str) and role != "assistant":
        msg["name"] = data["name"]
    return msg


def to_chat(items: list[Any]) -> list[Any]:
    """Items → chat messages, one for one; an item that carries nothing becomes ``None``, which
    :func:`model.importers.messages.import_messages` skips (the positions stay the items')."""
    out: list[Any] = []
    for item in items:
        if not is_dialect_item(item):
            out.append(item)
        elif item.get("type") in RESPONSES_TYPES:
            out.append(_responses(item))
        else:
            out.append(_langchain(item))
    return out


__all__ = ["LANGCHAIN_TYPES", "REASONING_ITEM", "RESPONSES_TYPES", "is_dialect_item", "to_chat"]
