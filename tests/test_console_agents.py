"""The console and the operator endpoints with issue 20's per-agent models, over real HTTP (a real
``triage serve``): promote / roll back one agent's model through ``/v1/operator/models/*`` and the
Models page's forms (the same :func:`serve.services.retrain.promote_version` / ``rollback_version`` as
``triage model``), the Models page per agent (versions, the active one, its card and learning curve
so far), the basis of ``failure_probability`` on the Runs, One run and Queue pages, ``at_risk`` shown
like any other kind, and patterns grouped by the run's resolved agent."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from model.data.realdata import load_source
from model.scoring.agent_registry import ZERO_SHOT, Registry
from model.scoring.agentmodel.model import AgentModel, AgentModelConfig
from serve.auth import create_key
from serve.services.retrain import ZeroShotCache
from serve.store import Stores
from tests.conftest import LiveServer

AGENT = "airline"
T = "acme"


def _report(auroc: float, runs: int) -> dict[str, Any]:
    """What `triage retrain` records of a version's gate (evaluation.json), in brief."""
    est = {"runs": runs, "failed": runs // 3, **{m: {"auroc": a} for m, a in
                                                   (("agent", auroc), ("zero-shot", 0.6), ("tfidf", 0.7), ("length", 0.65))}}
    return {"gate": {"estimate": est, "promote": True}, "card": {"cv_auroc": auroc}}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    runs = load_source("tau_airline")
    train, rest = runs[:60], runs[60:]
    traces = [r.trace.model_copy(update={"labels": None}) for r in train]
    prior = ZeroShotCache(None).probabilities(traces)
    model = AgentModel.fit(traces, [r.failed for r in train], [r.group for r in train], prior=prior, agent=AGENT,
                           config=AgentModelConfig(internal_folds=3, target_false_alarm=0.1))  # 25 successful runs
    work = tmp_path_factory.mktemp("console-agents")
    reg = Registry(work / "models")
    v1 = reg.save(T, AGENT, model, parent=None, card="# Agent model v1\n\n## Learning curve so far\n",
                  report=_report(0.71, 40), data={})
    v2 = reg.save(T, AGENT, model, parent=v1.version, card="# Agent model v2\n", report=_report(0.78, 60), data={})
    store = Stores.at(f"sqlite:///{work / 'triage.db'}")
    store.db.upgrade()
    key, _ = create_key(store.keys, T)
    op_key, _ = create_key(store.keys, "ops", operator=True)
    store.db.dispose()
    server = LiveServer(env={"TRIAGE_DATA_DIR": str(work), "TRIAGE_AUTH": "on", "TRIAGE_MODEL_POLL_S": "0.5",
                             "TRIAGE_CLASSIFIER": "false"}).wait_ready()
    try:
        yield {"url": server.url, "key": key, "op": op_key, "v1": v1.version, "v2": v2.version, "rest": rest, "work": work,
               "threshold": model.at_risk_threshold}
    finally:
        server.stop()


def _operator(srv: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {srv['op']}", "X-Triage-Tenant": T}


def _console(srv: dict[str, Any], key: str) -> tuple[httpx.Client, str]:
    c = httpx.Client(base_url=srv["url"], timeout=60)
    assert c.post("/ui/signin", data={"key": key, "next": "/ui/overview"}).status_code == 303
    got = re.search(r'data-csrf="([^"]+)"', c.get("/ui/overview").text)
    assert got is not None
    return c, got.group(1)


def test_operator_endpoints_act_on_one_agents_model(srv: dict[str, Any]) -> None:
    base, op = srv["url"], _operator(srv)
    promote, rollback = f"{base}/v1/operator/models/promote", f"{base}/v1/operator/models/rollback"
    # a tenant's own key: 403, nothing changed
    r = httpx.post(promote, json={"agent": AGENT, "version": srv["v1"]},
                   headers={"Authorization": f"Bearer {srv['key']}"}, timeout=30)
    assert r.status_code == 403, r.text
    # the agent is required and validated: 422 naming it
    for body in ({"version": srv["v1"]}, {"agent": "", "version": srv["v1"]}, {"agent": " airline", "version": srv["v1"]},
                 {"agent": "air\u0001line", "version": srv["v1"]}, {"agent": "x" * 201, "version": srv["v1"]},
                 {"agent": 7, "version": srv["v1"]}):
        r = httpx.post(promote, json=body, headers=op, timeout=30)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "agent"], (body, r.text)
    for body in ({}, {"agent": ""}, {"agent": "a\tb"}, {"agent": AGENT, "version": "v1"}):
        r = httpx.post(rollback, json=body, headers=op, timeout=30)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "agent" if "version" not in
                                                                                  body else "version"], (body, r.text)
    # another agent has no such version; the agent answered zero-shot has nothing to roll back
    r = httpx.post(promote, json={"agent": "hotel", "version": srv["v1"]}, headers=op, timeout=30)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "version", r.text
    r = httpx.post(rollback, json={"agent": AGENT}, headers=op, timeout=30)
    assert r.status_code == 409 and r.json()["detail"][0]["loc"] == ["body", "agent"], r.text
    # promotions stack, rollbacks pop, past the first one: zero-shot
    steps = [(promote, {"version": srv["v1"]}, srv["v1"]), (promote, {"version": srv["v2"]}, srv["v2"]),
             (rollback, {}, srv["v1"]), (rollback, {}, ZERO_SHOT)]
    for url, extra, active in steps:
        r = httpx.post(url, json={"agent": AGENT, **extra}, headers=op, timeout=60)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["tenant"] == T and body["agent"] == AGENT and body["active"] == active, body
        assert body["history"][0]["version"] == active and all(h["agent"] == AGENT for h in body["history"])
    assert len(body["history"]) == 4
    r = httpx.post(rollback, json={"agent": AGENT}, headers=op, timeout=30)
    assert r.status_code == 409, r.text


def _models(c: httpx.Client) -> dict[str, Any]:
    page = c.get("/ui/models?format=json")
    assert page.status_code == 200, page.text
    return {a["agent"]: a for a in page.json()["agents"]}


def test_models_page_per_agent_and_its_operator_forms(srv: dict[str, Any]) -> None:
    c, token = _console(srv, srv["op"])
    assert c.post("/ui/tenant", data={"csrf": token, "tenant": T}).status_code == 303
    agents = _models(c)
    a = agents[AGENT]
    assert [v["version"] for v in a["versions"]] == [srv["v1"], srv["v2"]]
    assert a["active"] == ZERO_SHOT and not any(v["active"] for v in a["versions"])  # after the API's rollbacks
    assert [v["cv_auroc"] for v in a["versions"]] == [0.71, 0.78] and [v["runs"] for v in a["versions"]] == [40, 60]
    assert "Learning curve so far" in a["versions"][0]["card"]
    assert [(r["version"], r["runs"], r["agent"]) for r in a["learning_curve"]] == [(srv["v1"], 40, 0.71),
                                                                                 (srv["v2"], 60, 0.78)]
    assert len(a["activations"]) == 4  # the API's two promotions and two rollbacks
    # the forms: promote v2 for the agent, roll back to zero-shot; the page shows each
    r = c.post("/ui/models/promote", data={"csrf": token, "agent": AGENT, "version": srv["v2"]})
    assert r.status_code == 303, r.text
    assert _models(c)[AGENT]["active"] == srv["v2"]
    html = c.get("/ui/models").text
    assert f'data-agent="{AGENT}"' in html and "0.780" in html and "Promote" in html and "Roll back" in html
    r = c.post("/ui/models/rollback", data={"csrf": token, "agent": AGENT})
    assert r.status_code == 303, r.text
    assert _models(c)[AGENT]["active"] == ZERO_SHOT
    r = c.post("/ui/models/promote", data={"csrf": token, "agent": AGENT, "version": srv["v2"]})
    assert r.status_code == 303 and _models(c)[AGENT]["active"] == srv["v2"]
    # a tenant's own key sees the agent's models, without the forms
    t, _ = _console(srv, srv["key"])
    assert _models(t)[AGENT]["active"] == srv["v2"]
    assert "Promote" not in t.get("/ui/models").text


def _bare(trace: Any, **update: Any) -> dict[str, Any]:
    out: dict[str, Any] = trace.model_copy(update={"labels": None, **update}).model_dump(mode="json",
                                                                                      exclude_none=True)
    return out


def test_basis_at_risk_and_patterns_of_the_agent_on_the_pages(srv: dict[str, Any]) -> None:
    base, api = srv["url"], {"Authorization": f"Bearer {srv['key']}"}
    rest = srv["rest"]
    # v2 is active (the previous test): the workers swap it in within the poll
    deadline, basis = time.monotonic() + 60, None
    while time.monotonic() < deadline:
        r = httpx.post(f"{base}/v1/diagnose", json={"trace": _bare(rest[0].trace), "options": {"agent": AGENT}},
                       headers=api, timeout=60)
        assert r.status_code == 200, r.text
        basis = r.json()["failure_probability_basis"]
        if basis["model"] == "agent":
            break
        time.sleep(0.5)
    assert basis is not None and basis["model"] == "agent" and basis["agent"] == AGENT, basis
    agent_run = r.json()["trace_id"]
    # a run that names no agent and no task type: an agent inferred from it (issue 31), zero-shot
    pool = httpx.post(f"{base}/v1/diagnose", json={"trace": _bare(rest[1].trace, task_type=None)}, headers=api,
                      timeout=60).json()
    assert pool["failure_probability_basis"]["model"] == "zero-shot" and pool["agent_source"] == "inferred"
    assert pool["failure_probability_basis"]["agent"] == pool["agent"] != AGENT
    # failing sessions of the agent, step by step, until one gets at_risk
    at_risk_run = None
    for k, run in enumerate([x for x in rest if x.failed][:8]):
        steps = _bare(run.trace)["steps"]
        for st in steps:
            r = httpx.post(f"{base}/v1/sessions/s{k}/steps", json={"steps": [st], "agent": AGENT}, headers=api,
                           timeout=60)
            assert r.status_code == 200, r.text
        if any(f["kind"] == "at_risk" for f in r.json()["failures"]):
            at_risk_run = r.json()["trace_id"]
            break
    assert at_risk_run is not None, "no failing session of the agent got at_risk"

    c, _ = _console(srv, srv["key"])
    # Runs: each run's agent and basis (the agent model's, with its labelled runs and CV AUROC)
    items = {i["id"]: i for i in c.get("/ui/runs?format=json&per_page=200").json()["items"]}
    assert items[agent_run]["agent"] == AGENT and items[agent_run]["basis"]["model"] == "agent"
    assert items[agent_run]["basis"]["labelled_runs"] == 60 and items[agent_run]["basis"]["cv_auroc"] is not None
    assert items[pool["trace_id"]]["agent"] == pool["agent"] and items[pool["trace_id"]]["basis"]["model"] == "zero-shot"
    html = c.get("/ui/runs").text
    # (the agent has its own column; the model's and the measure's names carry their titles)
    assert "agent model, 60 labelled runs, CV AUROC" in re.sub(r"<[^>]+>", "", html)
    assert re.search(r'<abbr class="term" title="[^"]+">agent model</abbr>', html)
    # at_risk like any other kind: the kind filter, the run's marked step, the overview's spectrum
    r = c.get("/ui/runs?format=json&kind=at_risk")
    assert r.status_code == 200 and at_risk_run in {i["id"] for i in r.json()["items"]}, r.text
    assert agent_run not in {i["id"] for i in r.json()["items"]} or items[agent_run]["primary_kind"] == "at_risk"
    one = c.get(f"/ui/runs/{at_risk_run}?format=json").json()
    assert one["agent"] == AGENT and one["basis"]["model"] == "agent"
    marked = [m for s in one["steps"] for m in s["marks"] if m["kind"] == "at_risk"]
    assert marked and marked[0]["level"] == "failure"
    assert "at_risk" in c.get(f"/ui/runs/{at_risk_run}").text and "agent airline" in c.get(f"/ui/runs/{at_risk_run}").text
    # the overview's chart counts each failed run once, under its primary kind (at_risk when it is the first)
    spectrum = c.get("/ui/overview?format=json").json()["spectrum"]["kinds"]
    assert one["verdict"] == "failed" and one["primary"]["kind"] in spectrum, (one["primary"], spectrum)
    # Patterns: grouped by the run's resolved agent (the agent named, not the task type `tau_airline` the
    # runs carry; the unnamed run under its inferred agent)
    pats = c.get("/ui/patterns?format=json&level=failure").json()["result"]["patterns"]
    risk = [p for p in pats if p["kind"] == "at_risk"]
    assert risk and all(p["agent"] == AGENT for p in risk)
    assert {p["agent"] for p in pats} <= {AGENT, pool["agent"]}
    only = c.get(f"/ui/patterns?format=json&agent={AGENT}").json()["result"]["patterns"]
    assert only and all(p["agent"] == AGENT for p in only)
    api_pats = httpx.get(f"{base}/v1/patterns", params={"agent": pool["agent"]}, headers=api, timeout=30).json()["patterns"]
    assert all(p["agent"] == pool["agent"] for p in api_pats)
    # Queue: the current run's agent and basis
    q = c.get("/ui/queue?format=json").json()
    assert q["current"] is not None and q["agent"] == q["current"]["agent"]
    assert q["current"]["basis"]["model"] in ("agent", "zero-shot")
    if q["agent"] == AGENT:
        assert q["basis_model"] == "agent" and q["cv_auroc"] is not None


def test_models_page_shows_the_last_retrain_with_its_refusal_codes(srv: dict[str, Any]) -> None:
    """Issue 31: a retrain that can learn nothing exits 0 with each agent's refusal code, and the Models
    page (and its JSON twin) shows that record."""
    from serve.services.retrain import retrain
    from serve.settings import Settings
    from tests.test_retrain_refusals import history, store_runs

    work = srv["work"]
    store = Stores.at(f"sqlite:///{work / 'triage.db'}")
    try:
        store_runs(store, history("tiny", "newbie", 5000) + history("one_class", "samey", 6000)
                   + history("one_class", "samey", 7000))
        res = retrain(store.activations, store.labels, Settings(data_dir=work), T)
    finally:
        store.db.dispose()
    assert res.exit_code == 0 and res.models == []
    assert res.agents["newbie"]["code"] == "too_few_runs" and res.agents["samey"]["code"] == "one_class"
    # together they are 23 runs with 2 successful: the pooled model is refused too
    assert {(r.agent, r.code) for r in res.refusals} == {("newbie", "too_few_runs"), ("samey", "one_class"),
                                                         ("_pooled", "too_few_runs")}
    c, _ = _console(srv, srv["key"])
    page = c.get("/ui/models", params={"format": "json"}).json()
    last = page["last_retrain"]
    assert last["exit_code"] == 0 and last["agents"]["newbie"]["status"] == "refused"
    html = c.get("/ui/models").text
    assert 'id="last-retrain"' in html and "too_few_runs" in html and "one_class" in html
