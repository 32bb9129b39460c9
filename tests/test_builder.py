"""The seeded trace builder: determinism, indexing, labels at the planted step."""

from __future__ import annotations

import pytest

from model.core.kinds import FailureKind
from model.core.schema import StepKind, StepStatus
from model.data.builder import RECIPE_KINDS, TRAP_NAMES, make_trace, make_trap
from model.data.tracebuilder import TraceBuilder

# The step kind each recipe's label of its own kind sits on.
LABEL_STEP_KIND = {
    FailureKind.TOOL_ERROR: StepKind.TOOL_RESULT,
    FailureKind.TIMEOUT: StepKind.TOOL_RESULT,
    FailureKind.RATE_LIMITED: StepKind.TOOL_RESULT,
    FailureKind.PROVIDER_ERROR: StepKind.ERROR,
    FailureKind.MALFORMED_CALL: StepKind.TOOL_CALL,
    FailureKind.EMPTY_RESPONSE: StepKind.FINAL_OUTPUT,
    FailureKind.INCOMPLETE: StepKind.TOOL_CALL,
    FailureKind.REFUSAL: StepKind.FINAL_OUTPUT,
    FailureKind.LOOP: StepKind.TOOL_RESULT,
    FailureKind.IGNORED_ERROR: StepKind.FINAL_OUTPUT,
    FailureKind.ASSUMPTION_VIOLATED: StepKind.FINAL_OUTPUT,
    FailureKind.DISALLOWED_TOOL: StepKind.TOOL_CALL,
    FailureKind.HALLUCINATION: StepKind.FINAL_OUTPUT,
    FailureKind.OFF_TOPIC: StepKind.FINAL_OUTPUT,
    FailureKind.CONTEXT_LOSS: StepKind.FINAL_OUTPUT,
    FailureKind.UNSAFE_OUTPUT: StepKind.FINAL_OUTPUT,
}


def test_every_trace_kind_has_a_recipe() -> None:
    assert set(RECIPE_KINDS) == set(FailureKind) - {FailureKind.DEGRADATION, FailureKind.AT_RISK}  # (streams; the agent model)
    assert set(LABEL_STEP_KIND) == set(RECIPE_KINDS)


@pytest.mark.parametrize("kind", [None, *RECIPE_KINDS], ids=lambda k: k or "healthy")
def test_same_seed_same_trace_other_seed_other_trace(kind: FailureKind | None) -> None:
    a = make_trace(kind, seed=11, n_steps=14)
    b = make_trace(kind, seed=11, n_steps=14)
    c = make_trace(kind, seed=12, n_steps=14)
    assert a.model_dump() == b.model_dump()
    assert a.model_dump() != c.model_dump()


@pytest.mark.parametrize("kind", RECIPE_KINDS)
@pytest.mark.parametrize("n_steps", [8, 20, 41])
def test_label_sits_on_the_planted_step(kind: FailureKind, n_steps: int) -> None:
    t = make_trace(kind, seed=n_steps, n_steps=n_steps)
    labels = t.labels
    assert labels is not None and not labels.healthy
    planted = [lb for lb in labels.failures if lb.kind is kind]
    assert len(planted) == 1
    assert t.steps[planted[0].step].kind is LABEL_STEP_KIND[kind]  # type: ignore[index]
    for lb in labels.failures:
        assert lb.source_index == t.steps[lb.step].source_index  # type: ignore[index]
    assert labels.first_failing_step == min(lb.step for lb in labels.failures)  # type: ignore[type-var]
    assert abs(len(t.steps) - n_steps) <= 3  # the recipes pad to about n_steps
    assert labels.provenance["recipe"] == kind.value and labels.provenance["seed"] == n_steps


def test_known_failing_steps_of_a_few_recipes() -> None:
    # 0 system, 1 user, 2/3 and 4/5 filler search pairs, then the recipe's own steps
    t = make_trace(FailureKind.TOOL_ERROR, seed=5, n_steps=9)
    assert [s.kind for s in t.steps[-3:]] == [StepKind.TOOL_CALL, StepKind.TOOL_RESULT, StepKind.FINAL_OUTPUT]
    assert t.labels is not None and t.labels.first_failing_step == len(t.steps) - 2
    assert t.steps[-2].status is StepStatus.ERROR
    loop = make_trace(FailureKind.LOOP, seed=5, n_steps=9)
    assert loop.labels is not None and loop.labels.first_failing_step == len(loop.steps) - 2
    assert [s.kind for s in loop.steps].count(StepKind.TOOL_CALL) == 3


def test_healthy_trace_and_traps_have_no_failures() -> None:
    assert make_trace(None, seed=0).labels.healthy  # type: ignore[union-attr]
    for name in TRAP_NAMES:
        t = make_trap(name, seed=3)
        assert t.labels is not None and t.labels.healthy and t.labels.first_failing_step is None
        assert t.steps[-1].kind is StepKind.FINAL_OUTPUT


def test_source_index_follows_messages() -> None:
    b = TraceBuilder(seed=1)
    b.system("sys")  # message 0
    b.user("q")  # message 1
    with b.message():  # message 2: text and two tool calls
        b.say("checking both")
        c1 = b.call("search", {"query": "a"})
        c2 = b.call("search", {"query": "b"})
    b.result(c2, "B")  # message 3
    b.result(c1, "A")  # message 4
    b.new_message()  # message 5, explicit form
    b.say("done")
    b.end_message()
    b.final("A and B")  # message 6
    t = b.build()
    assert [s.source_index for s in t.steps] == [0, 1, 2, 2, 2, 3, 4, 5, 6]
    assert t.steps[5].call_id == c2 and t.steps[6].call_id == c1
    assert t.steps[5].tool_name == "search"


def test_result_by_tool_name_links_the_latest_unanswered_call() -> None:
    b = TraceBuilder(seed=2)
    first = b.call("get_weather", {"city": "Oslo"})
    second = b.call("get_weather", {"city": "Lima"})
    b.result("get_weather", "Lima: 20")
    b.result("get_weather", "Oslo: 3")
    t = b.build()
    assert t.steps[2].call_id == second and t.steps[3].call_id == first


def test_call_ids_timestamps_and_raw_arguments() -> None:
    b = TraceBuilder(seed=3, trace_id="t-1", session_id="s-1", task_type="qa")
    cid = b.call("calculator", None, raw_args="{expression: 1+")
    fixed = b.call("calculator", {"expression": "1+1"}, call_id="my-id")
    b.result(fixed, 2, latency_ms=12.5)
    t = b.build()
    assert cid.startswith("call_") and fixed == "my-id"
    assert t.steps[0].tool_args is None and t.steps[0].tool_args_raw == "{expression: 1+"
    assert t.steps[1].tool_args_raw == '{"expression": "1+1"}'
    assert t.steps[2].content == "2" and t.steps[2].latency_ms == 12.5
    stamps = [s.timestamp for s in t.steps]
    assert all(a is not None and b_ is not None and a < b_ for a, b_ in zip(stamps, stamps[1:], strict=False))
    assert (t.id, t.session_id, t.task_type) == ("t-1", "s-1", "qa")


def test_error_step_and_labels() -> None:
    b = TraceBuilder(seed=4)
    b.user("hi")
    b.error("503 overloaded")
    b.label("provider_error")
    b.final("hello")
    b.label(FailureKind.REFUSAL, step=0, confidence=0.5)
    t = b.build()
    assert t.steps[1].kind is StepKind.ERROR and t.steps[1].status is StepStatus.ERROR
    assert t.steps[1].error_type == "provider_error"
    assert t.labels is not None
    assert [(lb.kind, lb.step) for lb in t.labels.failures] == [
        (FailureKind.PROVIDER_ERROR, 1),
        (FailureKind.REFUSAL, 0),
    ]
    assert t.labels.first_failing_step == 0


def test_bad_uses_say_what_is_wrong() -> None:
    b = TraceBuilder(seed=0)
    with pytest.raises(IndexError, match="outside the trace"):
        b.label("loop")
    with pytest.raises(ValueError, match="no trace recipe for kind 'degradation'"):
        make_trace("degradation", seed=0)
    with pytest.raises(ValueError, match="unknown trap 'nope'; valid names: retry_after_error"):
        make_trap("nope", seed=0)


def test_chinese_refusal_recipe() -> None:
    t = make_trace(FailureKind.REFUSAL, seed=0, language="zh")
    assert t.language == "zh" and "不能提供" in t.steps[-1].content


def test_docstring_examples() -> None:
    import doctest

    import model.data.builder
    import model.data.tracebuilder

    for mod in (model.data.builder, model.data.tracebuilder):
        result = doctest.testmod(mod)
        assert result.attempted > 0 and result.failed == 0, mod.__name__
