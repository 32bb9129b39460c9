"""``POST /v1/diagnose`` against a real uvicorn server on 127.0.0.1: answers, limits, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from serve.examples import HEALTHY, OPENAI_IGNORED_ERROR, OPENAI_LOOP
from tests.conftest import ROOT, LiveServer


def post(server: LiveServer, body: Any, *, raw: bytes | None = None) -> httpx.Response:
    content = raw if raw is not None else json.dumps(body).encode()
    return httpx.post(
        f"{server.url}/v1/diagnose", content=content, headers={"Content-Type": "application/json"}, timeout=60
    )


def test_healthy(live_server: LiveServer) -> None:
    r = post(live_server, HEALTHY)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["healthy"] is True and body["failures"] == []
    assert body["recommendation"]["strategy"] == "continue"
    assert body["schema_version"] == "1.6" and body["model_version"]


def test_ignored_error_root_cause_and_symptom(live_server: LiveServer) -> None:
    r = post(live_server, OPENAI_IGNORED_ERROR)
    assert r.status_code == 200, r.text
    body = r.json()
    kinds = {(f["kind"], f["source_index"]) for f in body["failures"]}
    assert ("tool_error", 3) in kinds
    assert ("ignored_error", 4) in kinds
    assert body["primary"]["kind"] == "ignored_error"  # critical beats high
    assert body["recommendation"]["strategy"] == "rollback"


def test_loop_caught_on_third_result(live_server: LiveServer) -> None:
    r = post(live_server, OPENAI_LOOP)
    assert r.status_code == 200, r.text
    loops = [f for f in r.json()["failures"] if f["kind"] == "loop"]
    assert len(loops) == 1 and loops[0]["source_index"] == 6


def test_shadow_and_allow_list(live_server: LiveServer) -> None:
    body = {**HEALTHY, "options": {"allowed_tools": ["search"], "shadow": True}}
    r = post(live_server, body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert [f["kind"] for f in out["failures"]] == ["disallowed_tool"]
    assert out["failures"][0]["source_index"] == 1
    assert out["recommendation"]["strategy"] == "continue"


@pytest.mark.parametrize(
    ("raw", "loc_prefix"),
    [
        (b'{"trace": {"messages": [{"role": "user", "content": "hi"', ["body"]),  # truncated JSON
        (json.dumps({"trace": {"messages": [{"role": 5, "content": "x"}]}}).encode(), ["body", "trace", "messages", 0, "role"]),
        (json.dumps({"trace": {"messages": [{"role": "wizard", "content": "x"}]}}).encode(), ["body", "trace", "messages", 0, "role"]),
        (json.dumps({"trace": {"messages": "not a list"}}).encode(), ["body", "trace", "messages"]),
        (json.dumps({"trace": [], "options": {"colour": "red"}}).encode(), ["body", "options", "colour"]),
        (json.dumps({"trace": HEALTHY["trace"], "format": "yaml"}).encode(), ["body", "format"]),
        (json.dumps({"trace": HEALTHY["trace"], "options": {"detectors": ["nope"]}}).encode(), ["body", "options", "detectors"]),
        (b"[" * 100_000 + b"]" * 100_000, ["body"]),  # deep nesting
        (b"", ["body"]),
    ],
)
def test_bad_input_is_422_naming_the_field(live_server: LiveServer, raw: bytes, loc_prefix: list[Any]) -> None:
    r = post(live_server, None, raw=raw)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail and detail[0]["loc"][: len(loc_prefix)] == loc_prefix, detail
    assert detail[0]["msg"]


def test_20_mb_body_is_413(live_server: LiveServer) -> None:
    big = {"trace": [{"role": "user", "content": "x" * (20 * 1024 * 1024)}]}
    r = post(live_server, big)
    assert r.status_code == 413
    assert "limit" in r.json()["detail"][0]["msg"]


def test_10000_steps_is_413(live_server: LiveServer) -> None:
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(10_000)]
    r = post(live_server, {"trace": msgs})
    assert r.status_code == 413, r.text
    assert "5000" in r.json()["detail"][0]["msg"]


def test_health_ready_and_openapi(live_server: LiveServer) -> None:
    assert httpx.get(f"{live_server.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{live_server.url}/readyz")
    assert ready.json()["checks"]["rules"] is True
    spec = httpx.get(f"{live_server.url}/openapi.json").json()
    op = spec["paths"]["/v1/diagnose"]["post"]
    assert {"200", "413", "422"} <= set(op["responses"])
    assert set(op["requestBody"]["content"]["application/json"]["examples"]) >= {"loop", "healthy"}
    assert httpx.get(f"{live_server.url}/docs").status_code == 200


def test_docs_examples_match_openapi_examples() -> None:
    for name, value in (("ignored_error", OPENAI_IGNORED_ERROR), ("loop", OPENAI_LOOP), ("healthy", HEALTHY)):
        path = Path(ROOT, "docs", "examples", f"{name}.json")
        assert json.loads(path.read_text()) == value, f"{path} differs from serve/examples.py"


def test_a_worker_settles_what_its_start_built(tmp_path: Path) -> None:
    """The lifespan takes what the worker's start built out of the garbage collector (serve.wiring.settle)
    and gives it back at its end."""
    import gc

    from fastapi.testclient import TestClient

    from serve.app import create_app
    from serve.settings import Settings

    assert gc.get_freeze_count() == 0
    with TestClient(create_app(Settings(data_dir=tmp_path, auth="off", classifier=False))) as client:
        frozen = gc.get_freeze_count()
        assert client.get("/v1/traces").status_code == 200
    assert frozen > 10_000  # the interpreter's objects, the services' among them
    assert gc.get_freeze_count() == 0
