"""bench/classifier_real.py: the step classifier alone on the real runs and semantic cases, two artefacts compared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.classifier_real import compare, piece_name, score

ARTIFACTS = Path(__file__).resolve().parent.parent / "model" / "artifacts"


def test_piece_names_drop_values_and_counts() -> None:
    assert piece_name("new figures one: 27") == "new figures ≥1"
    assert piece_name("new figures none") == "new figures none"
    assert piece_name("goal terms none of two") == "goal terms none"
    assert piece_name("from results: SK4711 9:05") == "from results"
    assert piece_name("args: missing required property 'city'") == "args"


def _run(source: str, i: int, failed: bool, top: float, raised: bool, top_si: int | None = 1) -> dict[str, object]:
    return {"source": source, "run_id": f"{source}-{i}", "group": f"g{i // 2}", "failed": failed,
            "label_source_index": 1 if failed else None, "top": top, "top_source_index": top_si,
            "top_kind": "hallucination", "raised": {"hallucination": 1} if raised else {},
            "raised_served": raised, "raised_at": [1] if raised else [], "steps": 3}


def _file(runs: list[dict[str, object]]) -> dict[str, object]:
    meta = {"model_version": "m", "representation": "rep-v4", "onnx_sha256": "x", "failure_kinds": ["off_topic"]}
    case = {"id": "c1", "language": "en", "group": "hallucination", "lookalike_of": None,
            "expected_source_index": 1, "raised": {}, "raised_at": [], "top": 0.0}
    twin = case | {"id": "c1-ok", "lookalike_of": "c1", "expected_source_index": None}
    return {"meta": meta, "runs": runs, "cases": [case, twin]}


def test_compare_prints_paired_differences() -> None:
    # A raises on every successful run and separates nothing; B raises only on the failed ones
    old = [_run("swe", i, i % 2 == 0, 0.9, True) for i in range(20)]
    new = [_run("swe", i, i % 2 == 0, 0.9 if i % 2 == 0 else 0.1, i % 2 == 0) for i in range(20)]
    table = compare(_file(old), _file(new))
    row = next(line for line in table.splitlines() if line.startswith("| swe |"))
    assert "| 20 (10) |" in row
    assert "0.500 → 1.000 (+0.500" in row  # AUROC
    assert "100.0% → 0.0% (-100.0% [-100.0%, -100.0%])" in row  # raises on successful runs
    assert "100.0% → 100.0% (+0.0%" in row  # on failed runs
    assert "| swe | hallucination 100.0% | none |" in table


@pytest.mark.skipif(not (ARTIFACTS / "classifier.onnx").is_file(), reason="no shipped classifier")
def test_score_reads_the_shipped_model_on_real_runs(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    score(ARTIFACTS, out, threads=1, limit_groups=1)
    data = json.loads(out.read_text(encoding="utf-8"))
    assert {r["source"] for r in data["runs"]} == {"tau_airline", "agentprocessbench", "swe", "whowhen"}
    assert len(data["cases"]) > 100 and data["meta"]["representation"] == "rep-v4"
    for r in data["runs"]:
        assert 0.0 <= r["top"] <= 1.0 and r["raised_served"] <= bool(r["raised"])
