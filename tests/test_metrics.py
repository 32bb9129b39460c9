"""Metric extraction from traces: exact per-step points and per-trace values."""

from __future__ import annotations

import doctest

import pytest

import model.streams.metrics as metrics_module
from model.core.errors import InputError
from model.core.kinds import FailureKind
from model.core.schema import Step, Trace
from model.data.builder import make_trace
from model.streams import StreamKey, extract_metrics


def sample_trace() -> Trace:
    return Trace(
        id="t1",
        task_type="research",
        metadata={"confidence": 0.82, "nested": {"quality": 3}, "label": "x", "cached": True},
        steps=[
            Step(kind="system", content="You are helpful."),
            Step(kind="user_input", content="Find the population of Lyon.", source_index=1),
            Step(kind="llm_reasoning", content="search", latency_ms=100, tokens_in=50, tokens_out=10,
                 source_index=2),
            Step(kind="llm_output", content="Let me search.", latency_ms=300, tokens_in=200, tokens_out=5,
                 source_index=2),
            Step(kind="tool_call", tool_name="search", tool_args={"q": "Lyon"}, call_id="c1", source_index=2),
            Step(kind="tool_result", content="522,000", tool_name="search", call_id="c1", status="ok",
                 latency_ms=40, source_index=3),
            Step(kind="tool_call", tool_name="fetch", tool_args={"u": "x"}, call_id="c2", source_index=4),
            Step(kind="tool_result", content="500", tool_name="fetch", call_id="c2", status="error",
                 latency_ms=900, source_index=5),
            Step(kind="error", content="connection reset", tool_name="fetch", latency_ms=10, source_index=6),
            Step(kind="llm_output", content="I'm sorry, but I can't help with that request.",
                 latency_ms=250, source_index=7),
            Step(kind="final_output", content="Lyon has about 522,000 inhabitants.", latency_ms=500,
                 tokens_out=9, source_index=8, metadata={"score": 0.7, "flag": True}),
        ],
    )


def points(m: object, name: str) -> list[tuple[int, int, float]]:
    return [(p.step, p.source_index, p.value) for p in m.per_step.get(name, [])]  # type: ignore[attr-defined]


def test_per_step_series_exact() -> None:
    m = extract_metrics(sample_trace())
    assert points(m, "llm_latency_ms") == [(2, 2, 100.0), (3, 2, 300.0), (9, 7, 250.0), (10, 8, 500.0)]
    assert points(m, "tool_latency_ms") == [(5, 3, 40.0), (7, 5, 900.0), (8, 6, 10.0)]
    assert points(m, "output_chars") == [(3, 2, 14.0), (9, 7, 46.0), (10, 8, 35.0)]
    assert points(m, "tokens_in") == [(2, 2, 50.0), (3, 2, 200.0)]
    assert points(m, "tokens_out") == [(2, 2, 10.0), (3, 2, 5.0), (10, 8, 9.0)]
    assert points(m, "tool_error") == [(5, 3, 0.0), (7, 5, 1.0), (8, 6, 1.0)]
    assert points(m, "refusal") == [(3, 2, 0.0), (9, 7, 1.0), (10, 8, 0.0)]
    assert points(m, "meta.score") == [(10, 8, 0.7)]
    assert "meta.flag" not in m.per_step  # booleans are not measurements
    assert m.series("tool_error") == [0.0, 1.0, 1.0]


def test_per_trace_values_exact() -> None:
    m = extract_metrics(sample_trace(), failure_prob=0.3)
    assert m.per_trace == {
        "steps": 11.0,
        "llm_latency_ms": 1150.0,
        "tool_latency_ms": 950.0,
        "latency_ms": 2100.0,
        "tokens_in": 250.0,
        "tokens_out": 24.0,
        "output_chars": 35.0,
        "tool_calls": 2.0,
        "tool_errors": 2.0,
        "tool_error_rate": pytest.approx(2 / 3),
        "refusal": 1.0,
        "failure_probability": 0.3,
        "meta.confidence": 0.82,
        "meta.nested.quality": 3.0,
    }


def test_missing_values_are_none_not_zero() -> None:
    t = Trace(task_type=None, steps=[Step(kind="user_input", content="hi")])
    m = extract_metrics(t)
    assert m.per_trace["llm_latency_ms"] is None
    assert m.per_trace["latency_ms"] is None
    assert m.per_trace["tool_error_rate"] is None
    assert m.per_trace["output_chars"] is None
    assert m.per_trace["failure_probability"] is None
    assert m.per_trace["refusal"] == 0.0
    with pytest.raises(InputError) as exc:  # no agent named: the service resolves one (issue 31), pass it
        m.stream_values("acme")
    assert exc.value.path == "agent"
    keys = m.stream_values("acme", "bot")
    assert StreamKey("acme", "steps", "bot") in keys
    assert all(k.agent == "bot" for k in keys)
    assert StreamKey("acme", "llm_latency_ms", "bot") not in keys


def test_last_llm_output_is_the_answer_without_a_final_output() -> None:
    t = Trace(steps=[Step(kind="llm_output", content="abc"), Step(kind="llm_output", content="  ")])
    assert extract_metrics(t).per_trace["output_chars"] == 3.0


def test_stream_keys_carry_tenant_and_agent() -> None:
    values = extract_metrics(sample_trace()).stream_values("acme", "research")
    assert values[StreamKey("acme", "tool_error_rate", "research")] == pytest.approx(2 / 3)
    assert values[StreamKey("acme", "meta.confidence", "research")] == 0.82
    assert StreamKey("acme", "failure_probability", "research") not in values
    assert str(StreamKey("acme", "x", "bot")) == "acme/x/bot"
    named = extract_metrics(sample_trace()).stream_values("acme", "scout")
    assert set(named) == {StreamKey("acme", k.name, "scout") for k in values}


def test_refusal_series_follows_the_registered_rule() -> None:
    refused = extract_metrics(make_trace(FailureKind.REFUSAL, seed=1))
    healthy = extract_metrics(make_trace(None, seed=1))
    assert refused.per_trace["refusal"] == 1.0
    assert healthy.per_trace["refusal"] == 0.0
    # Without a refusal detector there is no refusal series, and the value is unknown.
    none = extract_metrics(sample_trace(), refusal_detector=None)
    assert "refusal" not in none.per_step and none.per_trace["refusal"] is None
    unknown = extract_metrics(sample_trace(), refusal_detector="no_such_detector")
    assert unknown.per_trace["refusal"] is None


def test_bad_metadata_and_probability_are_clear_errors() -> None:
    t = sample_trace()
    t.steps[3].metadata["score"] = float("nan")
    with pytest.raises(InputError, match=r"steps\[3\]\.metadata\.score: numeric metadata must be finite"):
        extract_metrics(t)
    t2 = Trace(metadata={"a": {"b": float("inf")}})
    with pytest.raises(InputError, match=r"metadata\.a\.b"):
        extract_metrics(t2)
    with pytest.raises(InputError, match="failure_prob must be in"):
        extract_metrics(sample_trace(), failure_prob=1.5)


def test_docstring_examples() -> None:
    result = doctest.testmod(metrics_module)
    assert result.attempted > 0 and result.failed == 0
