"""Operator keys: ``triage keys create --operator``, migration 0010 on SQLite and PostgreSQL (rows
written before it keep working, their failures' tools are read from the trace and their agent is
their run's resolved agent), switching tenants with ``X-Triage-Tenant`` (403 for other keys) and
promoting / rolling back one agent's model over the API with the code of ``triage model`` — over
real HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from model.data.builder import make_trace
from model.data.realdata import load_source
from model.scoring.agent_registry import ZERO_SHOT, Registry
from model.scoring.agentmodel.model import AgentModel, AgentModelConfig
from serve.auth import TENANT_HEADER, create_key, hash_key
from serve.cli.main import app as cli_app
from serve.store import Stores
from serve.store.migrate import upgrade as migrate_to
from tests.conftest import LiveServer
from tests.storefix import db_url  # noqa: F401  (fixture)

AGENT = "billing-bot"


def test_migration_0010_keeps_older_rows(db_url: str) -> None:  # noqa: F811
    store = Stores.at(db_url)
    try:
        migrate_to(store.db.engine, "0009")  # the revision 0010 revises
        pg = store.db.dialect == "postgresql"
        js = "CAST(:{} AS JSON)" if pg else ":{}"
        trace = {"id": "old-1", "steps": [{"kind": "user_input", "content": "hi"},
                                          {"kind": "tool_call", "content": "", "tool_name": "search"},
                                          {"kind": "tool_result", "content": "Error: 503", "tool_name": "search"}]}
        now = datetime.now(UTC).replace(tzinfo=None)
        with store.db.engine.begin() as conn:
            conn.execute(text("INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', :now)"), {"now": now})
            conn.execute(text("INSERT INTO api_keys (id, tenant_id, key_hash, label, created_at) "
                              "VALUES ('k1', 't', :h, '', :now)"), {"h": hash_key("trg_k1_x"), "now": now})
            conn.execute(text("INSERT INTO labels (tenant_id, trace_id, kind, author, failed, author_type, created_at)"
                              " VALUES ('t', 'old-1', 'tool_error', 'ana', true, 'human', :now)"), {"now": now})
            conn.execute(text(
                "INSERT INTO traces (tenant_id, id, task_type, agent, created_at, updated_at, n_steps, healthy, "
                "model_version, shadow, trace, response, steps_in_rows) VALUES ('t', 'old-1', 'refunds', "
                f"'{AGENT}', :now, :now, 3, false, 'm', false, {js.format('trace')}, {js.format('resp')}, false)"),
                {"now": now, "trace": json.dumps(trace), "resp": json.dumps({"healthy": False})})
            conn.execute(text(
                "INSERT INTO failures (tenant_id, trace_id, kind, is_signal, severity, confidence, detector, step, "
                f"evidence, details) VALUES ('t', 'old-1', 'tool_error', false, 'high', 0.9, 'tool_error', 2, "
                f"'Error: 503', {js.format('d')})"), {"d": "{}"})
        store.db.upgrade()
        with store.db.engine.connect() as conn:
            assert conn.execute(text("SELECT operator FROM api_keys")).scalar_one() in (False, 0)
            assert conn.execute(text("SELECT withdrawn_at FROM labels")).scalar_one() is None
            tool, created, agent = conn.execute(text("SELECT tool, created_at, agent FROM failures")).one()
            # created_at and the run's resolved agent (not its task type) copied from the trace
            assert tool is None and created is not None and agent == AGENT
        key = store.keys.find_api_key(hash_key("trg_k1_x"))
        assert key is not None and key.operator is False
        assert len(store.labels.trace_labels("t", "old-1")) == 1  # an old label is counted (not withdrawn)
        occ, _ = store.reports.pattern_inputs("t", since=datetime.now(UTC) - timedelta(hours=1),
                                      until=datetime.now(UTC) + timedelta(hours=1))
        assert [(o.trace_id, o.tool, o.agent) for o in occ] == [("old-1", "search", AGENT)]  # tool: from the trace
    finally:
        store.db.dispose()


def test_keys_create_operator_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from serve.settings import get_settings

    url = f"sqlite:///{tmp_path / 'k.db'}"
    monkeypatch.setenv("TRIAGE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TRIAGE_DATABASE_URL", url)
    get_settings.cache_clear()
    try:
        runner = CliRunner()
        res = runner.invoke(cli_app, ["keys", "create", "--tenant", "ops", "--operator"])
        assert res.exit_code == 0, res.output
        key = res.output.strip().splitlines()[0]
        res = runner.invoke(cli_app, ["keys", "create", "--tenant", "acme"])
        plain = res.output.strip().splitlines()[0]
        store = Stores.at(url)
        try:
            op, other = store.keys.find_api_key(hash_key(key)), store.keys.find_api_key(hash_key(plain))
            assert op is not None and op.operator and other is not None and not other.operator
        finally:
            store.db.dispose()
        res = runner.invoke(cli_app, ["keys", "list"])
        assert res.exit_code == 0 and "operator" in res.output and "yes" in res.output
    finally:
        get_settings.cache_clear()


@pytest.fixture(scope="module")
def ops_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, dict[str, str], Path]]:
    data = tmp_path_factory.mktemp("ops")
    url = f"sqlite:///{data / 'triage.db'}"
    store = Stores.at(url)
    store.db.upgrade()
    keys = {"ops": create_key(store.keys, "ops", operator=True)[0], "acme": create_key(store.keys, "acme")[0],
            "other": create_key(store.keys, "other")[0]}
    store.db.dispose()
    srv = LiveServer(env={"TRIAGE_DATA_DIR": str(data), "TRIAGE_DATABASE_URL": url, "TRIAGE_AUTH": "on",
                          "TRIAGE_CLASSIFIER": "false", "TRIAGE_MODEL_POLL_S": "0.5"}).wait_ready()
    try:
        yield srv, keys, data
    finally:
        srv.stop()


def _h(key: str, tenant: str | None = None) -> dict[str, str]:
    h = {"Authorization": f"Bearer {key}"}
    if tenant is not None:
        h[TENANT_HEADER] = tenant
    return h


def test_operator_switches_tenants_others_get_403(ops_server: tuple[LiveServer, dict[str, str], Path]) -> None:
    srv, keys, _ = ops_server
    trace = make_trace("loop", seed=3, n_steps=8)
    r = httpx.post(f"{srv.url}/v1/diagnose", headers=_h(keys["acme"]),
                   json={"trace": trace.model_dump(mode="json")}, timeout=60)
    assert r.status_code == 200, r.text
    tid = r.json()["trace_id"]
    # the operator reads acme's runs and patterns by naming it; without the header, its own (none)
    got = httpx.get(f"{srv.url}/v1/traces", headers=_h(keys["ops"], "acme"), timeout=30).json()
    assert [t["id"] for t in got["items"]] == [tid]
    assert httpx.get(f"{srv.url}/v1/traces", headers=_h(keys["ops"]), timeout=30).json()["items"] == []
    pats = httpx.get(f"{srv.url}/v1/patterns", headers=_h(keys["ops"], "acme"), params={"days": 1}, timeout=30).json()
    assert pats["tenant"] == "acme" and pats["runs"] == 1
    assert httpx.get(f"{srv.url}/v1/traces/{tid}", headers=_h(keys["ops"], "acme"), timeout=30).status_code == 200
    # other keys may not name a tenant, not even their own
    for tenant in ("acme", "other", "ops"):
        r = httpx.get(f"{srv.url}/v1/traces", headers=_h(keys["other"], tenant), timeout=30)
        assert r.status_code == 403 and r.json()["detail"][0]["loc"] == ["header", "x-triage-tenant"], r.text
    assert httpx.get(f"{srv.url}/v1/traces/{tid}", headers=_h(keys["other"]), timeout=30).status_code == 404
    r = httpx.get(f"{srv.url}/v1/traces", headers=_h(keys["ops"], "nobody"), timeout=30)
    assert r.status_code == 404 and r.json()["detail"][0]["loc"] == ["header", "x-triage-tenant"]
    r = httpx.get(f"{srv.url}/v1/traces", headers=_h(keys["ops"], "bad name!"), timeout=30)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["header", "X-Triage-Tenant"], r.text


@pytest.fixture(scope="module")
def agent_model() -> AgentModel:
    runs = load_source("tau_airline")[:30]
    return AgentModel.fit([r.trace.model_copy(update={"labels": None}) for r in runs], [r.failed for r in runs],
                          [r.group for r in runs], config=AgentModelConfig(internal_folds=0), agent=AGENT)


def test_operator_promotes_and_rolls_back(ops_server: tuple[LiveServer, dict[str, str], Path],
                                          agent_model: AgentModel) -> None:
    srv, keys, data = ops_server
    registry = Registry(data / "models")
    v1 = registry.save("acme", AGENT, agent_model, parent=None, card="", report={}, data={}).version
    v2 = registry.save("acme", AGENT, agent_model, parent=v1, card="", report={}, data={}).version
    promote = f"{srv.url}/v1/operator/models/promote"
    rollback = f"{srv.url}/v1/operator/models/rollback"
    # not an operator: 403, nothing recorded
    r = httpx.post(promote, headers=_h(keys["acme"]), json={"agent": AGENT, "version": v1}, timeout=60)
    assert r.status_code == 403 and r.json()["detail"][0]["loc"] == ["header", "authorization"]
    assert httpx.post(rollback, headers=_h(keys["acme"]), json={"agent": AGENT}, timeout=60).status_code == 403
    # nothing to roll back yet (the agent is answered zero-shot): 409
    r = httpx.post(rollback, headers=_h(keys["ops"], "acme"), json={"agent": AGENT}, timeout=60)
    assert r.status_code == 409, r.text
    # bad bodies and unknown versions: 422 naming the field
    for body, loc in [({}, ["body", "agent"]), ({"agent": AGENT}, ["body", "version"]),
                      ({"agent": AGENT, "version": ""}, ["body", "version"]),
                      ({"agent": AGENT, "version": "v9-20990101T000000Z"}, ["body", "version"]),
                      ({"agent": "other-bot", "version": v1}, ["body", "version"]),
                      ({"agent": "", "version": v1}, ["body", "agent"]),
                      ({"agent": AGENT, "version": v1, "x": 1}, ["body", "x"])]:
        r = httpx.post(promote, headers=_h(keys["ops"], "acme"), json=body, timeout=60)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == loc, (body, r.text)
    r = httpx.post(rollback, headers=_h(keys["ops"], "acme"), json={}, timeout=60)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "agent"], r.text
    for v in (v1, v2):
        r = httpx.post(promote, headers=_h(keys["ops"], "acme"), json={"agent": AGENT, "version": v}, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["active"] == v and r.json()["tenant"] == "acme" and r.json()["agent"] == AGENT
    r = httpx.post(rollback, headers=_h(keys["ops"], "acme"), json={"agent": AGENT}, timeout=60)
    assert r.status_code == 200 and r.json()["active"] == v1
    hist = r.json()["history"]
    assert [(h["action"], h["version"]) for h in hist] == [("rollback", v1), ("promote", v2), ("promote", v1)]
    assert all(h["actor"].startswith("key:") and h["agent"] == AGENT for h in hist)
    # the same store rows `triage model list` reads; the agent's requests are answered by v1
    store = Stores.at(f"sqlite:///{data / 'triage.db'}")
    try:
        assert store.activations.active_model("acme", AGENT) == v1 and store.activations.active_model("acme", "other-bot") is None
        assert store.activations.active_model("ops", AGENT) is None
    finally:
        store.db.dispose()
    trace = make_trace(None, seed=4, n_steps=6)
    import time

    deadline = time.monotonic() + 30
    while True:
        got = httpx.post(f"{srv.url}/v1/diagnose", headers=_h(keys["acme"]),
                         json={"trace": trace.model_dump(mode="json"), "options": {"agent": AGENT}}, timeout=60).json()
        if got["model_version"].endswith(f"+{v1}") or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert got["model_version"].endswith(f"+{v1}") and got["failure_probability_basis"]["model"] == "agent"
    r = httpx.post(rollback, headers=_h(keys["ops"], "acme"), json={"agent": AGENT}, timeout=60)
    assert r.status_code == 200 and r.json()["active"] == ZERO_SHOT
