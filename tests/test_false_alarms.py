"""The rules that raised failures on successful real runs (issue 31), on generated traces: the exact
finding, or its absence, and its step; and the per-set analysis (:mod:`model.training.false_alarms`)."""

from __future__ import annotations

from model.core.kinds import FailureKind
from model.core.schema import Step, Trace
from model.data.realdata import RealRun
from model.data.tracebuilder import TraceBuilder
from model.detectors.rules.failed import IgnoredErrorRule, ToolErrorRule, call_terms, rests_on
from model.detectors.rules.loop import LoopRule
from model.detectors.rules.refusal import RefusalRule
from model.training.false_alarms import collect, loso_verdicts, render, table

THRESHOLD = 0.5  # model.diagnosis.diagnoser.DEFAULT_THRESHOLDS


# ---- an error the run moved on from ---------------------------------------------------------


def _option_then_buy(option: str, final: str = "click[Buy Now]") -> Trace:
    """A shop agent opens a product, picks an option the page does not offer, then buys."""
    b = TraceBuilder(seed=0)
    b.user("I need a fragrance free facial wash under 60 dollars.")  # 0
    c = b.call("click", {"target": "B003BMI628"})  # 1
    b.result(c, "Neutrogena Gentle Facial Cleanser, 8 Fl Oz. Price: $6.97 [Buy Now]")  # 2
    c = b.call("click", {"target": option})  # 3
    b.result(c, "Invalid action!", status="error")  # 4
    b.final(final)  # 5
    return b.build()


def test_an_error_the_run_moved_on_from_is_a_signal_not_a_failure() -> None:
    for option in ("fragrance free", "8 Fl Oz"):  # a value with no 3-letter word compares whole
        t = _option_then_buy(option)
        (f,) = ToolErrorRule().inspect(t)
        assert (f.kind, f.step, f.source_index) == (FailureKind.TOOL_ERROR, 4, 4)
        assert f.confidence < THRESHOLD and f.details["handled"] == "moved_on" and f.details["handled_by_step"] == 5
        assert IgnoredErrorRule().inspect(t) == []


def test_an_answer_that_rests_on_the_failed_call_still_ignores_it() -> None:
    # the purchase names the option it could not select: it goes on as if the click had worked
    t = _option_then_buy("fragrance free", final="Bought the fragrance free cleanser.")
    (f,) = ToolErrorRule().inspect(t)
    assert (f.step, f.confidence >= THRESHOLD, "handled" in f.details) == (4, True, False)
    (g,) = IgnoredErrorRule().inspect(t)
    assert (g.kind, g.step, g.confidence, g.details["failed_step"]) == (FailureKind.IGNORED_ERROR, 5, 0.8, 4)


def _booking_then(final: str) -> Trace:
    b = TraceBuilder(seed=0)
    b.user("Can you book Maya Schmidt on a flight Denver -> Zurich, May 31?")  # 0
    c = b.call("search_flights", {"origin": "DEN", "destination": "ZRH", "date": "2025-05-31"})  # 1
    b.result(c, "Error: search_flights failed with status 400 (Bad Request)", status="error")  # 2
    b.final(final)  # 3
    return b.build()


def test_an_answer_with_values_from_nowhere_or_a_claim_of_success_ignores_the_error() -> None:
    # it names nothing the call asked for, but states a flight and a fare nothing before it held
    for final in ("Flight CA4440 at 21:05 is confirmed for Maya Schmidt, fare $279.", "Done!", "已完成预订。"):
        t = _booking_then(final)
        (f,) = IgnoredErrorRule().inspect(t)
        assert (f.step, f.confidence, f.details["failed_step"]) == (3, 0.8, 2), final
        (g,) = ToolErrorRule().inspect(t)
        assert (g.step, g.confidence >= THRESHOLD, "handled" in g.details) == (2, True, False)
    # a value the user gave is no value from nowhere
    t = _booking_then("Maya Schmidt, 31 May: let me know when you want to go on.")
    assert IgnoredErrorRule().inspect(t) == []


def test_a_control_word_after_a_failed_write_ignores_nothing() -> None:
    # τ²'s no-user runs end on "###STOP###": it claims nothing about the call that failed
    b = TraceBuilder(seed=0)
    b.user("Ticket: the customer's line L1002 has no service.")  # 0
    c = b.call("resume_line", {"line_id": "L1002"})  # 1
    b.result(c, "Error: Line must be suspended to resume", status="error")  # 2
    b.final("###STOP###")  # 3
    t = b.build()
    assert IgnoredErrorRule().inspect(t) == []
    (f,) = ToolErrorRule().inspect(t)
    assert (f.step, f.details["handled"], f.confidence < THRESHOLD) == (2, "moved_on", True)


def test_a_call_without_arguments_keeps_its_failure() -> None:
    # nothing to compare the answer with: the failure stays (a stranger's weather answer after an outage)
    b = TraceBuilder(seed=0)
    b.user("weather?")
    c = b.call("get_weather", {})
    b.result(c, '{"error": "service down"}')
    b.final("Sunny, 24 C.")
    t = b.build()
    assert [(f.step, f.confidence >= THRESHOLD) for f in ToolErrorRule().inspect(t)] == [(2, True)]
    assert [(f.kind, f.step) for f in IgnoredErrorRule().inspect(t)] == [(FailureKind.IGNORED_ERROR, 3)]


def test_an_answer_that_says_the_thing_is_not_there_reports_the_failure() -> None:
    b = TraceBuilder(seed=0)
    b.user("Which version of requests are we pinned to?")  # 0
    c = b.call("read_file", {"path": "requirements-lock.txt"})  # 1
    b.result(c, "error: file not found: requirements-lock.txt")  # 2
    b.final("It isn't pinned: there is no requirements-lock.txt in the repo, and requirements.txt says >=2.31.")
    t = b.build()
    assert IgnoredErrorRule().inspect(t) == []
    (f,) = ToolErrorRule().inspect(t)
    assert (f.step, f.details["handled"], f.details["handled_by_step"], f.confidence < THRESHOLD) == (2, "told_user", 3, True)
    # the same read, and an answer that claims what the missing file says
    b = TraceBuilder(seed=0)
    b.user("Which version of requests are we pinned to?")
    c = b.call("read_file", {"path": "requirements-lock.txt"})
    b.result(c, "error: file not found: requirements-lock.txt")
    b.final("requests is pinned to 2.28.1 in the lock file.")
    assert [(g.kind, g.step) for g in IgnoredErrorRule().inspect(b.build())] == [(FailureKind.IGNORED_ERROR, 3)]


def test_call_terms_and_rests_on() -> None:
    call = Step(kind="tool_call", tool_name="get_weather", tool_args={"city": "Lisbon", "day": "tomorrow",
                                                                      "units": ["C"], "ok": True})
    assert call_terms(call) == {"lisbon", "tomorrow"}  # "C" has no word and is under two characters
    assert rests_on(call, "Tomorrow in Lisbon: sunny.") and not rests_on(call, "Done, bye.")
    zh = Step(kind="tool_call", tool_name="天气", tool_args={"城市": "北京市"})
    assert call_terms(zh) == {"北京", "京市"} and rests_on(zh, "北京明天晴。")
    raw = Step(kind="tool_call", tool_name="sql", tool_args_raw="SELECT total FROM orders")
    assert call_terms(raw) == {"select", "total", "orders"}
    assert rests_on(Step(kind="tool_call", tool_name="ping", tool_args={}), "anything")


# ---- a re-check after a change is not a loop ---------------------------------------------------


def _recheck(change: bool, result: str = "Speed test failed: No Connection.", rounds: int = 3) -> Trace:
    b = TraceBuilder(seed=0)
    b.user("My phone has no data.")  # 0
    for k in range(rounds):
        c = b.call("run_speed_test", {"device": "phone"})
        b.result(c, result)
        if change:  # a different fix each time, then the check again
            c = b.call(["toggle_airplane_mode", "reset_apn_settings", "reboot_device"][k % 3], {"device": "phone"})
            b.result(c, "Done.")
        else:  # only looked again at the same setting
            c = b.call("check_status_bar", {"device": "phone"})
            b.result(c, "No Signal")
    return b.build()


def test_a_check_rerun_after_each_change_is_no_loop() -> None:
    assert LoopRule().inspect(_recheck(change=True)) == []
    # the same check with only a repeated look in between: a cycle of two calls, both loop
    f, g = LoopRule().inspect(_recheck(change=False))
    assert (f.kind, f.step, f.details["count"], f.confidence) == (FailureKind.LOOP, 10, 3, 0.9)
    assert [r["call_step"] for r in f.details["repeats"]] == [1, 5, 9]
    assert (g.step, g.details["tool"]) == (12, "check_status_bar")


def test_a_repeat_that_followed_nothing_new_makes_the_loop() -> None:
    # check, fix, check, check: the last check changed nothing since the one before it
    b = TraceBuilder(seed=0)
    b.user("My phone has no data.")  # 0
    c = b.call("run_speed_test", {"device": "phone"})  # 1
    b.result(c, "No Connection.")  # 2
    c = b.call("reboot_device", {"device": "phone"})  # 3
    b.result(c, "Done.")  # 4
    for _ in range(2):
        c = b.call("run_speed_test", {"device": "phone"})  # 5, 7
        b.result(c, "No Connection.")  # 6, 8
    (f,) = LoopRule().inspect(b.build())
    assert (f.step, f.details["count"], [r["call_step"] for r in f.details["repeats"]]) == (8, 3, [1, 5, 7])


def test_a_failed_call_resent_unchanged_is_a_loop_whatever_came_between() -> None:
    # τ-airline: book_reservation rejected three times with the same error, a new thought between each
    b = TraceBuilder(seed=0)
    b.user("Book JFK-SFO business for me.")  # 0
    for k in range(3):
        c = b.call("book_reservation", {"origin": "JFK", "destination": "SFO", "paid": 1625})
        b.result(c, "Error: payment amount does not add up, total price is 4875, but paid 1625", status="error")
        c = b.call("think", {"thought": f"maybe the segments are wrong ({k})"})
        b.result(c, "")
    (f,) = LoopRule().inspect(b.build())
    assert (f.step, f.details["count"]) == (10, 3)


# ---- a refusal that offers what the agent can do ----------------------------------------------


def test_a_refusal_that_offers_a_handoff_is_a_signal() -> None:
    b = TraceBuilder(seed=0)
    b.user("My SIM is locked with a PIN. What should I do?")  # 0
    b.say("For your security, I'm unable to provide or reset SIM PIN codes. Would you like me to transfer "
          "you to a human agent who can help?")  # 1
    (f,) = RefusalRule().inspect(b.build())
    assert (f.step, f.confidence, f.details["offers"]) == (1, 0.4, True)
    # declining and handing the work back to the user is still a refusal
    b = TraceBuilder(seed=0)
    b.user("Find the NASA award number in the paper.")
    b.say("Unfortunately, I cannot complete the task as I am unable to access the paper. I recommend that "
          "you check it yourself.")
    (f,) = RefusalRule().inspect(b.build())
    assert (f.step, f.confidence, f.details["offers"]) == (1, 0.9, False)


# ---- the analysis ---------------------------------------------------------------------------------


def _run(source: str, trace: Trace, failed: bool, n: int) -> RealRun:
    from model.core.schema import TraceLabels

    trace.labels = TraceLabels(failed=failed)
    return RealRun(source, f"{source}:{n}", f"{source}:{n}", trace)


def test_the_analysis_names_the_detector_of_each_false_alarm() -> None:
    ok_ignored = _option_then_buy("fragrance free", final="Bought the fragrance free cleanser.")
    runs = [_run("tau2", ok_ignored, False, 0), _run("tau2", _option_then_buy("x y z"), False, 1),
            _run("tau2", _recheck(change=False), True, 2),
            _run("webshop", _option_then_buy("fragrance free"), False, 3)]
    found = collect(runs)
    rows = {(r["set"], r["detector"]): r for r in table(found)}
    assert set(rows) == {("tau2", "tool_error"), ("tau2", "ignored_error"), ("tau2", "loop"), ("tau2", "incomplete")}
    te = rows[("tau2", "tool_error")]
    assert (te["fired_on_successful"], te["successful_runs"], te["fired_on_failed"], te["failed_runs"]) == (1, 2, 0, 1)
    assert te["example"] == {"run": "tau2:0", "failed": False, "step": 4, "evidence": "Invalid action!"}
    assert rows[("tau2", "loop")]["fired_on_failed"] == 1
    verdicts = loso_verdicts(found)
    # held out, tau2 is judged by rules measured on webshop alone (where none fired): nothing demoted
    assert verdicts["tau2"]["false_alarms"] == (1, 2) and verdicts["tau2"]["recall"] == (1, 1)
    assert verdicts["webshop"]["false_alarms"] == (0, 1)
    # webshop held out: tau2 measured ignored_error and tool_error on 1 of 2 successful runs → demoted
    assert {"ignored_error", "tool_error"} <= set(verdicts["webshop"]["demoted"])
    assert "| tau2 | tool_error | tool_error | 50.0 %" in render(table(found), verdicts)
