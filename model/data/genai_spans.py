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
import json
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
    # an LLM call is open: its reasoning, one message and the tool calls it made are one span
    in_turn = said = False
    for step in trace.steps:
        if step.kind in _LLM:
            if not in_turn or said or step.kind is StepKind.LLM_REASONING:
                add(f"{operation} {model or ''}".strip(), llm_attrs)
                in_turn = True
            said = step.kind is not StepKind.LLM_REASONING
        elif step.kind is StepKind.TOOL_CALL:
            said = True
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


def _message(step: Any) -> dict[str, Any] | None:
    """An input message (user text, a tool's result) in the GenAI ``parts`` shape."""
    if step.kind is StepKind.USER_INPUT:
        return {"role": "user", "parts": [{"type": "text", "content": step.content}]}
    if step.kind is StepKind.TOOL_RESULT:
        msg = {"role": "tool", "parts": [{"type": "tool_call_response", "id": step.call_id or "",
                                          "response": step.content}]}
        return {**msg, "name": step.tool_name} if step.tool_name else msg
    return None


def otlp_content_on(trace: Trace, *, model: str | None, provider: str | None = None, operation: str = "chat",
                    service_name: str | None = None, trace_id: str | None = None) -> dict[str, Any]:
    """``trace`` as an LLM client's GenAI instrumentation with content capture **on** sends it: one
    chat span per assistant turn, carrying the system instructions, the whole conversation so far
    as ``gen_ai.input.messages`` and the turn (text, reasoning, tool calls) as
    ``gen_ai.output.messages``; tools run outside the instrumented client (no ``execute_tool``
    spans), their results arrive in the next turn's input. Messages after the last assistant turn
    (a tool result nobody read) are not in any span."""
    tid = trace_id or hashlib.sha256(trace.id.encode("utf-8")).hexdigest()[:32]
    system = "\n".join(st.content for st in trace.steps if st.kind is StepKind.SYSTEM)
    base = [_attr("gen_ai.operation.name", operation)]
    if provider:
        base.append(_attr("gen_ai.provider.name", provider))
    if model:
        base += [_attr("gen_ai.request.model", model), _attr("gen_ai.response.model", model)]
    if system:
        base.append(_attr("gen_ai.system_instructions", json.dumps([{"type": "text", "content": system}])))
    history: list[dict[str, Any]] = []
    turn: list[dict[str, Any]] = []
    spans: list[dict[str, Any]] = []

    def close() -> None:
        if not turn:
            return
        out = [{"role": "assistant", "parts": list(turn), "finish_reason": "stop"}]
        k = len(spans)
        spans.append({"traceId": tid, "spanId": hashlib.sha256(f"{tid}:{k}".encode()).hexdigest()[:16],
                      "name": f"{operation} {model or ''}".strip(), "kind": 3,
                      "startTimeUnixNano": str(1_700_000_000_000_000_000 + 2_000_000 * k),
                      "endTimeUnixNano": str(1_700_000_000_000_000_000 + 2_000_000 * k + 1_000_000),
                      "attributes": [*base, _attr("gen_ai.input.messages", json.dumps(history)),
                                     _attr("gen_ai.output.messages", json.dumps(out))]})
        history.extend(out)
        turn.clear()

    for step in trace.steps:
        if step.kind in (StepKind.LLM_OUTPUT, StepKind.FINAL_OUTPUT):
            if any(p["type"] in ("text", "tool_call") for p in turn):  # another message: another call
                close()
            turn.append({"type": "text", "content": step.content})
        elif step.kind is StepKind.LLM_REASONING:
            close()
            turn.append({"type": "reasoning", "content": step.content})
        elif step.kind is StepKind.TOOL_CALL:
            # the arguments as the model wrote them: JSON as an object, a ``verb[arg]`` or command as text
            text = step.content.strip()
            args = step.tool_args if step.tool_args is not None and text[:1] in ("{", "") else step.content
            turn.append({"type": "tool_call", "id": step.call_id or "", "name": step.tool_name or "tool",
                         "arguments": args})
        else:
            close()
            msg = _message(step)
            if msg is not None:
                history.append(msg)
    close()
    resource = [_attr("service.name", service_name)] if service_name else []
    return {"resourceSpans": [{"resource": {"attributes": resource},
                               "scopeSpans": [{"scope": {"name": "opentelemetry.instrumentation.genai"},
                                               "spans": spans}]}]}


__all__ = ["otlp_content_off", "otlp_content_on"]
