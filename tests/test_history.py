"""The replayed failure history (serve/history_replay.py) and what the notebook reads from it
(serve/history_report.py): exact figures on a hand-made history, and a small seeded replay through
the real service into SQLite."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from model.errors import InputError
from serve import history_report as hr
from serve.history_replay import DEFAULT_PHASES, OutcomeModel, Phase, replay_into, scaled
from serve.store import Store

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


def test_learning_curve_file(tmp_path: Path) -> None:
    path = tmp_path / "retrain.json"
    assert hr.load_learning_curve(path) is None  # absent: nothing, no invented numbers
    # the plain schema: rates as numbers
    path.write_text(json.dumps({"set": "tau_airline", "points": [
        {"k": 50, "auroc": 0.7, "ci": [0.6, 0.8], "false_alarms": 0.1, "recall": 0.5, "localisation_exact": 0.2},
        {"k": 0, "auroc": 0.6, "ci": [0.5, 0.7], "false_alarms": None, "recall": 0.4, "localisation_exact": None}]}))
    curve = hr.load_learning_curve(path)
    assert curve is not None and curve.set == "tau_airline" and [p.k for p in curve.points] == [0, 50]
    assert curve.points[1].ci == (0.6, 0.8) and curve.points[0].false_alarms is None
    assert hr.curve_markdown(curve).splitlines()[2] == "| 0 | 0.600 (0.500–0.700) | – | – | 0.40 | – |"
    # bench/retrain.py's shape: rates with intervals, the gain over K = 0, a refused K, fixed splits
    rate = {"rate": 0.25, "n": 8, "hits": 2, "ci": [0.07, 0.59]}
    path.write_text(json.dumps({"set": "tau_airline", "command": "python bench/retrain.py", "points": [
        {"k": 0, "auroc": 0.44, "ci": [0.25, 0.62], "false_alarms": rate, "recall": rate,
         "localisation_exact": {"rate": None, "n": 0, "ci": [None, None]}, "gate": None},
        {"k": 25, "auroc": None, "ci": [None, None], "refused": ["the tenant slice has 5 failed runs"]},
        {"k": 50, "auroc": 0.59, "ci": [0.47, 0.71], "gain_vs_k0": {"diff": 0.15, "ci": [-0.05, 0.38]},
         "false_alarms": rate, "recall": rate, "localisation_exact": rate}],
        "fixed_splits": {"swe": {"runs": 154, "auroc": {"0": 0.536, "50": 0.645}}}}))
    curve = hr.load_learning_curve(path)
    assert curve is not None and curve.fixed == {"swe": {0: 0.536, 50: 0.645}}
    assert curve.points[1].auroc is None and curve.points[1].refused == ("the tenant slice has 5 failed runs",)
    assert curve.points[2].gain == (0.15, -0.05, 0.38) and curve.points[0].localisation_exact == hr.Rate(None, None, 0)
    table = hr.curve_markdown(curve).splitlines()
    assert table[0].endswith("| swe |")
    assert table[2] == "| 0 | 0.440 (0.250–0.620) | – | 0.25 (0.07–0.59) | 0.25 (0.07–0.59) | – | 0.536 |"
    assert table[3] == "| 25 | refused: the tenant slice has 5 failed runs | | | | | – |"
    assert table[4].startswith("| 50 | 0.590 (0.470–0.710) | +0.150 (-0.050 to +0.380) |")
    path.write_text(json.dumps({"points": [{"k": 0, "auroc": 0.6, "ci": [0.5, 0.7]}, {"k": 5, "auroc": "hi",
                                                                                    "ci": [0, 1]}]}))
    with pytest.raises(InputError) as exc:
        hr.load_learning_curve(path)
    assert exc.value.path == "points[1].auroc"
    path.write_text(json.dumps({"points": [{"k": 0, "auroc": 0.6}]}))
    with pytest.raises(InputError) as exc:
        hr.load_learning_curve(path)
    assert exc.value.path == "points[0].ci"
    path.write_text("{")
    with pytest.raises(InputError):
        hr.load_learning_curve(path)


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
    store = Store(url)
    try:
        recs = list(store.iter_history("local"))
    finally:
        store.dispose()
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
