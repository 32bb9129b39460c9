"""Label undo: ``POST /v1/labels/undo`` withdraws the caller's newest label — the row is kept, marked
withdrawn, and counts nowhere (effective label, export, retraining's runs, the review queue) — on
SQLite and PostgreSQL, over real HTTP (404 when nothing is left, 422 naming the field), and the
review's ``u`` key."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from model.core.errors import NotFoundError
from model.core.options import DiagnoseOptions
from model.data.builder import make_trace
from model.diagnosis.diagnoser import Diagnoser
from serve.auth import create_key
from serve.cli.label_review import TerminalKeys, run_review
from serve.schemas import LabelRequest, UndoLabelRequest
from serve.services.label_queue import review_queue
from serve.services.retrain import labelled_runs
from serve.services.run_labels import labels_for
from serve.services.triage import TriageService
from serve.settings import Settings
from serve.store import Stores
from serve.wiring import build_service
from tests.conftest import LiveServer
from tests.storefix import db_url  # noqa: F401  (fixture)

T = "acme"


@pytest.fixture
def service(db_url: str) -> Iterator[TriageService]:  # noqa: F811
    svc = build_service(Settings(database_url=db_url), Diagnoser.with_shipped_models(classifier=False, runscore=False))
    for n, kind in enumerate(["loop", None, "malformed_call"]):
        trace = make_trace(kind, seed=20 + n, n_steps=8)
        trace.id = f"run-{n}"
        svc.diagnose(T, trace, DiagnoseOptions())
    yield svc
    svc.stores.db.dispose()


def _label(svc: TriageService, tid: str, failed: bool, author: str = "ana", **kw: object) -> None:
    svc.add_label(T, tid, LabelRequest.model_validate({"failed": failed, "author": author, **kw}))


def test_undo_withdraws_newest_keeps_the_row_and_counts_nowhere(service: TriageService, db_url: str) -> None:  # noqa: F811
    _label(service, "run-0", True, kind="loop")
    _label(service, "run-0", False, author="bob")
    _label(service, "run-1", False)
    assert labels_for(next(r for r in service.stores.labels.iter_history(T) if r["trace"]["id"] == "run-1"),
                      include_unconfirmed=False) is not None
    got = service.undo_label(T, UndoLabelRequest(author="ana"))
    assert got.trace_id == "run-1" and got.withdrawn.failed is False and got.labels == 0 and got.label is None
    # the row is still there, marked; no reader counts it
    with Stores.at(db_url).db.engine.connect() as conn:
        rows = conn.execute(text("SELECT trace_id, author, withdrawn_at FROM labels ORDER BY id")).all()
    assert [(t, a, w is not None) for t, a, w in rows] == [("run-0", "ana", False), ("run-0", "bob", False),
                                                            ("run-1", "ana", True)]
    assert service.get_trace(T, "run-1").label is None and service.stores.labels.trace_labels(T, "run-1") == []
    record = next(r for r in service.stores.labels.iter_history(T) if r["trace"]["id"] == "run-1")
    assert record["labels"] == [] and labels_for(record, include_unconfirmed=False) is None
    assert "run-1" not in {r.trace.id for r in labelled_runs(service.stores.labels, T)}  # retraining's runs
    queue, done = review_queue(service.stores.labels, T, author="ana", threshold_for=lambda _: None)
    assert "run-1" in {c.trace_id for c in queue} and done == 1  # back in ana's queue
    # again: ana's label on run-0; bob's (newer) stays and decides
    got = service.undo_label(T, UndoLabelRequest(author="ana"))
    assert got.trace_id == "run-0" and got.withdrawn.kind == "loop" and got.labels == 1
    assert got.label is not None and got.label.author == "bob" and got.label.failed is False
    with pytest.raises(NotFoundError):
        service.undo_label(T, UndoLabelRequest(author="ana"))
    # another tenant cannot withdraw acme's labels, even naming the author
    with pytest.raises(NotFoundError):
        service.undo_label("other", UndoLabelRequest(author="bob"))
    # scoped to one trace
    _label(service, "run-2", True)
    _label(service, "run-1", True)
    got = service.undo_label(T, UndoLabelRequest(author="ana", trace_id="run-2"))
    assert got.trace_id == "run-2" and service.get_trace(T, "run-1").label is not None


def test_review_u_undoes_and_goes_back(service: TriageService) -> None:
    queue, _ = review_queue(service.stores.labels, T, author="ana", threshold_for=lambda _: None)
    first, second = queue[0].trace_id, queue[1].trace_id
    out = io.StringIO()
    # ok on the first; on the second, undo (back to the first); failed on it; quit on the second
    keys = TerminalKeys(out=out, stdin=io.StringIO("o\nu\nf\nq\n"))
    saved, skipped = run_review(service, T, queue, author="ana", keys=keys, out=out)
    text_out = out.getvalue()
    assert (saved, skipped) == (1, 0), text_out
    assert f"undone: ok on {first} (withdrawn, kept in the store)" in text_out
    assert text_out.count(f"=== 1/{len(queue)}  {first}") == 2  # shown again after the undo
    assert f"=== 2/{len(queue)}  {second}" in text_out
    rows = service.stores.labels.trace_labels(T, first)
    assert [(r["author"], r["failed"]) for r in rows] == [("ana", True)]  # the withdrawn "ok" counts nowhere
    label = service.get_trace(T, first).label
    assert label is not None and label.failed and label.labels == 1


@pytest.fixture(scope="module")
def undo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, str, str]]:
    data = tmp_path_factory.mktemp("undo")
    url = f"sqlite:///{data / 'triage.db'}"
    store = Stores.at(url)
    store.db.upgrade()
    key_a, _ = create_key(store.keys, "acme")
    key_b, _ = create_key(store.keys, "other")
    store.db.dispose()
    srv = LiveServer(env={"TRIAGE_DATA_DIR": str(data), "TRIAGE_DATABASE_URL": url, "TRIAGE_AUTH": "on",
                          "TRIAGE_CLASSIFIER": "false"}).wait_ready()
    try:
        yield srv, key_a, key_b
    finally:
        srv.stop()


def test_http_undo(undo_server: tuple[LiveServer, str, str], tmp_path: Path) -> None:
    srv, key_a, key_b = undo_server
    a = {"Authorization": f"Bearer {key_a}"}
    trace = make_trace("loop", seed=5, n_steps=8)
    r = httpx.post(f"{srv.url}/v1/diagnose", headers=a, json={"trace": trace.model_dump(mode="json")}, timeout=60)
    assert r.status_code == 200, r.text
    tid = r.json()["trace_id"]
    assert httpx.post(f"{srv.url}/v1/traces/{tid}/labels", headers=a, json={"failed": True}, timeout=30).status_code == 200
    assert httpx.post(f"{srv.url}/v1/traces/{tid}/labels", headers=a, json={"failed": False, "author": "rev"},
                      timeout=30).status_code == 200
    # another tenant's key: its own labels only (none)
    r = httpx.post(f"{srv.url}/v1/labels/undo", headers={"Authorization": f"Bearer {key_b}"}, json={}, timeout=30)
    assert r.status_code == 404, r.text
    for body, loc in [({"author": "x" * 201}, ["body", "author"]), ({"trace_id": "a/b"}, ["body", "trace_id"]),
                      ({"nope": 1}, ["body", "nope"]), ([], ["body"])]:
        r = httpx.post(f"{srv.url}/v1/labels/undo", headers=a, json=body, timeout=30)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == loc, (body, r.text)
    # without author: the key's own label (posted without author), not the reviewer's newer one
    r = httpx.post(f"{srv.url}/v1/labels/undo", headers=a, json={}, timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["trace_id"] == tid and body["withdrawn"]["failed"] is True and body["withdrawn"]["author"].startswith("key:")
    assert body["labels"] == 1 and body["label"]["author"] == "rev"
    assert httpx.get(f"{srv.url}/v1/traces/{tid}", headers=a, timeout=30).json()["label"]["labels"] == 1
    assert httpx.post(f"{srv.url}/v1/labels/undo", headers=a, json={}, timeout=30).status_code == 404
    r = httpx.post(f"{srv.url}/v1/labels/undo", headers=a, json={"author": "rev", "trace_id": tid}, timeout=30)
    assert r.status_code == 200 and r.json()["label"] is None
