"""What a session append reads only the new steps for gives what reading the whole session gave:
coverage (assess_more), the recommendation's language (language_more), the task key, the tool names
handed to the store, each finding's redaction (RedactedFindings); the docstring examples (one graph
per trace inside shared_graphs among them)."""

from __future__ import annotations

import random
from typing import Any

from model.core.coverage import assess, assess_more
from model.core.schema import Step, StepKind, Trace
from model.diagnosis.ladders import language_more, trace_language
from model.diagnosis.repair_engine import task_key
from serve.redaction import Redactor
from serve.services.sessions import RedactedFindings, StepTools

KINDS = [StepKind.USER_INPUT, StepKind.LLM_OUTPUT, StepKind.TOOL_CALL, StepKind.TOOL_RESULT, StepKind.SYSTEM,
         StepKind.FINAL_OUTPUT, StepKind.LLM_REASONING]


def _step(rng: random.Random, source_index: int) -> Step:
    kind = rng.choice(KINDS)
    content = rng.choice(["", "ok", "__REDACTED__", "天气怎么样，请告诉我", "weather in Paris?", "x" * 700])
    meta = {"content_recorded": False} if rng.random() < 0.1 else {}
    return Step(kind=kind, content=content, source_index=source_index, metadata=meta,
                tool_name="search" if kind in (StepKind.TOOL_CALL, StepKind.TOOL_RESULT) else None)


def test_counting_only_the_new_steps_gives_what_the_whole_session_gives() -> None:
    rng = random.Random(7)
    for _ in range(30):
        trace, cov, lang = Trace(), {}, {}
        source = 0
        for _ in range(rng.randint(1, 40)):  # appends of 1-4 input elements, 1-3 steps each
            for _ in range(rng.randint(1, 4)):
                trace.steps.extend(_step(rng, source) for _ in range(rng.randint(1, 3)))
                source += 1
            if rng.random() < 0.05:  # a step out of order (a whole trace sent first): read again
                trace.steps.append(_step(rng, 0))
            assert assess_more(trace, cov) == assess(trace)
            assert language_more(trace, lang) == trace_language(trace)
            for step in (None, *rng.sample(range(len(trace.steps)), min(3, len(trace.steps)))):
                last = max((i for i in range(len(trace.steps) if step is None else step + 1)
                            if trace.steps[i].kind == StepKind.USER_INPUT), default=-1)
                assert task_key(trace, step) == f"u{last}"
        tools = StepTools(trace.steps)
        assert list(tools) == [s.tool_name for s in trace.steps] and tools[1:3] == [s.tool_name for s in trace.steps[1:3]]
    shorter = Trace(steps=trace.steps[:1])
    assert assess_more(shorter, cov) == assess(shorter)  # a trace replaced under the memo: read again


def _finding(i: int) -> dict[str, Any]:
    return {"kind": "tool_error", "step": i, "evidence": f"step {i}: mail bob{i}@example.com failed",
            "details": {"tool": "search", "password": f"hunter{i}"}, "confidence": 0.9}


def test_each_finding_redacted_once_is_redacted_as_the_whole() -> None:
    for redactor in (Redactor(), Redactor(mode="hash", salt="s"), Redactor.from_names([])):
        memo = RedactedFindings(redactor, size=3)
        for n in range(1, 7):  # findings gathered append after append; more than the memo holds
            resp = {"trace_id": "t", "failures": [_finding(0)], "signals": [_finding(i) for i in range(n)],
                    "primary": _finding(0), "recommendation": {"instruction": "write to alice@example.com"}}
            failures = {f"tool_error@{i}": {"rung": 1, "failure": _finding(i), "token": f"tok{i}"} for i in range(n)}
            failures["mail dave@example.com"] = {"rung": n}  # a key redacted too
            state = {"otlp": {"calls": {"c1": "search"}}, "failures": failures,
                     "classifier": {"n": n, "findings": [_finding(i) for i in range(n)]},
                     "rules": {"frozen": [_finding(9)], "recent": [], "cut": 0}, "note": "carol@example.com"}
            assert memo.response(resp) == redactor.redact(resp)
            want = redactor.redact({k: v for k, v in state.items() if k != "otlp"}) | {"otlp": state["otlp"]}
            assert memo.state(state) == want
        assert "bob0@example.com" not in str(memo.response(resp)) or not redactor.rules
        assert "dave@example.com" not in str(memo.state(state)) or not redactor.rules


def test_a_finding_is_remembered_only_for_its_exact_value() -> None:
    """The memo's key is orjson's JSON, which writes NaN as null and a tuple as a list: such a finding
    is redacted as itself, never as the one remembered under its key."""
    redactor = Redactor.from_names(["api_key", "email"])
    memo = RedactedFindings(redactor)
    for value in (None, float("nan"), 1234, True, 1.0, [1, 2], (1, 2), {"a": "bob@example.com"}):
        for _ in range(2):
            state = {"classifier": {"findings": [{"details": {"password": value}, "step": 1}]}}
            assert repr(memo.state(state)) == repr(redactor.redact(state))


def test_docstring_examples() -> None:
    import doctest

    import model.core.coverage
    import model.core.shared_graphs
    import model.diagnosis.ladders

    for mod in (model.core.coverage, model.core.shared_graphs, model.diagnosis.ladders):
        result = doctest.testmod(mod)
        assert result.attempted > 0 and result.failed == 0, mod.__name__
