"""The encoder block in the service (issue 34, "per step, once"): an agent model whose configuration reads
the static encoder answers ``/v1/diagnose`` and sessions with the offline model's probability; each step
is encoded once, after redaction — by a whole diagnosis, by the append that brought it (even when another
worker appends next) — and its float16 vector is stored with the run (``run_encodings``), deleted with
it, and read by ``triage retrain`` (a retrain whose served configuration has ``encoder_weight`` 1.0
encodes none of the runs stored encoded, and fits the same model as one that encodes them all);
``triage encode-runs`` backfills the runs stored without vectors, once, resumably (SQLite and PostgreSQL).

Encoding is counted on a real :class:`~model.scoring.encoder.StaticEncoder` (the shipped table) whose
``encode`` counts the texts it is given; the stores are real.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from model.core.options import DiagnoseOptions
from model.core.schema import Step, Trace
from model.data.realdata import load_source
from model.diagnosis.diagnoser import Diagnoser
from model.scoring.agent_registry import Registry
from model.scoring.agentmodel.encoded import encode_steps, step_text
from model.scoring.agentmodel.model import AgentModel, AgentModelConfig
from model.scoring.encoder import StaticEncoder, shared_encoder
from serve.schemas import AppendStepsRequest
from serve.services.agent_models import AgentModels
from serve.services.encodings import encode_runs
from serve.services.retrain import retrain
from serve.services.triage import TriageService
from serve.settings import Settings
from serve.wiring import build_service
from tests.storefix import db_url  # noqa: F401  (the SQLite / PostgreSQL fixture)

AGENT = "airline"
CFG: dict[str, Any] = {"shape_weight": 0.3, "c": 8.0, "last_turn": True, "encoder_weight": 1.0, "buckets": 1 << 14}


class Counting(StaticEncoder):
    """The shipped encoder, counting the texts it encodes."""

    def __init__(self, base: StaticEncoder) -> None:
        super().__init__(base.tokenizer, base.embeddings, meta=base.meta)
        self.texts = 0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += len(texts)
        return super().encode(texts)


def textual(steps: Sequence[Step]) -> int:
    return sum(step_text(s) is not None for s in steps)


@pytest.fixture(scope="module")
def counting() -> Counting:
    return Counting(shared_encoder())


@pytest.fixture(scope="module")
def fitted(counting: Counting) -> tuple[AgentModel, list[Any]]:
    runs = load_source("tau_airline")
    train, rest = runs[:60], runs[60:]
    model = AgentModel.fit([r.trace.model_copy(update={"labels": None}) for r in train], [r.failed for r in train],
                           [r.group for r in train], agent=AGENT, encoder=counting,
                           config=AgentModelConfig(internal_folds=3, target_false_alarm=0.1, **CFG))
    assert model.fitted_ is not None and model.fitted_.w_emb is not None
    return model, rest


def worker(data: Path, url: str, counting: Counting) -> TriageService:
    """One worker of the service on the database at ``url``, its agent models reading with ``counting``."""
    settings = Settings(data_dir=data, database_url=url)
    svc = build_service(settings, Diagnoser.with_shipped_models(classifier=False))
    reg = Registry(settings.resolved_model_registry)

    def load(tenant: str, key: str, version: str) -> Any:
        m: Any = reg.load(tenant, key, version)
        if getattr(m, "encoder_", None) is not None:  # a model that reads the encoder block
            assert m.encoder_.version == counting.version
            m.encoder_ = counting
        return m

    svc.diagnoses.models = AgentModels(active=svc.stores.activations.active_model, load=load)
    return svc


@pytest.fixture
def service(tmp_path: Path, fitted: tuple[AgentModel, list[Any]], counting: Counting) -> Iterator[TriageService]:
    svc = worker(tmp_path, f"sqlite:///{tmp_path / 't.db'}", counting)
    mv = Registry(tmp_path / "models").save("acme", AGENT, fitted[0], parent=None, card="test", report={}, data={})
    svc.stores.activations.activate_model("acme", mv.version, actor="test", agent=AGENT)
    assert svc.models.get("acme", AGENT) is not None  # loaded and smoke-checked (which encodes the smoke run)
    yield svc
    svc.stores.db.dispose()


def _bare(trace: Trace) -> Trace:
    return trace.model_copy(update={"labels": None}, deep=True)


def _stored_vectors(svc: TriageService, trace: Trace, enc: StaticEncoder) -> np.ndarray:
    return svc.stores.encodings.vectors("acme", [(trace.id, len(trace.steps))], enc.version)[trace.id]


def test_a_diagnosis_encodes_each_step_once_and_stores_the_vectors_it_served_with(
        service: TriageService, fitted: tuple[AgentModel, list[Any]], counting: Counting) -> None:
    model, rest = fitted
    steps = 0
    lengths = []
    for r in rest[:4]:
        t = _bare(r.trace)
        counting.texts = 0
        resp = service.diagnose("acme", t, DiagnoseOptions(agent=AGENT))
        basis = resp.failure_probability_basis
        assert basis is not None and basis.model == "agent"
        stored = service.stored_trace("acme", t.id)
        assert counting.texts == textual(stored.steps)  # every step once, in one batch
        assert resp.failure_probability == pytest.approx(model.score(stored, prior=basis.zero_shot_probability),
                                                         abs=1e-9)
        vec = _stored_vectors(service, stored, counting)
        assert np.array_equal(vec, encode_steps(counting, stored.steps), equal_nan=True)
        steps += len(stored.steps)
        lengths.append(len(stored.steps))
    runs, size = service.stores.encodings.stored_bytes("acme")
    assert runs == 4 and size == steps * counting.dim * 2  # float16, a row a step
    # posted again, changed: the old vectors go with the old steps
    t = _bare(rest[0].trace)
    t.steps = t.steps[:3]
    service.diagnose("acme", t, DiagnoseOptions(agent=AGENT))
    assert _stored_vectors(service, t, counting).shape[0] == 3
    assert service.stores.encodings.stored_bytes("acme") == (4, size - (lengths[0] - 3) * counting.dim * 2)  # replaced
    # another agent, answered zero-shot: nothing encoded, nothing stored
    counting.texts = 0
    other = _bare(rest[5].trace)
    service.diagnose("acme", other, DiagnoseOptions(agent="hotel"))
    assert counting.texts == 0 and not service.stores.encodings.vectors("acme", [(other.id, 5)], counting.version)


def test_a_session_append_encodes_only_its_new_steps_after_redaction_on_any_worker(
        service: TriageService, fitted: tuple[AgentModel, list[Any]], counting: Counting, tmp_path: Path) -> None:
    model, rest = fitted
    other = worker(tmp_path, f"sqlite:///{tmp_path / 't.db'}", counting)  # a second worker on the same store
    try:
        assert other.models.get("acme", AGENT) is not None
        t = _bare(next(r for r in rest if r.failed).trace)
        secret = "sk-abcdefghijklmnopqrstuvwx"
        t.steps[1].content = f"{t.steps[1].content} my key is {secret}"
        counting.texts = 0
        last = None
        for i, st in enumerate(t.steps):
            svc = service if (i // 3) % 2 == 0 else other  # three appends on one worker, then three on the other
            last = svc.append_steps("acme", "s1", AppendStepsRequest(
                steps=[st.model_dump(mode="json", exclude_none=True)], agent=AGENT))
            assert last.failure_probability_basis is not None and last.failure_probability_basis.model == "agent"
        assert last is not None and last.failure_probability_basis is not None
        stored = service.stored_trace("acme", service.sessions.get_session("acme", "s1").trace_id)
        assert secret not in stored.steps[1].content and "REDACTED" in stored.steps[1].content
        # each step encoded once, though each worker re-read the session the other had appended to
        assert counting.texts == textual(stored.steps)
        assert last.failure_probability == pytest.approx(
            model.score(stored, prior=last.failure_probability_basis.zero_shot_probability), abs=1e-9)
        # what is stored is the redacted steps' vectors, one a step
        vec = _stored_vectors(service, stored, counting)
        assert np.array_equal(vec, encode_steps(counting, stored.steps), equal_nan=True)
        # deleting the session deletes its vectors
        service.sessions.delete_session("acme", "s1")
        assert not service.stores.encodings.vectors("acme", [(stored.id, len(stored.steps))], counting.version)
    finally:
        other.stores.db.dispose()


def test_deleting_a_run_or_retention_deletes_its_vectors(db_url: str, tmp_path: Path) -> None:  # noqa: F811
    from datetime import UTC, datetime, timedelta

    from serve.store import Stores, open_stores

    stores: Stores = open_stores(Settings(data_dir=tmp_path, database_url=db_url))
    try:
        for tid in ("a", "b"):
            with stores.db.write() as db:
                stores.traces.put_trace(db, tenant="acme", trace_id=tid, trace={"id": tid, "steps": []},
                                        response={}, session_id=None, task_type=None, agent="x")
                stores.encodings.put(db, "acme", tid, 0, "enc", np.ones((2, 4), np.float32))
        assert set(stores.encodings.vectors("acme", [("a", 2), ("b", 2)], "enc")) == {"a", "b"}
        assert stores.traces.delete_trace("acme", "a")
        assert set(stores.encodings.vectors("acme", [("a", 2), ("b", 2)], "enc")) == {"b"}
        assert stores.upkeep.purge_tenant("acme", 1, now=datetime.now(UTC) + timedelta(days=2)).runs == 1
        assert stores.encodings.stored_bytes("acme") == (0, 0)
    finally:
        stores.db.dispose()


def _params(path: Path) -> Path:
    """A parameters file whose served candidate reads the encoder block (not the shipped one's choice)."""
    path.write_text(yaml.safe_dump({"learning_curve": {
        "model": {"prefix_fractions": [0.25, 0.5, 0.75, 1.0], "min_df": 2},
        "candidates": [{}, CFG], "served": 1}}), encoding="utf-8")
    return path


def test_a_retrain_with_the_encoder_block_reads_the_stored_vectors_and_encodes_none(
        service: TriageService, fitted: tuple[AgentModel, list[Any]], counting: Counting, tmp_path: Path) -> None:
    from serve.services.retrain import model_config

    _, rest = fitted
    settings = Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 't.db'}",
                        params_path=_params(tmp_path / "params.yaml"), retrain_cv_folds=3, retrain_cv_draws=1)
    config, _ = model_config(settings.params_path)
    assert config.encoder_weight == 1.0
    runs = rest[:40]
    assert 5 <= sum(r.failed for r in runs) <= 35
    steps = 0
    for r in runs:
        t = _bare(r.trace)
        t.metadata = {**t.metadata, "task_id": r.group}
        service.diagnose("acme", t, DiagnoseOptions(agent=AGENT))
        service.stores.labels.add_label("acme", t.id, failed=r.failed, author="checker", author_type="checker")
        steps += textual(service.stored_trace("acme", t.id).steps)
    st = service.stores
    counting.texts = 0
    first = retrain(st.activations, st.labels, settings, "acme", promote=False, record=False, only=[AGENT],
                    encodings=st.encodings, encoder=counting)
    assert counting.texts == 0  # every run was stored with its vectors
    assert first.cache["encoded_runs_stored"] == 40 and first.cache["encoded_runs_missing"] == 0
    # the same history without its vectors: each step encoded once, and the same model
    with st.db.write() as db:
        for r in runs:
            st.encodings.drop(db, "acme", r.trace.id)
    again = retrain(st.activations, st.labels, settings, "acme", promote=False, record=False, only=[AGENT],
                    encodings=st.encodings, encoder=counting)
    assert counting.texts == steps and again.cache["encoded_runs_missing"] == 40
    (a,), (b,) = first.models, again.models
    reg = Registry(settings.resolved_model_registry)
    assert a.learner == b.learner
    assert reg.load("acme", AGENT, a.version.version).version == reg.load("acme", AGENT, b.version.version).version


def test_the_backfill_encodes_stored_runs_once_and_resumes(db_url: str, tmp_path: Path,  # noqa: F811
                                                           counting: Counting) -> None:
    runs = load_source("tau_airline")[:5]
    svc = build_service(Settings(data_dir=tmp_path, database_url=db_url), Diagnoser.with_shipped_models(classifier=False))
    try:
        for r in runs:  # answered zero-shot: no vectors
            svc.diagnose("acme", _bare(r.trace), DiagnoseOptions(agent=AGENT))
        svc.diagnose("beta", _bare(runs[0].trace), DiagnoseOptions(agent=AGENT))
        stored = [svc.stored_trace("acme", r.trace.id) for r in runs]
        st = svc.stores
        counting.texts = 0

        class Stop(Exception):
            pass

        def stop(done: int, total: int) -> None:
            raise Stop

        with pytest.raises(Stop):  # interrupted after its first batch (committed)
            encode_runs(st.encodings, st.traces, counting, tenant="acme", batch=2, progress=stop)
        res = encode_runs(st.encodings, st.traces, counting, tenant="acme", batch=2)
        assert res.encoded == 3 and res.looked == 5
        assert counting.texts == sum(textual(t.steps) for t in stored)  # each step once, over both runs
        for t in stored:
            assert np.array_equal(_stored_vectors(svc, t, counting), encode_steps(shared_encoder(), t.steps),
                                  equal_nan=True)
        again = encode_runs(st.encodings, st.traces, counting, tenant="acme")
        assert again.encoded == 0 and counting.texts == sum(textual(t.steps) for t in stored)  # idempotent
        assert st.encodings.stored_bytes("beta") == (0, 0)  # another tenant's runs were not asked for
        assert encode_runs(st.encodings, st.traces, counting).encoded == 1  # every tenant's
    finally:
        svc.stores.db.dispose()


def test_the_heavy_lane_serves_and_stores_the_encoder_block(tmp_path: Path, fitted: tuple[AgentModel, list[Any]]) -> None:
    """A large body is diagnosed by the worker's helper process, which loads the model (and the shared
    encoder) itself: the same answer, and the run's vectors stored by it."""
    from fastapi.testclient import TestClient

    from serve.app import create_app
    from serve.store import open_stores

    model, rest = fitted
    settings = Settings(data_dir=tmp_path, classifier=False, auth="off", heavy_body_bytes=4096)
    stores = open_stores(settings)
    mv = Registry(settings.resolved_model_registry).save("local", AGENT, model, parent=None, card="", report={}, data={})
    stores.activations.activate_model("local", mv.version, actor="test", agent=AGENT)
    t = _bare(rest[1].trace)
    app = create_app(settings)
    with TestClient(app) as c:
        r = c.post("/v1/diagnose", json={"trace": t.model_dump(mode="json", exclude_none=True),
                                         "options": {"agent": AGENT}})
        assert r.status_code == 200, r.text
        assert app.state.heavy._pool is not None  # the helper answered
        got = r.json()
    try:
        assert got["failure_probability_basis"]["model"] == "agent"
        row = stores.traces.get_trace_json("local", t.id)
        assert row is not None
        stored = Trace.model_validate(row[1])
        assert got["failure_probability"] == pytest.approx(
            model.score(stored, prior=got["failure_probability_basis"]["zero_shot_probability"]), abs=1e-9)
        vec = stores.encodings.vectors("local", [(t.id, len(stored.steps))], shared_encoder().version)[t.id]
        assert np.array_equal(vec, encode_steps(shared_encoder(), stored.steps), equal_nan=True)
    finally:
        stores.db.dispose()


def test_a_hot_swap_to_an_encoder_model_mid_session_encodes_each_step_once(
        tmp_path: Path, fitted: tuple[AgentModel, list[Any]], counting: Counting) -> None:
    model, rest = fitted
    runs = load_source("tau_airline")[:60]
    plain = AgentModel.fit([r.trace.model_copy(update={"labels": None}) for r in runs], [r.failed for r in runs],
                           [r.group for r in runs], agent=AGENT, config=AgentModelConfig(internal_folds=0, buckets=1 << 14))
    svc = worker(tmp_path, f"sqlite:///{tmp_path / 't.db'}", counting)
    svc.diagnoses.models.poll_s = 0.0  # every request reads the activation (the swap is seen at once)
    reg = Registry(tmp_path / "models")
    try:
        svc.stores.activations.activate_model("acme", reg.save("acme", AGENT, plain, parent=None, card="", report={},
                                                               data={}).version, actor="test", agent=AGENT)
        t = _bare(rest[2].trace)
        counting.texts = 0
        for i, st in enumerate(t.steps):
            if i == 5:  # the encoder model is promoted mid-session
                v2 = reg.save("acme", AGENT, model, parent=None, card="", report={}, data={}).version
                svc.stores.activations.activate_model("acme", v2, actor="test", agent=AGENT)
                assert svc.models.get("acme", AGENT) is not None
                counting.texts = 0  # (its smoke check)
            last = svc.append_steps("acme", "s", AppendStepsRequest(
                steps=[st.model_dump(mode="json", exclude_none=True)], agent=AGENT))
            assert last.failure_probability_basis is not None
            assert last.failure_probability_basis.version is not None
            if i < 5:
                assert counting.texts == 0 and last.failure_probability_basis.model == "agent"  # n-grams only
        stored = svc.stored_trace("acme", svc.sessions.get_session("acme", "s").trace_id)
        assert last.failure_probability_basis.model == "agent"
        assert counting.texts == textual(stored.steps)  # the first five once, at the swap; the others as they came
        assert last.failure_probability == pytest.approx(
            model.score(stored, prior=last.failure_probability_basis.zero_shot_probability), abs=1e-9)
        # and all of them are stored: a retrain encodes none of this run
        vec = _stored_vectors(svc, stored, counting)
        assert np.array_equal(vec, encode_steps(shared_encoder(), stored.steps), equal_nan=True)
    finally:
        svc.stores.db.dispose()
