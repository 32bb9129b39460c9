"""`triage datasets export --from-store`: the history becomes labelled traces the pipeline reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from model.core.options import DiagnoseOptions
from model.core.schema import Trace
from model.diagnosis.diagnoser import Diagnoser
from model.importers import load_trace
from serve.examples import HEALTHY, OPENAI_IGNORED_ERROR, OPENAI_LOOP
from serve.schemas import OutcomeRequest
from serve.settings import Settings, get_settings
from serve.wiring import build_service
from tests.conftest import FIXTURES


def _trace(example: dict[str, Any], trace_id: str) -> Trace:
    t = load_trace(example["trace"])
    t.id = trace_id
    return t


@pytest.fixture
def history(tmp_path: Path) -> Path:
    settings = Settings(data_dir=tmp_path / "data")
    service = build_service(settings, Diagnoser())
    fixed = _trace(OPENAI_IGNORED_ERROR, "t-fixed")
    fixed.steps[1].content = "Ask bob@example.com"
    r = service.diagnose("acme", fixed, DiagnoseOptions())
    service.report_outcome("acme", OutcomeRequest(recommendation_id=r.recommendation.id, success=True))
    service.diagnose("acme", _trace(HEALTHY, "t-healthy"), DiagnoseOptions())
    loop = service.diagnose("acme", _trace(OPENAI_LOOP, "t-human"), DiagnoseOptions())
    assert loop.primary is not None
    service.stores.labels.add_label("acme", "t-human", failed=True, kind="hallucination", step=2, author="reviewer")
    service.diagnose("globex", _trace(HEALTHY, "t-other"), DiagnoseOptions())
    # content capture off: no failure found, the verdict unknown (healthy null)
    off = json.loads((FIXTURES / "integrations" / "otel-openai-v2-content-off.json").read_text())["trace"]
    unknown = load_trace(off)
    unknown.id = "t-unknown"
    assert service.diagnose("acme", unknown, DiagnoseOptions()).healthy is None
    service.stores.db.dispose()
    return tmp_path / "data"


def _export(data: Path, out: Path, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    from serve.cli.main import app

    get_settings.cache_clear()
    try:
        r = CliRunner().invoke(
            app,
            ["datasets", "export", "--from-store", "--out", str(out), *args],
            env={"TRIAGE_DATA_DIR": str(data), "TRIAGE_DATABASE_URL": None},
        )
    finally:
        get_settings.cache_clear()
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return r.exit_code, rows, r.stdout + r.stderr


def test_export_labels_from_outcomes_and_humans(history: Path, tmp_path: Path) -> None:
    code, rows, text = _export(history, tmp_path / "out.jsonl")
    assert code == 0, text
    by_id = {r["id"]: r for r in rows}
    assert set(by_id) == {"t-fixed", "t-human"}
    fixed = by_id["t-fixed"]
    assert fixed["labels"]["source"] == "repair_outcome"
    assert [(f["kind"], f["source_index"], f["confidence"]) for f in fixed["labels"]["failures"]] == [
        ("ignored_error", 4, 0.9)
    ]
    assert fixed["steps"][1]["content"] == "Ask [REDACTED:email]"
    assert fixed["metadata"]["redaction"]["mode"] == "mask"
    human = by_id["t-human"]
    assert human["labels"]["source"] == "human" and human["labels"]["failed"] is True
    assert [(f["kind"], f["step"]) for f in human["labels"]["failures"]] == [("hallucination", 2)]
    for row in rows:
        Trace.model_validate(row)  # what the training pipeline reads
    assert "wrote 2 traces" in text and "skipped 3" in text  # t-healthy, t-other, t-unknown


def test_export_unconfirmed_and_tenant(history: Path, tmp_path: Path) -> None:
    code, rows, _ = _export(history, tmp_path / "all.jsonl", "--include-unconfirmed", "--tenant", "acme")
    assert code == 0
    by_id = {r["id"]: r for r in rows}
    assert set(by_id) == {"t-fixed", "t-healthy", "t-human"}  # not t-unknown: no label, not "healthy"
    assert (
        by_id["t-healthy"]["labels"]["failures"] == []
        and by_id["t-healthy"]["labels"]["source"] == "rule_vote"
    )
    code, _, text = _export(history, tmp_path / "x.jsonl", "--tenant", "nobody")
    assert code == 0 and "wrote 0 traces" in text


def test_export_needs_a_source(tmp_path: Path) -> None:
    from serve.cli.main import app

    r = CliRunner().invoke(app, ["datasets", "export", "--out", str(tmp_path / "x.jsonl")])
    assert r.exit_code == 2 and "--from-store" in r.stderr
