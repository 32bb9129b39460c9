"""The repair ladders (model/diagnosis/ladders.py): ladders from YAML, usable parameters, languages, overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from model.core.errors import InputError
from model.core.findings import Failure
from model.core.kinds import KIND_INFO, FailureKind, Strategy
from model.core.options import DiagnoseOptions
from model.core.schema import Step, StepKind, ToolDefinition, Trace
from model.diagnosis.ladders import Ladders, trace_language


def failure(kind: FailureKind, step: int = 2, **details: object) -> Failure:
    info = KIND_INFO[kind]
    return Failure(kind=kind, category=info.category, severity=info.severity, confidence=0.9,
                   detector="t", step=step, source_index=step, evidence="the tool said 503.", details=dict(details))


def trace(user: str = "Book a table", language: str | None = None) -> Trace:
    return Trace(
        id="tr",
        language=language,
        steps=[
            Step(kind=StepKind.USER_INPUT, content=user, source_index=0),
            Step(kind=StepKind.TOOL_CALL, tool_name="book", tool_args={}, call_id="c", source_index=1),
            Step(kind=StepKind.TOOL_RESULT, tool_name="book", content="503", call_id="c", source_index=2, status="error"),
        ],
        tools=[ToolDefinition(name="book", parameters={"type": "object", "required": ["when"]})],
    )


def test_every_kind_has_a_ladder_ending_in_handoff() -> None:
    p = Ladders.load()
    for kind in FailureKind:
        ladder = p.ladder(kind)
        assert ladder[-1].strategy == Strategy.HUMAN_HANDOFF, kind


def test_retry_backoff_honours_retry_after_and_is_deterministic() -> None:
    p = Ladders.load()
    r1 = p.recommend(trace(), failure(FailureKind.RATE_LIMITED, retry_after=12))
    assert r1.strategy == Strategy.RETRY and r1.params["delay_s"] == 12.0 and r1.params["retry_after"] == 12
    a = p.recommend(trace(), failure(FailureKind.TIMEOUT), attempt=2)
    b = p.recommend(trace(), failure(FailureKind.TIMEOUT), attempt=2)
    assert a.params["delay_s"] == b.params["delay_s"]
    assert 1.5 <= a.params["delay_s"] <= 2.5  # 2 s ± 25 % jitter
    assert a.id == b.id


def test_permanent_tool_error_skips_retry() -> None:
    p = Ladders.load()
    rec = p.recommend(trace(), failure(FailureKind.TOOL_ERROR, http_status=404, tool="book"),
                      options=DiagnoseOptions(tool_equivalents={"book": ["book_v2"]}))
    assert rec.strategy == Strategy.SWITCH_TOOL
    assert rec.params["switch_to"] == "book_v2" and "book_v2" in rec.instruction
    assert p.recommend(trace(), failure(FailureKind.TOOL_ERROR, http_status=503)).strategy == Strategy.RETRY


def test_rollback_target_for_loop_and_blocking() -> None:
    p = Ladders.load()
    rec = p.recommend(trace(), failure(FailureKind.LOOP, step=9, repeats=[{"call_step": 3, "result_step": 4}, {"call_step": 6, "result_step": 7}]))
    assert rec.strategy == Strategy.ROLLBACK and rec.params["to_step"] == 2
    assert "to_source_index" not in rec.params  # step 3 is past this 3-step trace's end: no message to name
    blocked = p.recommend(trace(), failure(FailureKind.UNSAFE_OUTPUT))
    assert blocked.strategy == Strategy.HUMAN_HANDOFF and blocked.params["block"] is True


def test_rollback_names_the_message_to_restore_before() -> None:
    """``to_source_index``: the message holding the first discarded step (an executor keeps messages)."""
    t = Trace(id="tr", steps=[
        Step(kind=StepKind.USER_INPUT, content="Book a table", source_index=0),
        Step(kind=StepKind.LLM_OUTPUT, content="Let me book it.", source_index=1),  # one assistant message,
        Step(kind=StepKind.TOOL_CALL, tool_name="book", tool_args={}, call_id="c", source_index=1),  # two steps
        Step(kind=StepKind.TOOL_RESULT, tool_name="book", content="503", call_id="c", source_index=2, status="error"),
        Step(kind=StepKind.LLM_OUTPUT, content="Booked!", source_index=3),
    ])
    rec = Ladders.load().recommend(t, failure(FailureKind.IGNORED_ERROR, step=4, failed_step=3))
    assert rec.strategy == Strategy.ROLLBACK and rec.params["to_step"] == 1
    assert rec.params["to_source_index"] == 1  # the call's message goes, its text step with it


def test_rungs_climb_and_cap_at_handoff() -> None:
    p = Ladders.load()
    strategies = [p.recommend(trace(), failure(FailureKind.REFUSAL), rung=r).strategy for r in range(6)]
    assert strategies == [Strategy.SELF_CORRECT, Strategy.CLARIFY, Strategy.FALLBACK_MODEL] + [Strategy.HUMAN_HANDOFF] * 3


def test_language_of_instruction() -> None:
    p = Ladders.load()
    zh = trace("请帮我预订明天晚上七点的两人餐桌")
    assert trace_language(zh) == "zh"
    rec = p.recommend(zh, failure(FailureKind.CONTEXT_LOSS))
    assert rec.strategy == Strategy.REFRESH_CONTEXT and "约束" in rec.instruction
    assert "constraint" in p.recommend(trace(), failure(FailureKind.CONTEXT_LOSS)).instruction


def test_malformed_call_self_correct_carries_schema_and_fallback_model() -> None:
    p = Ladders.load()
    rec = p.recommend(trace(), failure(FailureKind.MALFORMED_CALL, step=1))
    assert rec.params["tool_schema"] == {"type": "object", "required": ["when"]}
    fb = p.recommend(trace(), failure(FailureKind.DEGRADATION), options=DiagnoseOptions(fallback_models=["gpt-x"]))
    assert fb.strategy == Strategy.FALLBACK_MODEL and fb.params["model"] == "gpt-x"


def test_user_policy_overrides_and_bad_policy_named(tmp_path: Path) -> None:
    good = tmp_path / "p.yaml"
    good.write_text("ladders:\n  refusal:\n    - {strategy: clarify}\n    - {strategy: human_handoff}\n")
    p = Ladders.load(good)
    assert [r.strategy for r in p.ladder(FailureKind.REFUSAL)] == [Strategy.CLARIFY, Strategy.HUMAN_HANDOFF]
    assert p.ladder(FailureKind.LOOP)[0].strategy == Strategy.ROLLBACK  # the rest stays default
    bad = tmp_path / "bad.yaml"
    bad.write_text("ladders:\n  refusal:\n    - {strategy: pray}\n")
    with pytest.raises(InputError, match="ladders.refusal.0.strategy"):
        Ladders.load(bad)
    loops = tmp_path / "loops.yaml"
    loops.write_text("ladders:\n  refusal:\n    - {strategy: retry}\n")
    with pytest.raises(InputError, match="must end in human_handoff"):
        Ladders.load(loops)
