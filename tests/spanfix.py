"""Build OTLP/JSON documents for tests: spans with typed attributes, in the exporter's shape."""

from __future__ import annotations

import json
from typing import Any


def value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, list):
        return {"arrayValue": {"values": [value(x) for x in v]}}
    if isinstance(v, dict):
        return {"stringValue": json.dumps(v)}
    return {"stringValue": str(v)}


def span(
    trace_id: str,
    span_id: str,
    name: str,
    start_s: float,
    attrs: dict[str, Any],
    *,
    parent: str | None = None,
    error: str | None = None,
    duration_s: float = 0.5,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": span_id,
        "name": name,
        "kind": 3,
        "startTimeUnixNano": str(int(start_s * 1e9)),
        "endTimeUnixNano": str(int((start_s + duration_s) * 1e9)),
        "attributes": [{"key": k, "value": value(v)} for k, v in attrs.items()],
        "status": {"code": 2, "message": error} if error else {},
    }
    if parent:
        out["parentSpanId"] = parent
    return out


def otlp(spans: list[dict[str, Any]], service: str = "agent") -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                "scopeSpans": [{"scope": {"name": "test"}, "spans": spans}],
            }
        ]
    }


def chat(trace_id: str, span_id: str, start_s: float, session: str | None = None, **attrs: Any) -> dict[str, Any]:
    """A GenAI chat span as the OpenAI client instrumentation writes it with content capture off."""
    a: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.response.model": "gpt-4o-mini",
        "gen_ai.usage.input_tokens": 50,
        "gen_ai.usage.output_tokens": 12,
        **attrs,
    }
    if session is not None:
        a["session.id"] = session
    return span(trace_id, span_id, "chat gpt-4o-mini", start_s, a)
