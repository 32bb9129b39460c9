"""Request examples for the OpenAPI docs; ``docs/examples/*.json`` are the same (a test checks)."""

from __future__ import annotations

from typing import Any

OPENAI_IGNORED_ERROR: dict[str, Any] = {
    "trace": {
        "messages": [
            {"role": "system", "content": "You are a travel assistant. Use the tools."},
            {"role": "user", "content": "What's the weather in Lisbon tomorrow?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Lisbon", "day": "tomorrow"}'},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": '{"error": {"code": 503, "message": "Service Unavailable"}}',
            },
            {"role": "assistant", "content": "Tomorrow in Lisbon it will be sunny with a high of 24°C."},
        ]
    },
    "options": {"tool_equivalents": {"get_weather": ["weather_backup"]}},
}

OPENAI_LOOP: dict[str, Any] = {
    "trace": {
        "messages": [
            {"role": "user", "content": "Find the population of Porto."},
            *[
                m
                for i in range(3)
                for m in (
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": f"call_{i}",
                                "type": "function",
                                "function": {"name": "search", "arguments": '{"query": "Porto population"}'},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": f"call_{i}", "content": '{"results": []}'},
                )
            ],
        ]
    },
    "format": "openai",
}

HEALTHY: dict[str, Any] = {
    "trace": [
        {"role": "user", "content": "What is 17 * 23?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": '{"expr": "17*23"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "391"},
        {"role": "assistant", "content": "17 × 23 = 391."},
    ]
}

DIAGNOSE_EXAMPLES: dict[str, dict[str, Any]] = {
    "ignored_error": {"summary": "A tool error the agent ignored", "value": OPENAI_IGNORED_ERROR},
    "loop": {"summary": "The same search three times", "value": OPENAI_LOOP},
    "healthy": {"summary": "A healthy calculation (bare message list)", "value": HEALTHY},
}
