"""The console over real HTTP (a real ``triage serve`` on 127.0.0.1) and its sessions in the store
(SQLite and PostgreSQL): migration 0009, sign-in / sign-out / key revocation, cookie flags, CSRF,
the Content-Security-Policy and no inline script, every page's JSON twin, tenant scoping, and a
clear 4xx naming the field for bad query parameters and forms. The browser walk is
tests/test_console_browser.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import inspect, text

from serve.auth import create_key, find_ui_session, hash_key, open_ui_session
from serve.examples import OPENAI_LOOP
from serve.store import Stores
from serve.store.migrate import downgrade
from serve.store.migrate import upgrade as migrate_to
from tests.conftest import LiveServer
from tests.storefix import db_url  # noqa: F401  (fixture)

PAGES = ["/ui/overview", "/ui/patterns", "/ui/runs", "/ui/queue", "/ui/models", "/ui/streams"]


# -- migration 0009 and the session store, on SQLite and PostgreSQL ------------------------------------

def test_migration_0009_adds_ui_sessions_and_keeps_rows(db_url: str) -> None:  # noqa: F811
    store = Stores.at(db_url)
    try:
        migrate_to(store.db.engine, "0008")  # the revision 0009 revises
        with store.db.engine.begin() as conn:
            conn.execute(text("INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', '2026-01-01 00:00:00')"))
            conn.execute(text("INSERT INTO api_keys (id, tenant_id, key_hash, label, created_at) "
                              "VALUES ('k1', 't', 'h1', '', '2026-01-01 00:00:00')"))
        assert "ui_sessions" not in inspect(store.db.engine).get_table_names()
        migrate_to(store.db.engine, "0009")
        assert "ui_sessions" in inspect(store.db.engine).get_table_names()
        with store.db.engine.connect() as conn:
            assert conn.execute(text("SELECT id FROM api_keys")).scalar_one() == "k1"  # nothing lost
        store.keys.add_ui_session("a" * 64, tenant="t", key_id="k1", csrf="c", expires_at=datetime.now(UTC) + timedelta(hours=1))
        # a session reads its key's operator flag, which the next revision (0010) adds: the session
        # opened at 0009 lives on after it
        migrate_to(store.db.engine, "0010")
        got = store.keys.find_ui_session("a" * 64)
        assert got is not None and got[1] is False
        downgrade(store.db.engine, "0008")
        assert "ui_sessions" not in inspect(store.db.engine).get_table_names()
        store.db.upgrade()
    finally:
        store.db.dispose()


def test_migration_0010_adds_operator_keys_label_withdrawal_and_failure_tools(db_url: str) -> None:  # noqa: F811
    store = Stores.at(db_url)
    try:
        migrate_to(store.db.engine, "0009")  # the revision 0010 revises
        with store.db.engine.begin() as conn:
            conn.execute(text("INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', '2026-01-01 00:00:00')"))
            conn.execute(text("INSERT INTO api_keys (id, tenant_id, key_hash, label, created_at) "
                              "VALUES ('k1', 't', 'h1', '', '2026-01-01 00:00:00')"))

        def columns(table: str) -> set[str]:
            return {c["name"] for c in inspect(store.db.engine).get_columns(table)}

        assert "operator" not in columns("api_keys") and "withdrawn_at" not in columns("labels")
        assert "tool" not in columns("failures")
        migrate_to(store.db.engine, "0010")
        assert "operator" in columns("api_keys") and "withdrawn_at" in columns("labels")
        assert "tool" in columns("failures")
        with store.db.engine.connect() as conn:  # the key kept, not an operator
            assert conn.execute(text("SELECT id, operator FROM api_keys")).one() == ("k1", False)
        downgrade(store.db.engine, "0009")
        assert "operator" not in columns("api_keys") and "tool" not in columns("failures")
        with store.db.engine.connect() as conn:
            assert conn.execute(text("SELECT id FROM api_keys")).scalar_one() == "k1"
        store.db.upgrade()
    finally:
        store.db.dispose()


def test_migration_0011_indexes_recommendations_and_outcomes_by_trace(db_url: str) -> None:  # noqa: F811
    store = Stores.at(db_url)
    try:
        migrate_to(store.db.engine, "0010")
        with store.db.engine.begin() as conn:
            conn.execute(text("INSERT INTO recommendations (tenant_id, id, trace_id, strategy, rung, attempt, status, "
                              "created_at, body) VALUES ('t', 'r1', 'x1', 'retry', 0, 1, 'open', "
                              "'2026-01-01 00:00:00', '{}')"))
            conn.execute(text("INSERT INTO outcomes (tenant_id, recommendation_id, trace_id, strategy, success, note, "
                              "created_at) VALUES ('t', 'r1', 'x1', 'retry', true, '', '2026-01-01 00:00:00')"))

        def indexes(table: str) -> set[str]:
            return {str(i["name"]) for i in inspect(store.db.engine).get_indexes(table)}

        assert "ix_recs_tenant_trace" not in indexes("recommendations")
        migrate_to(store.db.engine, "0011")
        assert "ix_recs_tenant_trace" in indexes("recommendations")
        assert "ix_outcomes_tenant_trace" in indexes("outcomes")
        with store.db.engine.connect() as conn:  # the rows kept
            assert conn.execute(text("SELECT trace_id FROM recommendations")).scalar_one() == "x1"
            assert conn.execute(text("SELECT trace_id FROM outcomes")).scalar_one() == "x1"
        downgrade(store.db.engine, "0010")
        assert "ix_outcomes_tenant_trace" not in indexes("outcomes")
        store.db.upgrade()
    finally:
        store.db.dispose()


def test_overview_finds_a_runs_repairs_by_its_trace_not_by_scanning_the_tenant(tmp_path: Path) -> None:
    """The query plan of the overview's joins (SQLite): each run's recommendations and outcomes are
    looked up by (tenant, trace), or the recommendations of the window by (tenant, time) — searched by
    tenant alone, 20,000 runs timed out the page — and the window's runs are read from the console's
    covering index (revision 0015) or by their key, never scanned."""
    from sqlalchemy import event

    import serve.services.console as ui_data

    store = Stores.at(f"sqlite:///{tmp_path / 'plan.db'}")
    store.db.upgrade()
    seen: list[tuple[str, Any]] = []
    event.listen(store.db.engine, "before_cursor_execute",
                 lambda conn, cur, statement, params, ctx, many: seen.append((statement, params)))
    try:
        now = datetime.now(UTC)
        ui_data.overview(store, "t", since=now - timedelta(days=7), until=now, agent=None)
        plans = {}
        with store.db.engine.connect() as conn:
            for statement, params in seen:
                for table in ("recommendations", "outcomes"):
                    if statement.lstrip().startswith("SELECT") and f"JOIN {table} " in statement:
                        rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).all()
                        plans[table] = " | ".join(str(r[-1]) for r in rows)
        # recommendations: by run, or the window's own (they are no older than the run: serve/store/console.py)
        recs = plans["recommendations"]
        assert ("ix_recs_tenant_trace (tenant_id=? AND trace_id=?)" in recs
                or "ix_recs_tenant_created (tenant_id=? AND created_at>?)" in recs), plans
        assert ("COVERING INDEX ix_traces_console (tenant_id=? AND created_at>? AND created_at<?)" in recs
                or "sqlite_autoindex_traces_1 (tenant_id=? AND id=?)" in recs), plans
        assert "ix_outcomes_tenant_trace (tenant_id=? AND trace_id=?)" in plans["outcomes"], plans
        assert "COVERING INDEX ix_traces_console (tenant_id=? AND created_at>? AND created_at<?)" in plans["outcomes"]
        for table in ("recommendations", "outcomes"):
            assert "SCAN" not in plans[table], plans
    finally:
        store.db.dispose()


def test_overview_chart_counts_each_failed_run_once_over_the_windows_days(tmp_path: Path) -> None:
    """The spectrum's bars add up to the failed runs of the window, though a run has several failure
    kinds (each run counted under its primary kind); its days span the window whatever days have runs."""
    from model.core.schema import Trace
    from model.diagnosis.diagnoser import Diagnoser
    from serve.schemas import DiagnoseOptions
    from serve.services import console as ui_data
    from serve.settings import Settings
    from serve.wiring import build_service, load_runscorer

    settings = Settings(data_dir=tmp_path)
    service = build_service(settings, Diagnoser(runscorer=load_runscorer(settings)))
    ignored = [{"kind": "user_input", "content": "Will it rain in Oslo tomorrow?"},
               {"kind": "tool_call", "tool_name": "get_forecast", "call_id": "a1", "tool_args": {"city": "Oslo"}},
               {"kind": "tool_result", "tool_name": "get_forecast", "call_id": "a1", "status": "error",
                "content": "HTTP 503 Service Unavailable"},
               {"kind": "final_output", "content": "Tomorrow will be sunny in Oslo."}]
    healthy = [{"kind": "user_input", "content": "What is 2 + 2?"}, {"kind": "final_output", "content": "4"}]
    try:
        for i, steps in enumerate([ignored, ignored, healthy]):
            service.diagnose("t", Trace.model_validate({"id": f"r{i}", "steps": steps}), DiagnoseOptions())
        now = datetime.now(UTC)
        got = ui_data.overview(service.stores, "t", since=now - timedelta(days=7), until=now, agent=None)
        assert got["totals"]["failed"] == 2
        assert sum(sum(v) for v in got["spectrum"]["kinds"].values()) == 2
        days = got["spectrum"]["days"]
        assert days[0] == (now - timedelta(days=7)).date().isoformat() and days[-1] == now.date().isoformat()
        assert len(days) == 8 and all(v[-1] == sum(v) for v in got["spectrum"]["kinds"].values())
        # what the old chart counted: a run once per failure kind, more than the failed runs
        kinds = {(f["kind"]) for f in service.get_trace("t", "r0").diagnosis["failures"]}
        assert len(kinds) >= 2, kinds
    finally:
        service.stores.db.dispose()


def test_a_tool_calls_arguments_are_shown_once() -> None:
    from model.core.schema import Step
    from serve.services.console import content_is_args

    def call(content: str, **kw: Any) -> Step:
        return Step.model_validate({"kind": "tool_call", "tool_name": "t", "content": content, **kw})

    assert content_is_args(call('{"city": "Oslo"}', tool_args={"city": "Oslo"}))  # an importer's copy
    assert content_is_args(call('{ "city":"Oslo" }', tool_args={"city": "Oslo"}))  # the same JSON
    assert content_is_args(call("city=Oslo", tool_args_raw="city=Oslo"))  # raw, not JSON
    assert not content_is_args(call("Looking up Oslo", tool_args={"city": "Oslo"}))  # words of its own
    assert not content_is_args(call('{"city": "Bergen"}', tool_args={"city": "Oslo"}))
    assert not content_is_args(call("", tool_args={"city": "Oslo"}))


def test_sessions_end_on_sign_out_expiry_and_key_revocation(db_url: str) -> None:  # noqa: F811
    store = Stores.at(db_url)
    store.db.upgrade()
    try:
        key, key_id = create_key(store.keys, "acme")
        assert open_ui_session(store.keys, "trg_nope_" + "x" * 20, ttl=timedelta(hours=1)) is None
        assert open_ui_session(store.keys, "not a key", ttl=timedelta(hours=1)) is None
        token = open_ui_session(store.keys, key, ttl=timedelta(hours=1))
        assert token is not None and key not in token
        got = find_ui_session(store.keys, token)
        assert got is not None and got.principal.tenant == "acme" and got.principal.key_id == key_id
        with store.db.engine.connect() as conn:  # the store keeps the token's hash, never the token
            ids = [r[0] for r in conn.execute(text("SELECT id FROM ui_sessions"))]
        assert ids == [hash_key(token)]
        assert store.keys.revoke_ui_session(got.token_hash) and find_ui_session(store.keys, token) is None
        assert not store.keys.revoke_ui_session(got.token_hash)
        # expiry
        short = open_ui_session(store.keys, key, ttl=timedelta(seconds=-1))
        assert find_ui_session(store.keys, short) is None
        # revoking the key ends every session opened with it
        t2, t3 = open_ui_session(store.keys, key, ttl=timedelta(hours=1)), open_ui_session(store.keys, key, ttl=timedelta(hours=1))
        assert find_ui_session(store.keys, t2) is not None and find_ui_session(store.keys, t3) is not None
        assert store.keys.revoke_api_key(key_id)
        assert find_ui_session(store.keys, t2) is None and find_ui_session(store.keys, t3) is None
        assert open_ui_session(store.keys, key, ttl=timedelta(hours=1)) is None
    finally:
        store.db.dispose()


# -- over HTTP ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("console")
    store = Stores.at(f"sqlite:///{work / 'triage.db'}")
    store.db.upgrade()
    key, key_id = create_key(store.keys, "acme")
    other, _ = create_key(store.keys, "other")
    store.db.dispose()
    server = LiveServer(env={"TRIAGE_DATA_DIR": str(work), "TRIAGE_AUTH": "on"}).wait_ready()
    ids = []
    for k in (key, other):
        r = httpx.post(f"{server.url}/v1/diagnose", json=OPENAI_LOOP, headers={"Authorization": f"Bearer {k}"},
                       timeout=60)
        assert r.status_code == 200, r.text
        ids.append(r.json()["trace_id"])
    yield {"url": server.url, "key": key, "key_id": key_id, "other": other, "dir": work, "acme_run": ids[0],
           "other_run": ids[1]}
    server.stop()


def _signed_in(base: str, key: str) -> httpx.Client:
    c = httpx.Client(base_url=base, timeout=30)
    r = c.post("/ui/signin", data={"key": key, "next": "/ui/runs"})
    assert r.status_code == 303 and r.headers["location"] == "/ui/runs", r.text
    return c


def _trace_id(c: httpx.Client) -> str:
    items = c.get("/ui/runs?format=json").json()["items"]
    assert len(items) == 1
    return str(items[0]["id"])


def test_root_leads_to_the_console_and_sign_in_names_the_local_key(srv: dict[str, Any]) -> None:
    base = srv["url"]
    r = httpx.get(f"{base}/")
    assert r.status_code == 303 and r.headers["location"] == "/ui/overview"
    r = httpx.get(f"{base}/", follow_redirects=True)
    assert r.status_code == 200 and str(r.url) == f"{base}/ui/signin?next=/ui/overview"
    # the key `make run` printed, where it is kept (serve/cli/keys.py `keys local`), and the alternative
    for words in ("<code>make run</code> printed", "<code>.triage/local.key</code>",
                  "<code>.venv/bin/triage keys local</code>", "<code>.venv/bin/triage keys create --tenant NAME</code>"):
        assert words in r.text, words
    assert "/" not in {route for route in httpx.get(f"{base}/openapi.json").json()["paths"]}  # not an API route


def test_sign_in_cookie_and_sign_out(srv: dict[str, Any]) -> None:
    base = srv["url"]
    r = httpx.get(f"{base}/ui/runs?verdict=failed")
    assert r.status_code == 303 and r.headers["location"] == "/ui/signin?next=/ui/runs%3Fverdict%3Dfailed"
    assert httpx.get(f"{base}/ui/runs?format=json").status_code == 401
    bad = httpx.post(f"{base}/ui/signin", data={"key": "trg_wrong_" + "y" * 30})
    assert bad.status_code == 401 and "set-cookie" not in bad.headers and "unknown or revoked" in bad.text
    c = httpx.Client(base_url=base, timeout=30)
    r = c.post("/ui/signin", data={"key": srv["key"], "next": "//evil.example/x"})
    assert r.headers["location"] == "/ui/overview"  # no open redirect
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert "Secure" not in cookie  # plain HTTP here; set when the request came over TLS
    assert srv["key"] not in cookie
    page = c.get("/ui/overview")
    assert page.status_code == 200 and ">acme<" in page.text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    assert c.post("/ui/signout", data={"csrf": "wrong"}).status_code == 403
    assert c.get("/ui/overview?format=json").status_code == 200  # a refused sign-out leaves it signed in
    r = c.post("/ui/signout", data={"csrf": csrf.group(1)})
    assert r.status_code == 303 and r.headers["location"] == "/ui/signin"
    token = c.cookies.get("triage_session")
    assert token is None or httpx.get(f"{base}/ui/overview?format=json",
                                      cookies={"triage_session": token}).status_code == 401


def test_revoking_the_key_ends_the_session(srv: dict[str, Any]) -> None:
    store = Stores.at(f"sqlite:///{srv['dir'] / 'triage.db'}")
    try:
        key, key_id = create_key(store.keys, "acme", label="to revoke")
        c = _signed_in(srv["url"], key)
        assert c.get("/ui/runs?format=json").status_code == 200
        assert store.keys.revoke_api_key(key_id)
        assert c.get("/ui/runs?format=json").status_code == 401
        assert c.get("/ui/runs").status_code == 303
    finally:
        store.db.dispose()


def test_pages_have_the_policy_no_inline_script_and_a_json_twin(srv: dict[str, Any]) -> None:
    c = _signed_in(srv["url"], srv["key"])
    tid = _trace_id(c)
    for path in [*PAGES, f"/ui/runs/{tid}", "/ui/signin", "/docs", "/redoc"]:
        r = c.get(path)
        assert r.status_code == 200, (path, r.text[:300])
        csp = r.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in \
            csp.split("script-src")[1].split(";")[0], path
        assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"
        scripts = re.findall(r"<script([^>]*)>(.*?)</script>", r.text, flags=re.S)
        assert scripts and all('src="/ui/static/' in attrs and not body.strip() for attrs, body in scripts), path
        assert "cdn" not in r.text.lower() and "https://" not in " ".join(a for a, _ in scripts)
        if path.startswith("/ui/") and path != "/ui/signin":
            twin = c.get(path, params={"format": "json"})
            assert twin.status_code == 200 and twin.headers["content-type"] == "application/json", path
            assert isinstance(twin.json(), dict)


def test_bad_query_parameters_and_forms_get_a_4xx_naming_the_field(srv: dict[str, Any]) -> None:
    c = _signed_in(srv["url"], srv["key"])
    tid = _trace_id(c)
    cases = {
        "/ui/overview?days=0": "days", "/ui/overview?days=x": "days", "/ui/overview?format=xml": "format",
        "/ui/runs?page=0": "page", "/ui/runs?per_page=100000": "per_page", "/ui/runs?verdict=maybe": "verdict",
        "/ui/runs?kind=nope": "kind", "/ui/runs?since=2026-13-40": "since", "/ui/runs?until=yesterday": "until",
        "/ui/runs?labelled=perhaps": "labelled", "/ui/queue?at=-1": "at", "/ui/streams?stream=a%20b": "stream",
        "/ui/streams?stream=nosuch": "stream", "/ui/runs/bad%20id": "trace_id", "/ui/runs/nosuch": "trace_id",
        "/ui/patterns?days=0": "days", "/ui/patterns?level=some": "level", "/ui/patterns/x%20y": "pattern_id",
        "/ui/patterns/nosuch": "pattern_id",
    }
    for path, field in cases.items():
        r = c.get(path)
        assert 400 <= r.status_code < 500, (path, r.status_code, r.text[:300])
        assert field in [str(p) for p in r.json()["detail"][0]["loc"]], (path, r.text[:300])
    page = c.get(f"/ui/runs/{tid}").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    form = {"csrf": csrf.group(1)}
    for body, field in (({"failed": "perhaps"}, "failed"), ({"failed": "true", "step": "x"}, "step"),
                        ({"failed": "true", "kind": "nope"}, "kind"), ({"failed": "false", "kind": "loop"}, "kind"),
                        ({"failed": "true", "step": "9999"}, "step")):
        r = c.post(f"/ui/runs/{tid}/label", data={**form, **body})
        assert r.status_code == 422 and field in [str(p) for p in r.json()["detail"][0]["loc"]], (body, r.text)
    assert c.post(f"/ui/runs/{tid}/label", data={"failed": "true"}).status_code == 403  # no CSRF token
    assert c.post(f"/ui/runs/{tid}/label", content=b'{"failed": true}',
                  headers={"content-type": "application/json"}).status_code == 415
    r = c.post("/ui/api/labels/" + tid, content=b"[1", headers={"x-csrf-token": csrf.group(1)})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body"]
    r = c.post("/ui/api/labels/" + tid, json={"failed": True}, headers={"x-csrf-token": "nope"})
    assert r.status_code == 403
    r = c.post("/ui/signin", data={"key": srv["key"]}, headers={"origin": "http://evil.example"})
    assert r.status_code == 403 and r.json()["detail"][0]["loc"] == ["header", "origin"]
    # nothing stored by the refusals
    got = httpx.get(f"{srv['url']}/v1/traces/{tid}", headers={"Authorization": f"Bearer {srv['key']}"}).json()
    assert got["label"] is None


def test_queue_says_why_a_run_is_asked_in_rounded_figures_with_its_terms_explained(srv: dict[str, Any]) -> None:
    c = _signed_in(srv["url"], srv["key"])
    twin = c.get("/ui/queue?format=json&order=margin").json()
    u = twin["current"]["uncertainty"]
    # the loop run: its margin is measured on its loop finding's confidence against the kind's threshold
    assert u["on"] == "loop" and isinstance(u["value"], float) and isinstance(u["threshold"], float)
    html = c.get("/ui/queue?order=margin").text
    why = re.search(r'<p class="meta" id="why-asked">(.*?)</p>', html, flags=re.S)
    assert why is not None
    words = re.sub(r"<[^>]+>", "", why.group(1))
    assert f"its loop confidence {u['value']:.2f} is close to the kind's threshold {u['threshold']:.2f}" in words
    assert not re.search(r"\d\.\d{4}", words), words  # not "0.5208 vs operating point 0.5208 (margin 0.0)"
    margin = twin["current"]["margin"]
    assert f"(margin {'< 0.001' if margin < 0.0005 else f'{margin:.3f}'})" in words
    for term in ("threshold", "margin"):
        assert re.search(rf'<abbr class="term" title="[^"]+">{term}</abbr>', why.group(1)), term
    # the default order is the measured best; random order says so instead of "asked because"
    from serve.services.label_queue import DEFAULT_ORDER

    assert c.get("/ui/queue?format=json").json()["order"] == DEFAULT_ORDER
    rnd = c.get("/ui/queue?order=random")
    assert rnd.status_code == 200 and "Next in random order" in rnd.text and 'data-order="random"' in rnd.text
    ids = [q["id"] for q in c.get("/ui/queue?format=json&order=random").json()["queue"]]
    assert ids == [q["id"] for q in c.get("/ui/queue?format=json&order=random").json()["queue"]]  # a stable page
    bad = c.get("/ui/queue?order=bogus")
    assert bad.status_code == 422 and "order" in [str(p) for p in bad.json()["detail"][0]["loc"]]


def test_label_form_writes_what_the_api_writes_and_stays_in_its_tenant(srv: dict[str, Any]) -> None:
    c = _signed_in(srv["url"], srv["key"])
    tid = _trace_id(c)
    assert tid == srv["acme_run"]
    page = c.get(f"/ui/runs/{tid}").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    r = c.post(f"/ui/runs/{tid}/label", data={"csrf": csrf.group(1), "failed": "true", "kind": "loop", "step": "1"})
    assert r.status_code == 303
    got = httpx.get(f"{srv['url']}/v1/traces/{tid}", headers={"Authorization": f"Bearer {srv['key']}"}).json()["label"]
    assert got["failed"] is True and got["author"] == f"key:{srv['key_id']}" and got["failures"][0]["kind"] == "loop"
    assert got["failures"][0]["step"] == 1
    assert "Effective label: <b>failed</b>" in c.get(f"/ui/runs/{tid}").text
    # the other tenant's run is not there for acme's session, and acme's is not there for other's
    other = _signed_in(srv["url"], srv["other"])
    assert _trace_id(other) == srv["other_run"]
    # the same trace id in two tenants is two traces: other's copy carries none of acme's label
    assert other.get(f"/ui/runs/{srv['other_run']}?format=json").json()["label"] is None
    assert {i["id"] for i in c.get("/ui/runs?format=json&per_page=200").json()["items"]} == {tid}
    assert c.get("/ui/runs/not-a-run-of-acme?format=json").status_code == 404


def test_docs_assets_are_served_from_the_package(srv: dict[str, Any]) -> None:
    base = srv["url"]
    for path in re.findall(r'(?:src|href)="(/ui/static/[^"]+)"', httpx.get(f"{base}/docs").text +
                           httpx.get(f"{base}/redoc").text):
        r = httpx.get(base + path)
        assert r.status_code == 200 and len(r.content) > 100, path
    for lic in ("swagger-ui/LICENSE", "redoc/LICENSE", "uplot/LICENSE"):
        assert (Path(__file__).resolve().parent.parent / "serve/ui/static/vendor" / lic).is_file()


def _csrf(c: httpx.Client, path: str = "/ui/overview") -> str:
    got = re.search(r'data-csrf="([^"]+)"', c.get(path).text)
    assert got is not None
    return got.group(1)


def test_operator_sessions_switch_tenant_and_promote_or_roll_back(srv: dict[str, Any]) -> None:
    store = Stores.at(f"sqlite:///{srv['dir'] / 'triage.db'}")
    try:
        op_key, _ = create_key(store.keys, "ops", operator=True)
    finally:
        store.db.dispose()
    # a tenant's own key: no switch, no model actions (403), nothing changed
    c = _signed_in(srv["url"], srv["key"])
    token = _csrf(c)
    assert "tenant-form" not in c.get("/ui/overview").text
    r = c.post("/ui/tenant", data={"csrf": token, "tenant": "other"})
    assert r.status_code == 403 and r.json()["detail"][0]["loc"] == ["body", "tenant"]
    assert c.post("/ui/models/rollback", data={"csrf": token}).status_code == 403
    assert c.post("/ui/models/promote", data={"csrf": token, "version": "shipped"}).status_code == 403
    assert c.get("/ui/models?format=json").json()["activations"] == []
    # an operator: switches to acme (sees acme's run, not its own tenant's), back home, unknown → 404
    o = _signed_in(srv["url"], op_key)
    token = _csrf(o)
    assert "tenant-form" in o.get("/ui/overview").text
    assert o.get("/ui/runs?format=json").json()["items"] == []
    r = o.post("/ui/tenant", data={"csrf": token, "tenant": "acme"})
    assert r.status_code == 303
    assert [i["id"] for i in o.get("/ui/runs?format=json").json()["items"]] == [srv["acme_run"]]
    assert "(operator of ops)" in o.get("/ui/overview").text
    r = o.post("/ui/tenant", data={"csrf": token, "tenant": "nosuchtenant"})
    assert r.status_code == 404 and r.json()["detail"][0]["loc"] == ["body", "tenant"]
    assert o.post("/ui/tenant", data={"tenant": "acme"}).status_code == 403  # no CSRF token
    # model actions on acme name the agent (422 naming it when missing or malformed); nothing to roll
    # back while the agent is answered zero-shot (409); promote names the version
    for form in ({}, {"agent": ""}, {"agent": " support"}, {"agent": "sup\x01port"}, {"agent": "x" * 201}):
        r = o.post("/ui/models/rollback", data={"csrf": token, **form})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "agent"], (form, r.text)
        r = o.post("/ui/models/promote", data={"csrf": token, "version": "v9-20260101T000000Z", **form})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "agent"], (form, r.text)
    r = o.post("/ui/models/rollback", data={"csrf": token, "agent": "support"})
    assert r.status_code == 409 and r.json()["detail"][0]["loc"] == ["body", "agent"], r.text
    r = o.post("/ui/models/promote", data={"csrf": token, "agent": "support", "version": "v9-20260101T000000Z"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "version", r.text
    assert o.post("/ui/models/promote", data={"csrf": token, "agent": "support"}).status_code == 422
    assert o.get("/ui/models?format=json").json()["activations"] == []
    o.post("/ui/tenant", data={"csrf": token, "tenant": ""})  # back to its own tenant
    assert o.get("/ui/runs?format=json").json()["items"] == []
