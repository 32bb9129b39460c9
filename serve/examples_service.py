"""OpenAPI request examples of the stateful endpoints (sessions, outcomes, streams)."""

from __future__ import annotations

from typing import Any

APPEND_EXAMPLES: dict[str, dict[str, Any]] = {
    "openai_messages": {
        "summary": "OpenAI messages: a user turn and a tool call",
        "value": {
            "messages": [
                {"role": "user", "content": "Find the cheapest flight to Lisbon."},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "search_flights", "arguments": '{"to": "LIS"}'},
                        }
                    ],
                },
            ],
            "options": {"tool_equivalents": {"search_flights": ["search_flights_v2"]}},
            "task_type": "travel",
        },
    },
    "native_step": {
        "summary": "One native step: the tool's result",
        "value": {
            "steps": [
                {
                    "kind": "tool_result",
                    "tool_name": "search_flights",
                    "call_id": "call_1",
                    "content": '{"error": "upstream timeout"}',
                    "status": "timeout",
                }
            ]
        },
    },
}

OUTCOME_EXAMPLES: dict[str, dict[str, Any]] = {
    "failed": {
        "summary": "The retry did not help",
        "value": {
            "recommendation_id": "3f2b0c1d9e8a4b7c6d5e4f3a2b1c0d9e",
            "success": False,
            "duration_s": 2.5,
        },
    },
    "succeeded": {
        "summary": "The repair worked",
        "value": {
            "recommendation_id": "3f2b0c1d9e8a4b7c6d5e4f3a2b1c0d9e",
            "success": True,
            "duration_s": 1.2,
            "cost": 0.002,
        },
    },
}

OBSERVATION_EXAMPLES: dict[str, dict[str, Any]] = {
    "latency": {
        "summary": "Latency of three runs (ms)",
        "value": {
            "values": [812.0, 790.5, 845.2],
            "task_type": "travel",
            "params": {"shift": 1.0, "arl0": 500, "warmup": 50},
        },
    }
}

__all__ = ["APPEND_EXAMPLES", "OBSERVATION_EXAMPLES", "OUTCOME_EXAMPLES"]
