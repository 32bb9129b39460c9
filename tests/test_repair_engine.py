"""The repair engine (model/diagnosis/repair_engine.py): rungs, attempts, open failures, budgets → human_handoff."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from model.core.errors import InputError
from model.core.findings import Failure
from model.core.kinds import KIND_INFO, FailureKind, Strategy
from model.core.options import DiagnoseOptions
from model.core.schema import Step, StepStatus, Trace
from model.diagnosis.repair_engine import (
    Budgets,
    Reach,
    RepairEngine,
    failure_key,
    load_budgets,
    reach,
    task_key,
)


def _trace(lang_text: str = "find the weather") -> Trace:
    return Trace(
        id="t-1",
        steps=[
            Step(kind="user_input", content=lang_text, source_index=0),
            Step(kind="tool_call", tool_name="search", tool_args={"q": "x"}, call_id="c1", source_index=1),
            Step(
                kind="tool_result", content="HTTP 503", status=StepStatus.ERROR, call_id="c1", source_index=2
            ),
            Step(kind="user_input", content="and tomorrow?", source_index=3),
            Step(kind="tool_call", tool_name="search", tool_args={"q": "y"}, call_id="c2", source_index=4),
            Step(
                kind="tool_result", content="timeout", status=StepStatus.TIMEOUT, call_id="c2", source_index=5
            ),
        ],
    )


def _failure(kind: str, step: int, **details: Any) -> Failure:
    info = KIND_INFO[FailureKind(kind)]
    return Failure(
        kind=FailureKind(kind),
        category=info.category,
        severity=info.severity,
        confidence=1.0,
        detector=kind,
        step=step,
        source_index=step,
        evidence=f"{kind} here",
        details=details,
    )


def _state_roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(state))  # what the store does
    return out


def test_timeout_ladder_attempts_then_rungs_then_handoff() -> None:
    engine = RepairEngine.load()
    trace, f = _trace(), _failure("timeout", 5)
    opts = DiagnoseOptions(fallback_models=["small-model"])
    state: dict[str, Any] = {}
    d = engine.recommend(state, trace, [f], session_key="s", now=0.0, options=opts)
    seen = [(d.recommendation.strategy, d.rung, d.attempt)]
    ids = {d.recommendation.id}
    for i in range(6):
        state = _state_roundtrip(state)
        nxt = engine.on_outcome(
            state, d.recommendation.id, success=False, trace=trace, session_key="s", now=1.0 + i
        )
        assert nxt is not None
        d = nxt
        seen.append((d.recommendation.strategy, d.rung, d.attempt))
        ids.add(d.recommendation.id)
        if d.recommendation.strategy == Strategy.HUMAN_HANDOFF:
            break
    assert seen == [
        (Strategy.RETRY, 0, 1),
        (Strategy.RETRY, 0, 2),
        (Strategy.RETRY, 0, 3),
        (Strategy.ADJUST_PARAMETERS, 1, 1),
        (Strategy.FALLBACK_MODEL, 2, 1),
        (Strategy.HUMAN_HANDOFF, 3, 1),
    ]
    assert len(ids) == 6
    assert d.recommendation.params["reason"] == "per-failure budget spent: 3 rungs"
    assert d.recommendation.budgets["failure_rungs_left"] == 0
    assert d.recommendation.budgets["task_recommendations_left"] == 0
    # handed off stays handed off: a further failed outcome climbs nowhere
    assert (
        engine.on_outcome(state, d.recommendation.id, success=False, trace=trace, session_key="s", now=9)
        is None
    )
    again = engine.recommend(state, trace, [f], session_key="s", now=10.0, options=opts)
    assert again.recommendation.id == d.recommendation.id and not again.new


def test_retry_backoff_grows_and_honours_retry_after() -> None:
    engine = RepairEngine.load()
    trace = _trace()
    state: dict[str, Any] = {}
    d1 = engine.recommend(state, trace, [_failure("rate_limited", 5, retry_after=42)], session_key="s", now=0)
    assert d1.recommendation.strategy == Strategy.RETRY
    assert d1.recommendation.params["delay_s"] == 42.0
    assert d1.recommendation.params["retry_after"] == 42
    state2: dict[str, Any] = {}
    a = engine.recommend(state2, trace, [_failure("timeout", 5)], session_key="s2", now=0).recommendation
    b = engine.on_outcome(state2, a.id, success=False, trace=trace, session_key="s2", now=1)
    assert b is not None
    # base 1 s, doubling, jitter ±25 %
    assert 0.75 <= a.params["delay_s"] <= 1.25
    assert 1.5 <= b.recommendation.params["delay_s"] <= 2.5
    assert b.recommendation.params["attempt"] == 2


def test_open_failure_repeats_same_recommendation_without_spending() -> None:
    engine = RepairEngine.load()
    trace, f = _trace(), _failure("tool_error", 2, tool="search")
    state: dict[str, Any] = {}
    first = engine.recommend(state, trace, [f], session_key="s", now=0)
    assert first.new
    for t in range(1, 4):
        d = engine.recommend(state, trace, [f], session_key="s", now=float(t))
        assert d.recommendation.id == first.recommendation.id and not d.new
    assert state["tasks"]["u0"]["recommendations"] == 1


def test_stale_outcome_does_not_escalate_twice() -> None:
    engine = RepairEngine.load()
    trace, f = _trace(), _failure("loop", 2)
    state: dict[str, Any] = {}
    first = engine.recommend(state, trace, [f], session_key="s", now=0).recommendation
    second = engine.on_outcome(state, first.id, success=False, trace=trace, session_key="s", now=1)
    assert second is not None and second.recommendation.strategy == Strategy.REPLAN_GLOBAL
    # the same failed outcome reported again: no second escalation
    assert engine.on_outcome(state, first.id, success=False, trace=trace, session_key="s", now=2) is None
    assert state["failures"]["loop@2"]["rung"] == 1


def test_success_resolves_and_resolved_failure_is_not_reopened() -> None:
    engine = RepairEngine.load()
    trace, f = _trace(), _failure("empty_response", 5)
    state: dict[str, Any] = {}
    rec = engine.recommend(state, trace, [f], session_key="s", now=0).recommendation
    assert engine.on_outcome(state, rec.id, success=True, trace=trace, session_key="s", now=1) is None
    d = engine.recommend(state, trace, [f], session_key="s", now=2)
    assert d.recommendation.strategy == Strategy.CONTINUE
    assert "resolved" in d.recommendation.rationale


def test_failure_gone_from_later_diagnosis_is_resolved() -> None:
    engine = RepairEngine.load()
    trace = _trace()
    state: dict[str, Any] = {}
    engine.recommend(state, trace, [_failure("tool_error", 2)], session_key="s", now=0)
    d = engine.recommend(state, trace, [], session_key="s", now=1)
    assert d.recommendation.strategy == Strategy.CONTINUE
    assert state["failures"]["tool_error@2"]["status"] == "resolved"


def test_task_time_budget_hands_off() -> None:
    engine = RepairEngine.load()
    trace, f = _trace(), _failure("timeout", 5)
    state: dict[str, Any] = {}
    rec = engine.recommend(state, trace, [f], session_key="s", now=1000.0).recommendation
    d = engine.on_outcome(state, rec.id, success=False, trace=trace, session_key="s", now=1000.0 + 301)
    assert d is not None
    assert d.recommendation.strategy == Strategy.HUMAN_HANDOFF
    assert "300 s of recovery" in d.recommendation.params["reason"]


def test_replan_global_budget_per_session() -> None:
    engine = RepairEngine.load()
    trace = _trace()
    state: dict[str, Any] = {}
    got = []
    for i, step in enumerate((1, 2, 4)):  # three loops in one session, each failing its rollback
        rec = engine.recommend(
            state, trace, [_failure("loop", step)], session_key="s", now=float(i)
        ).recommendation
        assert rec.strategy == Strategy.ROLLBACK
        nxt = engine.on_outcome(state, rec.id, success=False, trace=trace, session_key="s", now=i + 0.5)
        assert nxt is not None
        got.append(nxt.recommendation.strategy)
        engine.on_outcome(
            state, nxt.recommendation.id, success=True, trace=trace, session_key="s", now=i + 0.6
        )
    # loops at steps 1 and 2 share task u0 (4 recommendations); the third is task u3
    assert got == [Strategy.REPLAN_GLOBAL, Strategy.REPLAN_GLOBAL, Strategy.HUMAN_HANDOFF]
    assert state["replan_global"] == 2


def test_switch_tool_uses_equivalents_or_is_skipped() -> None:
    engine = RepairEngine.load()
    trace, f = _trace(), _failure("ignored_error", 2, tool="search")
    with_alt = DiagnoseOptions(tool_equivalents={"search": ["bing", "ddg"]})
    state: dict[str, Any] = {}
    rec = engine.recommend(state, trace, [f], session_key="a", now=0, options=with_alt).recommendation
    assert rec.strategy == Strategy.ROLLBACK and rec.params["to_step"] == 0  # before the failed call (step 1)
    nxt = engine.on_outcome(state, rec.id, success=False, trace=trace, session_key="a", now=1)
    assert nxt is not None
    assert nxt.recommendation.strategy == Strategy.SWITCH_TOOL
    assert nxt.recommendation.params["switch_to"] == "bing"
    state = {}
    rec = engine.recommend(state, trace, [f], session_key="b", now=0).recommendation
    nxt = engine.on_outcome(state, rec.id, success=False, trace=trace, session_key="b", now=1)
    assert nxt is not None and nxt.recommendation.strategy == Strategy.HUMAN_HANDOFF
    assert "skipped switch_tool" in nxt.recommendation.rationale


def test_blocking_kinds_hand_off_at_once_and_language() -> None:
    engine = RepairEngine.load()
    d = engine.recommend({}, _trace(), [_failure("unsafe_output", 5)], session_key="s", now=0)
    assert d.recommendation.strategy == Strategy.HUMAN_HANDOFF
    assert d.recommendation.params["block"] is True
    assert d.recommendation.params["reason"] == "unsafe_output goes to a human at once"
    zh = engine.recommend(
        {}, _trace("请帮我查一下北京明天的天气情况"), [_failure("refusal", 5)], session_key="s", now=0
    )
    assert zh.recommendation.strategy == Strategy.SELF_CORRECT
    assert "请重新阅读" in zh.recommendation.instruction


def test_most_severe_earliest_unresolved_failure_is_acted_on() -> None:
    engine = RepairEngine.load()
    trace = _trace()
    fs = [_failure("timeout", 5), _failure("tool_error", 2), _failure("ignored_error", 4)]
    d = engine.recommend({}, trace, fs, session_key="s", now=0)
    assert d.failure_key == "ignored_error@4"
    assert failure_key(fs[1]) == "tool_error@2"
    assert task_key(trace, 2) == "u0" and task_key(trace, 5) == "u3"


def test_shadow_recommends_continue_and_keeps_no_failure_state() -> None:
    state: dict[str, Any] = {}
    d = RepairEngine.load().recommend(
        state,
        _trace(),
        [_failure("tool_error", 2)],
        session_key="s",
        now=0,
        options=DiagnoseOptions(shadow=True),
    )
    assert d.recommendation.strategy == Strategy.CONTINUE
    assert state["failures"] == {}


def test_user_policy_file_overrides_budgets_and_ladder(tmp_path: Path) -> None:
    p = tmp_path / "policy.yaml"
    p.write_text(
        "budgets:\n  failure_rungs: 1\nladders:\n  timeout:\n"
        "    - {strategy: adjust_parameters}\n    - {strategy: replan_local}\n    - {strategy: human_handoff}\n"
    )
    engine = RepairEngine.load(p)
    assert engine.budgets == Budgets(failure_rungs=1)
    trace = _trace()
    state: dict[str, Any] = {}
    rec = engine.recommend(state, trace, [_failure("timeout", 5)], session_key="s", now=0).recommendation
    assert rec.strategy == Strategy.ADJUST_PARAMETERS
    nxt = engine.on_outcome(state, rec.id, success=False, trace=trace, session_key="s", now=1)
    assert nxt is not None and nxt.recommendation.strategy == Strategy.HUMAN_HANDOFF
    assert nxt.recommendation.params["reason"] == "per-failure budget spent: 1 rungs"


def test_bad_budget_value_names_the_field(tmp_path: Path) -> None:
    p = tmp_path / "policy.yaml"
    p.write_text("budgets:\n  task_recommendations: zero\n")
    with pytest.raises(InputError) as exc:
        load_budgets(p)
    assert exc.value.path == "budgets.task_recommendations"


def test_a_later_successful_retry_resolves_a_transient_failure() -> None:
    engine = RepairEngine.load()
    trace = _trace()
    state: dict[str, Any] = {}
    f = _failure("tool_error", 2, tool="search")
    first = engine.recommend(state, trace, [f], session_key="s", now=0)
    assert first.recommendation.strategy == Strategy.RETRY
    # the agent retried on its own and the search worked: the same diagnosis now says continue
    trace.steps.append(
        Step(kind="tool_call", tool_name="search", tool_args={"q": "x"}, call_id="c3", source_index=6)
    )
    trace.steps.append(
        Step(kind="tool_result", tool_name="search", content="18C", call_id="c3", source_index=7)
    )
    later = engine.recommend(state, trace, [f], session_key="s", now=1)
    assert later.recommendation.strategy == Strategy.CONTINUE
    assert later.recommendation.rationale.endswith("(later steps got past tool_error@2)")
    assert state["failures"]["tool_error@2"]["status"] == "resolved"
    # a logical failure is not resolved by later steps
    loop = engine.recommend({}, trace, [_failure("loop", 2)], session_key="s2", now=0)
    assert loop.recommendation.strategy == Strategy.ROLLBACK


def test_a_loop_that_repeats_after_a_successful_rollback_reopens_one_rung_up() -> None:
    """The session keeps the steps a rollback undid, so a later repeat grows the same finding
    (same source_index); it reopens that failure on the next rung instead of passing unseen."""
    engine = RepairEngine.load()
    steps = [Step(kind="user_input", content="weather?", source_index=0)]
    for i in range(4):
        steps += [Step(kind="tool_call", tool_name="search", tool_args={"q": "w"}, call_id=f"c{i}",
                       source_index=1 + 2 * i),
                  Step(kind="tool_result", content="no results", call_id=f"c{i}", source_index=2 + 2 * i)]
    repeats = [{"call_step": 1 + 2 * i, "result_step": 2 + 2 * i} for i in range(3)]
    three = Trace(id="t-loop", steps=steps[:7])
    loop = _failure("loop", 6, repeats=repeats)
    state: dict[str, Any] = {}
    rec = engine.recommend(state, three, [loop], session_key="s", now=0).recommendation
    assert rec.strategy == Strategy.ROLLBACK
    assert engine.on_outcome(state, rec.id, success=True, trace=three, session_key="s", now=1) is None
    # the same finding, nothing new: stays resolved
    assert engine.recommend(state, three, [loop], session_key="s", now=2).recommendation.strategy == Strategy.CONTINUE
    state = _state_roundtrip(state)
    four = Trace(id="t-loop", steps=steps)
    grown = _failure("loop", 6, repeats=[*repeats, {"call_step": 7, "result_step": 8}])
    d = engine.recommend(state, four, [grown], session_key="s", now=3)
    assert d.recommendation.strategy == Strategy.REPLAN_GLOBAL and d.rung == 1 and d.new
    assert state["failures"]["loop@6"]["status"] == "open"
    assert engine.recommend(state, four, [grown], session_key="s", now=4).recommendation.id == d.recommendation.id


def test_reach_is_a_findings_latest_evidence_its_own_or_a_loops_last_repeat() -> None:
    """The one loop-reach rule: the engine reopens by its step, a session step sends both indices
    with each failure (serve.schemas.SessionFailure), the client's executor judges by its source_index."""
    from serve.schemas import SessionStepResponse

    repeats = [{"call_step": 1 + 2 * i, "call_source_index": 10 + 2 * i, "result_step": 2 + 2 * i,
                "result_source_index": 11 + 2 * i} for i in range(4)]
    loop = _failure("loop", 6, repeats=repeats)
    assert reach(loop) == Reach(step=8, source_index=17)
    assert reach(_failure("timeout", 5)) == Reach(step=5, source_index=5)
    assert reach(_failure("loop", 2, repeats=[{"step": 1}, "not a repeat", {"call_step": True}])) == Reach(2, 2)
    assert reach(Failure(kind=FailureKind.LOOP, category="logical", severity="high", confidence=0.9, detector="loop",
                         details={"repeats": [{"step": 3, "source_index": 4}]})) == Reach(3, 4)
    answer = SessionStepResponse(trace_id="t", model_version="m", healthy=False, session_id="s",
                                 failures=[loop.model_dump()], signals=[_failure("timeout", 5).model_dump()],
                                 primary=loop.model_dump(), recommendation={"id": "r", "strategy": "rollback"})
    sent = answer.model_dump(mode="json")
    assert [(f["reach_step"], f["reach_source_index"]) for f in sent["failures"]] == [(8, 17)]
    assert [(f["reach_step"], f["reach_source_index"]) for f in sent["signals"]] == [(5, 5)]
    assert (sent["primary"]["reach_step"], sent["primary"]["reach_source_index"]) == (8, 17)


def test_a_failed_outcome_reopens_a_failure_later_steps_resolved() -> None:
    """The agent gave up and told the user: the tool error is only a signal then, so later steps
    resolve it; the agent's failed outcome for its repair still moves it up the ladder."""
    engine = RepairEngine.load()
    trace = _trace()
    state: dict[str, Any] = {}
    f = _failure("tool_error", 2, http_status=400)  # permanent: retry skipped, no equivalent: replan_local
    rec = engine.recommend(state, trace, [f], session_key="s", now=0).recommendation
    assert rec.strategy == Strategy.REPLAN_LOCAL and "skipped retry" in rec.rationale
    assert engine.recommend(state, trace, [], session_key="s", now=1).recommendation.strategy == Strategy.CONTINUE
    assert state["failures"]["tool_error@2"]["status"] == "resolved"
    d = engine.on_outcome(state, rec.id, success=False, trace=trace, session_key="s", now=2)
    assert d is not None and d.recommendation.strategy == Strategy.HUMAN_HANDOFF
    assert state["failures"]["tool_error@2"]["status"] == "handoff"
    # a success reported for a failure an outcome resolved is not reopened by a later failure report
    assert engine.on_outcome(state, d.recommendation.id, success=True, trace=trace, session_key="s", now=3) is None
    assert engine.on_outcome(state, d.recommendation.id, success=False, trace=trace, session_key="s", now=4) is None


def test_a_permanent_tool_error_skips_retry_in_the_engine_too() -> None:
    """A 400 skips the ``only_if_transient`` retry rung; the engine must know, so that the rung it
    keeps (and checks for ``switch_tool``'s equivalents) is the one recommended: without an
    equivalent of the failed tool the answer is ``replan_local``, not a ``switch_tool`` repeated
    ``max_attempts`` times (the closed-loop bench's malformed-arguments runs showed it)."""
    engine = RepairEngine.load()
    trace, f = _trace(), _failure("tool_error", 2, tool="search", http_status=400)
    other = DiagnoseOptions(tool_equivalents={"weather": ["weather_alt"]})  # equivalents, not of "search"
    state: dict[str, Any] = {}
    d = engine.recommend(state, trace, [f], session_key="a", now=0, options=other)
    assert d.recommendation.strategy == Strategy.REPLAN_LOCAL
    assert "skipped retry" in d.recommendation.rationale
    state = {}
    with_alt = DiagnoseOptions(tool_equivalents={"search": ["bing"]})
    d = engine.recommend(state, trace, [f], session_key="b", now=0, options=with_alt)
    assert d.recommendation.strategy == Strategy.SWITCH_TOOL and d.recommendation.params["switch_to"] == "bing"
    nxt = engine.on_outcome(state, d.recommendation.id, success=False, trace=trace, session_key="b", now=1)
    assert nxt is not None and nxt.recommendation.strategy == Strategy.REPLAN_LOCAL  # one rung up, not an attempt
    state = {}  # a transient error keeps its retry rung
    d = engine.recommend(state, trace, [_failure("tool_error", 2, tool="search", http_status=503)],
                         session_key="c", now=0, options=other)
    assert d.recommendation.strategy == Strategy.RETRY
