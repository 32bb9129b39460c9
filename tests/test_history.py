"""The replayed failure history (serve/offline/history_replay.py) and what the notebook reads from it
(serve/offline/history_report.py): exact figures on a hand-made history, and a small seeded replay through
the real service into SQLite."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from model.core.errors import InputError
from serve.offline import history_report as hr
from serve.offline.history_replay import DEFAULT_PHASES, OutcomeModel, Phase, replay_into, scaled
from serve.store import Stores

T0 = datetime(2026, 1, 5, 9, tzinfo=UTC)  # a Monday


def _record(tid: str, at: datetime, failures: list[str], signals: list[str] = (),  # type: ignore[assignment]
            recs: list[dict[str, Any]] = (), outs: list[dict[str, Any]] = (),  # type: ignore[assignment]
            labels: list[dict[str, Any]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    return {
        "tenant": "t", "created_at": at + timedelta(days=30),
        "trace": {"id": tid, "steps": [{"kind": "user_input", "content": "x", "timestamp": at.isoformat()}]},
        "response": {"failures": [{"kind": k, "detector": "rules", "detectors": ["rules"]} for k in failures], "signals": [{"kind": k} for k in signals],
                     "primary": {"kind": failures[0]} if failures else None, "failure_probability": 0.5},
        "recommendations": list(recs), "outcomes": list(outs), "labels": list(labels),
    }


def _rec(rid: str, key: str, strategy: str, minute: int) -> dict[str, Any]:
    return {"id": rid, "failure_key": key, "kind": key.split("@")[0], "strategy": strategy,
            "created_at": T0 + timedelta(minutes=minute)}


def _out(rid: str, strategy: str, ok: bool, secs: float, minute: int) -> dict[str, Any]:
    return {"recommendation_id": rid, "strategy": strategy, "success": ok, "duration_s": secs, "cost": secs / 1000,
            "created_at": T0 + timedelta(minutes=minute)}


@pytest.fixture
def records() -> list[dict[str, Any]]:
    return [
        _record("a", T0, ["tool_error", "ignored_error"],
                recs=[_rec("r1", "tool_error@3", "retry", 1), _rec("r2", "tool_error@3", "switch_tool", 2)],
                outs=[_out("r1", "retry", False, 4.0, 1), _out("r2", "switch_tool", True, 9.0, 2)],
                labels=[{"failed": True, "kind": "tool_error", "author": "outcome", "author_type": "human",
                         "created_at": T0, "id": 1}]),
        _record("b", T0 + timedelta(days=1), ["loop"], ["timeout"],
                recs=[_rec("r3", "loop@5", "rollback", 3), _rec("r4", "loop@5", "human_handoff", 4)],
                outs=[_out("r3", "rollback", False, 20.0, 3), _out("r4", "human_handoff", True, 600.0, 4)]),
        _record("c", T0 + timedelta(days=15), [], ["timeout"],
                labels=[{"failed": False, "kind": None, "author": "ci", "author_type": "checker",
                         "created_at": T0, "id": 2}]),
        _record("d", T0 + timedelta(days=16), ["loop"], recs=[_rec("r5", "loop@2", "rollback", 5)],
                outs=[_out("r5", "rollback", False, 10.0, 5)]),
    ]


def test_spectrum_and_cooccurrence(records: list[dict[str, Any]]) -> None:
    rs = hr.runs(records)
    assert [r.trace_id for r in rs] == ["a", "b", "c", "d"]
    assert rs[0].at == T0  # the run's own time, not when it was stored
    assert rs[0].detectors == ("rules",) and rs[2].detectors == ()
    sp = hr.spectrum(rs)
    assert sp.weeks == [T0.date(), T0.date() + timedelta(weeks=1), T0.date() + timedelta(weeks=2)]
    assert sp.kinds == ["tool_error", "loop", "ignored_error"]  # the enum's order
    assert sp.counts == [[1, 1, 1], [0, 0, 0], [0, 1, 0]] and sp.runs == [2, 0, 2]
    with_signals = hr.spectrum(rs, of="both")
    assert with_signals.kinds == ["tool_error", "timeout", "loop", "ignored_error"]
    assert with_signals.counts[2] == [0, 1, 1, 0]
    only = hr.spectrum(rs, of="signals")
    assert only.kinds == ["timeout"] and only.counts == [[1], [0], [1]]
    with pytest.raises(InputError):
        hr.spectrum(rs, of="everything")
    co = hr.cooccurrence(rs)
    assert co.kinds == ["tool_error", "loop", "ignored_error"]
    assert co.matrix == [[1, 0, 1], [0, 2, 0], [1, 0, 1]]
    assert hr.label_counts(rs) == {"outcome": 1, "none": 2, "checker": 1}


def test_efficacy_and_time_to_recovery(records: list[dict[str, Any]]) -> None:
    eff = {e.strategy: e for e in hr.efficacy(records)}
    assert [e.strategy for e in hr.efficacy(records)] == ["rollback", "human_handoff", "retry", "switch_tool"]
    assert (eff["rollback"].calls, eff["rollback"].successes, eff["rollback"].mean_s) == (2, 0, 15.0)
    assert eff["switch_tool"].rate == 1.0 and eff["switch_tool"].ci == pytest.approx((0.2065, 1.0), abs=1e-4)
    table = hr.efficacy_markdown(hr.efficacy(records)).splitlines()
    assert table[2] == "| rollback | 2 | 0 | 0% (0%–66%) | 15.0 | 15.0 | 0.0150 |"
    recs = hr.recoveries(records)
    assert [(r.trace_id, r.kind, r.recommendations, r.outcomes, r.recovered, r.repair_s, r.handed_off, r.fixed_by)
            for r in recs] == [("a", "tool_error", 2, 2, True, 13.0, False, "switch_tool"),
                               ("b", "loop", 2, 2, True, 620.0, True, "human_handoff"),
                               ("d", "loop", 1, 1, False, None, False, None)]
    t = hr.time_to_recovery(recs)
    assert (t.failures, t.recovered, t.by_human, t.unresolved) == (3, 2, 1, 1)
    assert (t.mttr_s, t.median_s, t.mttr_automatic_s) == (316.5, 316.5, 13.0)
    assert hr.recovery_by_kind(recs)["loop"].recovered == 1
    assert hr.recovery_line(t) == ("3 failures with a recommendation: 2 recovered (1 by a human), 1 unresolved; "
                                   "MTTR 316.5 s (median 316.5 s), without hand-offs 13.0 s")
    assert hr.recovery_markdown(hr.recovery_by_kind(recs)).splitlines()[3] == \
        "| loop | 2 | 1 | 1 | 1 | 620.0 | 620.0 | – |"


def test_learning_curves_read_the_learning_curve_report(tmp_path: Path) -> None:
    path = tmp_path / "learning.json"
    assert hr.load_learning_curves(path) is None  # absent: nothing, no invented numbers

    def m(a: float) -> dict:
        return {"auroc": a, "interval": [a - 0.1, a + 0.1], "auprc": a}

    path.write_text(json.dumps({"sets": {"tau_airline": {"runs": 200, "zero_shot": m(0.48), "results": {
        "K=all|f=1": {"agent": m(0.78), "tfidf": m(0.76), "length": m(0.69)},
        "K=100|f=0.5": {"agent": m(0.6), "tfidf": m(0.65), "length": m(0.67)},  # a prefix: not this curve
        "K=25|f=1": {"agent": m(0.66), "tfidf": m(0.70), "length": m(0.68)},
        "K=100|f=1": {"agent": m(0.77), "tfidf": m(0.765), "length": m(0.69)}}}}}))
    curves = hr.load_learning_curves(path)
    assert curves is not None and list(curves) == ["tau_airline"]
    c = curves["tau_airline"]
    assert c.runs == 200 and [p.k for p in c.points] == ["0", "25", "100", "all"]
    assert c.points[0].tfidf is None and c.points[2].ci == pytest.approx((0.67, 0.87))
    table = hr.curve_markdown(c).splitlines()
    assert table[2] == "| 0 (zero-shot) | 0.480 (0.380–0.580) | – | – |"
    assert table[4] == "| 100 | 0.770 (0.670–0.870) | 0.765 | 0.690 |"
    path.write_text(json.dumps({"sets": {"x": {"results": {"K=25|f=1": {"agent": {"auroc": 0.6}}}}}}))
    with pytest.raises(InputError) as exc:
        hr.load_learning_curves(path)
    assert exc.value.path == "sets.x.results.K=25|f=1.agent"
    path.write_text(json.dumps({"points": []}))  # bench/retrain.py's old K sweep: not this report
    with pytest.raises(InputError) as exc:
        hr.load_learning_curves(path)
    assert exc.value.path == "sets"
    path.write_text("{")
    with pytest.raises(InputError):
        hr.load_learning_curves(path)
    # the report in the repository reads
    real = hr.load_learning_curves(Path(__file__).resolve().parent.parent / "reports" / "learning.json")
    assert real is not None and "tau_airline" in real and real["tau_airline"].points[0].k == "0"


def test_outcome_model_and_phases_refuse_bad_input() -> None:
    with pytest.raises(InputError) as exc:
        OutcomeModel(success={"pray": 0.5})
    assert exc.value.path == "success"
    with pytest.raises(InputError):
        OutcomeModel(wrong_factor=2.0)
    assert [p.runs for p in scaled(DEFAULT_PHASES, 40)] == [15, 10, 15]
    assert [p.runs for p in scaled(DEFAULT_PHASES, 60)] == [23, 15, 22]  # exactly 60
    with pytest.raises(InputError):
        scaled([Phase(1), Phase(1)], 1)


def _table(url: str) -> tuple[list[Any], list[dict[str, Any]]]:
    store = Stores.at(url)
    try:
        recs = list(store.labels.iter_history("local"))
    finally:
        store.db.dispose()
    return hr.efficacy(recs), recs


@pytest.mark.slow
def test_replay_through_the_service_is_seeded_and_consistent(tmp_path: Path) -> None:
    url, summary = replay_into(tmp_path / "a", runs=24, seed=3)
    assert summary.traces == 24 and summary.first == datetime(2026, 1, 5, tzinfo=UTC)
    assert summary.last is not None and summary.last < summary.first + timedelta(days=56)
    eff, records = _table(url)
    assert len(records) == 24
    assert sum(e.calls for e in eff) == summary.outcomes > 0
    recs = hr.recoveries(records)
    assert sum(r.recovered for r in recs) == summary.recovered
    assert sum(r.outcomes for r in recs) == summary.outcomes  # every outcome belongs to a diagnosed failure
    rs = hr.runs(records)
    counts = hr.label_counts(rs)
    assert counts.get("checker", 0) + counts.get("outcome", 0) + counts.get("human", 0) > 0
    assert len(hr.spectrum(rs, of="both").weeks) == 8  # the phases' eight weeks
    # same seed, same history; the stored trace ids are the generator's
    url2, summary2 = replay_into(tmp_path / "b", runs=24, seed=3)
    eff2, records2 = _table(url2)
    assert summary2 == summary and eff2 == eff
    assert [r["trace"]["id"] for r in records2] == [r["trace"]["id"] for r in records]
    with pytest.raises(InputError):
        replay_into(tmp_path / "a", runs=24, seed=3)  # not into a store that has a history
