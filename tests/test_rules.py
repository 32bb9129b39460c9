"""Rule detectors on built traces with known failing steps (exact step and source_index)."""

from __future__ import annotations

import pytest

from model.core.errors import InputError
from model.core.findings import Finding
from model.core.kinds import FailureKind
from model.core.schema import Step, ToolDefinition, Trace
from model.data.builder import RECIPE_KINDS, TOOLS, TRAP_NAMES, make_trace, make_trap
from model.data.tracebuilder import TraceBuilder
from model.detectors.catalog import TRACE_DETECTORS, make_detector
from model.detectors.rules.answer import EmptyResponseRule, IncompleteRule
from model.detectors.rules.assumption import AssumptionViolatedRule, is_empty_result
from model.detectors.rules.calls import DisallowedToolRule, MalformedCallRule
from model.detectors.rules.common import RECOVERED_CONFIDENCE, final_answer_step
from model.detectors.rules.failed import (
    IgnoredErrorRule,
    ProviderErrorRule,
    RateLimitedRule,
    TimeoutRule,
    ToolErrorRule,
)
from model.detectors.rules.loop import LoopRule
from model.detectors.rules.refusal import RefusalRule

THRESHOLD = 0.5  # model.diagnosis.diagnoser.DEFAULT_THRESHOLDS: at or above = failure
RULE_NAMES = [
    "assumption_violated", "disallowed_tool", "empty_response", "ignored_error", "incomplete", "loop",
    "malformed_call", "provider_error", "rate_limited", "refusal", "timeout", "tool_error",
]  # fmt: skip
ALLOWED = ["search", "get_weather", "calculator", "job_status"]


def all_rules(trace: Trace) -> list[Finding]:
    out: list[Finding] = []
    for name in RULE_NAMES:
        det = make_detector(name, allowed_tools=ALLOWED) if name == "disallowed_tool" else make_detector(name)
        out.extend(det.inspect(trace))
    return out


def failures(trace: Trace) -> set[tuple[str, int | None, int | None]]:
    return {(f.kind.value, f.step, f.source_index) for f in all_rules(trace) if f.confidence >= THRESHOLD}


def test_every_rule_is_registered() -> None:
    assert set(RULE_NAMES) <= set(TRACE_DETECTORS)


RULE_KINDS = [k for k in RECIPE_KINDS if any(k in TRACE_DETECTORS[n].kinds for n in RULE_NAMES)]
CLASSIFIER_ONLY = [k for k in RECIPE_KINDS if k not in RULE_KINDS]


def test_kind_split() -> None:
    assert set(CLASSIFIER_ONLY) == {
        FailureKind.HALLUCINATION, FailureKind.OFF_TOPIC, FailureKind.CONTEXT_LOSS, FailureKind.UNSAFE_OUTPUT,
    }  # fmt: skip


@pytest.mark.parametrize("seed", [0, 1, 7])
@pytest.mark.parametrize("n_steps", [6, 15, 40])
@pytest.mark.parametrize("kind", RULE_KINDS)
def test_rules_find_exactly_the_planted_failures(kind: FailureKind, n_steps: int, seed: int) -> None:
    t = make_trace(kind, seed=seed, n_steps=n_steps)
    assert t.labels is not None
    planted = {(lb.kind.value, lb.step, lb.source_index) for lb in t.labels.failures if lb.kind is not None}
    if kind in HANDLED_KINDS:
        # The built run's answer tells the user the call failed: a handled error, a signal on the
        # planted step (real runs: τ-bench's "user not found" → the agent asks for the zip code).
        found = {(f.kind.value, f.step, f.source_index): f for f in all_rules(t)}
        assert set(found) >= planted and failures(t) == set()
        assert all(found[p].details["handled"] == "told_user" for p in planted)
        # cut the run right after the error (the live case: nothing has handled it yet): a failure
        first = min(lb.step for lb in t.labels.failures if lb.step is not None)
        t.steps = t.steps[: first + 1]
        planted = {p for p in planted if p[1] is not None and p[1] <= first}
        assert failures(t) >= planted
        return
    assert failures(t) == planted


#: Technical kinds whose built runs end in an answer that reports the failure to the user.
HANDLED_KINDS = (FailureKind.TOOL_ERROR, FailureKind.TIMEOUT, FailureKind.RATE_LIMITED)


@pytest.mark.parametrize("kind", [None, *CLASSIFIER_ONLY], ids=lambda k: k or "healthy")
def test_rules_stay_quiet_where_only_the_classifier_could_tell(kind: FailureKind | None) -> None:
    for seed in range(5):
        assert all_rules(make_trace(kind, seed=seed, n_steps=12)) == []


@pytest.mark.parametrize("name", TRAP_NAMES)
def test_traps_stay_healthy(name: str) -> None:
    for seed in range(8):
        found = all_rules(make_trap(name, seed=seed))
        assert [f for f in found if f.confidence >= THRESHOLD] == []
        if name == "retry_after_error":
            # the first error is reported as a recovered signal, not a failure
            (sig,) = found
            assert (sig.kind, sig.step, sig.source_index, sig.confidence) == (
                FailureKind.TOOL_ERROR, 3, 3, RECOVERED_CONFIDENCE,
            )  # fmt: skip
            assert sig.details["recovered_by_step"] == 6 and sig.details["recovered"] is True
        else:
            assert found == []


def test_span_id_and_source_index_come_from_the_step() -> None:
    t = make_trace(FailureKind.TOOL_ERROR, seed=0, n_steps=8)
    for i, s in enumerate(t.steps):
        s.span_id = f"span-{i}"
        s.source_index = 100 + i // 2  # an input where two steps share each element
    (f,) = ToolErrorRule().inspect(t)
    assert (f.step, f.source_index, f.span_id) == (5, 102, "span-5")
    assert f.details == {"reason": "status", "http_status": 500, "tool": "get_weather", "call_step": 4,
                         "handled": "told_user", "handled_by_step": 6}


# ---------------------------------------------------------------------- empty / incomplete


def test_empty_response() -> None:
    b = TraceBuilder(seed=0)
    b.user("hi")  # step 0
    with b.message():  # steps 1-2, source 1: a message that only calls a tool -> blank text is fine
        b.say("")
        cid = b.call("search", {"query": "x"})
    b.result(cid, "r")  # step 3, source 2
    b.say("   ")  # step 4, source 3: blank assistant message
    b.final("null")  # step 5, source 4
    found = EmptyResponseRule().inspect(b.build())
    assert [(f.step, f.source_index, f.confidence) for f in found] == [(4, 3, 0.85), (5, 4, 0.8)]


def test_incomplete() -> None:
    b = TraceBuilder(seed=0)
    b.user("do it")
    c = b.call("search", {"query": "x"})
    b.result(c, "r")
    (f,) = IncompleteRule().inspect(b.build())
    assert (f.step, f.source_index, f.confidence, f.details) == (2, 2, 0.9, {"last_kind": "tool_result"})
    b.say("Here is the answer: r.")  # a trailing assistant message counts as the answer
    assert IncompleteRule().inspect(b.build()) == []
    only_user = Trace(steps=[Step(kind="user_input", content="hello?")])
    assert [(f.step, f.confidence) for f in IncompleteRule().inspect(only_user)] == [(0, 0.75)]
    assert IncompleteRule().inspect(Trace()) == []


# ---------------------------------------------------------------------- failed calls


def test_provider_error_recovered_is_a_signal() -> None:
    b = TraceBuilder(seed=0)
    b.user("hi")
    b.error("500 Internal Server Error")
    b.final("hello")
    (f,) = ProviderErrorRule().inspect(b.build())
    assert (f.step, f.confidence, f.details["recovered_by_step"]) == (1, RECOVERED_CONFIDENCE, 2)


def test_llm_rate_limit_is_rate_limited_not_provider_error() -> None:
    b = TraceBuilder(seed=0)
    b.user("hi")
    b.error("Error code: 429 - Rate limit reached. Please try again in 1.5s.", error_type="RateLimitError")
    t = b.build()
    assert ProviderErrorRule().inspect(t) == []
    (f,) = RateLimitedRule().inspect(t)
    assert (f.step, f.confidence, f.details["retry_after"], f.details["http_status"]) == (1, 0.95, 1.5, 429)


def _one_result(content: str, status: str = "ok") -> Trace:
    b = TraceBuilder(seed=0)
    b.user("go")
    with b.message():
        b.say("calling")
        cid = b.call("api", {"q": 1})
    b.result(cid, content, status=status)  # step 3, source_index 2
    return b.build()


@pytest.mark.parametrize(
    ("content", "status", "kind", "conf"),
    [
        ('{"data": null, "error": {"message": "invalid token"}}', "ok", "tool_error", 0.9),
        ('{"success": false}', "ok", "tool_error", 0.9),
        ('{"status": "error", "message": "quota"}', "ok", "tool_error", 0.9),
        ('{"ok": false, "error": "channel_not_found"}', "ok", "tool_error", 0.9),
        ("Traceback (most recent call last):\n  File \"x.py\"\nZeroDivisionError: division by zero", "ok",
         "tool_error", 0.9),
        ("HTTP 403 Forbidden", "ok", "tool_error", 0.85),
        ("anything", "error", "tool_error", 0.95),
        ("Request timed out", "ok", "timeout", 0.85),
        ("504 Gateway Timeout", "error", "timeout", 0.95),
        ("", "timeout", "timeout", 0.95),
        ("429 Too Many Requests", "ok", "rate_limited", 0.85),
        ('{"error": {"type": "rate_limit_error"}}', "ok", "rate_limited", 0.9),
    ],
)
def test_failed_call_kinds(content: str, status: str, kind: str, conf: float) -> None:
    t = _one_result(content, status)
    by_kind = {n: make_detector(n).inspect(t) for n in ("tool_error", "timeout", "rate_limited")}
    for name, found in by_kind.items():
        if name == kind:
            assert [(f.step, f.source_index, f.confidence) for f in found] == [(3, 2, conf)]
        else:
            assert found == []


def test_rate_limited_reads_retry_after_forms() -> None:
    cases = {
        "HTTP/1.1 429 Too Many Requests\nRetry-After: 30\n": 30.0,
        '{"error": {"code": 429, "message": "slow down", "retry_after": 2.5}}': 2.5,
        '{"error": "rate_limited", "Retry-After": "4"}': 4.0,
        "Rate limit exceeded. Try again in 500ms.": 0.5,
    }
    for content, seconds in cases.items():
        (f,) = RateLimitedRule().inspect(_one_result(content, "error"))
        assert f.details["retry_after"] == seconds, content
    (f,) = RateLimitedRule().inspect(_one_result("429 Too Many Requests", "error"))
    assert "retry_after" not in f.details


def test_timeout_recovered_by_a_later_success() -> None:
    b = TraceBuilder(seed=0)
    c = b.call("slow", {})
    b.result(c, "ETIMEDOUT", status="error")  # 1
    c = b.call("slow", {})
    b.result(c, "ok!")  # 3
    b.final("ok!")
    (f,) = TimeoutRule().inspect(b.build())
    assert (f.step, f.confidence, f.details["recovered_by_step"]) == (1, RECOVERED_CONFIDENCE, 3)


# ---------------------------------------------------------------------- refusal


@pytest.mark.parametrize(
    "text",
    [
        "I'm sorry, but I can't help with that.",
        "I can't assist with creating malware.",
        "I am unable to provide that information.",
        "As an AI language model, I cannot browse the internet.",
        "I must decline this request.",
        "我无法提供这方面的帮助。",
        "抱歉，我不能帮你做这件事。",
        "我不能提供该信息。",
        "很抱歉，我无法完成这个请求",
        "作为一个AI，我不能访问互联网。",
        "I won't be able to help with that one.",
        "As an AI assistant, I'm unable to perform this action.",
        "Sorry, I'm not able to do this for you.",
        "很抱歉，这超出了我能提供帮助的范围。",
        "抱歉，这个请求我没法处理。还有其他可以帮你的吗？",
    ],
)
def test_refusal_english_and_chinese(text: str) -> None:
    b = TraceBuilder(seed=0, language="zh" if any("\u4e00" <= ch <= "\u9fff" for ch in text) else "en")
    b.user("please")
    b.say("thinking it over")
    b.final(text)
    (f,) = RefusalRule().inspect(b.build())
    assert (f.step, f.source_index, f.confidence) == (2, 2, 0.9)


@pytest.mark.parametrize(
    "text",
    [
        "Sorry, I misread — the answer is 396.",
        "Sorry for the confusion earlier; 18 * 22 = 396.",
        "I'm unable to access the file, so I used the cached copy: total 42.",
        "Apologies, the previous figure was wrong. The correct total is 396.",
        "抱歉，我刚才算错了，答案是396。",
        "The report explains why the agent could not help with that edge case in 2019.",
    ],
)
def test_refusal_leaves_self_corrections_and_failure_reports_alone(text: str) -> None:
    b = TraceBuilder(seed=0)
    b.user("q")
    b.final(text)
    assert RefusalRule().inspect(b.build()) == []


def test_refusal_followed_by_an_answer_is_a_signal() -> None:
    b = TraceBuilder(seed=0)
    b.user("q")
    b.final("I can't help with booking directly, but here is the airline's number: 555-0100.")
    (f,) = RefusalRule().inspect(b.build())
    assert f.confidence == 0.4 and f.details["answer_follows"] is True


def test_refusal_explained_by_a_failure_is_a_signal() -> None:
    b = TraceBuilder(seed=0)
    b.user("q")
    b.final("I can't provide the forecast because the weather service is down.")
    (f,) = RefusalRule().inspect(b.build())
    assert f.confidence == 0.4 and f.details["failure_given"] is True


def test_refusal_only_in_assistant_text() -> None:
    b = TraceBuilder(seed=0)
    b.user("Say 'I can't help with that' if you refuse.")
    c = b.call("search", {"query": "x"})
    b.result(c, "Forum post: I can't help with that, sorry.")
    b.final("Here you go: x.")
    assert RefusalRule().inspect(b.build()) == []


# ---------------------------------------------------------------------- malformed calls


def test_malformed_call_invalid_json_and_schema() -> None:
    b = TraceBuilder(seed=0)
    b.tools(TOOLS)
    b.user("weather")
    b.call("get_weather", None, raw_args='{"city": "Oslo",')  # 1 not JSON
    b.call("get_weather", None, raw_args='["Oslo"]')  # 2 not an object
    b.call("get_weather", {"units": "c"})  # 3 missing city
    b.call("get_weather", {"city": 7})  # 4 wrong type
    b.call("get_weather", {"city": "Oslo", "country": "NO"})  # 5 unknown property
    b.call("get_weather", {"city": "Oslo", "units": "kelvin"})  # 6 not in enum
    b.call("teleport", {"to": "Oslo"})  # 7 not a tool the agent has
    b.call("get_weather", {"city": "Oslo", "units": "f"})  # 8 fine
    b.call("job_status", {"job_id": "j", "verbose": True})  # 9 fine: additionalProperties not false
    b.call("search", None, raw_args='{"query": "x", "limit": 3}')  # 10 fine: raw JSON that parses
    found = MalformedCallRule().inspect(b.build())
    got = [(f.step, f.source_index, f.confidence, f.details["reason"]) for f in found]
    assert got == [
        (1, 1, 0.95, "invalid_json"),
        (2, 2, 0.9, "not_an_object"),
        (3, 3, 0.9, "schema"),
        (4, 4, 0.9, "schema"),
        (5, 5, 0.9, "schema"),
        (6, 6, 0.9, "schema"),
        (7, 7, 0.4, "unknown_tool"),
    ]
    assert found[2].details["problems"] == ["missing required property 'city'"]
    assert found[3].details["problems"] == ["city: expected string, got int"]
    assert found[4].details["problems"] == ["unknown property 'country'"]
    assert found[5].details["problems"] == ["units: 'kelvin' is not one of ['c', 'f']"]


def test_malformed_call_without_tool_definitions_only_checks_json() -> None:
    b = TraceBuilder(seed=0)
    b.call("anything", {"x": 1})
    b.call("anything", None, raw_args="{x: 1}")
    assert [f.step for f in MalformedCallRule().inspect(b.build())] == [1]


def test_schema_types() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "xs": {"type": "array",
              "items": {"type": "number"}}, "flag": {"type": ["boolean", "null"]}}}  # fmt: skip
    t = Trace(
        tools=[ToolDefinition(name="f", parameters=schema)],
        steps=[
            Step(kind="tool_call", tool_name="f", tool_args={"n": 2.0, "xs": [1, 2.5], "flag": None}),
            Step(kind="tool_call", tool_name="f", tool_args={"n": True, "xs": [1, "a"], "flag": 1},
                 source_index=1),  # fmt: skip
        ],
    )
    (f,) = MalformedCallRule().inspect(t)
    assert f.step == 1
    assert f.details["problems"] == [
        "n: expected integer, got bool",
        "xs[1]: expected number, got str",
        "flag: expected one of ['boolean', 'null'], got int",
    ]


# ---------------------------------------------------------------------- disallowed tool


def test_disallowed_tool() -> None:
    t = make_trace(FailureKind.DISALLOWED_TOOL, seed=3, n_steps=10)
    assert DisallowedToolRule().inspect(t) == []  # no allow-list: no opinion
    (f,) = DisallowedToolRule(allowed_tools=ALLOWED).inspect(t)
    assert t.labels is not None
    assert (f.step, f.source_index) == (t.labels.failures[0].step, t.labels.failures[0].source_index)
    assert (f.confidence, f.details["tool"]) == (0.99, "shell")
    only_search = DisallowedToolRule(allowed_tools=["search"]).inspect(t)
    assert [f.details["tool"] for f in only_search] == ["shell"]  # the filler calls are all searches
    assert DisallowedToolRule(allowed_tools=[]).inspect(t)[0].step == t.steps.index(
        next(s for s in t.steps if s.kind.value == "tool_call")
    )
    with pytest.raises(InputError, match="allowed_tools must be a list of tool names"):
        DisallowedToolRule(allowed_tools="search").inspect(t)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- loop


def _loop_trace(results: list[str], args: list[dict[str, object]] | None = None) -> Trace:
    b = TraceBuilder(seed=0)
    b.user("status?")  # 0
    for k, res in enumerate(results):
        with b.message():
            b.say(f"checking ({k})")
            cid = b.call("status", (args or [{"id": "A1"}] * len(results))[k])
        b.result(cid, res)
    b.final("done")
    return b.build()


def test_loop_fires_on_the_result_of_the_third_call_and_lists_every_repeat() -> None:
    # steps: 0 user; per round: say, call (one message), result -> rounds at 1-3, 4-6, 7-9, 10-12
    t = _loop_trace(
        ['{"state": "pending"}', '{ "state" : "PENDING" }', '{"state":"pending"}', '{"state": "pending"}'],
        [{"id": "A1"}, {" ID ": "a1"}, {"id": "a1 "}, {"id": "A1"}],
    )
    (f,) = LoopRule().inspect(t)
    assert (f.step, f.source_index, f.confidence) == (9, 6, 0.9)
    assert f.details["count"] == 4
    assert f.details["repeats"] == [
        {"call_step": 2, "call_source_index": 1, "result_step": 3, "result_source_index": 2},
        {"call_step": 5, "call_source_index": 3, "result_step": 6, "result_source_index": 4},
        {"call_step": 8, "call_source_index": 5, "result_step": 9, "result_source_index": 6},
        {"call_step": 11, "call_source_index": 7, "result_step": 12, "result_source_index": 8},
    ]


def test_loop_threshold_is_configurable() -> None:
    t = _loop_trace(["same", "same"])
    assert LoopRule().inspect(t) == []
    (f,) = LoopRule(repeats=2).inspect(t)
    assert (f.step, f.source_index) == (6, 4)
    with pytest.raises(InputError, match="loop.repeats must be an integer >= 2; got 1"):
        LoopRule(repeats=1).inspect(t)


def test_polling_with_changing_results_is_not_a_loop() -> None:
    t = _loop_trace(['{"progress": 10}', '{"progress": 40}', '{"progress": 90}', '{"progress": 100}'])
    assert LoopRule().inspect(t) == []


def test_retry_after_error_whose_result_differs_is_not_a_loop() -> None:
    t = _loop_trace(["HTTP 503", "HTTP 503", '{"state": "done"}'])
    assert LoopRule().inspect(t) == []
    # but the same error three times is
    (f,) = LoopRule().inspect(_loop_trace(["HTTP 503", "HTTP 503", "HTTP 503"]))
    assert f.step == 9


def test_loop_run_resets_when_the_result_changes_and_on_a_new_user_turn() -> None:
    t = _loop_trace(["a", "a", "b", "b", "b"])  # a-run of 2, then b-run of 3 ending at round 5
    (f,) = LoopRule().inspect(t)
    assert f.step == 15 and [r["result_step"] for r in f.details["repeats"]] == [9, 12, 15]
    b = TraceBuilder(seed=0)
    for _ in range(2):
        b.user("check again")
        for _ in range(2):
            c = b.call("status", {"id": 1})
            b.result(c, "same")
    assert LoopRule().inspect(b.build()) == []


def test_interleaved_identical_calls_still_loop() -> None:
    b = TraceBuilder(seed=0)
    for _ in range(3):
        c = b.call("a", {"q": 1})
        b.result(c, "A")
        c = b.call("b", {"q": 1})
        b.result(c, "B")
    found = LoopRule().inspect(b.build())
    assert [(f.step, f.details["tool"]) for f in found] == [(9, "a"), (11, "b")]


def test_a_call_repeated_after_other_work_is_no_loop_but_a_short_cycle_is() -> None:
    """What real runs showed: resolved mini-SWE-agent runs rerun ``python reproduce_issue.py`` or
    re-read a file with the same output, 4–47 calls apart (26 of 371 resolved runs flagged); the
    τ-airline loops (failed runs) repeat 1–2 calls apart."""

    def run(between: int, rounds: int = 3) -> Trace:
        b = TraceBuilder(seed=0)
        for k in range(rounds):
            c = b.call("bash", {"command": "python reproduce_issue.py"})
            b.result(c, "AssertionError: 1 != 2")
            for j in range(between):
                c = b.call("bash", {"command": f"sed -n '{k * 10 + j},+5p' models.py"})
                b.result(c, f"line {k} {j}")
        return b.build()

    assert [f.details["count"] for f in LoopRule().inspect(run(0))] == [3]
    assert [f.details["count"] for f in LoopRule().inspect(run(2))] == [3]  # a cycle of three calls
    assert LoopRule().inspect(run(3)) == []  # three other calls in between: rerun after other work
    assert LoopRule(cycle=4).inspect(run(3)) != []
    with pytest.raises(InputError, match="loop.cycle must be an integer >= 1; got 0"):
        LoopRule(cycle=0).inspect(run(0))


# ---------------------------------------------------------------------- ignored error


def _failure_then(final: str, *, retry: bool = False, other_tool: bool = False, say: str | None = None) -> Trace:
    b = TraceBuilder(seed=0)
    b.user("weather in Oslo?")  # 0
    c = b.call("get_weather", {"city": "Oslo"})  # 1
    b.result(c, '{"error": "service down"}')  # 2
    if retry:
        c = b.call("get_weather", {"city": "Oslo"})
        b.result(c, '{"temp_c": 3}')
    if other_tool:
        c = b.call("search", {"query": "Oslo weather"})
        b.result(c, '{"results": [{"snippet": "3.5 C at 14:00"}]}')
    if say:
        b.say(say)
    b.final(final)
    return b.build()


def test_ignored_error() -> None:
    t = _failure_then("It is 3 °C and sunny in Oslo.")
    (f,) = IgnoredErrorRule().inspect(t)
    assert (f.step, f.source_index, f.confidence) == (3, 3, 0.8)
    assert f.details["failed_step"] == 2 and f.details["failed_source_index"] == 2
    assert f.details["failed_steps"] == [2] and f.details["tool"] == "get_weather"
    assert f.details["failure_kind"] == "tool_error"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"final": "Sorry, the weather service failed, so I can't tell."},
        {"final": "I couldn’t get the weather for Oslo."},
        {"final": "天气服务失败了，无法获取。"},
        {"final": "It is 3 °C in Oslo.", "retry": True},
        {"final": "It is 3 °C in Oslo.", "say": "The weather tool returned an error; estimating."},
        {"final": "I had trouble reaching the weather service; no data for Oslo."},
    ],
)
def test_acknowledged_or_recovered_errors_are_not_ignored(kwargs: dict[str, object]) -> None:
    assert IgnoredErrorRule().inspect(_failure_then(**kwargs)) == []  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "final",
    ["The terminal errored out; no result yet.", "SQL引擎报错，需要重试。", "我们这边系统出了问题，操作没有成功。"],
)
def test_more_acknowledgements(final: str) -> None:
    assert IgnoredErrorRule().inspect(_failure_then(final)) == []


@pytest.mark.parametrize(
    "final",
    [
        "All set - it is 3 °C in Oslo. Sorry about the cold!",
        "Unfortunately it is only 3 °C in Oslo today.",
        "There is an issue for travellers: it is 3 °C in Oslo.",
        "It is 3 °C in Oslo. Sorry for the trouble with your umbrella.",
    ],
)
def test_apologies_about_something_else_do_not_acknowledge_the_error(final: str) -> None:
    (f,) = IgnoredErrorRule().inspect(_failure_then(final))
    assert (f.step, f.confidence) == (3, 0.8)


def test_error_worked_around_with_another_tool_is_only_a_signal() -> None:
    (f,) = IgnoredErrorRule().inspect(_failure_then("It is 3.5 °C in Oslo.", other_tool=True))
    assert (f.step, f.confidence, f.details["answer_uses_step"]) == (5, 0.45, 4)
    # another tool succeeded, but the answer rests on nothing it returned
    (f,) = IgnoredErrorRule().inspect(_failure_then("It is 20 °C and sunny in Oslo.", other_tool=True))
    assert (f.step, f.confidence) == (5, 0.8) and "answer_uses_step" not in f.details


def test_no_final_answer_no_ignored_error() -> None:
    b = TraceBuilder(seed=0)
    c = b.call("t", {})
    b.result(c, "boom", status="error")
    assert IgnoredErrorRule().inspect(b.build()) == []


# ---------------------------------------------------------------------- assumption violated


def _empty_then(result: str, *then: tuple[str, object]) -> Trace:
    b = TraceBuilder(seed=0)
    b.user("Find order 55123 and refund it.")  # 0
    c = b.call("search_orders", {"q": "55123"})  # 1
    b.result(c, result)  # 2
    for kind, arg in then:
        if kind == "call":
            tool, args = arg  # type: ignore[misc]
            c = b.call(tool, args)
            b.result(c, '{"ok": true}')
        elif kind == "say":
            b.say(str(arg))
        else:
            b.final(str(arg))
    return b.build()


def test_assumption_violated_on_the_answer_that_relies_on_an_empty_result() -> None:
    t = _empty_then('{"results": [], "total": 0}', ("final", "Refunded order 55123 for 40 EUR."))
    (f,) = AssumptionViolatedRule().inspect(t)
    assert (f.step, f.source_index, f.confidence) == (3, 3, 0.75)
    assert f.details == {
        "empty_result_step": 2, "empty_result_source_index": 2, "tool": "search_orders",
        "dependent_kind": "final_output",
    }  # fmt: skip


def test_assumption_violated_on_a_call_with_made_up_values() -> None:
    t = _empty_then("未找到", ("call", ("refund", {"order_id": "ORD-7731"})), ("final", "Done."))
    (f,) = AssumptionViolatedRule().inspect(t)
    assert (f.step, f.confidence, f.details["dependent_kind"]) == (3, 0.7, "tool_call")


@pytest.mark.parametrize(
    "then",
    [
        (("call", ("search_orders", {"q": "55123 refund"})), ("final", "Refunded.")),  # re-search
        (("call", ("lookup_customer", {"name": "x"})), ("final", "Refunded.")),  # search-like tool
        (("call", ("refund", {"order_id": "55123"})), ("final", "Done.")),  # the user's own id
        (("final", "I couldn't find order 55123."),),
        (("final", "No results for that order."),),
        (("say", "Nothing came back; let me ask."), ("final", "Which order number?")),
        (("final", "没有找到该订单。"),),
    ],
)
def test_assumption_respected(then: tuple[tuple[str, object], ...]) -> None:
    found = AssumptionViolatedRule().inspect(_empty_then("[]", *then))
    assert [f for f in found if f.confidence >= THRESHOLD] == []


def test_assumption_watch_continues_past_neutral_calls() -> None:
    # a call with nothing made up keeps the watch; a later call with an invented id is the finding
    t = _empty_then(
        '{"flights": [], "page": 1, "total_pages": 0}',
        ("say", "One more thing first."),  # 3
        ("call", ("get_time", {"tz": "UTC"})),  # 4, result 5
        ("call", ("book", {"flight_id": "NH5601"})),  # 6, result 7
        ("final", "Booked."),
    )
    (f,) = AssumptionViolatedRule().inspect(t)
    assert (f.step, f.confidence, f.details["empty_result_step"]) == (6, 0.7, 2)
    # an answer after other data came in may rest on that data: a signal
    t = _empty_then('{"order": null, "message": "no order 55123"}', ("call", ("get_time", {})), ("final", "Ok."))
    (f,) = AssumptionViolatedRule().inspect(t)
    assert (f.step, f.confidence) == (5, 0.45)
    # a URL that appears nowhere before is made up too
    t = _empty_then("No results found.", ("call", ("fetch_page", {"url": "https://example.org/orders/x"})))
    (f,) = AssumptionViolatedRule().inspect(t)
    assert (f.step, f.confidence) == (3, 0.7)


@pytest.mark.parametrize(
    "final",
    [
        "There's no order matching 55123. Can you confirm it?",
        "The search returned no orders, so I can't refund it.",
        "Nobody has an order like that.",
    ],
)
def test_assumption_acknowledged_in_other_words(final: str) -> None:
    assert AssumptionViolatedRule().inspect(_empty_then('{"orders": []}', ("final", final))) == []


def test_assumption_violated_by_an_intermediate_message_with_invented_figures() -> None:
    t = _empty_then(
        "exitcode: 0 (execution succeeded)\nCode output: 0 nan\n",
        ("say", "254 orders match; the mean order value is 4.5."),  # 3
        ("say", "Verified."),
    )
    (f,) = AssumptionViolatedRule().inspect(t)
    assert (f.step, f.confidence, f.details["dependent_kind"]) == (3, 0.65, "llm_output")
    # one new value is not enough (e.g. "let me try 2024")
    t = _empty_then("[]", ("say", "Let me try the 2024 list."), ("call", ("search_orders", {"q": "2024"})))
    assert AssumptionViolatedRule().inspect(t) == []


def test_a_value_the_agent_names_after_the_empty_result_is_not_grounded() -> None:
    t = _empty_then(
        '{"flights": [], "total_pages": 0}',
        ("say", "Going with CA9075."),  # 3: one new value, not enough for a message finding
        ("call", ("book_flight", {"flight_id": "CA9075"})),  # 4: still made up
        ("final", "Booked CA9075."),
    )
    (f,) = AssumptionViolatedRule().inspect(t)
    assert (f.step, f.confidence) == (4, 0.7)
    # whereas a value a tool returned after the empty result is grounded
    b = TraceBuilder(seed=0)
    b.user("book me a flight")
    c = b.call("search_flights", {"q": "x"})
    b.result(c, "[]")  # 2
    c = b.call("get_alternatives", {})  # 3: nothing made up, keep watching
    b.result(c, '{"alternatives": ["CA9075"]}')  # 4
    c = b.call("book_flight", {"flight_id": "CA9075"})  # 5: grounded by step 4
    b.result(c, '{"ok": true}')
    b.final("Booked the alternative, CA9075.")
    found = AssumptionViolatedRule().inspect(b.build())
    assert [(f.step, f.confidence) for f in found] == [(7, 0.45)]


def test_non_empty_or_failed_results_are_not_assumption_problems() -> None:
    assert AssumptionViolatedRule().inspect(_empty_then('{"results": [1]}', ("final", "Refunded."))) == []
    assert AssumptionViolatedRule().inspect(_empty_then('{"error": "x", "results": []}', ("final", "ok"))) == []


@pytest.mark.parametrize(
    ("text", "empty"),
    [
        ("", True), ("[]", True), ("{}", True), ("null", True), ('{"items": [], "next": null}', True),
        ('{"count": 0}', True), ("No results found.", True), ("0 results", True), ("未找到", True),
        ("no matches", True), ('{"items": [1]}', False), ("Found 3 results", False),
        ('{"name": "x"}', False), ("No results found for 'x', but similar: y, z, w.", False),
        ('{"flights": [], "page": 1, "total_pages": 0}', True), ('{"order": null, "message": "no order #9"}', True),
        ('{"name": "x", "age": null}', False), ('{"status": "sent", "id": "m-1"}', False),
        ('{"results": [{"a": 1}], "next": null}', False), ('{"rows": [], "row_count": 0}', True),
        ('{"columns": ["sum"], "rows": [[null]]}', True), ('{"columns": ["sum"], "rows": [[3]]}', False),
        ("exit_code=0\nstdout:\n", True), ("exitcode: 0 (execution succeeded)\nCode output: 0 nan\n", True),
        ("exitcode: 0 (execution succeeded)\nCode output: 42\n", False),
    ],
)  # fmt: skip
def test_is_empty_result(text: str, empty: bool) -> None:
    assert is_empty_result(text) is empty


def test_deeply_nested_arguments_and_results_do_not_break_the_rules() -> None:
    deep: object = []
    for _ in range(600):
        deep = [deep]
    text = '{"r": ' + "[" * 600 + "]" * 600 + "}"
    t = Trace(
        steps=[Step(kind="user_input", content="go", source_index=0)]
        + [
            s
            for k in range(3)
            for s in (
                Step(kind="tool_call", tool_name="f", tool_args={"a": deep}, call_id=f"c{k}", source_index=1 + 2 * k),
                Step(kind="tool_result", tool_name="f", call_id=f"c{k}", content=text, source_index=2 + 2 * k),
            )
        ]
    )
    found = all_rules(t)
    assert sorted((f.kind.value, f.step) for f in found if f.confidence >= THRESHOLD) == [
        ("disallowed_tool", 1), ("disallowed_tool", 3), ("disallowed_tool", 5), ("incomplete", 6), ("loop", 6),
    ]  # fmt: skip


def test_raw_arguments_nested_too_deep_to_parse_are_left_alone() -> None:
    # json.loads raises RecursionError: the rule says nothing (it used to report "not_an_object")
    raw = '{"a": ' + "[" * 5000 + "]" * 5000 + "}"
    t = Trace(steps=[
        Step(kind="user_input", content="go", source_index=0),
        Step(kind="tool_call", tool_name="f", tool_args_raw=raw, call_id="c0", source_index=1),
        Step(kind="tool_result", tool_name="f", call_id="c0", content="ok", source_index=2),
    ])
    assert [f for f in all_rules(t) if f.kind.value == "malformed_call"] == []
    broken = t.model_copy(update={"steps": [t.steps[0], t.steps[1].model_copy(update={"tool_args_raw": "[1, 2]"})]})
    assert [f.details["reason"] for f in all_rules(broken) if f.kind.value == "malformed_call"] == ["not_an_object"]


def test_final_answer_behind_a_terminate_control_word() -> None:
    b = TraceBuilder(seed=0)
    b.user("q")  # 0
    c = b.call("run", {"code": "x"})
    b.result(c, "exitcode: 1 (execution failed)\nTraceback (most recent call last):", status="error")  # 2
    b.say("The answer is 42.", speaker="Expert")  # 3
    b.final("TERMINATE")  # 4
    t = b.build()
    assert final_answer_step(t) == 3
    (f,) = IgnoredErrorRule().inspect(t)
    assert (f.step, f.source_index, f.details["failed_step"]) == (3, 3, 2)
    assert IncompleteRule().inspect(t) == []
    only = Trace(steps=[Step(kind="final_output", content="TERMINATE")])
    assert final_answer_step(only) == 0


def test_empty_response_skips_content_not_recorded() -> None:
    """OTel spans without content capture are unknown, not empty (importer marks them)."""
    from model.core.schema import Step, StepKind, Trace
    from model.detectors.catalog import make_detector

    unrecorded = Step(kind=StepKind.FINAL_OUTPUT, content="", source_index=1, metadata={"content_recorded": False})
    blank = Step(kind=StepKind.FINAL_OUTPUT, content="", source_index=1)
    user = Step(kind=StepKind.USER_INPUT, content="hi", source_index=0)
    det = make_detector("empty_response")
    assert det.inspect(Trace(steps=[user, unrecorded])) == []
    assert [(f.step, f.source_index) for f in det.inspect(Trace(steps=[user, blank]))] == [(1, 1)]


# ---------------------------------------------------------------------- what real runs showed
# Each case below is shaped on a successful real run where the rule used to raise a failure
# (τ-bench airline, GPT-4o; reports/real.md has the firing rates before and after).


def _chat(*msgs: dict) -> Trace:
    from model.importers import load_trace

    return load_trace({"messages": list(msgs)}, format="openai")


def _call(cid: str, name: str, args: str) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}]}


def test_a_chat_may_end_on_the_users_turn_or_a_handoff() -> None:
    closed = _chat({"role": "user", "content": "Cancel my booking ABC123."},
                   {"role": "assistant", "content": "Done: ABC123 is cancelled and refunded."},
                   {"role": "user", "content": "Thank you so much for your help! ###STOP###"})
    assert IncompleteRule().inspect(closed) == []
    handed = _chat({"role": "user", "content": "I want a human."},
                   _call("t", "transfer_to_human_agents", '{"summary": "wants a human"}'),
                   {"role": "tool", "tool_call_id": "t", "content": "Transfer successful"})
    assert IncompleteRule().inspect(handed) == []
    # still incomplete: the user asked and nobody answered; a call cut off mid-work
    asked = _chat({"role": "user", "content": "Cancel my booking ABC123."})
    assert [f.kind for f in IncompleteRule().inspect(asked)] == [FailureKind.INCOMPLETE]
    cut = _chat({"role": "user", "content": "Weather?"}, _call("w", "get_weather", '{"city": "Rome"}'),
                {"role": "tool", "tool_call_id": "w", "content": "Rome: 21 C"})
    assert [f.confidence for f in IncompleteRule().inspect(cut)] == [0.9]


def test_an_error_the_agent_handled_is_a_signal() -> None:
    asked = _chat({"role": "user", "content": "My user id is mia_li_3668."},
                  _call("u", "get_user_details", '{"user_id": "mia_li_3668"}'),
                  {"role": "tool", "tool_call_id": "u", "content": "Error: user not found"},
                  {"role": "assistant", "content": "I couldn't find that user id. Could you give me your zip code?"})
    (f,) = ToolErrorRule().inspect(asked)
    assert f.confidence < THRESHOLD and f.details["handled"] == "told_user" and f.details["handled_by_step"] == 3
    other = _chat({"role": "user", "content": "Flights JFK to SEA on May 20?"},
                  _call("a", "search_direct_flight", '{"origin": "JFK", "destination": "SEA", "date": "2024-05-20"}'),
                  {"role": "tool", "tool_call_id": "a", "content": "Error: no direct flights"},
                  _call("b", "search_onestop_flight", '{"origin": "JFK", "destination": "SEA", "date": "2024-05-20"}'),
                  {"role": "tool", "tool_call_id": "b", "content": '[{"flight": "HAT136"}]'},
                  {"role": "assistant", "content": "There is a one-stop option, HAT136."})
    (f,) = ToolErrorRule().inspect(other)
    assert f.details["handled"] == "other_route" and f.confidence < THRESHOLD
    # ignored: the answer passes over the error: the tool error stays a failure and ignored_error fires
    ignored = _chat({"role": "user", "content": "Book the 8pm table at Nopi."},
                    _call("b", "book_table", '{"name": "Nopi", "time": "20:00"}'),
                    {"role": "tool", "tool_call_id": "b", "content": "Error: 500 Internal Server Error"},
                    {"role": "assistant", "content": "Your table at Nopi is booked for 8pm."})
    (f,) = ToolErrorRule().inspect(ignored)
    assert f.confidence >= THRESHOLD and "handled" not in f.details
    assert [g.kind for g in IgnoredErrorRule().inspect(ignored)] == [FailureKind.IGNORED_ERROR]


def test_a_think_tool_is_empty_by_design() -> None:
    t = _chat({"role": "user", "content": "Change my flight to the 22nd."},
              _call("t", "think", '{"thought": "The user has a basic economy ticket; policy says no change."}'),
              {"role": "tool", "tool_call_id": "t", "content": ""},
              {"role": "assistant", "content": "I'm sorry, basic economy tickets cannot be modified."})
    assert AssumptionViolatedRule().inspect(t) == []
    # the same shape from a lookup tool is still an assumption the answer goes on from
    t2 = _chat({"role": "user", "content": "What is my balance?"},
               _call("t", "get_balance", '{"account": "A1"}'),
               {"role": "tool", "tool_call_id": "t", "content": ""},
               {"role": "assistant", "content": "Your balance is 1,250 dollars."})
    assert [f.kind for f in AssumptionViolatedRule().inspect(t2)] == [FailureKind.ASSUMPTION_VIOLATED]


def test_a_refusal_the_instructions_require_is_a_signal() -> None:
    policy = ("# Airline Agent Policy\nBasic economy flights cannot be modified. "
              "You should deny requests that are against this policy.")
    asked = [{"role": "user", "content": "Please change my basic economy flight to May 22."}]
    no = {"role": "assistant", "content": "I'm sorry, but I can't help with changing basic economy flights; "
                                          "they cannot be modified."}
    (f,) = RefusalRule().inspect(_chat({"role": "system", "content": policy}, *asked, no))
    assert f.confidence < THRESHOLD and f.details["policy_required"] is True
    # no instruction forbids it: a refusal
    (g,) = RefusalRule().inspect(_chat(*asked, no))
    assert g.confidence >= THRESHOLD and g.details["policy_required"] is False


def test_a_malformed_call_the_agent_corrected_is_a_signal() -> None:
    """What real runs showed: the AgentProcessBench search agent sent cut-off JSON, got an error,
    called again and answered right (2 of 134 successful runs flagged)."""
    b = TraceBuilder(seed=0)
    b.user("When was the Battle of Manila?")
    bad = b.call("search", None, raw_args='{"query_list": ["Battle of Manila 1898 date"]')
    b.result(bad, '{"error": "missing query_list/query"}')
    (f,) = MalformedCallRule().inspect(b.build())
    assert f.confidence == 0.95 and "recovered" not in f.details  # not corrected (yet): a failure
    c = b.call("search", {"query_list": ["Battle of Manila 1898 date"]})
    b.result(c, '{"results": ["The Battle of Manila was fought on 13 August 1898."]}')
    b.final("13 August 1898.")
    t = b.build()
    (f,) = MalformedCallRule().inspect(t)
    second = next(i for i, s in enumerate(t.steps) if s.call_id == c and s.kind.value == "tool_call")
    assert f.confidence == RECOVERED_CONFIDENCE and f.details["recovered_by_step"] == second
    assert [g.confidence for g in MalformedCallRule().inspect_steps(t)] == [0.95]
    from model.data.labelling.functions import apply_lfs

    assert any(v.lf == "malformed_call" and v.confidence == 0.95 for v in apply_lfs(t))


def test_a_refusal_weighed_as_an_option_or_followed_by_more_work_is_a_signal() -> None:
    """What real runs showed: a resolved mini-SWE-agent run reasoned "If I am strictly forbidden from
    modifying tests, I cannot complete the task …" and went on working."""

    def run(text: str, *, more_work: bool) -> Trace:
        b = TraceBuilder(seed=0)
        b.user("Fix the bug in Permutation.")
        b.say(text)
        if more_work:
            c = b.call("bash", {"command": "python -m pytest sympy/combinatorics"})
            b.result(c, "1 failed")
        return b.build()

    plain = "I cannot complete the task of allowing non-disjoint cycles."
    (f,) = RefusalRule().inspect(run(plain, more_work=False))
    assert f.confidence == 0.9
    (f,) = RefusalRule().inspect(run("If I am strictly forbidden from modifying tests, " + plain[0].lower() + plain[1:],
                                     more_work=False))
    assert f.confidence == 0.4 and f.details["hypothetical"] is True
    (f,) = RefusalRule().inspect(run(plain, more_work=True))
    assert f.confidence == 0.4 and f.details["went_on"] is True
    (f,) = RefusalRule().inspect(run("如果不能修改测试，我无法完成这个任务。", more_work=False))
    assert f.details["hypothetical"] is True
