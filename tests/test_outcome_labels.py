"""Outcomes as evidence: an outcome's `label` is a human label by author `outcome`, placed at the
failure its recommendation addressed; without one, the export keeps outcomes as evidence about the
diagnosed failure and leaves `labels.failed` unset (docs/service.md, "Recorded outcomes as evidence")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from model.core.options import DiagnoseOptions
from model.core.schema import LabelSource
from model.data.builder import make_trace
from model.diagnosis.diagnoser import Diagnoser
from serve.schemas import LabelRequest, OutcomeRequest
from serve.services.run_labels import addressed_place, labels_for
from serve.services.triage import TriageService
from serve.settings import Settings
from serve.wiring import build_service
from tests.storefix import db_url  # noqa: F401  (fixture)


@pytest.fixture
def service(db_url: str, tmp_path: Path) -> Iterator[TriageService]:  # noqa: F811
    s = build_service(Settings(database_url=db_url, data_dir=tmp_path), Diagnoser())
    yield s
    s.stores.db.dispose()


def _loop(service: TriageService, tid: str) -> tuple[str, int, int]:
    trace = make_trace("loop", seed=4, n_steps=9)
    trace.id = tid
    resp = service.diagnose("t", trace, DiagnoseOptions())
    assert resp.primary is not None and resp.primary.kind.value == "loop"
    assert resp.primary.step is not None and resp.primary.source_index is not None
    return resp.recommendation.id, resp.primary.step, resp.primary.source_index


def _record(service: TriageService, tid: str) -> dict:  # type: ignore[type-arg]
    return next(r for r in service.stores.labels.iter_history("t") if r["trace"]["id"] == tid)


def test_outcome_label_is_placed_at_the_addressed_failure(service: TriageService) -> None:
    rec, step, source_index = _loop(service, "a")
    service.report_outcome("t", OutcomeRequest(recommendation_id=rec, success=True, label="loop"))  # type: ignore[arg-type]
    (row,) = service.stores.labels.trace_labels("t", "a")
    assert (row["failed"], row["kind"], row["step"], row["source_index"], row["author"], row["author_type"]) == (
        True, "loop", step, source_index, "outcome", "human")
    label = service.get_trace("t", "a").label
    assert label is not None and label.failed and label.author == "outcome"
    assert [(f.kind, f.step, f.source_index) for f in label.failures] == [("loop", step, source_index)]
    exported = labels_for(_record(service, "a"), include_unconfirmed=False)
    assert exported is not None and exported.failed is True and exported.source is LabelSource.HUMAN
    assert [(f.kind and f.kind.value, f.step) for f in exported.failures] == [("loop", step)]
    # a reviewer's later verdict outranks it as any newer human label would
    service.add_label("t", "a", LabelRequest(failed=False, author="ana"))
    label = service.get_trace("t", "a").label
    assert label is not None and not label.failed and label.author == "ana"


def test_healthy_outcome_label_and_outcomes_without_labels(service: TriageService) -> None:
    rec, _, _ = _loop(service, "b")
    service.report_outcome("t", OutcomeRequest(recommendation_id=rec, success=True, label="healthy"))  # type: ignore[arg-type]
    (row,) = service.stores.labels.trace_labels("t", "b")
    assert (row["failed"], row["kind"], row["step"], row["source_index"]) == (False, None, None, None)
    exported = labels_for(_record(service, "b"), include_unconfirmed=False)
    assert exported is not None and exported.failed is False and exported.failures == []

    # no label: the repair that worked confirms the diagnosed failure (0.9), labels.failed unset
    rec, step, source_index = _loop(service, "c")
    service.report_outcome("t", OutcomeRequest(recommendation_id=rec, success=True))
    assert service.stores.labels.trace_labels("t", "c") == []
    exported = labels_for(_record(service, "c"), include_unconfirmed=False)
    assert exported is not None and exported.failed is None and exported.source is LabelSource.REPAIR_OUTCOME
    assert [(f.kind and f.kind.value, f.step, f.source_index, f.confidence) for f in exported.failures] == [
        ("loop", step, source_index, 0.9)]
    # every repair failed: the failure is kept, weaker (the diagnosis or the repair may be wrong)
    rec, step, _ = _loop(service, "d")
    got = service.report_outcome("t", OutcomeRequest(recommendation_id=rec, success=False))
    assert got.next is not None
    exported = labels_for(_record(service, "d"), include_unconfirmed=False)
    assert exported is not None and exported.failed is None
    assert [(f.step, f.confidence) for f in exported.failures] == [(step, 0.6)]


def test_addressed_place() -> None:
    state = {"failures": {"loop@5": {"step": 9, "source_index": 5}, "incomplete@-": {"step": 12}}}
    assert addressed_place("loop@5", state) == (9, 5)
    assert addressed_place("incomplete@-", state) == (12, None)
    assert addressed_place("tool_error@3", {}) == (None, 3)  # not in the state: the key's source_index
    assert addressed_place(None, state) == (None, None)
