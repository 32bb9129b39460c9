"""bench/compare_reports.py: point estimates compared to 1e-9, interval bounds to ±0.01, the
bootstrap's replicates and run facts skipped, every differing figure named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.compare_reports import compare, main

BASE = {"generated": "2026-01-01", "seconds": {"swe": 12.0},
        "sets": {"swe": {"auroc": {"auroc": 0.6311, "ci": [0.55, 0.71]}, "best_baseline": "characters",
                         "localisation": {"ours_exact_ci": [0.2, 0.4]}, "interval": [0.1, 0.2]}},
        "replicates": {"swe": [0.1, 0.2, 0.3]}, "done_when": {"met": True}}


def changed(**edits: object) -> dict[str, object]:
    new = json.loads(json.dumps(BASE))
    for dotted, value in edits.items():
        *head, last = dotted.split("__")
        node = new
        for k in head:
            node = node[k]
        node[last] = value
    return new


def test_equal_reports_and_draw_level_changes_pass() -> None:
    c = compare(BASE, changed(generated="2027-05-05", seconds={"swe": 99.0}, replicates={"swe": [9.0]}))
    assert c.ok and c.skipped == 5 and c.widest_interval_change == 0
    c = compare(BASE, changed(sets__swe__interval=[0.105, 0.2]))
    assert c.ok and c.widest_interval_change == pytest.approx(0.005) and len(c.notes) == 1


@pytest.mark.parametrize(("edits", "named"), [
    ({"sets__swe__interval": [0.1, 0.215]}, "sets.swe.interval[1]: interval bound 0.2 -> 0.215"),
    ({"sets__swe__localisation": {"ours_exact_ci": [0.2, 0.42]}}, "ours_exact_ci[1]"),
    ({"sets__swe__best_baseline": "messages"}, "sets.swe.best_baseline: 'characters' -> 'messages'"),
    ({"done_when": {"met": False}}, "done_when.met: True -> False"),
    ({"done_when": {"met": True, "new": 1}}, "done_when.new: only in the branch"),
])
def test_a_point_or_an_interval_out_of_tolerance_is_named(edits: dict[str, object], named: str) -> None:
    c = compare(BASE, changed(**edits))
    assert not c.ok and any(named in f for f in c.failures), c.failures


def test_a_point_estimate_moved_by_more_than_1e9_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new = changed()
    new["sets"]["swe"]["auroc"]["auroc"] = 0.6311 + 1e-6  # type: ignore[index]
    for d, report in (("base", BASE), ("branch", new)):
        (tmp_path / d).mkdir()
        (tmp_path / d / "real.json").write_text(json.dumps(report), encoding="utf-8")
    assert main([str(tmp_path / "base"), str(tmp_path / "branch")]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS  sets.swe.auroc.auroc: 0.6311 -> 0.631101" in out and "real.json: 1 figure(s) differ" in out
    assert main([str(tmp_path / "base" / "real.json"), str(tmp_path / "base" / "real.json")]) == 0
