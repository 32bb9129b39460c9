"""The fuzz and abuse suite (issue 15) on SQLite and PostgreSQL: every bad value a 422 naming its
field and never a 5xx; no secret of the corpus in the store or in any response, no look-alike
destroyed; outcomes idempotent; /metrics scoped to the caller's tenant; hypothesis over the request
bodies. The app is the real one (store, migrations, auth), driven in-process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, text

from serve.app import create_app
from serve.auth import create_key
from serve.settings import Settings
from serve.store import Stores
from tests.secret_corpus import LOOKALIKES, SECRETS
from tests.storefix import db_url  # noqa: F401  (fixture)
from tests.test_redaction import leaked


class Api:
    def __init__(self, client: TestClient, keys: dict[str, str]) -> None:
        self.client = client
        self.keys = keys

    def call(self, method: str, url: str, *, tenant: str = "acme", body: Any = None, raw: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {self.keys[tenant]}"} if tenant else {}
        if raw is not None:
            headers["Content-Type"] = "application/json"
            r = self.client.request(method, url, content=raw.encode("utf-8", "surrogatepass"), headers=headers)
        else:
            r = self.client.request(method, url, json=body, headers=headers)
        assert r.status_code < 500, (method, url, r.status_code, r.text[:500])
        return r


@pytest.fixture
def api(db_url: str, tmp_path: Path) -> Iterator[Api]:  # noqa: F811
    store = Stores.at(db_url)
    store.db.upgrade()
    keys = {t: create_key(store.keys, t)[0] for t in ("acme", "globex", "ops")}
    store.db.dispose()
    s = Settings(
        data_dir=tmp_path, database_url=db_url, classifier=False, auth="on", operator_tenants="ops", auth_cache_s=0
    )
    with TestClient(create_app(s)) as client:
        yield Api(client, keys)


def _native(**trace: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"id": "t1", "steps": [{"kind": "user_input", "content": "hi"}]}
    base.update(trace)
    return {"trace": base, "format": "native"}


def _deep(n: int) -> Any:
    v: Any = "x"
    for _ in range(n):
        v = {"a": v}
    return v


#: (name, method, url, body | raw JSON text, expected status, the loc that must be named)
BAD: list[tuple[str, str, str, Any, int, list[Any]]] = [
    ("lone surrogate", "POST", "/v1/diagnose", '{"trace": {"id": "t", "steps": [{"kind": "user_input", "content": "a\\ud800b"}]}}', 422, ["body", "trace", "steps", 0, "content"]),
    ("source_index 2^63", "POST", "/v1/diagnose", _native(steps=[{"kind": "user_input", "content": "x", "source_index": 2**63}]), 422, ["body", "trace", "steps", 0, "source_index"]),
    ("source_index 2^31", "POST", "/v1/diagnose", _native(steps=[{"kind": "user_input", "content": "x", "source_index": 2**31}]), 422, ["body", "trace", "steps", 0, "source_index"]),
    ("nesting 300", "POST", "/v1/diagnose", _native(metadata=_deep(300)), 422, ["body", "trace", "metadata"]),
    ("nesting 999", "POST", "/v1/diagnose", '{"trace": {"id": "t", "steps": [], "metadata": ' + '{"a": ' * 999 + "1" + "}" * 999 + "}}", 422, ["body"]),
    ("nesting 5000", "POST", "/v1/diagnose", '{"trace": ' + "[" * 5000 + "]" * 5000 + "}", 422, ["body"]),
    ("NaN", "POST", "/v1/diagnose", '{"trace": {"id": "t", "steps": [{"kind": "user_input", "content": "x"}], "metadata": {"m": NaN}}}', 422, ["body"]),
    ("Infinity", "POST", "/v1/diagnose", '{"trace": {"id": "t", "steps": [{"kind": "user_input", "content": "x"}], "metadata": {"m": Infinity}}}', 422, ["body"]),
    ("1e999", "POST", "/v1/diagnose", '{"trace": {"id": "t", "steps": [{"kind": "user_input", "content": "x", "latency_ms": 1e999}]}}', 422, ["body", "trace", "steps", 0, "latency_ms"]),
    ("huge int", "POST", "/v1/diagnose", '{"trace": {"id": "t", "steps": [], "metadata": {"n": 1' + "0" * 5000 + "}}}", 422, ["body"]),
    ("NUL in id", "POST", "/v1/diagnose", _native(id="a\x00b"), 422, ["body", "trace", "id"]),
    ("NUL in content", "POST", "/v1/diagnose", _native(steps=[{"kind": "user_input", "content": "a\x00"}]), 422, ["body", "trace", "steps", 0, "content"]),
    ("id with slash", "POST", "/v1/diagnose", _native(id="a/b"), 422, ["body", "trace", "id"]),
    ("empty id", "POST", "/v1/diagnose", _native(id=""), 422, ["body", "trace", "id"]),
    ("id 129", "POST", "/v1/diagnose", _native(id="a" * 129), 422, ["body", "trace", "id"]),
    ("session id 129", "POST", "/v1/diagnose", _native(session_id="s" * 129), 422, ["body", "trace", "session_id"]),
    ("task type 201", "POST", "/v1/diagnose", _native(task_type="t" * 201), 422, ["body", "trace", "task_type"]),
    ("shadow 0", "POST", "/v1/diagnose", {**_native(), "options": {"shadow": 0}}, 422, ["body", "options", "shadow"]),
    ("speakers role", "POST", "/v1/diagnose", {"trace": [{"role": "user", "content": "x", "name": "a"}], "options": {"speakers": {"a": "boss"}}}, 422, ["body", "options", "speakers", "a"]),
    ("session path id", "POST", "/v1/sessions/" + "s" * 129 + "/steps", {"messages": [{"role": "user", "content": "x"}]}, 422, ["path", "session_id"]),
    ("session NUL", "POST", "/v1/sessions/a%00b/steps", {"messages": [{"role": "user", "content": "x"}]}, 422, ["path", "session_id"]),
    ("session surrogate", "POST", "/v1/sessions/s1/steps", '{"messages": [{"role": "user", "content": "\\udc00"}]}', 422, ["body", "messages", 0, "content"]),
    ("session nesting", "POST", "/v1/sessions/s1/steps", {"steps": [{"kind": "user_input", "content": "x", "metadata": _deep(400)}]}, 422, ["body", "steps", 0, "metadata"]),
    ("session source_index", "POST", "/v1/sessions/s1/steps", {"steps": [{"kind": "user_input", "content": "x", "source_index": 2**40}]}, 422, ["body", "steps"]),
    ("session speakers", "POST", "/v1/sessions/s1/steps", {"messages": [{"role": "user", "content": "x", "name": "a"}], "options": {"speakers": {"a": "boss"}}}, 422, ["body", "options", "speakers", "a"]),
    ("step false", "POST", "/v1/traces/t1/labels", {"kind": "loop", "step": False}, 422, ["body", "step"]),
    ("step 2^31", "POST", "/v1/traces/t1/labels", {"kind": "loop", "step": 2**31}, 422, ["body", "step"]),
    ("author NUL", "POST", "/v1/traces/t1/labels", {"kind": "loop", "author": "a\x00"}, 422, ["body", "author"]),
    ("since 0.5", "GET", "/v1/traces?since=0.5", None, 422, ["query", "since"]),
    ("cursor", "GET", "/v1/traces?cursor=zz", None, 422, ["query", "cursor"]),
    ("cursor NUL", "GET", "/v1/traces?cursor=a%00", None, 422, ["query", "cursor"]),
    ("session query NUL", "GET", "/v1/traces?session=a%00", None, 422, ["query", "session"]),
    ("trace path slash", "GET", "/v1/traces/a:b%20c", None, 422, ["path", "trace_id"]),
    ("trace path long", "DELETE", "/v1/traces/" + "a" * 129, None, 422, ["path", "trace_id"]),
    ("stream NUL", "POST", "/v1/streams/a%00b/observations", {"values": [1.0]}, 422, ["path", "name"]),
    ("stream task NUL", "GET", "/v1/streams/x/changepoints?task_type=a%00", None, 422, ["query", "task_type"]),
    ("observation Infinity", "POST", "/v1/streams/x/observations", '{"values": [Infinity]}', 422, ["body"]),
    ("rebaseline 1", "POST", "/v1/streams/x/observations", {"values": [1.0], "rebaseline": 1}, 422, ["body", "rebaseline"]),
    ("outcome NUL id", "POST", "/v1/outcomes", {"recommendation_id": "a\x00", "success": True}, 422, ["body", "recommendation_id"]),
    ("outcome success 1", "POST", "/v1/outcomes", {"recommendation_id": "r", "success": 1}, 422, ["body", "success"]),
    ("outcome cost bool", "POST", "/v1/outcomes", {"recommendation_id": "r", "success": True, "cost": True}, 422, ["body", "cost"]),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_input_is_a_422_naming_the_field(api: Api, case: tuple[str, str, str, Any, int, list[Any]]) -> None:
    _, method, url, body, status, loc = case
    api.call("POST", "/v1/diagnose", body=_native())  # a stored trace t1 for the label cases
    raw = body if isinstance(body, str) else None
    r = api.call(method, url, body=None if raw is not None else body, raw=raw)
    assert r.status_code == status, r.text[:300]
    detail = r.json()["detail"]
    assert any(d["loc"][: len(loc)] == loc for d in detail), detail
    assert "SELECT" not in r.text and "INSERT" not in r.text and "[SQL" not in r.text
    assert "retry-after" not in r.headers
    assert api.call("GET", "/readyz", tenant="").status_code == 200  # the store is fine


def _secret_trace() -> dict[str, Any]:
    texts = [t for t, _ in SECRETS.values()]
    steps: list[dict[str, Any]] = [{"kind": "user_input", "content": "please help; " + LOOKALIKES[0]}]
    for i, t in enumerate(texts):
        steps.append({"kind": "tool_call", "tool_name": "http", "call_id": f"c{i}", "tool_args": {"body": t}})
        steps.append(
            {"kind": "tool_result", "call_id": f"c{i}", "status": "error", "content": f"error 500: {t}",
             "metadata": {"echo": t}}
        )
    steps.append({"kind": "tool_call", "tool_name": "auth", "tool_args_raw": SECRETS["client_secret_raw_args"][0]})
    steps.append({"kind": "final_output", "content": " | ".join(LOOKALIKES)})
    return {"id": "secrets", "task_type": "probe", "steps": steps, "metadata": {"note": " ".join(texts)}}


def _stored_text(url: str) -> str:
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    out = []
    with engine.connect() as conn:
        for table in ("traces", "failures", "sessions", "recommendations", "outcomes", "labels"):
            for row in conn.execute(text(f"SELECT * FROM {table}")):
                out.append(json.dumps([str(v) for v in row]))
    engine.dispose()
    return "\n".join(out)


def test_a_label_that_says_where_but_not_how_is_accepted(api: Api) -> None:
    """A native trace whose label has ``kind: null`` (the real sets' step labels) is valid: redaction
    re-validates the trace it redacted and used to drop the null, a 500 (found by the history replay)."""
    body = _native(id="t-null-kind", steps=[{"kind": "user_input", "content": "mail me at a@b.io"},
                                           {"kind": "final_output", "content": "done"}],
                   labels={"failed": True, "failures": [{"kind": None, "step": 1}]})
    r = api.call("POST", "/v1/diagnose", body=body)
    assert r.status_code == 200, r.text
    stored = api.call("GET", "/v1/traces/t-null-kind")
    assert stored.status_code == 200
    assert "a@b.io" not in stored.text


def test_secret_corpus_never_stored_or_answered(api: Api, db_url: str) -> None:  # noqa: F811
    bodies = []
    r = api.call("POST", "/v1/diagnose", body={"trace": _secret_trace(), "format": "native"})
    assert r.status_code == 200
    bodies.append(r.text)
    rec = r.json()["recommendation"]
    steps = _secret_trace()["steps"]
    for i in range(0, len(steps), 40):
        a = api.call("POST", "/v1/sessions/probe-1/steps", body={"steps": steps[i : i + 40]})
        assert a.status_code == 200, a.text[:300]
        bodies.append(a.text)
    for url in ("/v1/traces/secrets", "/v1/sessions/probe-1", "/v1/traces", "/v1/traces/secrets/graph"):
        bodies.append(api.call("GET", url).text)
    if rec["strategy"] != "continue":
        bodies.append(api.call("POST", "/v1/outcomes", body={"recommendation_id": rec["id"], "success": False,
                                                              "note": SECRETS["openai"][0]}).text)
    stored = _stored_text(db_url)
    everything = "\n".join([*bodies, stored])
    for kept in LOOKALIKES:  # what must survive may share a piece with a secret ("example.")
        everything = everything.replace(kept, "")
    # JSON escapes ("\n" in PEM bodies) are compared in both forms
    for name, (_, secret) in SECRETS.items():
        assert not leaked(secret, everything), name
        assert not leaked(json.dumps(secret)[1:-1], everything), name
    detail = api.call("GET", "/v1/traces/secrets").json()
    assert detail["trace"]["steps"][-1]["content"] == " | ".join(LOOKALIKES)  # 0 look-alikes destroyed


def test_outcomes_are_idempotent_and_metrics_scoped(api: Api) -> None:
    trace = {"id": "t-out", "steps": [
        {"kind": "user_input", "content": "weather?"},
        {"kind": "tool_call", "tool_name": "weather", "call_id": "c1"},
        {"kind": "tool_result", "call_id": "c1", "status": "timeout", "content": "timed out"},
    ]}
    rec = api.call("POST", "/v1/diagnose", body={"trace": trace}).json()["recommendation"]
    assert rec["strategy"] == "retry"
    first = api.call("POST", "/v1/outcomes", body={"recommendation_id": rec["id"], "success": True})
    again = api.call("POST", "/v1/outcomes", body={"recommendation_id": rec["id"], "success": True})
    assert first.json()["recorded"] and not again.json()["recorded"]
    flip = api.call("POST", "/v1/outcomes", body={"recommendation_id": rec["id"], "success": False})
    assert flip.status_code == 409 and flip.json()["detail"][0]["type"] == "conflict"
    assert len(api.call("GET", "/v1/traces/t-out").json()["outcomes"]) == 1
    api.call("POST", "/v1/diagnose", tenant="globex", body={"trace": {**trace, "id": "g1"}})

    def metric(tenant: str, line: str) -> float:
        body = api.call("GET", "/metrics", tenant=tenant).text
        found = [ln for ln in body.splitlines() if ln.startswith(line)]
        return float(found[0].split()[-1]) if found else 0.0

    assert metric("acme", 'triage_outcomes_total{result="success",strategy="retry"}') == 1.0
    assert metric("acme", "triage_traces_diagnosed_total") == 1.0  # its own only
    assert metric("globex", "triage_traces_diagnosed_total") == 1.0
    assert metric("ops", "triage_traces_diagnosed_total") == 2.0  # the operator sees every tenant
    assert "triage_request_duration_seconds" not in api.call("GET", "/metrics", tenant="acme").text
    assert api.client.get("/metrics").status_code == 401


def test_success_after_a_handoff_is_a_conflict(api: Api) -> None:
    trace = {"id": "t-h", "steps": [
        {"kind": "user_input", "content": "weather?"},
        {"kind": "tool_call", "tool_name": "weather", "call_id": "c1"},
        {"kind": "tool_result", "call_id": "c1", "status": "timeout", "content": "timed out"},
    ]}
    rec = api.call("POST", "/v1/diagnose", body={"trace": trace}).json()["recommendation"]
    seen = [rec]
    while rec["strategy"] != "human_handoff":
        nxt = api.call("POST", "/v1/outcomes", body={"recommendation_id": rec["id"], "success": False}).json()["next"]
        assert nxt is not None
        rec = nxt
        seen.append(rec)
    late = api.call("POST", "/v1/outcomes", body={"recommendation_id": seen[0]["id"], "success": True})
    assert late.status_code == 409
    ok = api.call("POST", "/v1/outcomes", body={"recommendation_id": rec["id"], "success": True})
    assert ok.status_code == 200 and ok.json()["recorded"]


_json = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
_steps = st.lists(
    st.fixed_dictionaries(
        {"kind": st.sampled_from(["user_input", "tool_call", "tool_result", "llm_output", "error", "bogus"])},
        optional={"content": st.text(max_size=40), "source_index": st.integers(min_value=-5, max_value=2**64),
                  "metadata": _json, "tool_args": _json, "status": st.sampled_from(["ok", "error", "x"]),
                  "latency_ms": st.floats(allow_nan=False, allow_infinity=False), "tokens_out": _json},
    ),
    max_size=5,
)
_bodies = st.one_of(
    st.fixed_dictionaries({"trace": st.fixed_dictionaries({"id": st.text(max_size=10), "steps": _steps},
                                                            optional={"metadata": _json, "session_id": st.text(max_size=5)})},
                          optional={"options": st.fixed_dictionaries({}, optional={"shadow": _json, "speakers": _json, "detectors": _json})}).map(lambda b: ("POST", "/v1/diagnose", b)),
    st.fixed_dictionaries({"steps": _steps}, optional={"task_type": _json, "options": _json}).map(lambda b: ("POST", "/v1/sessions/fz/steps", b)),
    st.fixed_dictionaries({"recommendation_id": st.text(max_size=70), "success": _json}, optional={"duration_s": _json, "cost": _json, "note": _json}).map(lambda b: ("POST", "/v1/outcomes", b)),
    st.fixed_dictionaries({"values": st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=5)}, optional={"params": _json, "task_type": _json}).map(lambda b: ("POST", "/v1/streams/fz/observations", b)),
    _json.map(lambda b: ("POST", "/v1/diagnose", b)),
)


def test_hypothesis_request_bodies_never_5xx(api: Api) -> None:
    @seed(20261201)
    @settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(case=_bodies)
    def run(case: tuple[str, str, Any]) -> None:
        method, url, body = case
        raw = json.dumps(body, ensure_ascii=False)  # surrogates in generated text travel as escapes
        api.call(method, url, raw=raw)

    run()
