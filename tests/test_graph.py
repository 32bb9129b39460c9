"""The execution graph: edges on built traces, step outcomes, JSON and Mermaid output."""

from __future__ import annotations

import json

import pytest

from model.core.graph import EdgeKind, ExecutionGraph, retry_after_seconds, step_failure
from model.core.kinds import FailureKind
from model.core.schema import Step, StepKind, Trace
from model.data.builder import make_trace, make_trap
from model.data.tracebuilder import TraceBuilder


def pairs(g: ExecutionGraph, kind: EdgeKind) -> list[tuple[int, int]]:
    return [(e.source, e.target) for e in g.edges_of(kind)]


def test_edges_of_a_retry_after_error() -> None:
    # 0 system, 1 user, 2 call, 3 result (503), 4 say, 5 call (retry), 6 result ok, 7 final
    t = make_trap("retry_after_error", seed=0)
    g = ExecutionGraph.from_trace(t)
    assert pairs(g, EdgeKind.FOLLOWED_BY) == [(i, i + 1) for i in range(7)]
    assert pairs(g, EdgeKind.RESULT_OF) == [(3, 2), (6, 5)]
    assert pairs(g, EdgeKind.RETRY_OF) == [(5, 2)]
    assert g.call_of == {3: 2, 6: 5} and g.result_of_call == {2: 3, 5: 6} and g.retry_of == {5: 2}
    assert list(g.failures) == [3] and g.failures[3].kind is FailureKind.TOOL_ERROR
    assert not g.succeeded(3) and g.succeeded(6)
    assert [n.failed for n in g.nodes] == [False, False, False, True, False, False, False, False]


def test_result_of_without_call_ids_and_parallel_calls() -> None:
    steps = [
        Step(kind="tool_call", tool_name="a", tool_args={"q": 1}, source_index=0),
        Step(kind="tool_call", tool_name="b", tool_args={}, call_id="cb", source_index=0),
        Step(kind="tool_call", tool_name="a", tool_args={"q": 2}, source_index=0),
        Step(kind="tool_result", tool_name="b", call_id="cb", content="B", source_index=1),
        Step(kind="tool_result", tool_name="a", content="A2", source_index=2),  # latest unanswered a
        Step(kind="tool_result", tool_name="a", content="A1", source_index=3),
        Step(kind="tool_result", tool_name="a", content="again", source_index=4),  # none left: latest a
    ]
    g = ExecutionGraph.from_trace(Trace(steps=steps))
    assert pairs(g, EdgeKind.RESULT_OF) == [(3, 1), (4, 2), (5, 0), (6, 2)]
    assert g.result_of_call == {1: 3, 2: 4, 0: 5}


def test_retry_of_chains_and_resets_on_success() -> None:
    b = TraceBuilder(seed=0)
    c = b.call("t", {"x": 1})
    b.result(c, "HTTP 500", status="error")  # 1
    c = b.call("t", {"x": 1})  # 2 retry of 0
    b.result(c, {"ok": False})  # 3 fails again (envelope)
    c = b.call("t", {"x": 1})  # 4 retry of 2
    b.result(c, "fine")  # 5
    c = b.call("t", {"x": 2})  # 6 after a success: not a retry
    b.result(c, "fine too")
    g = ExecutionGraph.from_trace(b.build())
    assert pairs(g, EdgeKind.RETRY_OF) == [(2, 0), (4, 2)]
    assert sorted(g.failures) == [1, 3]


def test_uses_result_of_links_distinctive_tokens_only() -> None:
    b = TraceBuilder(seed=0)
    b.user("Book flight for order 4471 please")  # 0: 4471 is the user's, not distinctive
    c = b.call("search_flights", {"order": "4471"})  # 1
    b.result(c, {"flights": [{"id": "XY123", "price": 396}], "order": 4471})  # 2
    c = b.call("book", {"flight": "xy123"})  # 3: reuses XY123 (case-insensitive)
    b.result(c, {"booking": "BK-9f31"})  # 4
    b.final("Booked XY123 for 396 EUR, booking BK-9f31 (order 4471).")  # 5
    g = ExecutionGraph.from_trace(b.build())
    flow = [(e.source, e.target, e.token) for e in g.edges_of(EdgeKind.USES_RESULT_OF)]
    assert flow == [(3, 2, "xy123"), (5, 2, "396"), (5, 4, "bk-9f31")]
    assert not ExecutionGraph.from_trace(b.build(), data_flow=False).edges_of("uses_result_of")


def test_to_json_is_json_and_complete() -> None:
    t = make_trap("self_correction", seed=0)
    g = ExecutionGraph.from_trace(t)
    data = json.loads(json.dumps(g.to_json()))
    assert [n["step"] for n in data["nodes"]] == list(range(len(t.steps)))
    assert data["nodes"][3] == {
        "step": 3,
        "kind": "tool_call",
        "label": "3 tool_call calculator",
        "source_index": 3,
        "tool": "calculator",
        "failed": False,
    }
    assert {"source": 4, "target": 3, "kind": "result_of"} in data["edges"]
    assert {"source": 5, "target": 4, "kind": "uses_result_of", "token": "396"} in data["edges"]
    assert len(data["edges"]) == len(g.edges) == (len(t.steps) - 1) + 1 + 1


def test_to_mermaid_text() -> None:
    b = TraceBuilder(seed=0)
    b.user('say "hi"')
    c = b.call("echo", {"text": "hi"})
    b.result(c, "boom", status="error")
    c = b.call("echo", {"text": "hi"})
    b.result(c, "hi-42")
    b.final("hi-42")
    text = ExecutionGraph.from_trace(b.build()).to_mermaid()
    assert text == (
        "flowchart TD\n"
        '  s0["0 user_input"]\n'
        '  s1["1 tool_call echo"]\n'
        '  s2["2 tool_result echo (error)"]\n'
        '  s3["3 tool_call echo"]\n'
        '  s4["4 tool_result echo"]\n'
        '  s5["5 final_output"]\n'
        "  s0 --> s1\n"
        "  s1 --> s2\n"
        "  s2 -.->|result_of| s1\n"
        "  s2 --> s3\n"
        "  s3 ==>|retry_of| s1\n"
        "  s3 --> s4\n"
        "  s4 -.->|result_of| s3\n"
        "  s4 --> s5\n"
        "  s5 -.->|uses_result_of| s4\n"
        "  classDef failed fill:#fdd,stroke:#c00\n"
        "  class s2 failed\n"
    )


def test_mermaid_escapes_quotes_in_labels() -> None:
    t = Trace(steps=[Step(kind="tool_call", tool_name='say"x"', source_index=0)])
    assert '["0 tool_call say#quot;x#quot;"]' in ExecutionGraph.from_trace(t).to_mermaid()


def test_empty_trace() -> None:
    g = ExecutionGraph.from_trace(Trace())
    assert g.nodes == [] and g.edges == [] and g.to_json() == {"nodes": [], "edges": []}
    assert g.to_mermaid() == "flowchart TD\n"


def result(content: str, status: str | None = "ok", **kw: object) -> Step:
    return Step(kind="tool_result", tool_name="t", content=content, status=status, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("step", "kind", "reason", "details"),
    [
        (result("x", "error"), "tool_error", "status", {}),
        (result("x", "timeout"), "timeout", "status", {}),
        (result("HTTP 502 Bad Gateway", "error"), "tool_error", "status", {"http_status": 502}),
        (result("Too Many Requests", "error"), "rate_limited", "status", {}),
        (result('{"error": "no such city"}'), "tool_error", "envelope (error field)", {}),
        (result('{"success": false, "msg": "x"}'), "tool_error", "envelope (success: false)", {}),
        (result('{"ok": false}'), "tool_error", "envelope (ok: false)", {}),
        (result('{"status": "error", "message": "bad"}'), "tool_error", "envelope (status: error)", {}),
        (result('{"result": {"error": {"code": 404}}}'), "tool_error", "envelope (error field)",
         {"http_status": 404}),
        (result('{"error": {"code": 429, "retry_after": 7}}'), "rate_limited", "envelope (error field)",
         {"http_status": 429, "retry_after": 7.0}),
        (result('{"error": "upstream timed out"}'), "timeout", "envelope (error field)", {}),
        (result("Traceback (most recent call last):\n  File 'x'\nKeyError: 'a'"), "tool_error", "traceback", {}),
        (result("404 Not Found"), "tool_error", "http_status", {"http_status": 404}),
        (result("upstream said: HTTP/1.1 503"), "tool_error", "http_status", {"http_status": 503}),
        (result("504 Gateway Timeout"), "timeout", "http_status", {"http_status": 504}),
        (result("connect ETIMEDOUT 10.0.0.1:443"), "timeout", "timeout_text", {}),
        (result("HTTP 429 Too Many Requests\nRetry-After: 12"), "rate_limited", "http_status",
         {"http_status": 429, "retry_after": 12.0}),
        (result("rate limit exceeded, try again in 20s"), "rate_limited", "rate_limit_text",
         {"retry_after": 20.0}),
        (result("ValueError: invalid literal"), "tool_error", "exception", {}),
        (result("Error: file not found"), "tool_error", "error_prefix", {}),
        (Step(kind="error", content="500 Internal Server Error", status="error"), "provider_error", "status",
         {"http_status": 500}),
        (Step(kind="error", content="Rate limit reached for gpt-4", status="error"), "rate_limited", "status",
         {}),
        (Step(kind="tool_call", tool_name="t", status="timeout"), "timeout", "status", {}),
    ],
)
def test_step_failure_reads_status_and_payload(
    step: Step, kind: str, reason: str, details: dict[str, object]
) -> None:
    f = step_failure(step)
    assert f is not None
    assert (f.kind.value, f.reason) == (kind, reason)
    assert {k: v for k, v in f.details.items() if k != "error_type"} == details


@pytest.mark.parametrize(
    "step",
    [
        result('{"results": [{"title": "Error handling in Python"}]}'),
        result('{"error": null, "data": [1]}'),
        result('{"success": true}'),
        result("A guide to error handling and timeouts in HTTP clients."),
        result("The 404 page of our site was redesigned in 2020."),
        result(""),
        Step(kind="llm_output", content="Error: I made a mistake", status="error"),
        Step(kind="tool_call", tool_name="t", status="ok"),
    ],
)
def test_step_failure_leaves_successes_alone(step: Step) -> None:
    assert step_failure(step) is None


def test_retry_after_forms() -> None:
    assert retry_after_seconds("Retry-After: 30") == 30.0
    assert retry_after_seconds('{"retry_after_ms": 250}', {"retry_after_ms": 250}) == 0.25
    assert retry_after_seconds("please retry in 2 minutes") == 120.0
    assert retry_after_seconds("x-ratelimit-reset soon") is None


def test_graph_on_every_recipe_is_consistent() -> None:
    for kind in [None, *FailureKind]:
        if kind in (FailureKind.DEGRADATION, FailureKind.AT_RISK):  # no recipe: streams, the agent model
            continue
        t = make_trace(kind, seed=9, n_steps=15)
        g = ExecutionGraph.from_trace(t)
        for res, call in g.call_of.items():
            assert t.steps[res].kind is StepKind.TOOL_RESULT and t.steps[call].kind is StepKind.TOOL_CALL
            assert t.steps[res].call_id == t.steps[call].call_id
        assert len(g.edges_of(EdgeKind.FOLLOWED_BY)) == len(t.steps) - 1
