"""Fair share (serve/fairshare.py) on a real uvicorn on 127.0.0.1: the queue wait in
``Server-Timing`` and ``/metrics``; the per-tenant in-flight cap (429 before the body is read, other
tenants unaffected); a tenant answered 429 has its admitted diagnoses served by the worker's
low-priority helper process, while the other tenants' stay in the worker."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from serve.auth import create_key
from serve.store import Stores
from tests.conftest import LiveServer, child_pids


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    data = tmp_path_factory.mktemp("fair")
    store = Stores.at(f"sqlite:///{data / 'triage.db'}")
    store.db.upgrade()
    keys = {t: create_key(store.keys, t)[0] for t in ("flood", "calm", "busy", "ops")}
    store.db.dispose()
    srv = LiveServer(env={
        "TRIAGE_DATA_DIR": str(data), "TRIAGE_AUTH": "on", "TRIAGE_CLASSIFIER": "false", "TRIAGE_RUNSCORE": "false",
        "TRIAGE_OPERATOR_TENANTS": "ops", "TRIAGE_AUTH_CACHE_S": "60", "TRIAGE_RATE_LIMIT_KEY_RPS": "5",
        "TRIAGE_RATE_LIMIT_KEY_BURST": "5", "TRIAGE_TENANT_INFLIGHT": "2", "TRIAGE_FLOOD_LANE_S": "60",
    }).wait_ready()
    yield srv, keys
    srv.stop()


def _trace(i: int) -> dict[str, object]:
    return {"trace": {"id": f"t{i}", "steps": [
        {"kind": "user_input", "content": "book a flight"},
        {"kind": "tool_call", "tool_name": "search", "call_id": "c1", "tool_args": {"q": "x"}},
        {"kind": "tool_result", "tool_name": "search", "call_id": "c1", "content": "error: HTTP 500"},
    ]}}


def _helpers(pid: int) -> set[int]:
    """The worker's helper processes (``multiprocessing`` spawned; Linux /proc)."""
    return {k for k in child_pids(pid) if b"spawn_main" in Path(f"/proc/{k}/cmdline").read_bytes()}


def test_queue_wait_in_server_timing_and_metrics(server: tuple[LiveServer, dict[str, str]]) -> None:
    srv, keys = server
    with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {keys['calm']}"}) as c:
        r = c.post("/v1/diagnose", json=_trace(1))
        assert r.status_code == 200, r.text
        timing = dict(part.strip().split(";dur=") for part in r.headers["server-timing"].split(","))
        assert set(timing) == {"queue", "read"} and 0 <= float(timing["read"]) <= float(timing["queue"]) < 10_000
        assert "server-timing" not in c.get("/healthz").headers  # no handler in a thread: nothing to say
        scrape = c.get("/metrics", headers={"Authorization": f"Bearer {keys['ops']}"}).text
    assert 'triage_queue_wait_seconds_count{route="/v1/diagnose"}' in scrape


def test_inflight_cap_refuses_before_the_body_and_spares_other_tenants(server: tuple[LiveServer, dict[str, str]]) -> None:
    """Two of tenant ``busy``'s diagnoses are held in progress (their bodies half sent): its third
    request gets 429 at once; another tenant is served; once the two are answered, ``busy`` is too."""
    srv, keys = server
    auth = {"Authorization": f"Bearer {keys['busy']}"}
    assert httpx.get(f"{srv.url}/v1/traces", headers=auth).status_code == 200  # the worker caches the key
    body = json.dumps(_trace(2)).encode()
    held = []
    for _ in range(2):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        s.sendall(f"POST /v1/diagnose HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {keys['busy']}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body[:10])
        held.append(s)
    time.sleep(0.5)  # both in the app, waiting for the rest of their bodies
    r = httpx.get(f"{srv.url}/v1/traces", headers=auth)
    assert r.status_code == 429 and r.headers["retry-after"] == "1", r.text
    assert r.json()["detail"][0]["type"] == "rate_limited.inflight"
    assert httpx.get(f"{srv.url}/v1/traces", headers={"Authorization": f"Bearer {keys['calm']}"}).status_code == 200
    for s in held:
        s.sendall(body[10:])
        assert s.recv(4096).startswith(b"HTTP/1.1 200"), "a held request was not answered"
        s.close()
    assert httpx.get(f"{srv.url}/v1/traces", headers=auth).status_code == 200


def test_a_tenant_over_its_limit_is_served_by_the_helper(server: tuple[LiveServer, dict[str, str]]) -> None:
    """``flood`` spends its 5-request burst and gets 429s; its next admitted diagnosis is answered by
    the worker's helper process (no queue wait: no thread of the worker ran it), the same
    verdict as in the worker; ``calm``'s diagnosis is still served in the worker."""
    srv, keys = server
    with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {keys['flood']}"}, timeout=60) as c:
        first = c.post("/v1/diagnose", json=_trace(3))
        assert first.status_code == 200 and "server-timing" in first.headers  # within its limit: the worker
        statuses = [c.get("/v1/traces?limit=1").status_code for _ in range(12)]
        assert 429 in statuses, statuses
        time.sleep(1.1)  # a token again
        r = c.post("/v1/diagnose", json=_trace(4))
    assert r.status_code == 200, r.text
    assert "server-timing" not in r.headers
    assert _helpers(srv.proc.pid), "no helper process serves the tenant over its limit"
    def verdict(answer: httpx.Response) -> tuple[object, object]:  # (the recommendation's id and jitter vary)
        return answer.json()["failures"], answer.json()["recommendation"]["strategy"]

    assert verdict(r) == verdict(first)
    calm = httpx.post(f"{srv.url}/v1/diagnose", json=_trace(5), headers={"Authorization": f"Bearer {keys['calm']}"})
    assert calm.status_code == 200 and "server-timing" in calm.headers
