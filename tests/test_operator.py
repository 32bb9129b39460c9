"""Operator keys: ``triage keys create --operator``, migration 0010 on SQLite and PostgreSQL (rows
written before it keep working, and their failures' tools are read from the trace), switching
tenants with ``X-Triage-Tenant`` (403 for other keys) and promoting / rolling back models over the
API with the code of ``triage model`` — over real HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from model.builder import make_trace
from model.registry import SHIPPED_VERSION, Registry
from serve.auth import TENANT_HEADER, create_key, hash_key
from serve.cli import app as cli_app
from serve.store import Store
from serve.store.migrate import upgrade as migrate_to
from tests.conftest import LiveServer
from tests.storefix import db_url  # noqa: F401  (fixture)
from tests.test_hot_swap import register, tiny_scorer


def test_migration_0010_keeps_older_rows(db_url: str) -> None:  # noqa: F811
    store = Store(db_url)
    try:
        migrate_to(store.engine, "0006")
        pg = store.dialect == "postgresql"
        js = "CAST(:{} AS JSON)" if pg else ":{}"
        trace = {"id": "old-1", "steps": [{"kind": "user_input", "content": "hi"},
                                          {"kind": "tool_call", "content": "", "tool_name": "search"},
                                          {"kind": "tool_result", "content": "Error: 503", "tool_name": "search"}]}
        now = datetime.now(UTC).replace(tzinfo=None)
        with store.engine.begin() as conn:
            conn.execute(text("INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', :now)"), {"now": now})
            conn.execute(text("INSERT INTO api_keys (id, tenant_id, key_hash, label, created_at) "
                              "VALUES ('k1', 't', :h, '', :now)"), {"h": hash_key("trg_k1_x"), "now": now})
            conn.execute(text("INSERT INTO labels (tenant_id, trace_id, kind, author, failed, author_type, created_at)"
                              " VALUES ('t', 'old-1', 'tool_error', 'ana', true, 'human', :now)"), {"now": now})
            conn.execute(text(
                "INSERT INTO traces (tenant_id, id, created_at, updated_at, n_steps, healthy, model_version, shadow, "
                f"trace, response, steps_in_rows) VALUES ('t', 'old-1', :now, :now, 3, false, 'm', false, "
                f"{js.format('trace')}, {js.format('resp')}, false)"),
                {"now": now, "trace": json.dumps(trace), "resp": json.dumps({"healthy": False})})
            conn.execute(text(
                "INSERT INTO failures (tenant_id, trace_id, kind, is_signal, severity, confidence, detector, step, "
                f"evidence, details) VALUES ('t', 'old-1', 'tool_error', false, 'high', 0.9, 'tool_error', 2, "
                f"'Error: 503', {js.format('d')})"), {"d": "{}"})
        store.upgrade()
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT operator FROM api_keys")).scalar_one() in (False, 0)
            assert conn.execute(text("SELECT withdrawn_at FROM labels")).scalar_one() is None
            tool, created, agent = conn.execute(text("SELECT tool, created_at, agent FROM failures")).one()
            assert tool is None and created is not None and agent is None  # created_at copied from the trace
        key = store.find_api_key(hash_key("trg_k1_x"))
        assert key is not None and key.operator is False
        assert len(store.trace_labels("t", "old-1")) == 1  # an old label is counted (not withdrawn)
        occ, _ = store.pattern_inputs("t", since=datetime.now(UTC) - timedelta(hours=1),
                                      until=datetime.now(UTC) + timedelta(hours=1))
        assert [(o.trace_id, o.tool) for o in occ] == [("old-1", "search")]  # read from the stored trace
    finally:
        store.dispose()


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
        store = Store(url)
        try:
            op, other = store.find_api_key(hash_key(key)), store.find_api_key(hash_key(plain))
            assert op is not None and op.operator and other is not None and not other.operator
        finally:
            store.dispose()
        res = runner.invoke(cli_app, ["keys", "list"])
        assert res.exit_code == 0 and "operator" in res.output and "yes" in res.output
    finally:
        get_settings.cache_clear()


@pytest.fixture(scope="module")
def ops_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, dict[str, str], Path]]:
    data = tmp_path_factory.mktemp("ops")
    url = f"sqlite:///{data / 'triage.db'}"
    store = Store(url)
    store.upgrade()
    keys = {"ops": create_key(store, "ops", operator=True)[0], "acme": create_key(store, "acme")[0],
            "other": create_key(store, "other")[0]}
    store.dispose()
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


def test_operator_promotes_and_rolls_back(ops_server: tuple[LiveServer, dict[str, str], Path]) -> None:
    srv, keys, data = ops_server
    registry = Registry(data / "models")
    v1 = register(registry, "acme", tiny_scorer(1))
    v2 = register(registry, "acme", tiny_scorer(2), parent=v1)
    promote = f"{srv.url}/v1/operator/models/promote"
    rollback = f"{srv.url}/v1/operator/models/rollback"
    # not an operator: 403, nothing recorded
    r = httpx.post(promote, headers=_h(keys["acme"]), json={"version": v1}, timeout=60)
    assert r.status_code == 403 and r.json()["detail"][0]["loc"] == ["header", "authorization"]
    assert httpx.post(rollback, headers=_h(keys["acme"]), timeout=60).status_code == 403
    # nothing to roll back yet: 409
    r = httpx.post(rollback, headers=_h(keys["ops"], "acme"), timeout=60)
    assert r.status_code == 409, r.text
    # bad bodies and unknown versions: 422 naming the field
    for body, loc in [({}, ["body", "version"]), ({"version": ""}, ["body", "version"]),
                      ({"version": "v9-20990101T000000Z"}, ["body", "version"]), ({"version": v1, "x": 1}, ["body", "x"])]:
        r = httpx.post(promote, headers=_h(keys["ops"], "acme"), json=body, timeout=60)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == loc, (body, r.text)
    for v in (v1, v2):
        r = httpx.post(promote, headers=_h(keys["ops"], "acme"), json={"version": v}, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["active"] == v and r.json()["tenant"] == "acme"
    r = httpx.post(rollback, headers=_h(keys["ops"], "acme"), timeout=60)
    assert r.status_code == 200 and r.json()["active"] == v1
    hist = r.json()["history"]
    assert [(h["action"], h["version"]) for h in hist] == [("rollback", v1), ("promote", v2), ("promote", v1)]
    assert all(h["actor"].startswith("key:") for h in hist)
    # the same store rows `triage model list` reads; acme's requests are answered by v1
    store = Store(f"sqlite:///{data / 'triage.db'}")
    try:
        assert store.active_model("acme") == v1 and store.active_model("ops") is None
    finally:
        store.dispose()
    trace = make_trace(None, seed=4, n_steps=6)
    import time

    deadline = time.monotonic() + 30
    while True:
        mv = httpx.post(f"{srv.url}/v1/diagnose", headers=_h(keys["acme"]),
                        json={"trace": trace.model_dump(mode="json")}, timeout=60).json()["model_version"]
        if mv.endswith(f"+{v1}") or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert mv.endswith(f"+{v1}")
    r = httpx.post(rollback, headers=_h(keys["ops"], "acme"), timeout=60)
    assert r.status_code == 200 and r.json()["active"] == SHIPPED_VERSION
