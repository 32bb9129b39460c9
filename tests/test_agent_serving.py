"""Agent models in the service (serve/services/agent_models.py): a real agent model fitted on τ-airline runs,
registered and activated for one (tenant, agent), answers that agent's diagnoses and sessions —
the same probability as the offline model, the prefix score O(1) per step, ``at_risk`` at the step
where the prefix score first crossed its early-warning point — while other agents stay zero-shot,
re-centred on their observed failure rate; a corrupt artefact is refused and zero-shot stays."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from model.core.errors import SmokeCheckError
from model.core.options import DiagnoseOptions
from model.core.schema import Trace
from model.data.realdata import load_source
from model.diagnosis.agent_answer import recentre_offset
from model.diagnosis.diagnoser import Diagnoser
from model.scoring.agent_registry import POOLED, Registry
from model.scoring.agentmodel.model import AgentModel, AgentModelConfig
from serve.schemas import AppendStepsRequest, LabelRequest
from serve.services.agent_models import build_models, check_model
from serve.services.retrain import ZeroShotCache
from serve.services.retrain_plan import plan, shortage
from serve.services.triage import TriageService
from serve.settings import Settings
from serve.wiring import build_service

AGENT = "airline"


@pytest.fixture(scope="module")
def fitted() -> tuple[AgentModel, list[Any]]:
    runs = load_source("tau_airline")
    train, rest = runs[:60], runs[60:]
    traces = [r.trace.model_copy(update={"labels": None}) for r in train]
    prior = ZeroShotCache(None).probabilities(traces)
    model = AgentModel.fit(traces, [r.failed for r in train], [r.group for r in train], prior=prior, agent=AGENT,
                           config=AgentModelConfig(internal_folds=3, target_false_alarm=0.1))  # 25 successful:
    return model, rest  # enough for a 10 % early-warning tail (5 % needs 40)


@pytest.fixture
def service(tmp_path: Path, fitted: tuple[AgentModel, list[Any]]) -> Iterator[TriageService]:
    settings = Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 't.db'}")
    svc = build_service(settings, Diagnoser.with_shipped_models(classifier=False))
    svc.diagnoses.models = build_models(settings, svc.stores.activations)
    reg = Registry(settings.resolved_model_registry)
    mv = reg.save("acme", AGENT, fitted[0], parent=None, card="test", report={}, data={})
    svc.stores.activations.activate_model("acme", mv.version, actor="test", agent=AGENT)
    yield svc
    svc.stores.db.dispose()


def _bare(trace: Trace) -> Trace:
    return trace.model_copy(update={"labels": None}, deep=True)


def test_served_probability_is_the_offline_models(service: TriageService, fitted: tuple[AgentModel, list[Any]]) -> None:
    model, rest = fitted
    for r in rest[:6]:
        t = _bare(r.trace)
        resp = service.diagnose("acme", t, DiagnoseOptions(agent=AGENT))
        basis = resp.failure_probability_basis
        assert basis is not None and basis.model == "agent" and basis.agent == AGENT and basis.labelled_runs == 60
        assert basis.cv_auroc == model.card_["cv_auroc"] and resp.model_version.endswith("+" + (basis.version or "@?").split("@")[1])
        stored = service.stored_trace("acme", t.id)  # as served: redacted first
        assert resp.failure_probability == pytest.approx(model.score(stored, prior=basis.zero_shot_probability),
                                                         abs=1e-9)
    # another agent of the tenant, and the same agent of another tenant: zero-shot
    other = service.diagnose("acme", _bare(rest[0].trace), DiagnoseOptions(agent="hotel"))
    assert other.failure_probability_basis is not None and other.failure_probability_basis.model == "zero-shot"
    assert other.failure_probability == other.failure_probability_basis.zero_shot_probability
    elsewhere = service.diagnose("beta", _bare(rest[0].trace), DiagnoseOptions(agent=AGENT))
    assert elsewhere.failure_probability_basis is not None and elsewhere.failure_probability_basis.model == "zero-shot"


def test_a_session_gets_the_prefix_score_and_at_risk_where_it_first_crossed(
        service: TriageService, fitted: tuple[AgentModel, list[Any]]) -> None:
    model, rest = fitted
    thr = model.at_risk_threshold
    assert thr is not None
    failing = [r for r in rest if r.failed][:5]
    raised = 0
    for k, r in enumerate(failing):
        t = _bare(r.trace)
        sid = f"s{k}"
        last = None
        for st in t.steps:
            last = service.append_steps("acme", sid, AppendStepsRequest(
                steps=[st.model_dump(mode="json", exclude_none=True)], agent=AGENT))
            assert last.failure_probability_basis is not None and last.failure_probability_basis.model == "agent"
        assert last is not None
        stored = service.stored_trace("acme", service.sessions.get_session("acme", sid).trace_id)
        # the prefix state kept between appends gives what a fresh read of the whole session gives
        assert last.failure_probability == pytest.approx(
            model.score(stored, prior=last.failure_probability_basis.zero_shot_probability), abs=1e-9)
        at_risk = [f for f in last.failures if f.kind == "at_risk"]
        if at_risk:
            raised += 1
            step = at_risk[0].step
            assert step is not None and at_risk[0].details["prefix_probability"] >= thr
            assert at_risk[0].details["threshold"] == thr
    assert raised >= 1


def test_a_corrupt_or_broken_model_is_refused_and_zero_shot_stays(tmp_path: Path,
                                                                  fitted: tuple[AgentModel, list[Any]]) -> None:
    settings = Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 't.db'}")
    svc = build_service(settings, Diagnoser.with_shipped_models(classifier=False))
    try:
        svc.diagnoses.models = build_models(settings, svc.stores.activations)
        reg = Registry(settings.resolved_model_registry)
        mv = reg.save("acme", AGENT, fitted[0], parent=None, card="", report={}, data={})
        (mv.path / "agentmodel.json").write_text("{}")  # edited after save: sha256 differs
        svc.stores.activations.activate_model("acme", mv.version, actor="test", agent=AGENT)
        resp = svc.diagnose("acme", _bare(fitted[1][0].trace), DiagnoseOptions(agent=AGENT))
        assert resp.failure_probability_basis is not None and resp.failure_probability_basis.model == "zero-shot"
        assert svc.models.refused == {("acme", "load"): 1}
    finally:
        svc.stores.db.dispose()
    broken = AgentModel.from_dict(fitted[0].to_dict())
    broken.at_risk_threshold = float("nan")
    with pytest.raises(SmokeCheckError, match="at_risk_threshold"):
        check_model(broken)


def test_promotion_and_rollback_swap_in_without_a_restart(service: TriageService,
                                                           fitted: tuple[AgentModel, list[Any]]) -> None:
    from model.scoring.agent_registry import ZERO_SHOT

    model, rest = fitted
    t = _bare(rest[0].trace)
    first = service.diagnose("acme", t, DiagnoseOptions(agent=AGENT)).failure_probability_basis
    assert first is not None and first.model == "agent"
    v1 = first.version
    service.stores.activations.activate_model("acme", ZERO_SHOT, actor="test", action="rollback", agent=AGENT)
    service.models.poll()
    after = service.diagnose("acme", t, DiagnoseOptions(agent=AGENT)).failure_probability_basis
    assert after is not None and after.model == "zero-shot"
    assert v1 is not None
    service.stores.activations.activate_model("acme", v1.split("@")[1], actor="test", agent=AGENT)
    service.models.poll()
    again = service.diagnose("acme", t, DiagnoseOptions(agent=AGENT)).failure_probability_basis
    assert again is not None and again.model == "agent" and again.version == v1


def test_zero_shot_is_recentred_on_the_agents_observed_rate(service: TriageService,
                                                            fitted: tuple[AgentModel, list[Any]]) -> None:
    assert recentre_offset([0.3, 0.3], [True, True]) > 0 > recentre_offset([0.3, 0.3], [False, False])
    assert abs(recentre_offset([0.3] * 4, [True, False, False, True])) < 1.0
    _, rest = fitted
    first = service.diagnose("acme", _bare(rest[0].trace), DiagnoseOptions(agent="hotel"))
    assert first.failure_probability_basis is not None and first.failure_probability_basis.labelled_runs == 0
    for r in rest[1:13]:
        t = _bare(r.trace)
        service.diagnose("acme", t, DiagnoseOptions(agent="hotel"))
        service.add_label("acme", t.id, LabelRequest(failed=True, author="qa"))
    service.diagnoses.recentring.ttl_s = 0.0
    again = service.diagnose("acme", _bare(rest[0].trace), DiagnoseOptions(agent="hotel"))
    basis = again.failure_probability_basis
    assert basis is not None and basis.model == "zero-shot" and basis.labelled_runs == 12
    assert again.failure_probability is not None and basis.zero_shot_probability is not None
    assert again.failure_probability > basis.zero_shot_probability  # every labelled run of it failed


def test_plan_gives_enough_agents_their_own_model_and_pools_the_rest() -> None:
    from serve.services.retrain_plan import LabelledRun

    def runs(agent: str, n: int, failed: int) -> list[LabelledRun]:
        return [LabelledRun(Trace(), agent, i < failed, None) for i in range(n)]

    own, skipped = plan([*runs("a", 20, 5), *runs("b", 19, 9), *runs("c", 8, 3), *runs("_pool", 2, 1)],
                        min_runs=20, min_class=5)
    assert sorted(own) == [POOLED, "a"] and len(own[POOLED]) == 29
    # each agent sent to the pool carries the code of what it lacks (issue 31: fixed codes, not prose)
    assert {a: r.code for a, r in skipped.items()} == {"_pool": "too_few_runs", "b": "too_few_runs",
                                                       "c": "too_few_runs"}
    own, skipped = plan([*runs("d", 20, 0), *runs("e", 20, 10)], min_runs=20, min_class=5,
                        groups_of=lambda rs: ["one"] * len(rs) if rs[0].agent == "e" else [str(i) for i in range(len(rs))])
    assert {a: r.code for a, r in skipped.items()} == {"d": "one_class", "e": "too_few_task_groups"}
    own, skipped = plan(runs("c", 8, 3), min_runs=20, min_class=5)
    # the pool is planned whatever its size; retrain refuses it when it is short too
    assert list(own) == [POOLED] and skipped["c"].code == "too_few_runs"
    short = shortage(POOLED, own[POOLED], min_runs=20, min_class=5)
    assert short is not None and short.code == "too_few_runs"
