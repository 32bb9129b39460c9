"""The agent every integration fixture records: the OpenAI client against the stub model, two tools.

``search`` finds nothing (the model calls it four times with the same query: a loop);
``get_weather`` answers HTTP 503 (the model then makes up a forecast: an ignored error).
"""

from __future__ import annotations

import json
from typing import Any

TOOLS = [
    {"type": "function", "function": {"name": "search", "description": "Search the web.",
                                      "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                                                     "required": ["query"]}}},
    {"type": "function", "function": {"name": "get_weather", "description": "The forecast for a city.",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string"}, "day": {"type": "string"}}}}},
]
QUESTION = "What's the weather in Lisbon tomorrow?"


def run_tool(name: str, args: dict[str, Any]) -> str:
    if name == "search":
        return json.dumps({"results": []})
    return json.dumps({"error": {"code": 503, "message": "Service Unavailable"}})


def run(client: Any, model: str = "gpt-4o-mini") -> list[dict[str, Any]]:
    """Run the agent to its answer; returns the conversation (OpenAI chat messages)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a travel assistant. Use the tools."},
        {"role": "user", "content": QUESTION},
    ]
    for _ in range(8):
        resp = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        msg = resp.choices[0].message
        entry: dict[str, Any] = {"role": "assistant", "content": msg.content}
        if msg.tool_calls:
            entry["tool_calls"] = [{"id": c.id, "type": "function",
                                    "function": {"name": c.function.name, "arguments": c.function.arguments}}
                                   for c in msg.tool_calls]
        messages.append(entry)
        if not msg.tool_calls:
            return messages
        for c in msg.tool_calls:
            messages.append({"role": "tool", "tool_call_id": c.id,
                             "content": run_tool(c.function.name, json.loads(c.function.arguments))})
    raise RuntimeError("the stub model never answered")
