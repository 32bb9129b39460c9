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
        assert m.encoder_ is not None and m.encoder_.version == counting.version
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
    runs, size = service.stores.encodings.stored_bytes("acme")
    assert runs == 4 and size == steps * counting.dim * 2  # float16, a row a step
    # posted again, changed: the old vectors go with the old steps
    t = _bare(rest[0].trace)
    t.steps = t.steps[:3]
    service.diagnose("acme", t, DiagnoseOptions(agent=AGENT))
    assert _stored_vectors(service, t, counting).shape[0] == 3
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
    from datetime import timedelta

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
        assert stores.traces.purge_older_than(timedelta(seconds=0)) == 1
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
