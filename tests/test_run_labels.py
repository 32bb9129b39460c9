"""Run-level labels: ``POST /v1/traces/{id}/labels`` with ``failed``, authors and author types, the
effective label (an author's newest wins, a human's outranks a checker's) on SQLite and PostgreSQL,
what ``GET /v1/traces/{id}`` shows and what ``datasets export --from-store`` writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from model.core.errors import InputError, NotFoundError
from model.core.options import DiagnoseOptions
from model.data.builder import make_trace
from model.diagnosis.diagnoser import Diagnoser
from serve.examples import OPENAI_LOOP
from serve.schemas import LabelRequest
from serve.services.run_labels import effective_label, labels_for
from serve.services.triage import TriageService
from serve.settings import Settings
from serve.store import Stores
from serve.store.migrate import upgrade as migrate_to
from serve.wiring import build_service
from tests.conftest import LiveServer
from tests.storefix import db_url  # noqa: F401  (fixture)

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _row(i: int, failed: bool | None, *, author: str = "", author_type: str = "human",
         kind: str | None = None, step: int | None = None) -> dict[str, Any]:
    return {"id": i, "created_at": T0 + timedelta(seconds=i), "failed": failed, "kind": kind, "step": step,
            "source_index": step, "author": author, "author_type": author_type}


def test_effective_label_rules() -> None:
    assert effective_label([]) is None
    # an author's newest wins: a reviewer first says loop at 3, then "healthy"
    eff = effective_label([_row(1, True, author="r", kind="loop", step=3), _row(2, False, author="r")])
    assert eff is not None and not eff.failed and eff.failures == [] and eff.labels == 2
    # and back to failed: only the failures since the "healthy" count
    eff = effective_label([_row(1, True, author="r", kind="loop", step=3), _row(2, False, author="r"),
                           _row(3, True, author="r", kind="hallucination", step=5), _row(4, True, author="r")])
    assert eff is not None and eff.failed and [(f.kind, f.step) for f in eff.failures] == [("hallucination", 5)]
    # a human outranks a checker, however new the checker's label
    eff = effective_label([_row(1, False, author="alice"), _row(2, True, author="ci", author_type="checker")])
    assert eff is not None and not eff.failed and (eff.author, eff.author_type) == ("alice", "human")
    # checkers alone: the newest checker decides
    eff = effective_label([_row(1, True, author="a", author_type="checker"),
                           _row(2, False, author="b", author_type="checker")])
    assert eff is not None and not eff.failed and eff.author == "b" and eff.author_type == "checker"
    # two humans: the newest decides failed; the failures are those of the humans who say failed
    eff = effective_label([_row(1, True, author="a", kind="loop", step=2), _row(2, False, author="b"),
                           _row(3, True, author="c", step=4)])
    assert eff is not None and eff.failed and [(f.kind, f.step) for f in eff.failures] == [("loop", 2), (None, 4)]
    # rows from before run-level labels (failed NULL): a kind meant failed
    eff = effective_label([_row(1, None, kind="loop", step=1)])
    assert eff is not None and eff.failed


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"failed": False, "kind": "loop"}, "kind"),
        ({"failed": True, "kind": "healthy"}, "kind"),
        ({}, "failed"),
        ({"author": "x"}, "failed"),
        ({"failed": False, "step": 1}, "step"),
        ({"kind": "healthy", "source_index": 1}, "source_index"),
        ({"failed": True, "step": 1, "source_index": 1}, "source_index"),
    ],
)
def test_label_request_names_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as exc:
        LabelRequest.model_validate(body).verdict()
    assert exc.value.path == field


@pytest.fixture
def service(db_url: str) -> Any:  # noqa: F811
    svc = build_service(Settings(database_url=db_url), Diagnoser())
    yield svc
    svc.stores.db.dispose()


def _label(service: TriageService, trace_id: str, **body: Any) -> Any:
    return service.add_label("t", trace_id, LabelRequest.model_validate(body))


def test_precedence_in_the_store(service: TriageService) -> None:
    trace = make_trace("loop", seed=3, n_steps=10)
    service.diagnose("t", trace, DiagnoseOptions())
    r = _label(service, trace.id, failed=True, author="reward", author_type="checker")
    assert r.labels == 1 and r.label.failed and r.label.author_type == "checker" and r.label.failures == []
    r = _label(service, trace.id, failed=False, author="alice")
    assert r.labels == 2 and not r.label.failed and (r.label.author, r.label.author_type) == ("alice", "human")
    r = _label(service, trace.id, failed=True, author="reward", author_type="checker")  # newer, still a checker
    assert not r.label.failed
    last = len(trace.steps) - 1
    r = _label(service, trace.id, failed=True, kind="loop", source_index=trace.steps[last].source_index,
               author="alice")  # alice's newest: failed, a loop
    first = next(i for i, s in enumerate(trace.steps) if s.source_index == trace.steps[last].source_index)
    assert r.label.failed and [(f.kind, f.step) for f in r.label.failures] == [("loop", first)]
    detail = service.get_trace("t", trace.id)
    assert detail.label is not None and detail.label.failed and detail.label.labels == 4
    # the export: the effective label, labels.failed and the located failure
    (record,) = list(service.stores.labels.iter_history("t"))
    exported = labels_for(record, include_unconfirmed=False)
    assert exported is not None and exported.failed is True and exported.source.value == "human"
    assert [(f.kind and f.kind.value, f.step) for f in exported.failures] == [("loop", first)]


def test_failed_only_exports_as_failed_and_bad_input(service: TriageService) -> None:
    trace = make_trace(None, seed=1, n_steps=6)
    service.diagnose("t", trace, DiagnoseOptions())
    assert service.get_trace("t", trace.id).label is None
    _label(service, trace.id, failed=True, author="ci", author_type="checker")
    (record,) = list(service.stores.labels.iter_history("t"))
    exported = labels_for(record, include_unconfirmed=False)
    assert exported is not None and exported.failed is True and exported.failures == []
    assert exported.source.value == "checker" and not exported.healthy  # not "healthy" for lack of a kind
    with pytest.raises(NotFoundError):
        _label(service, "nope", failed=True)
    with pytest.raises(InputError) as exc:
        _label(service, trace.id, failed=True, source_index=10_000)
    assert exc.value.path == "source_index"
    with pytest.raises(InputError) as exc:
        _label(service, trace.id, failed=False, kind="loop")
    assert exc.value.path == "kind"
    assert len(service.stores.labels.trace_labels("t", trace.id)) == 1  # nothing written by the refusals


def test_migration_fills_failed_for_older_labels(db_url: str) -> None:  # noqa: F811
    store = Stores.at(db_url)
    try:
        migrate_to(store.db.engine, "0003")
        with store.db.engine.begin() as conn:
            conn.execute(text("INSERT INTO labels (tenant_id, trace_id, kind, author, created_at) VALUES "
                              "('t', 'a', 'loop', '', '2026-01-01 00:00:00'), "
                              "('t', 'b', NULL, '', '2026-01-01 00:00:00')"))
        store.db.upgrade()
        with store.db.engine.connect() as conn:
            got = sorted(conn.execute(text("SELECT trace_id, failed, author_type FROM labels")).all())
        assert [(t, bool(f), a) for t, f, a in got] == [("a", True, "human"), ("b", False, "human")]
    finally:
        store.db.dispose()


def test_http_labels_and_422(live_server: LiveServer) -> None:
    base = live_server.url
    d = httpx.post(f"{base}/v1/diagnose", json=OPENAI_LOOP, timeout=60).json()
    tid = d["trace_id"]
    r = httpx.post(f"{base}/v1/traces/{tid}/labels", json={"failed": True, "author": "ci",
                                                           "author_type": "checker"}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["label"]["failed"] is True and r.json()["label"]["author_type"] == "checker"
    r = httpx.post(f"{base}/v1/traces/{tid}/labels", json={"failed": False, "kind": "loop"}, timeout=30)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "kind"], r.text
    r = httpx.post(f"{base}/v1/traces/{tid}/labels", json={"failed": "yes"}, timeout=30)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "failed"], r.text
    r = httpx.post(f"{base}/v1/traces/{tid}/labels", json={"failed": True, "author_type": "bot"}, timeout=30)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "author_type"], r.text
    r = httpx.post(f"{base}/v1/traces/{tid}/labels", json={"failed": False, "author": "bob"}, timeout=30)
    assert r.status_code == 200 and r.json()["labels"] == 2
    got = httpx.get(f"{base}/v1/traces/{tid}", timeout=30).json()["label"]
    assert got["failed"] is False and got["author"] == "bob" and got["author_type"] == "human"


def test_export_cli_writes_failed(tmp_path: Path) -> None:
    from tests.test_export import _export

    data = tmp_path / "data"
    service = build_service(Settings(data_dir=data), Diagnoser())
    trace = make_trace(None, seed=2, n_steps=6)
    trace.id = "run-failed"
    service.diagnose("acme", trace, DiagnoseOptions())
    service.add_label("acme", trace.id, LabelRequest(failed=True, author="ci", author_type="checker"))
    service.stores.db.dispose()
    code, rows, out = _export(data, tmp_path / "out.jsonl")
    assert code == 0, out
    (row,) = rows
    assert row["labels"]["failed"] is True and row["labels"]["source"] == "checker"
    assert "1 checker" in out
