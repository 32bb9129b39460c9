"""Issue 31 items 4-5: ``triage retrain`` never ends in a traceback, and serves the best measured learner.

Degenerate histories (one run, one class, every run one task group, two groups, empty traces, a corrupt
stored run, huge and tiny agents mixed) are stored through the store's API, with run-level labels only
and no agent names in the traces, and ``triage retrain --json`` runs on them in process: each agent's
exact refusal code and the exit code are asserted (hypothesis draws the mixes). The cheap learners'
numpy export scores as scikit-learn does, and a served cheap learner answers diagnoses and sessions
with ``failure_probability_basis.learner`` naming it.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from model.core.schema import Trace
from model.importers import load_trace
from serve.settings import get_settings
from serve.store import Stores

T = "acme"
ENV = {"TRIAGE_RETRAIN_MIN_RUNS": "6", "TRIAGE_RETRAIN_MIN_CLASS": "2", "TRIAGE_RETRAIN_CV_DRAWS": "1",
       "TRIAGE_AUTH": "off", "TRIAGE_CLASSIFIER": "false"}


def run_trace(i: int, task: str, failed: bool, *, empty: bool = False) -> dict[str, Any]:
    """A small chat run of a booking agent: failed runs meet a tool error and apologise."""
    if empty:
        return {"id": f"r{i}", "steps": [], "metadata": {"task_id": task}}
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    ask = f"please book {words[sum(map(ord, task)) % len(words)]} trip number {task} for {words[i % len(words)]}"
    result = "error: seat not found, booking rejected" if failed else "confirmed booking reference ABC"
    answer = "sorry, I could not book it" if failed else "your trip is booked, enjoy"
    t = load_trace({"messages": [
        {"role": "user", "content": ask},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "book", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": result},
        {"role": "assistant", "content": answer}]}, format="openai")
    t.id = f"r{i}"
    t.metadata = {"task_id": task}
    return t.model_dump(mode="json", exclude_none=True)


def store_runs(store: Stores, runs: list[tuple[str, dict[str, Any], bool]]) -> None:
    """Store ``(agent, trace, failed)`` as a diagnosed run with a checker's run-level label."""
    for agent, trace, failed in runs:
        with store.db.write() as db:
            store.traces.put_trace(db, tenant=T, trace_id=trace["id"], trace=trace, response={}, session_id=None,
                            task_type=None, agent=agent)
        store.labels.add_label(T, trace["id"], failed=failed, author="checker", author_type="checker")


# name → (runs, expected code of the agent, expected status)
def history(kind: str, agent: str, start: int) -> list[tuple[str, dict[str, Any], bool]]:
    def one(i: int, task: str, failed: bool, empty: bool = False) -> tuple[str, dict[str, Any], bool]:
        return agent, run_trace(start + i, f"{agent}-{task}", failed, empty=empty), failed

    if kind == "one_run":
        return [one(0, "t0", True)]
    if kind == "tiny":
        return [one(i, f"t{i}", i == 0) for i in range(3)]
    if kind == "one_class":
        return [one(i, f"t{i % 4}", True) for i in range(10)]
    if kind == "one_group":
        return [one(i, "t0", i % 2 == 0) for i in range(10)]
    if kind == "two_groups":
        return [one(i, f"t{i % 2}", (i // 2) % 2 == 0) for i in range(12)]
    if kind == "two_pure_groups":  # two tasks, one always failing, one always succeeding: no fold has both classes
        return [one(i, f"t{i % 2}", i % 2 == 0) for i in range(12)]
    if kind == "empty":
        return [one(i, f"t{i % 3}", i % 2 == 0, empty=True) for i in range(12)]
    if kind == "huge":
        return [one(i, f"t{i % 8}", (i // 8) % 2 == 0) for i in range(48)]
    raise AssertionError(kind)


EXPECTED_CODE = {"one_run": "too_few_runs", "tiny": "too_few_runs", "one_class": "one_class",
                 "one_group": "too_few_task_groups", "two_pure_groups": "too_few_task_groups", "two_groups": None, "empty": None, "huge": None}


def retrain_json(work: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, dict[str, Any] | None, str]:
    from serve.cli.main import app

    for k, v in {**ENV, "TRIAGE_DATA_DIR": str(work)}.items():
        monkeypatch.setenv(k, v)
    get_settings.cache_clear()
    try:
        r = CliRunner().invoke(app, ["retrain", "--tenant", T, "--json", *args])
    finally:
        get_settings.cache_clear()
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.output
    first = r.stdout.find("{")
    return r.exit_code, json.loads(r.stdout[first:]) if first >= 0 else None, r.output


def open_stores(work: Path) -> Stores:
    store = Stores.at(f"sqlite:///{work / 'triage.db'}")
    store.db.upgrade()
    return store


@pytest.fixture
def work(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


KINDS = sorted(EXPECTED_CODE)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(kinds=["one_run", "one_class", "one_group"], corrupt=False)
@example(kinds=["two_groups", "empty", "tiny"], corrupt=True)
@example(kinds=["huge", "tiny", "one_group"], corrupt=False)
@example(kinds=["two_pure_groups", "one_class"], corrupt=False)
@given(kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=3, unique=True), corrupt=st.booleans())
def test_degenerate_histories_get_their_exact_codes_and_exit_codes(kinds: list[str], corrupt: bool,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        store = open_stores(work)
        runs: list[tuple[str, dict[str, Any], bool]] = []
        for j, kind in enumerate(kinds):
            runs += history(kind, f"agent-{kind}", 1000 * j)
        if corrupt:
            runs.append((f"agent-{kinds[0]}", {"id": "broken", "steps": "not a list of steps"}, True))
        store_runs(store, runs)
        store.db.dispose()
        code, rec, out = retrain_json(work, monkeypatch)
        assert rec is not None, out
        for kind in kinds:
            got = rec["agents"][f"agent-{kind}"]
            want = EXPECTED_CODE[kind]
            if want is None:
                assert got["status"] == "fitted" and got["code"] is None, got
            else:  # no model of its own: refused, or served by the pooled model, its code saying why
                assert got["code"] == want, got
                assert got["status"] in ("refused", "pooled"), got
                if kind in ("one_run", "one_class"):  # one class of its own: the pool cannot be measured on it
                    assert got["status"] == "refused", got
        refused = {(r["agent"], r["code"]) for r in rec["refusals"]}
        assert {a for a, _ in refused} <= {*rec["agents"], "_pooled"}
        assert {c for _, c in refused} <= set(rec["codes"])
        assert (("agent-" + kinds[0], "corrupt_run") in refused) == corrupt
        kept = any(not m["promoted"] for m in rec["models"])
        assert code == (2 if corrupt else 1 if kept else 0), (code, rec["models"])
        assert rec["exit_code"] == code
        if "empty" in kinds:  # every learner scores an empty run alike: nothing beats zero-shot, so it is kept
            m = next(m for m in rec["models"] if m["agent"] == "agent-empty")
            assert not m["promoted"] and m["learner"] in ("tfidf", "length")
        # the record is stored where the console reads it
        from model.scoring.agent_registry import Registry

        stored = Registry(work / "models").retrains(T)
        assert stored and stored[0]["agents"] == rec["agents"]


def test_no_promote_exits_0_and_an_unknown_agent_exits_2(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_stores(work)
    store_runs(store, history("huge", "big", 0) + history("one_group", "flat", 100))
    store.db.dispose()
    code, rec, out = retrain_json(work, monkeypatch, "--no-promote")
    assert code == 0 and rec is not None, out
    assert rec["agents"]["big"]["status"] == "fitted"
    assert rec["agents"]["flat"]["code"] == "too_few_task_groups"
    m = next(m for m in rec["models"] if m["agent"] == "big")
    est = m["gate"]["estimate"]
    # the served learner is the best of the three in the gate's grouped CV (the agent model only when above both)
    best = max(("agent", "tfidf", "length"), key=lambda k: est[k]["auroc"])
    assert est[m["learner"]]["auroc"] == est[best]["auroc"]
    assert est["cv_folds"] == 5 and est["groups"] == 8
    code, rec, out = retrain_json(work, monkeypatch, "--agent", "nobody")
    assert code == 2 and rec is None and "nobody" in out and "Traceback" not in out
    bad = work / "params.yaml"
    bad.write_text("learning_curve: [unclosed\n", encoding="utf-8")
    code, rec, out = retrain_json(work, monkeypatch, "--params", str(bad))
    assert code == 2 and rec is None and "not readable YAML" in out
    (work / "not-a-folder").write_text("", encoding="utf-8")  # a registry that cannot be written: one line, exit 2
    monkeypatch.setenv("TRIAGE_MODEL_REGISTRY", str(work / "not-a-folder"))
    code, rec, out = retrain_json(work, monkeypatch, "--no-promote")
    assert code == 2 and rec is None and "could not write" in out


def test_a_missing_params_file_is_an_error_naming_it_wherever_the_command_runs(
        work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from model.core.paths import REPO_ROOT
    from serve.settings import Settings

    store = open_stores(work)
    store_runs(store, history("huge", "big", 0))
    store.db.dispose()
    missing = work / "elsewhere" / "params.yaml"
    code, rec, out = retrain_json(work, monkeypatch, "--params", str(missing))
    assert code == 2 and rec is None and f"the parameters file {missing} does not exist" in out, out
    monkeypatch.setenv("TRIAGE_PARAMS_PATH", str(missing))  # the service reads it from its settings
    code, rec, out = retrain_json(work, monkeypatch)
    assert code == 2 and rec is None and str(missing) in out and "TRIAGE_PARAMS_PATH" in out, out
    assert not (work / "models").exists()  # refused before anything was fitted or registered
    monkeypatch.delenv("TRIAGE_PARAMS_PATH")
    monkeypatch.chdir(work)  # not the working directory's params.yaml: the checkout's
    assert Settings().params_path == REPO_ROOT / "params.yaml" and Settings().params_path.is_file()


def test_two_task_groups_cut_the_folds_to_two(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_stores(work)
    store_runs(store, history("two_groups", "pair", 0))
    store.db.dispose()
    code, rec, out = retrain_json(work, monkeypatch, "--no-promote")
    assert code == 0 and rec is not None, out
    est = rec["models"][0]["gate"]["estimate"]
    assert est["cv_folds"] == 2 and est["groups"] == 2 and est["folds"] == 2


def test_the_cheap_learners_export_scores_as_scikit_learn() -> None:
    from model.data.realdata import load_source
    from model.scoring.agentmodel.cheap import CheapModel, cheap_view
    from model.training.agentmodel.cheap_export import export
    from model.training.agentmodel.cv import CheapLearners

    runs = load_source("tau_airline")[:90]
    train, test = runs[:60], runs[60:]
    tv = [cheap_view(r.trace) for r in train]
    hv = [cheap_view(r.trace) for r in test]

    def lengths(vs: list[tuple[str, int, int]]) -> np.ndarray:
        return np.array([[np.log1p(v[1]), np.log1p(v[2])] for v in vs])

    cl = CheapLearners([v[0] for v in tv], lengths(tv), np.array([r.failed for r in train], float))
    ref = cl.score([v[0] for v in hv], lengths(hv))
    for learner in ("tfidf", "length"):
        m = CheapModel.from_dict(json.loads(json.dumps(export(cl, learner).to_dict())))  # through its JSON
        mine = np.array([m.score(r.trace) for r in test])
        assert np.allclose(mine, ref[learner], atol=1e-9), learner
        # a prefix scores the prefix's text: the state after k steps equals the score of the first k steps
        t = test[0].trace
        state = m.start()
        for k, step in enumerate(t.steps, 1):
            state.add(step)
            if k in (1, len(t.steps) // 2):
                cut = Trace.model_validate({**t.model_dump(mode="json"), "steps": t.model_dump(mode="json")["steps"][:k]})
                assert m.score_state(state) == m.score(cut)


def test_a_served_cheap_learner_answers_diagnoses_and_sessions(tmp_path: Path) -> None:
    """The TF-IDF learner registered and activated for one agent answers its diagnoses (basis
    ``learner: tfidf``, the offline model's probability) and its sessions (the prefix score kept between
    appends equals a fresh read of the whole session; ``at_risk`` at or above its threshold)."""
    from model.core.options import DiagnoseOptions
    from model.data.realdata import load_source
    from model.diagnosis.diagnoser import Diagnoser
    from model.scoring.agent_registry import Registry
    from model.training.agentmodel.cheap_export import fit_cheap
    from serve.schemas import AppendStepsRequest
    from serve.services.agent_models import build_models
    from serve.settings import Settings
    from serve.wiring import build_service

    runs = load_source("tau_airline")
    train, rest = runs[:120], runs[120:]  # ≥ 45 successful runs: enough to place a 5 % early-warning point
    model = fit_cheap("tfidf", [r.trace.model_copy(update={"labels": None}) for r in train],
                      [r.failed for r in train], [r.group for r in train],
                      card={"agent": "airline", "labelled_runs": 120, "cv_auroc": 0.7})
    assert model.at_risk_threshold is not None
    s = Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 't.db'}")
    svc = build_service(s, Diagnoser.with_shipped_models(classifier=False))
    try:
        svc.diagnoses.models = build_models(s, svc.stores.activations)
        mv = Registry(s.resolved_model_registry).save(T, "airline", model, parent=None, card="t", report={}, data={})
        svc.stores.activations.activate_model(T, mv.version, actor="test", agent="airline")
        t = rest[0].trace.model_copy(update={"labels": None}, deep=True)
        resp = svc.diagnose(T, t, DiagnoseOptions(agent="airline"))
        basis = resp.failure_probability_basis
        assert basis is not None and basis.model == "agent" and basis.learner == "tfidf" and basis.cv_auroc == 0.7
        assert resp.failure_probability == pytest.approx(model.score(svc.stored_trace(T, t.id)), abs=1e-12)
        failing = [r for r in rest if r.failed][:3]
        for k, r in enumerate(failing):
            bare = r.trace.model_copy(update={"labels": None}, deep=True)
            last = None
            for step in bare.steps:
                last = svc.append_steps(T, f"s{k}", AppendStepsRequest(
                    steps=[step.model_dump(mode="json", exclude_none=True)], agent="airline"))
            assert last is not None and last.failure_probability_basis is not None
            assert last.failure_probability_basis.learner == "tfidf"
            stored = svc.stored_trace(T, svc.sessions.get_session(T, f"s{k}").trace_id)
            assert last.failure_probability == pytest.approx(model.score(stored), abs=1e-12)
            for f in last.failures:
                if f.kind == "at_risk":
                    assert f.details["prefix_probability"] >= model.at_risk_threshold
        # a pooled model serves its members only (retrain lists an agent when its OOF AUROC ≥ zero-shot's)
        from model.scoring.agent_registry import POOLED

        length = fit_cheap("length", [r.trace.model_copy(update={"labels": None}) for r in train],
                           [r.failed for r in train], [r.group for r in train])
        pv = Registry(s.resolved_model_registry).save(T, POOLED, length, parent=None, card="t", report={}, data={},
                                                      members=("hotel",))
        svc.stores.activations.activate_model(T, pv.version, actor="test", agent=POOLED)
        for agent, served in (("hotel", True), ("cars", False), ("_pool", False)):
            b = svc.diagnose(T, rest[1].trace.model_copy(update={"labels": None, "id": f"p-{agent}"}, deep=True),
                             DiagnoseOptions(agent=agent)).failure_probability_basis
            assert b is not None and (b.model == "agent") == served, (agent, b)
            assert (b.learner == "length") == served and (b.version or "").startswith(POOLED) == served
    finally:
        svc.stores.db.dispose()


def test_the_pooled_model_serves_an_agent_only_where_it_beats_zero_shot_on_its_labels() -> None:
    from serve.services.retrain_plan import pooled_members

    agents = ["a"] * 4 + ["b"] * 4 + ["c"] * 2
    y = np.array([1, 0, 1, 0, 1, 0, 1, 0, 1, 1], float)
    oof = np.array([[0.9, 0.1, 0.8, 0.2,  0.1, 0.9, 0.2, 0.8,  0.7, 0.6],    # a right, b backwards
                    [0.9, 0.2, np.nan, 0.1,  0.2, 0.8, 0.1, np.nan,  0.5, 0.5]])  # a draw with runs not held out
    zs = np.array([0.5, 0.5, 0.5, 0.5,  0.9, 0.1, 0.8, 0.2,  0.3, 0.4])
    got = pooled_members(agents, y, oof, zs)
    assert got["a"] == {"runs": 4, "auroc": 1.0, "zero-shot": 0.5, "serves": True}
    assert got["b"] == {"runs": 4, "auroc": 0.0, "zero-shot": 1.0, "serves": False}
    assert got["c"] == {"runs": 2, "auroc": None, "zero-shot": None, "serves": False}  # one class: not measurable
    # a tie with zero-shot serves (≥)
    assert pooled_members(["d"] * 2, np.array([1.0, 0.0]), np.array([[0.6, 0.4]]), np.array([0.7, 0.3]))["d"]["serves"]


def test_a_learner_that_ranks_runs_backwards_is_never_promoted() -> None:
    """Two tasks whose cue means the opposite (``alpha`` fails in one, succeeds in the other), and a
    zero-shot score that points the wrong way on the agent: every learner is at or below chance in the
    grouped CV, and beating the backwards zero-shot does not make it servable."""
    from model.scoring.agentmodel.model import AgentModelConfig
    from serve.services.retrain_gate import CHANCE, gate

    traces, failed, groups = [], [], []
    for i in range(24):
        task, cue = f"t{i % 2}", ("alpha", "bravo")[(i // 2) % 2]
        t = load_trace({"messages": [{"role": "user", "content": f"please book the {cue} trip for me"},
                                     {"role": "assistant", "content": "done, here is your booking"}]}, format="openai")
        t.id = f"b{i}"
        traces.append(t)
        failed.append((cue == "alpha") == (task == "t0"))
        groups.append(task)
    zero_shot = [0.0 if f else 1.0 for f in failed]  # AUROC 0 on this agent
    g = gate(traces, failed, groups, None, zero_shot, AgentModelConfig(), folds=5, draws=1, seed=0)
    served = g.estimate["served"]
    assert g.estimate[served]["auroc"] <= CHANCE
    assert g.estimate["zero-shot"]["auroc"] == 0.0 and g.estimate[served]["auroc"] > 0.0  # it beats zero-shot…
    assert not g.promote and g.reason().startswith("not above chance")  # …and is still not served


def test_a_retrain_reads_which_runs_the_service_flagged_for_another_cause(work: Path) -> None:
    """The early warning's budget is shared with the answer's other causes: ``read_runs`` marks the stored
    runs answered unhealthy by a rule or a stream (not by ``at_risk`` alone, nor healthy ones)."""
    from serve.services.retrain_plan import read_runs

    store = open_stores(work)
    def f(kind: str) -> dict[str, Any]:
        return {"kind": kind, "severity": "medium", "confidence": 0.9}

    answers = {"r0": {"healthy": False, "failures": [f("loop")]},
               "r1": {"healthy": False, "failures": [f("at_risk")]},
               "r2": {"healthy": True, "failures": []},
               "r3": {"healthy": False, "failures": [f("at_risk"), f("degradation")]}}
    for i, (tid, response) in enumerate(answers.items()):
        trace = run_trace(i, f"t{i}", failed=False)
        with store.db.write() as db:
            store.traces.put_trace(db, tenant=T, trace_id=tid, trace=trace, response=response, session_id=None,
                            task_type=None, agent="a")
        store.labels.add_label(T, tid, failed=False, author="checker", author_type="checker")
    runs, bad = read_runs(store.labels, T)
    store.db.dispose()
    assert not bad
    assert {r.trace.id: r.flagged for r in runs} == {"r0": True, "r1": False, "r2": False, "r3": True}


def test_a_retrain_reads_runs_in_the_order_they_were_stored_not_by_their_random_ids(work: Path) -> None:
    """Runs posted without an id get a random one; the folds and fits follow the runs' order, so the
    retrain reads them oldest first — the same history posted twice gives the same retrain."""
    from datetime import UTC, datetime, timedelta

    from serve.services.retrain_plan import read_runs

    store = open_stores(work)
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    ids = ["f3", "0a", "c7", "5b"]  # stored in this order
    for i, tid in enumerate(ids):
        trace = run_trace(i, f"t{i}", failed=i % 2 == 0)
        trace["id"] = tid
        with store.db.write() as db:
            store.traces.put_trace(db, tenant=T, trace_id=tid, trace=trace, response={}, session_id=None,
                            task_type=None, agent="a", now=t0 + timedelta(seconds=i))
        store.labels.add_label(T, tid, failed=i % 2 == 0, author="checker", author_type="checker")
    runs, _ = read_runs(store.labels, T)
    store.db.dispose()
    assert [r.trace.id for r in runs] == ids
