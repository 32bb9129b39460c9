"""model.training.runscore.readout: picking misses, the message window around them, the rule table."""

from __future__ import annotations

import pytest

from model.core.errors import InputError
from model.core.schema import Step, Trace, TraceLabels
from model.data.realdata import RealRun
from model.scoring.runscore.model import Example
from model.training.runscore.evaluate import Prepared
from model.training.runscore.readout import (
    Prediction,
    describe,
    message_window,
    pick,
    render_rule_table,
    rule_table,
)


def _trace(n: int = 10) -> Trace:
    steps = [Step(kind="user_input", content="Book a flight to Lisbon", source_index=0)]
    for i in range(1, n):
        steps.append(Step(kind="llm_output", content=f"message number {i} " + "x" * 300, source_index=i,
                          speaker="agent"))
    return Trace(id="t", steps=steps)


def test_message_window_marks_and_elides() -> None:
    out = message_window(_trace(), [(2, "attributed"), (8, "labelled"), (None, "nothing")], radius=1, width=40)
    lines = out.splitlines()
    assert [ln[:5] for ln in lines] == ["[  1]", "[  2]", "[  3]", "   …", "[  7]", "[  8]", "[  9]"]
    assert lines[1].endswith("<== attributed") and lines[5].endswith("<== labelled")
    assert "…" in lines[1] and len(lines[1].split("agent llm_output")[1].split("<==")[0].strip()) == 40
    both = message_window(_trace(), [(4, "attributed"), (4, "labelled")], radius=0)
    assert both.endswith("<== attributed + labelled") and len(both.splitlines()) == 1
    # no mark: the last messages
    assert message_window(_trace(), [], radius=1).splitlines()[-1].startswith("[  9]")


def _pred(i: int, failed: bool, p: float, attributed: int | None = 3, labelled: int | None = None,
          rule: bool = False, source: str = "a") -> Prediction:
    return Prediction(i, source, f"r{i}", failed, p, 0.5, rule, attributed, labelled)


def test_pick_draws_each_kind_of_miss() -> None:
    preds = [_pred(0, False, 0.9), _pred(1, False, 0.1, rule=True), _pred(2, False, 0.1),
             _pred(3, True, 0.2, labelled=5), _pred(4, True, 0.8, labelled=3), _pred(5, True, 0.9, labelled=4),
             _pred(6, False, 0.7, source="b")]
    assert [p.index for p in pick(preds, "false_alarm", n=10)] == [0, 1, 6]
    assert [p.index for p in pick(preds, "false_alarm", n=10, source="a")] == [0, 1]
    assert [p.index for p in pick(preds, "missed", n=10)] == [3]
    assert [p.index for p in pick(preds, "misplaced", n=10)] == [3, 5]
    assert len(pick(preds, "false_alarm", n=2, seed=3)) == 2
    with pytest.raises(InputError, match="miss"):
        pick(preds, "wrong", n=1)  # type: ignore[arg-type]


def _prepared(failed: bool, failures: list[tuple[str, str, int | None]], signals: list[tuple[str, str]]) -> Prepared:
    t = _trace(4)
    t.labels = TraceLabels(failed=failed)
    run = RealRun("a", f"a:{len(failures)}:{failed}", "g", t)
    return Prepared(run, Example.from_trace(t, "a", "g"), failures, signals, 0, 0)


def test_rule_table_counts_failures_and_signals_by_outcome() -> None:
    prepared = [_prepared(False, [("loop", "loop", 2)], []), _prepared(False, [], [("loop", "loop")]),
                _prepared(True, [("loop", "loop", 1)], [("tool_error", "tool_error")]), _prepared(True, [], [])]
    rows = {r["detector"]: r for r in rule_table(prepared)}
    assert rows["loop"] == {"set": "a", "detector": "loop", "successful": 2, "failed": 2, "failure_on_successful": 1,
                            "failure_on_failed": 1, "signal_on_successful": 1, "signal_on_failed": 0}
    assert rows["tool_error"]["signal_on_failed"] == 1 and rows["tool_error"]["failure_on_failed"] == 0
    assert "| a | loop | 1/2 (50 %) | 1/2 (50 %) | 1/2 (50 %) | 0/2 (0 %) |" in render_rule_table(list(rows.values()))
    text = describe(Prediction(0, "a", "a:1:False", False, 0.7, 0.5, True, 2, None), prepared)
    assert text.startswith("a:1:False  successful  failure_probability 0.700 (threshold 0.500)  rule failures: loop@2")
    assert "<== attributed" in text
