"""A trace as an OpenTelemetry GenAI exporter with content capture off would send it (OTLP/JSON).

Content capture is opt-in in the GenAI conventions, so by default a span carries no messages, no
system instructions, no tool arguments or results and no tool definitions; what survives is the
operation (``chat`` / ``text_completion`` / ``execute_tool``), the model, the provider, the tool
names and call ids, errors, and the resource's ``service.name`` when the application sets one.
This module writes that, one span per LLM call (an assistant turn and the tool calls it made) and
one ``execute_tool`` span per tool run, all children of no agent span (the run names no agent),
so that the identity evaluation (:mod:`model.training.identity_eval`) and benches can post real
runs the way such an exporter would. It reads back through :func:`model.importers.load_traces`
(``format="auto"``), the reader of ``POST /v1/diagnose`` and ``/otlp/v1/traces``.

>>> from model.core.schema import Step, Trace
>>> t = Trace(steps=[Step(kind="user_input", content="hi"), Step(kind="tool_call", tool_name="lookup", call_id="c1"),
...                  Step(kind="tool_result", tool_name="lookup", call_id="c1", content="42"),
...                  Step(kind="final_output", content="It is 42.")])
>>> doc = otlp_content_off(t, model="gpt-4o", provider="openai")
>>> [s["name"] for s in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]]
['chat gpt-4o', 'execute_tool lookup', 'chat gpt-4o']
"""

from __future__ import annotations

import hashlib
from typing import Any

from model.core.schema import StepKind, StepStatus, Trace

_LLM = frozenset({StepKind.LLM_OUTPUT, StepKind.LLM_REASONING, StepKind.FINAL_OUTPUT})


def _attr(key: str, value: str | int) -> dict[str, Any]:
    return {"key": key, "value": {"intValue": str(value)} if isinstance(value, int) else {"stringValue": value}}


def otlp_content_off(trace: Trace, *, model: str | None, provider: str | None = None, operation: str = "chat",
                     service_name: str | None = None, trace_id: str | None = None) -> dict[str, Any]:
    """``trace`` as OTLP/JSON GenAI spans with content capture off (see the module docstring).

    ``model``, ``provider``, ``operation`` (``chat`` or ``text_completion``): what the LLM spans
    say; ``service_name``: the resource's ``service.name`` (``None``: not set); ``trace_id``: the
    OTLP trace id (default: a hash of ``trace.id``).
    """
    tid = trace_id or hashlib.sha256(trace.id.encode("utf-8")).hexdigest()[:32]
    spans: list[dict[str, Any]] = []
    clock = 1_700_000_000_000_000_000

    def add(name: str, attrs: list[dict[str, Any]], error: bool = False) -> None:
        nonlocal clock
        sid = hashlib.sha256(f"{tid}:{len(spans)}".encode()).hexdigest()[:16]
        span: dict[str, Any] = {"traceId": tid, "spanId": sid, "name": name, "kind": 3,
                                "startTimeUnixNano": str(clock), "endTimeUnixNano": str(clock + 1_000_000),
                                "attributes": attrs}
        if error:
            span["status"] = {"code": 2}
        spans.append(span)
        clock += 2_000_000

    llm_attrs = [_attr("gen_ai.operation.name", operation)]
    if provider:
        llm_attrs.append(_attr("gen_ai.provider.name", provider))
    if model:
        llm_attrs += [_attr("gen_ai.request.model", model), _attr("gen_ai.response.model", model)]
    in_turn = False  # an LLM call is open: its text and the tool calls it made are one span
    for step in trace.steps:
        if step.kind in _LLM:
            if not in_turn:
                add(f"{operation} {model or ''}".strip(), llm_attrs)
                in_turn = True
        elif step.kind is StepKind.TOOL_CALL:
            if not in_turn:  # a call no recorded LLM turn made (a harness parsing text): the model's call
                add(f"{operation} {model or ''}".strip(), llm_attrs)
            in_turn = True
        elif step.kind is StepKind.TOOL_RESULT:
            name = step.tool_name or "tool"
            attrs = [_attr("gen_ai.operation.name", "execute_tool"), _attr("gen_ai.tool.name", name)]
            if step.call_id:
                attrs.append(_attr("gen_ai.tool.call.id", step.call_id))
            add(f"execute_tool {name}", attrs, error=step.status in (StepStatus.ERROR, StepStatus.TIMEOUT))
            in_turn = False
        else:  # system, user input, an error: not an LLM span of its own (content off: not shown)
            in_turn = False
    resource = [_attr("service.name", service_name)] if service_name else []
    return {"resourceSpans": [{"resource": {"attributes": resource},
                               "scopeSpans": [{"scope": {"name": "opentelemetry.instrumentation.genai"},
                                               "spans": spans}]}]}


__all__ = ["otlp_content_off"]
