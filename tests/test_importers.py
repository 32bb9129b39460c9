"""Importers: every format with spec-shaped fixtures, exact step kinds and source indices."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from model.core.errors import InputError, TooLargeError, TraceImportError
from model.core.schema import Step, StepKind, StepStatus, Trace
from model.importers import (
    FORMATS,
    detect_format,
    load_trace,
    load_traces,
    parse_json_text,
    read_path,
)

FIX = Path(__file__).resolve().parent / "fixtures" / "importers"


def fixture(name: str) -> Any:
    return json.loads((FIX / name).read_text(encoding="utf-8"))


def kinds(trace: Trace) -> list[tuple[str, int]]:
    return [(s.kind.value, s.source_index) for s in trace.steps]


# ------------------------------------------------------------------------------------------ openai


def test_openai_tool_calls_share_the_message_source_index() -> None:
    trace = load_trace(fixture("openai_tools.json"))
    assert kinds(trace) == [
        ("system", 0),
        ("user_input", 1),
        ("llm_output", 2),
        ("tool_call", 2),
        ("tool_call", 2),
        ("tool_result", 3),
        ("tool_result", 4),
        ("tool_call", 5),
        ("tool_result", 6),
        ("final_output", 7),
    ]
    s = trace.steps
    assert trace.id == "chat-weather-1"
    assert trace.metadata == {"model": "gpt-4o-mini"}
    assert [t.name for t in trace.tools] == ["get_weather", "get_time"]
    assert trace.tools[0].parameters is not None and trace.tools[0].parameters["required"] == ["city"]
    assert s[1].content == "What's the weather and time in Paris?"  # image part dropped
    assert (s[3].tool_name, s[3].call_id, s[3].tool_args, s[3].tool_args_raw) == (
        "get_weather", "call_w", {"city": "Paris"}, None,
    )
    # unterminated JSON arguments are kept raw for the malformed_call rule, not an import error
    assert (s[4].tool_args, s[4].tool_args_raw) == (None, '{"city": "Paris"')
    assert (s[5].tool_name, s[5].call_id) == ("get_weather", "call_w")
    assert (s[6].tool_name, s[6].call_id) == ("get_time", "call_t")
    assert s[8].content == "14:05"  # content given as parts
    assert all(step.span_id is None for step in s)


def test_openai_legacy_function_call_and_function_role() -> None:
    trace = load_trace(fixture("openai_legacy_functions.json"))
    assert kinds(trace) == [
        ("system", 0), ("user_input", 1), ("tool_call", 2), ("tool_result", 3), ("final_output", 4),
    ]
    call, result = trace.steps[2], trace.steps[3]
    assert (call.tool_name, call.tool_args) == ("convert", {"amount": 100, "from": "USD", "to": "EUR"})
    assert (result.tool_name, result.content) == ("convert", '{"result": 92.1}')


def test_final_output_rule() -> None:
    # ends on a tool result: no final output
    t = load_trace([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "calling", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "r"},
    ])
    assert kinds(t) == [("user_input", 0), ("llm_output", 1), ("tool_call", 1), ("tool_result", 2)]
    # ends on a user turn: the assistant's text before it is not final
    t = load_trace([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                    {"role": "user", "content": "and?"}])
    assert kinds(t) == [("user_input", 0), ("llm_output", 1), ("user_input", 2)]
    # two texts at the end: only the last one is final
    t = load_trace([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                    {"role": "assistant", "content": "b"}])
    assert kinds(t) == [("user_input", 0), ("llm_output", 1), ("final_output", 2)]


def test_openai_content_forms_reasoning_and_refusal() -> None:
    t = load_trace({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"}, "b"]},
        {"role": "assistant", "content": None, "reasoning_content": "think", "refusal": "I can't help with that."},
        {"role": "assistant", "content": None},
    ]})
    assert kinds(t) == [("user_input", 0), ("llm_reasoning", 1), ("llm_output", 1), ("final_output", 2)]
    assert t.steps[0].content == "a\nb"
    assert t.steps[2].content == "I can't help with that."
    assert t.steps[3].content == ""  # an empty reply stays visible to the empty_response rule


def test_arguments_given_as_object_and_non_object_json() -> None:
    t = load_trace([
        {"role": "user", "content": "q"},
        {"role": "assistant", "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}},
            {"id": "2", "type": "function", "function": {"name": "f", "arguments": "[1, 2]"}},
            {"id": "3", "type": "function", "function": {"name": "f", "arguments": ""}},
        ]},
    ])
    calls = t.steps[1:]
    assert [(c.tool_args, c.tool_args_raw) for c in calls] == [({"x": 1}, None), (None, "[1, 2]"), ({}, None)]


# ------------------------------------------------------------------------------------- multi-agent


def test_ag2_group_chat() -> None:
    trace = load_trace(fixture("ag2_groupchat.json"))
    assert kinds(trace) == [
        ("llm_output", 0), ("tool_result", 1), ("llm_output", 2), ("tool_result", 3),
        ("llm_output", 4), ("final_output", 5),
    ]
    s = trace.steps
    assert [x.speaker for x in s] == [
        "Math_Expert", "Computer_terminal", "Math_Expert", "Computer_terminal", "Checker_Expert", "Checker_Expert",
    ]
    assert (s[1].tool_name, s[1].status) == ("Computer_terminal", StepStatus.ERROR)  # exitcode: 1
    assert s[3].status == StepStatus.OK  # exitcode: 0
    assert trace.metadata["mistake_step"] == "2"
    assert trace.metadata["mistake_agent"] == "Math_Expert"
    assert set(trace.metadata) == {
        "question", "ground_truth", "mistake_agent", "mistake_step", "mistake_reason", "system_prompt",
    }


def test_magentic_one_terminal_and_human() -> None:
    trace = load_trace(fixture("magentic_one.json"))
    assert kinds(trace) == [
        ("user_input", 0), ("llm_output", 1), ("llm_output", 2), ("llm_output", 3),
        ("tool_result", 4), ("llm_output", 5), ("final_output", 6),
    ]
    assert trace.steps[4].status == StepStatus.ERROR  # "POSIX exit code: 1"
    assert trace.steps[2].speaker == "WebSurfer"


def test_named_user_rules() -> None:
    t = load_trace([
        {"role": "user", "name": "Planner_Expert", "content": "the task"},  # message 0: the task
        {"role": "user", "name": "Admin", "content": "go on"},  # a human-looking name
        {"role": "user", "name": "Coder", "content": "done"},  # an agent's turn
        {"role": "user", "name": "user_proxy", "content": "exitcode: 0 (execution succeeded)\nCode output: 4"},
        {"role": "assistant", "name": "code_executor", "content": "Traceback (most recent call last):\nKeyError"},
        {"role": "user", "content": "thanks"},
    ])
    assert kinds(t) == [
        ("user_input", 0), ("user_input", 1), ("llm_output", 2), ("tool_result", 3), ("tool_result", 4),
        ("user_input", 5),
    ]
    assert [t.steps[3].status, t.steps[4].status] == [StepStatus.OK, StepStatus.ERROR]


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("exitcode: 0 (execution succeeded)\nCode output: 4", StepStatus.OK),
        ("exitcode: 1 (execution failed)\nCode output: boom", StepStatus.ERROR),
        ("exitcode: 124 (execution failed)\nCode output: \nTimeout", StepStatus.TIMEOUT),
        ("exitcode: 0 (execution succeeded)\nTraceback (most recent call last):\n  x", StepStatus.ERROR),
        ("There is no code from the last 1 message for me to execute.", None),
    ],
)
def test_terminal_status(text: str, status: StepStatus | None) -> None:
    t = load_trace([{"role": "user", "content": "task"}, {"role": "user", "name": "Computer_terminal", "content": text}])
    assert (t.steps[1].kind, t.steps[1].status) == (StepKind.TOOL_RESULT, status)


def test_speakers_option_maps_names_to_roles() -> None:
    data = fixture("magentic_one.json")
    t = load_trace(data, speakers={"Reviewer": "user", "WebSurfer": "tool", "Orchestrator": "system"})
    assert kinds(t) == [
        ("user_input", 0), ("system", 1), ("tool_result", 2), ("llm_output", 3),
        ("tool_result", 4), ("user_input", 5), ("system", 6),
    ]  # the last agent text (3) is followed by a tool result: no final output
    assert (t.steps[2].tool_name, t.steps[2].speaker) == ("WebSurfer", "WebSurfer")
    with pytest.raises(TraceImportError) as e:
        load_trace(data, speakers={"Reviewer": "human"})
    assert e.value.path == "speakers.Reviewer"
    assert "assistant, system, tool, user" in e.value.message


# ------------------------------------------------------------------------------------------ spans


def test_otlp_genai_two_traces_history_imported_once() -> None:
    data = fixture("otel_otlp.json")
    assert detect_format(data) == "otel"
    traces = load_traces(data)
    assert [t.id for t in traces] == ["5b8efff798038103d269b633813fc60c", "0af7651916cd43dd8448eb211c80319c"]
    a, b = traces
    # spans sorted by start: invoke_agent(0), chat(1), execute_tool(2), chat(3); the agent span
    # has children and makes no step; chat 3 repeats system/user/tool_call/tool result: imported once
    assert kinds(a) == [("system", 1), ("user_input", 1), ("tool_call", 1), ("tool_result", 2), ("final_output", 3)]
    assert [s.span_id for s in a.steps] == [
        "a000000000000002", "a000000000000002", "a000000000000002", "a000000000000003", "a000000000000004",
    ]
    assert a.session_id == "conv-42"
    assert a.metadata == {"source_format": "otel", "service.name": "weather-bot", "gen_ai.agent.name": "weather_bot"}
    call, result, final = a.steps[2], a.steps[3], a.steps[4]
    assert (call.tool_name, call.call_id, call.tool_args, call.speaker) == (
        "get_weather", "call_1", {"city": "Paris"}, "weather_bot",
    )
    assert (call.model, call.temperature, call.tokens_in, call.tokens_out, call.latency_ms) == (
        "gpt-4o-2024-08-06", 0.2, 120, 15, 500.0,
    )
    assert (result.call_id, result.status, result.latency_ms, result.content) == ("call_1", StepStatus.OK, 300.0,
                                                                                  "18C, sunny")
    assert (final.content, final.tokens_in, final.tokens_out) == ("It is 18C and sunny in Paris.", 160, 12)
    assert final.timestamp is not None and final.timestamp.isoformat() == "2024-11-29T10:00:00.830000+00:00"
    # the failed chat span: the provider error, with the status message as content
    assert kinds(b) == [("user_input", 0), ("error", 0)]
    err = b.steps[1]
    assert (err.status, err.error_type, err.model) == (StepStatus.ERROR, "RateLimitError", "gpt-4o")
    assert err.content == "429 Too Many Requests: retry after 20 seconds"


def test_otel_legacy_flattened_span_list() -> None:
    data = fixture("otel_span_list_legacy.json")
    assert detect_format(data) == "otel"
    t = load_trace(data)
    assert kinds(t) == [("system", 0), ("user_input", 0), ("tool_call", 0), ("tool_result", 1), ("final_output", 2)]
    assert [s.span_id for s in t.steps] == ["b1", "b1", "b1", "b2", "b3"]
    call, result = t.steps[2], t.steps[3]
    assert (call.call_id, call.tool_args, call.tokens_in, call.tokens_out, call.latency_ms) == (
        "c9", {"q": "2022 World Cup winner"}, 50, 10, 1500.0,
    )
    assert (result.status, result.error_type, result.content) == (
        StepStatus.ERROR, "503", "HTTP 503 Service Unavailable",
    )


def test_openinference_spans() -> None:
    data = fixture("openinference_spans.json")
    assert detect_format(data) == "openinference"
    t = load_trace(data)
    # sorted: agent r0(0), l1(1), t1(2), t2(3), l2(4)
    assert kinds(t) == [
        ("system", 1), ("user_input", 1), ("tool_call", 1), ("tool_result", 2),
        ("tool_call", 3), ("tool_result", 3), ("final_output", 4),
    ]
    assert t.id == "oi-trace-1" and t.session_id == "sess-7"
    s = t.steps
    assert (s[2].tool_name, s[2].call_id, s[2].speaker, s[2].temperature) == (
        "web_search", "call_a", "research_agent", 0.0,
    )
    assert (s[3].call_id, s[3].status, s[3].content) == ("call_a", StepStatus.OK, "Burj Khalifa, 828 m")
    assert (s[4].tool_name, s[4].tool_args) == ("calculator", {"input": "828/0"})
    assert (s[5].status, s[5].error_type, s[5].content) == (StepStatus.ERROR, "ZeroDivisionError", "division by zero")
    assert (s[6].tokens_in, s[6].tokens_out, s[6].latency_ms) == (140, 14, 1250.0)
    assert [x.name for x in t.tools] == ["web_search"]


def _otlp(spans: list[dict[str, Any]]) -> dict[str, Any]:
    def conv(v: Any) -> dict[str, Any]:
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        if isinstance(v, float):
            return {"doubleValue": v}
        return {"stringValue": v}

    out = []
    for s in spans:
        o = dict(s)
        o["attributes"] = [{"key": k, "value": conv(v)} for k, v in s["attributes"].items()]
        out.append(o)
    return {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": out}]}]}


def test_openinference_in_otlp_shape() -> None:
    spans = [
        {"traceId": "t", "spanId": "s1", "name": "llm", "startTimeUnixNano": "100", "endTimeUnixNano": "200",
         "attributes": {"openinference.span.kind": "LLM",
                        "llm.input_messages.0.message.role": "user",
                        "llm.input_messages.0.message.content": "hi",
                        "output.value": "hello"}},
        {"traceId": "t", "spanId": "s0", "name": "retrieve", "startTimeUnixNano": "50", "endTimeUnixNano": "90",
         "attributes": {"openinference.span.kind": "RETRIEVER", "input.value": "greeting",
                        "retrieval.documents.0.document.content": "hi means hello",
                        "retrieval.documents.1.document.content": "hey too"}},
    ]
    data = _otlp(spans)
    assert detect_format(data) == "openinference"
    t = load_trace(data)
    assert kinds(t) == [("tool_call", 0), ("tool_result", 0), ("user_input", 1), ("final_output", 1)]
    assert t.steps[0].tool_args == {"query": "greeting"}
    assert json.loads(t.steps[1].content) == ["hi means hello", "hey too"]


def test_span_order_start_time_then_span_id() -> None:
    def tool(span_id: str, start: Any, name: str) -> dict[str, Any]:
        return {"trace_id": "t", "span_id": span_id, "start_time": start,
                "attributes": {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}}

    data = [tool("b", 5, "second"), tool("z", None, "last"), tool("a", 5, "first"), tool("c", 1, "zeroth")]
    t = load_trace(data)
    assert [(s.tool_name, s.source_index, s.kind.value) for s in t.steps[::2]] == [
        ("zeroth", 0, "tool_call"), ("first", 1, "tool_call"), ("second", 2, "tool_call"), ("last", 3, "tool_call"),
    ]
    assert [s.source_index for s in t.steps] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_repeated_history_keeps_a_genuinely_repeated_message() -> None:
    def chat(span_id: str, start: int, inputs: list[str], output: str) -> dict[str, Any]:
        msgs = [{"role": "user" if i % 2 == 0 else "assistant", "parts": [{"type": "text", "content": c}]}
                for i, c in enumerate(inputs)]
        return {"trace_id": "t", "span_id": span_id, "start_time": start,
                "attributes": {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(msgs),
                               "gen_ai.output.messages": json.dumps(
                                   [{"role": "assistant", "parts": [{"type": "text", "content": output}]}])}}

    t = load_trace([
        chat("s1", 1, ["yes"], "Sure?"),
        chat("s2", 2, ["yes", "Sure?", "yes"], "Done."),
    ])
    assert [(s.kind.value, s.source_index, s.content) for s in t.steps] == [
        ("user_input", 0, "yes"), ("llm_output", 0, "Sure?"), ("user_input", 1, "yes"), ("final_output", 1, "Done."),
    ]


def test_chat_span_without_recorded_content_is_flagged() -> None:
    t = load_trace([{"trace_id": "t", "span_id": "s", "attributes": {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.usage.output_tokens": 7}}])
    assert kinds(t) == [("final_output", 0)]
    assert t.steps[0].metadata["content_recorded"] is False
    assert t.steps[0].tokens_out == 7


def test_leaf_agent_span_wrapper_and_status_forms() -> None:
    msgs_in = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "book a table"}]}])
    msgs_out = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Booked."}]}])
    data = {"spans": [
        # an agent span with no children that carries the messages itself
        {"traceId": "t", "spanId": "s1", "start_time": "2025-03-01T12:00:00Z",
         "attributes": {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "booker",
                        "gen_ai.input.messages": msgs_in, "gen_ai.output.messages": msgs_out}},
        # a tool that timed out (status given as a bare string)
        {"traceId": "t", "spanId": "s2", "start_time": "2025-03-01T12:00:01Z", "status": "ERROR",
         "attributes": {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "reserve",
                        "error.type": "TimeoutError"}},
    ]}
    assert detect_format(data) == "otel"
    t = load_trace(data)
    assert kinds(t) == [("user_input", 0), ("llm_output", 0), ("tool_call", 1), ("tool_result", 1)]
    assert t.steps[1].speaker == "booker"
    result = t.steps[3]
    assert (result.status, result.error_type, result.content) == (StepStatus.TIMEOUT, "TimeoutError", "TimeoutError")
    # no gen_ai.tool.call.arguments on the span (content capture off): unknown, not "no arguments"
    assert (t.steps[2].tool_args, t.steps[2].tool_args_raw, t.steps[2].content) == (None, None, "")


def test_tool_call_arguments_that_are_not_json_in_spans() -> None:
    t = load_trace([{"trace_id": "t", "span_id": "s", "attributes": {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "f",
        "gen_ai.tool.call.arguments": "{'city': 'Paris'}", "gen_ai.tool.call.result": {"ok": True}}}])
    assert (t.steps[0].tool_args, t.steps[0].tool_args_raw) == (None, "{'city': 'Paris'}")
    assert t.steps[1].content == '{"ok": true}'


@pytest.mark.parametrize("tool_span_id", [None, "x1"])
def test_tool_span_answers_an_id_less_call_from_the_chat_span(tool_span_id: str | None) -> None:
    out = json.dumps([{"role": "assistant", "parts": [{"type": "tool_call", "name": "f", "arguments": {"a": 1}}]}])
    tool_attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "f",
                                  "gen_ai.tool.call.result": "r"}
    if tool_span_id is not None:
        tool_attrs["gen_ai.tool.call.id"] = tool_span_id
    t = load_trace([
        {"trace_id": "t", "span_id": "s1", "start_time": 1,
         "attributes": {"gen_ai.operation.name": "chat", "gen_ai.output.messages": out}},
        {"trace_id": "t", "span_id": "s2", "start_time": 2, "attributes": tool_attrs},
    ])
    assert kinds(t) == [("tool_call", 0), ("tool_result", 1)]
    assert (t.steps[1].tool_name, t.steps[1].call_id) == ("f", tool_span_id)


def test_spans_without_known_attributes() -> None:
    with pytest.raises(TraceImportError, match="none of its 1 spans carries gen_ai"):
        load_traces([{"trace_id": "t", "span_id": "s", "name": "GET /", "attributes": {"http.method": "GET"}}])


# ------------------------------------------------------------------------------------------ native


def test_native_round_trip_and_validation_path() -> None:
    original = load_trace(fixture("openai_tools.json"))
    again = load_trace(json.loads(original.model_dump_json()))
    assert again == original
    data = json.loads(original.model_dump_json())
    data["steps"][2]["kind"] = "thinking"
    with pytest.raises(TraceImportError) as e:
        load_trace(data)
    assert e.value.path == "steps[2].kind"
    assert "'thinking'" in e.value.message
    data["steps"][2]["kind"] = "llm_output"
    data["steps"][1]["tokens_in"] = -3
    with pytest.raises(TraceImportError) as e:
        load_trace(data, format="native")
    assert e.value.path == "steps[1].tokens_in"


def test_native_list_of_traces() -> None:
    one = Trace(steps=[Step(kind=StepKind.USER_INPUT, content="a")]).model_dump(mode="json")
    two = Trace(steps=[Step(kind=StepKind.FINAL_OUTPUT, content="b")]).model_dump(mode="json")
    assert [t.steps[0].content for t in load_traces([one, two])] == ["a", "b"]
    with pytest.raises(TraceImportError, match="expected one run, got 2"):
        load_trace([one, two])


# ----------------------------------------------------------------------------------- detection


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("openai_tools.json", "openai"),
        ("openai_legacy_functions.json", "openai"),
        ("ag2_groupchat.json", "openai"),
        ("otel_otlp.json", "otel"),
        ("otel_span_list_legacy.json", "otel"),
        ("openinference_spans.json", "openinference"),
    ],
)
def test_detect_format(name: str, fmt: str) -> None:
    assert detect_format(fixture(name)) == fmt
    assert fmt in FORMATS


@pytest.mark.parametrize("data", [{"foo": 1}, [1, 2], "text", 3, None, [{"x": 1}]])
def test_detect_format_rejects_unknown(data: Any) -> None:
    with pytest.raises(TraceImportError) as e:
        detect_format(data)
    assert "native, openai, otel, openinference" in str(e.value)


def test_unknown_format_name() -> None:
    with pytest.raises(TraceImportError) as e:
        load_traces([], format="langsmith")
    assert e.value.path == "format"
    assert "auto, native, openai, otel, openinference" in e.value.message


# ---------------------------------------------------------------------------------- bad inputs


def test_truncated_json() -> None:
    text = (FIX / "openai_tools.json").read_text(encoding="utf-8")[:300]
    with pytest.raises(TraceImportError) as e:
        parse_json_text(text)
    assert "truncated" in e.value.message and "column" in e.value.message
    assert e.value.line is not None and e.value.line > 1


def test_invalid_json_in_the_middle() -> None:
    with pytest.raises(TraceImportError) as e:
        parse_json_text('{"messages": [\n  {"role": "user",, "content": "x"}]}')
    assert e.value.line == 2
    assert "truncated" not in e.value.message


@pytest.mark.parametrize("text", ["", "   \n", b"", b"\xef\xbb\xbf  "])
def test_empty_text(text: str | bytes) -> None:
    with pytest.raises(TraceImportError, match="empty input"):
        parse_json_text(text)


def test_not_utf8() -> None:
    with pytest.raises(TraceImportError, match="not UTF-8"):
        parse_json_text(b'{"messages": "\xff"}')


@pytest.mark.parametrize("data", [[], {"messages": []}, {"history": []}, {"resourceSpans": []},
                                  {"steps": []}])
def test_empty_traces(data: Any) -> None:
    with pytest.raises(TraceImportError, match="empty"):
        load_traces(data)


def test_deep_nesting_is_a_clear_error() -> None:
    text = "[" * 100_000 + "]" * 100_000
    with pytest.raises(TraceImportError, match="nesting too deep"):
        parse_json_text(text)
    inner = '{"role": "user", "content": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(TraceImportError, match="nesting too deep"):
        parse_json_text('{"messages": [' + inner + "]}")


def test_deep_nesting_already_parsed() -> None:
    deep: Any = "x"
    for _ in range(100_000):
        deep = [deep]
    # content parts nest: the importer reads one level and rejects the rest with a path
    with pytest.raises(TraceImportError) as e:
        load_traces([{"role": "user", "content": [deep]}])
    assert e.value.path == "[0].content[0]"


@pytest.mark.parametrize(
    ("messages", "path", "fragment"),
    [
        ([{"role": "user", "content": "q"}, {"role": "robot", "content": "x"}], "messages[1].role",
         "unknown role 'robot'; valid roles: assistant, developer, function, system, tool, user"),
        ([{"role": "user", "content": "q"}, {"content": "x"}], "messages[1].role", "missing"),
        ([{"role": 7, "content": "q"}], "messages[0].role", "got a number"),
        ([{"role": "user", "content": 42}], "messages[0].content", "got a number"),
        ([{"role": "user", "content": [{"type": "text", "text": 5}]}], "messages[0].content[0].text", "got a number"),
        ([{"role": "user", "content": "q"}, "hello"], "messages[1]", "expected an object, got a string"),
        ([{"role": "assistant", "tool_calls": {"id": "a"}}], "messages[0].tool_calls", "expected a list"),
        ([{"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": 12}}]}],
         "messages[0].tool_calls[0].function.arguments", "got a number"),
        ([{"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": ["x"]}}]}],
         "messages[0].tool_calls[0].function.arguments", "got a list"),
        ([{"role": "assistant", "tool_calls": [{"id": "a", "function": {"arguments": "{}"}}]}],
         "messages[0].tool_calls[0].function.name", "expected a tool name"),
        ([{"role": "assistant", "tool_calls": [{"id": "a"}]}], "messages[0].tool_calls[0].function",
         "got null"),
        ([{"role": "tool", "tool_call_id": 3, "content": "r"}], "messages[0].tool_call_id", "got a number"),
        ([{"role": "user", "name": ["a"], "content": "r"}], "messages[0].name", "got a list"),
    ],
)
def test_bad_messages_name_the_field(messages: list[Any], path: str, fragment: str) -> None:
    with pytest.raises(TraceImportError) as e:
        load_traces({"messages": messages})
    assert e.value.path == path
    assert fragment in e.value.message
    assert str(e.value).startswith(path + ": ")


def test_messages_not_a_list() -> None:
    with pytest.raises(TraceImportError) as e:
        load_traces({"messages": "hi"})
    assert e.value.path == "messages"


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d["resourceSpans"][0]["scopeSpans"][0]["spans"][1].__setitem__("attributes", 5),
         "resourceSpans[0].scopeSpans[0].spans[1].attributes"),
        (lambda d: d["resourceSpans"][0]["scopeSpans"][0]["spans"][0].__setitem__("startTimeUnixNano", "soon"),
         "resourceSpans[0].scopeSpans[0].spans[0].startTimeUnixNano"),
        (lambda d: d["resourceSpans"][0]["scopeSpans"][1].__setitem__("spans", {}),
         "resourceSpans[0].scopeSpans[1].spans"),
        (lambda d: d["resourceSpans"][0]["scopeSpans"][0]["spans"][0].pop("traceId"),
         "resourceSpans[0].scopeSpans[0].spans[0].traceId"),
        (lambda d: d["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"][0].__setitem__(
            "value", {"intValue": "many"}),
         "resourceSpans[0].scopeSpans[0].spans[0].attributes[0].value.intValue"),
    ],
)
def test_bad_otlp_names_the_field(mutate: Any, path: str) -> None:
    data = fixture("otel_otlp.json")
    mutate(data)
    with pytest.raises(TraceImportError) as e:
        load_traces(data)
    assert e.value.path == path


def test_bad_genai_messages_attribute() -> None:
    span = {"trace_id": "t", "span_id": "s", "attributes": {
        "gen_ai.operation.name": "chat", "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "te'}}
    with pytest.raises(TraceImportError) as e:
        load_traces([span])
    assert e.value.path == '[0].attributes["gen_ai.input.messages"]'
    assert "not valid JSON" in e.value.message
    span["attributes"]["gen_ai.input.messages"] = '[{"role": "user", "parts": "hi"}]'
    with pytest.raises(TraceImportError) as e:
        load_traces([span])
    assert e.value.path == '[0].attributes["gen_ai.input.messages"][0].parts'


def _mutations(data: Any, seed: int, n: int) -> list[Any]:
    """Copies of ``data`` with one randomly chosen value replaced by a value of another type."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        d = copy.deepcopy(data)
        node, key = None, None
        cur = d
        for _depth in range(rng.randint(1, 8)):
            if isinstance(cur, dict) and cur:
                key = rng.choice(list(cur))
            elif isinstance(cur, list) and cur:
                key = rng.randrange(len(cur))
            else:
                break
            node, cur = cur, cur[key]
        if node is not None:
            node[key] = rng.choice([None, 7, -1, 2.5, True, "x", [], {}, [1], {"a": None}])
        out.append(d)
    return out


@pytest.mark.parametrize("name", sorted(p.name for p in FIX.glob("*.json")))
def test_mutated_inputs_give_input_errors_never_crashes(name: str) -> None:
    for i, data in enumerate(_mutations(fixture(name), seed=len(name), n=150)):
        try:
            traces = load_traces(data)
        except InputError:
            continue
        except Exception as exc:  # pragma: no cover - the assertion message is the point
            pytest.fail(f"mutation {i} of {name} raised {type(exc).__name__}: {exc}")
        assert traces and all(t.steps for t in traces)


# ------------------------------------------------------------------------------------- size limit


def test_ten_thousand_messages_over_the_limit() -> None:
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(10_000)]
    with pytest.raises(TooLargeError, match="10000 messages, more than the limit of 5000"):
        load_traces({"messages": msgs}, max_steps=5000)
    assert len(load_trace({"messages": msgs}, max_steps=10_000).steps) == 10_000


def test_step_limit_counts_steps_not_messages() -> None:
    calls = [{"id": f"c{k}", "type": "function", "function": {"name": "f", "arguments": "{}"}} for k in range(3)]
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "t", "tool_calls": calls}]
    assert len(load_trace(msgs, max_steps=5).steps) == 5
    with pytest.raises(TooLargeError):
        load_trace(msgs, max_steps=4)


def test_ten_thousand_native_steps_and_spans_over_the_limit() -> None:
    native = {"steps": [{"kind": "llm_output", "content": str(i)} for i in range(10_000)]}
    with pytest.raises(TooLargeError):
        load_traces(native, max_steps=5000)
    spans = [{"trace_id": "t", "span_id": f"{i:05d}", "start_time": i,
              "attributes": {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "f"}}
             for i in range(5_000)]  # two steps per span: 10,000 steps
    with pytest.raises(TooLargeError):
        load_traces(spans, max_steps=5000)


def test_bad_max_steps() -> None:
    with pytest.raises(InputError, match="max_steps"):
        load_traces([{"role": "user", "content": "q"}], max_steps=0)


# ---------------------------------------------------------------------------------- files


def test_jsonl_one_trace_per_line_and_bad_line(tmp_path: Path) -> None:
    good = json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})
    f = tmp_path / "archive.jsonl"
    f.write_text(good + "\n\n" + json.dumps(fixture("otel_otlp.json")) + "\n", encoding="utf-8")
    traces = read_path(f)
    assert [len(t.steps) for t in traces] == [2, 5, 2]
    f.write_text(good + "\n" + good + "\n" + '{"messages": [{"role": "user", "content": "q"}\n', encoding="utf-8")
    with pytest.raises(TraceImportError) as e:
        read_path(f)
    assert e.value.line == 3
    assert str(e.value).startswith("line 3: invalid JSON")
    f.write_text(good + "\n" + json.dumps({"messages": [{"role": "bot", "content": "x"}]}) + "\n", encoding="utf-8")
    with pytest.raises(TraceImportError) as e:
        read_path(f)
    assert (e.value.line, e.value.path) == (2, "messages[0].role")


def test_jsonl_line_over_the_limit_keeps_its_line(tmp_path: Path) -> None:
    f = tmp_path / "a.jsonl"
    big = {"messages": [{"role": "user", "content": "q"}] * 6}
    f.write_text(json.dumps({"messages": [{"role": "user", "content": "q"}]}) + "\n" + json.dumps(big) + "\n")
    with pytest.raises(TooLargeError) as e:
        read_path(f, max_steps=5)
    assert e.value.line == 2


def test_folder_reads_sorted_and_names_the_bad_file(tmp_path: Path) -> None:
    (tmp_path / "b.json").write_text(json.dumps([{"role": "user", "content": "b"}]))
    (tmp_path / "a.jsonl").write_text(json.dumps([{"role": "user", "content": "a"}]) + "\n")
    (tmp_path / "notes.txt").write_text("ignored")
    assert [t.steps[0].content for t in read_path(tmp_path)] == ["a", "b"]
    (tmp_path / "c.json").write_text('{"messages": [{"role": "user", "content": 1}]}')
    with pytest.raises(TraceImportError) as e:
        read_path(tmp_path)
    assert e.value.path == "c.json:messages[0].content"
    (tmp_path / "c.json").write_text("[")
    with pytest.raises(TraceImportError) as e:
        read_path(tmp_path)
    assert e.value.path == "c.json" and e.value.line == 1


def test_missing_path_and_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(TraceImportError, match="no such file"):
        read_path(tmp_path / "nope.json")
    with pytest.raises(TraceImportError, match="no .json or .jsonl"):
        read_path(tmp_path)
    (tmp_path / "e.jsonl").write_text("\n\n")
    with pytest.raises(TraceImportError, match="no traces"):
        read_path(tmp_path / "e.jsonl")


def test_langchain_model_dump_and_tool_error_status() -> None:
    """LangChain ``model_dump()`` messages; a ToolMessage with status error is a failed result."""
    msgs = [
        {"type": "human", "content": "Weather in Lisbon?"},
        {"type": "ai", "content": "", "tool_calls": [{"name": "get_weather", "args": {"city": "Lisbon"}, "id": "w1",
                                                      "type": "tool_call"}]},
        {"type": "tool", "content": "Error: ConnectionError('503')", "tool_call_id": "w1", "name": "get_weather",
         "status": "error"},
        {"type": "ai", "content": [{"type": "text", "text": "It will be sunny."}]},
    ]
    t = load_trace({"messages": msgs})
    assert [(s.kind.value, s.source_index) for s in t.steps] == [
        ("user_input", 0), ("tool_call", 1), ("tool_result", 2), ("final_output", 3)]
    assert t.steps[2].status == "error" and t.steps[2].tool_name == "get_weather"
    assert t.steps[1].tool_args == {"city": "Lisbon"} and t.steps[3].content == "It will be sunny."


def test_responses_items_reasoning_and_items_without_text() -> None:
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Find it."}]},
        {"type": "reasoning", "id": "rs1", "summary": [{"type": "summary_text", "text": "Search first."}]},
        {"type": "web_search_call", "id": "ws1", "status": "completed"},
        {"type": "function_call", "call_id": "c1", "name": "search", "arguments": '{"q": "x"}'},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "none"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Nothing found."}]},
    ]
    t = load_trace(items)
    assert [(s.kind.value, s.source_index) for s in t.steps] == [
        ("user_input", 0), ("llm_reasoning", 1), ("tool_call", 3), ("tool_result", 4), ("final_output", 5)]
    assert t.steps[3].content == "none" and t.steps[1].content == "Search first."
