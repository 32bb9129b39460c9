"""The frozen semantic cases (datasets/semantic/cases.jsonl) and their scoring (model.training.semantic)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from model.core.errors import InputError
from model.core.findings import DiagnosisResponse, Failure, Recommendation
from model.core.kinds import Category, FailureKind, Severity, Strategy
from model.detectors.classifier import DEFAULT_ARTIFACTS
from model.importers import load_trace
from model.training.semantic import (
    DEFAULT_CASES,
    GROUPS,
    LANGUAGES,
    evaluate_cases,
    load_cases,
    main,
    parse_cases,
    render_markdown,
    shipped_diagnose_fn,
    wilson,
)

needs_model = pytest.mark.skipif(not (DEFAULT_ARTIFACTS / "classifier.onnx").is_file(),
                                 reason="no shipped classifier")


# ------------------------------------------------------------------------------------------ the file


def test_cases_file_is_tracked_not_ignored() -> None:
    ignore = (DEFAULT_CASES.parent.parent / ".gitignore").read_text(encoding="utf-8").split()
    assert not any(p.strip("/").startswith("semantic") for p in ignore)


def test_cases_meet_the_minimums() -> None:
    cases = load_cases()
    failing = [c for c in cases if c.failing]
    alikes = [c for c in cases if not c.failing]
    per = Counter((c.group, c.language) for c in failing)
    for group in GROUPS:
        assert sum(per[(group, lang)] for lang in LANGUAGES) >= 12, group
        for lang in LANGUAGES:
            assert per[(group, lang)] >= 5, (group, lang)
    assert len(alikes) >= len(failing)
    mirrored = Counter(c.lookalike_of for c in alikes)
    assert all(mirrored[c.id] >= 1 for c in failing), "every failing case has a look-alike"
    drift = [c for c in failing if c.group == "goal_drift"]
    assert all(c.kind is FailureKind.OFF_TOPIC and c.subtype == "goal_drift" for c in drift)
    assert {len(c.trace["messages"]) for c in cases} <= set(range(3, 16))
    assert sum(any(m["role"] == "system" for m in c.trace["messages"]) for c in cases) >= 10
    assert sum(any(m.get("tool_calls") for m in c.trace["messages"]) for c in cases) == len(cases)


def test_every_case_imports_and_its_index_is_an_agent_step() -> None:
    cases = load_cases()
    ids = {c.id for c in cases}
    for c in cases:
        trace = load_trace(c.trace)
        if c.failing:
            idx = c.expected_source_index
            assert idx is not None and 0 <= idx < len(c.trace["messages"])
            assert c.trace["messages"][idx]["role"] == "assistant"
            kinds = {s.kind.value for s in trace.steps if s.source_index == idx}
            assert kinds & {"tool_call", "llm_output", "final_output"}, (c.id, kinds)
        else:
            assert c.lookalike_of in ids and c.expected_source_index is None


# ------------------------------------------------------------------------------------------ validation

_MSGS = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "ok"},
         {"role": "assistant", "content": "bye"}]


def _line(**over: Any) -> str:
    rec: dict[str, Any] = {"id": "x1", "language": "en", "kind": "off_topic", "details": {},
                           "expected_source_index": 1, "lookalike_of": None, "note": "", "trace": {"messages": _MSGS}}
    rec.update(over)
    return json.dumps(rec)


@pytest.mark.parametrize(("lines", "where", "what"), [
    ([_line(), "{not json"], "line 2", "invalid JSON"),
    ([_line(), "", _line(id="x2", expected_source_index=4)], "line 3", "expected_source_index"),
    ([_line(expected_source_index=2)], "line 1", "assistant"),
    ([_line(kind="loop")], "line 1", "kind"),
    ([_line(), _line()], "line 2", "duplicate id"),
    ([_line(), _line(id="x2", kind=None, expected_source_index=None, lookalike_of="nope")], "line 2", "nope"),
    ([_line(), _line(id="x2", kind=None, expected_source_index=None, lookalike_of="x1", language="zh")],
     "line 2", "language"),
    ([_line(details={"subtype": "goal_drift"}, kind="hallucination")], "line 1", "subtype"),
    ([_line(trace={"messages": _MSGS[:2]})], "line 1", "trace.messages"),
    ([json.dumps({"id": "x1"})], "line 1", "missing field"),
])
def test_bad_lines_are_rejected_naming_the_line(lines: list[str], where: str, what: str) -> None:
    with pytest.raises(InputError) as err:
        parse_cases(lines, file="cases.jsonl")
    assert where in str(err.value) and what in str(err.value) and "cases.jsonl" in str(err.value)


def test_cli_reports_a_bad_file_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "c.jsonl"
    bad.write_text(_line(expected_source_index=9) + "\n", encoding="utf-8")
    assert main(["--cases", str(bad), "--no-classifier"]) == 2
    assert "line 1" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ arithmetic


class _Resp(DiagnosisResponse):
    """A response with the two fields that are coming (read through getattr by model.training.semantic)."""

    failure_probability: float | None = None
    attribution: dict[str, Any] | None = None


def _resp(failures: list[tuple[FailureKind, int]], *, prob: float | None = None,
          attr: int | None = None, healthy: bool | None = None) -> DiagnosisResponse:
    fs = [Failure(kind=k, category=Category.LOGICAL, severity=Severity.HIGH, confidence=0.7, detector="fake",
                  source_index=si) for k, si in failures]
    return _Resp(trace_id="t", model_version="fake-1", healthy=(not fs) if healthy is None else healthy,
                 failures=fs, recommendation=Recommendation(id="r", strategy=Strategy.CONTINUE),
                 failure_probability=prob, attribution=None if attr is None else {"source_index": attr})


def test_evaluate_cases_counts_exactly() -> None:
    def case(cid: str, kind: str | None, idx: int | None, of: str | None = None, lang: str = "en",
             details: dict[str, str] | None = None) -> str:
        return _line(id=cid, kind=kind, expected_source_index=idx, lookalike_of=of, language=lang,
                     details=details or {}, note=cid)

    lines = [
        case("h1", "hallucination", 1), case("h2", "hallucination", 3), case("h3", "hallucination", 1),
        case("d1", "off_topic", 3, details={"subtype": "goal_drift"}, lang="zh"),
        case("h1-ok", None, None, "h1"), case("h2-ok", None, None, "h2"), case("d1-ok", None, None, "d1", "zh"),
    ]
    cases = parse_cases(lines)
    HAL, OFF, CTX = FailureKind.HALLUCINATION, FailureKind.OFF_TOPIC, FailureKind.CONTEXT_LOSS
    answers = {
        "h1": _resp([(HAL, 1)], prob=0.9),                    # caught, at index, right kind
        "h2": _resp([(CTX, 1)], prob=0.8, attr=3),            # caught, at index via attribution, wrong kind
        "h3": _resp([], prob=0.05, attr=1),                 # healthy: the attribution alone does not count
        "d1": _resp([(OFF, 2)], prob=0.6),                    # caught, one message off
        "h1-ok": _resp([], prob=0.1),
        "h2-ok": _resp([(HAL, 3)], prob=0.85),                # false alarm
        "d1-ok": _resp([], prob=0.6),                       # tie with d1's score
    }
    seen: list[str] = []

    def diagnose(trace: dict[str, Any]) -> DiagnosisResponse:
        cid = next(c.id for c in cases if c.trace is trace)
        seen.append(cid)
        return answers[cid]

    res = evaluate_cases(cases, diagnose)
    assert seen == [c.id for c in cases]
    assert (res["cases"], res["failing"], res["lookalikes"], res["model_versions"]) == (7, 4, 3, ["fake-1"])
    rows = {(r["group"], r["language"]): r for r in res["caught"]}
    hal = rows[("hallucination", "en")]
    assert hal["n"] == 3
    assert (hal["caught"]["k"], hal["at_index"]["k"], hal["kind_at_index"]["k"]) == (2, 2, 1)
    assert hal["caught"]["rate"] == pytest.approx(2 / 3)
    assert hal["caught"]["ci95"] == pytest.approx(list(wilson(2, 3)))
    drift = rows[("goal_drift", "zh")]
    assert (drift["caught"]["k"], drift["at_index"]["k"], drift["n"]) == (1, 0, 1)
    total = rows[("all", "all")]
    assert (total["n"], total["caught"]["k"], total["at_index"]["k"], total["kind_at_index"]["k"]) == (4, 3, 2, 1)
    assert ("off_topic", "en") not in rows and ("hallucination", "zh") not in rows
    alike = {(r["group"], r["language"]): r for r in res["lookalike_rows"]}
    assert alike[("hallucination", "en")]["false_alarms"]["k"] == 1
    assert alike[("hallucination", "en")]["n"] == 2
    assert alike[("goal_drift", "zh")]["false_alarms"]["k"] == 0
    assert alike[("all", "all")]["false_alarms"] == {"k": 1, "n": 3, "rate": pytest.approx(1 / 3),
                                                     "ci95": pytest.approx(list(wilson(1, 3)))}
    assert res["lookalike_kinds_fired"] == {"hallucination": 1}
    # scores: failing 0.9, 0.8, 0.05, 0.6 vs look-alikes 0.1, 0.85, 0.6 → (3 + 2 + 0 + 1.5) / 12
    assert res["auroc"] == pytest.approx(6.5 / 12)
    # own kind (failures' confidence is 0.7): failing 0.7, 0, 0, 0.7 vs look-alikes 0, 0.7 (h2's kind), 0
    own = res["own_kind"]
    assert own["auroc"] == pytest.approx(7 / 12)
    assert (own["failing_at_least_0.3"]["k"], own["lookalikes_at_least_0.3"]["k"]) == (2, 1)
    assert [r["kind_confidence"] for r in res["per_case"]] == [0.7, 0.0, 0.0, 0.7, 0.0, 0.7, 0.0]
    md = render_markdown(res)
    assert "| hallucination | en | 3 | 2/3 = 67 % [" in md and "hallucination ×1" in md and "0.54" in md


def test_score_falls_back_to_confidences_without_failure_probability() -> None:
    cases = parse_cases([_line()])
    plain = DiagnosisResponse(trace_id="t", model_version="m", healthy=True,
                              signals=[Failure(kind=FailureKind.OFF_TOPIC, category=Category.LOGICAL,
                                               severity=Severity.HIGH, confidence=0.3, detector="d",
                                               source_index=1)],
                              recommendation=Recommendation(id="r", strategy=Strategy.CONTINUE))
    rec = evaluate_cases(cases, lambda _t: plain)["per_case"][0]
    assert (rec["score"], rec["caught"], rec["kind_confidence"], rec["attribution_source_index"]) == (0.3, False, 0.3,
                                                                                                      None)


def test_wilson_matches_the_closed_form() -> None:
    assert wilson(0, 0) == (0.0, 1.0)
    lo, hi = wilson(0, 12)
    assert lo == 0.0 and hi == pytest.approx(0.2425, abs=1e-4)
    lo, hi = wilson(12, 12)
    assert hi == 1.0 and lo == pytest.approx(0.7575, abs=1e-4)


# ------------------------------------------------------------------------------------------ the shipped model


def _well_formed(res: dict[str, Any], n_cases: int) -> None:
    assert res["cases"] == n_cases and res["failing"] + res["lookalikes"] == n_cases
    for row in res["caught"]:
        for key in ("caught", "at_index", "kind_at_index"):
            fig = row[key]
            assert fig["n"] == row["n"] and 0 <= fig["k"] <= fig["n"]
            assert fig["ci95"][0] <= fig["rate"] <= fig["ci95"][1]
        assert row["kind_at_index"]["k"] <= row["at_index"]["k"] <= row["caught"]["k"]
    total = next(r for r in res["caught"] if (r["group"], r["language"]) == ("all", "all"))
    assert total["n"] == res["failing"]
    assert sum(r["n"] for r in res["caught"] if r["group"] != "all" and r["language"] != "all") == res["failing"]
    alike = next(r for r in res["lookalike_rows"] if (r["group"], r["language"]) == ("all", "all"))
    assert alike["n"] == res["lookalikes"]
    assert res["auroc"] is not None and 0.0 <= res["auroc"] <= 1.0
    assert len(res["per_case"]) == n_cases


def test_rules_run_on_every_case() -> None:
    cases = load_cases()
    fn, with_clf = shipped_diagnose_fn(classifier=False)
    assert not with_clf
    res = evaluate_cases(cases, fn)
    _well_formed(res, len(cases))
    assert res["model_versions"][0].startswith("rules-")
    bare, _ = shipped_diagnose_fn(classifier=False, runscore=False)
    assert evaluate_cases(cases[:2], bare)["model_versions"] == ["rules-" + res["model_versions"][0][6:].split("+")[0]]


@needs_model
def test_shipped_classifier_runs_on_every_case(capsys: pytest.CaptureFixture[str]) -> None:
    cases = load_cases()
    fn, with_clf = shipped_diagnose_fn()
    assert with_clf
    res = evaluate_cases(cases, fn)
    _well_formed(res, len(cases))
    assert not res["model_versions"][0].startswith("rules-")
    # the service's path: the run scorer's version follows the classifier's (failure_probability on)
    assert "+runscore-" in res["model_versions"][0]
    assert main([]) == 0
    out = capsys.readouterr().out
    assert f"| all | all | {res['failing']} |" in out and "false alarms" in out


def test_module_doctests() -> None:
    import doctest

    import model.training.semantic

    assert doctest.testmod(model.training.semantic).failed == 0
