"""Rate limits and the daily step quota (serve/ratelimit.py): 429 with Retry-After, per key, per
client address with auth off, per tenant; the quota shared through the store; metrics; and the
total holding with 2 real uvicorn workers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from model.data.builder import make_trace
from serve.app import create_app
from serve.auth import create_key
from serve.ratelimit import RateLimiter, TokenBuckets, seconds_to_midnight, utc_day
from serve.settings import Settings
from serve.store import Store
from tests.conftest import LiveServer


def test_token_bucket_burst_refill_and_wait() -> None:
    b = TokenBuckets(rate=2.0, burst=3.0)
    assert [b.take("k", now=10.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take("k", now=10.0) == pytest.approx(0.5)  # one token comes back in 1/rate s
    assert b.take("k", now=10.5) == 0.0
    assert b.take("other", now=10.5) == 0.0  # buckets are per name
    assert b.take("k", now=100.0) == 0.0  # refilled (capped at the burst)
    assert [b.take("k", now=100.0) for _ in range(3)][-1] > 0


def test_split_per_process_and_lru_bound() -> None:
    lim = RateLimiter(key_rps=10, key_burst=8, tenant_rps=0, tenant_burst=0, daily_steps=0, processes=4)
    assert lim.key is not None and (lim.key.rate, lim.key.burst) == (2.5, 2.0)
    assert lim.tenant is None
    small = TokenBuckets(rate=1, burst=1, max_buckets=2)
    for name in "abc":
        small.take(name, now=0.0)
    assert list(small._buckets) == ["b", "c"]


def test_seconds_to_midnight() -> None:
    from datetime import UTC, datetime

    assert seconds_to_midnight(datetime(2026, 1, 1, 23, 59, 30, tzinfo=UTC)) == 30
    assert utc_day(datetime(2026, 1, 2, 0, 0, tzinfo=UTC)) == "2026-01-02"


def _app(tmp_path: Path, **kw: Any) -> tuple[TestClient, dict[str, str]]:
    settings = Settings(data_dir=tmp_path, classifier=False, auth="on", auth_cache_s=60, **kw)
    store = Store(settings.resolved_database_url)
    store.upgrade()
    keys = {name: create_key(store, tenant)[0] for name, tenant in [("a1", "acme"), ("a2", "acme"), ("g", "globex")]}
    store.dispose()
    return TestClient(create_app(settings)), keys


def _get(c: TestClient, key: str) -> httpx.Response:
    return c.get("/v1/traces", params={"limit": 1}, headers={"Authorization": f"Bearer {key}"})


def test_per_key_then_per_tenant_limits_answer_429_with_retry_after(tmp_path: Path) -> None:
    client, keys = _app(
        tmp_path, rate_limit_key_rps=0.5, rate_limit_key_burst=3, rate_limit_tenant_rps=0.5, rate_limit_tenant_burst=4
    )
    with client as c:
        assert [_get(c, keys["a1"]).status_code for _ in range(3)] == [200] * 3
        r = _get(c, keys["a1"])
        assert r.status_code == 429
        assert r.json()["detail"][0]["type"] == "rate_limited.key"
        assert "0.5 requests a second from this key" in r.json()["detail"][0]["msg"]
        assert 1 <= int(r.headers["Retry-After"]) <= 2
        # the tenant's other key has its own bucket, until the tenant's (burst 4; 3 spent) is empty
        assert _get(c, keys["a2"]).status_code == 200
        r = _get(c, keys["a2"])
        assert r.status_code == 429 and r.json()["detail"][0]["type"] == "rate_limited.tenant"
        # another tenant is not touched
        assert [_get(c, keys["g"]).status_code for _ in range(2)] == [200] * 2
        # unauthenticated calls are 401, not counted; health and metrics are not limited
        assert c.get("/v1/traces").status_code == 401
        assert all(c.get("/healthz").status_code == 200 for _ in range(10))
        # a tenant's scrape shows its own 429s (the metrics route itself is not rate limited)
        text = c.get("/metrics", headers={"Authorization": f"Bearer {keys['a1']}"}).text
        assert 'triage_rate_limited_total{scope="key",tenant="acme"} 1.0' in text
        assert 'triage_rate_limited_total{scope="tenant",tenant="acme"} 1.0' in text
        assert _get(c, keys["g"]).status_code == 200
        for _ in range(3):
            _get(c, keys["g"])  # globex is refused once too
        mine = c.get("/metrics", headers={"Authorization": f"Bearer {keys['a1']}"}).text
        theirs = c.get("/metrics", headers={"Authorization": f"Bearer {keys['g']}"}).text
        assert 'tenant="globex"' not in mine and 'tenant="acme"' not in theirs
        assert 'triage_rate_limited_total{scope="key",tenant="globex"} ' in theirs
        assert "429" in c.get("/openapi.json").json()["paths"]["/v1/diagnose"]["post"]["responses"]


def test_auth_off_limits_each_client_address(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, classifier=False, auth="off", rate_limit_key_rps=0.1, rate_limit_key_burst=2)
    with TestClient(create_app(settings), client=("10.0.0.1", 5000)) as one, TestClient(
        create_app(settings), client=("10.0.0.2", 5000)
    ) as two:
        assert [one.get("/v1/traces").status_code for _ in range(3)] == [200, 200, 429]
        # the second app is a second worker: its own buckets, its own address
        assert two.get("/v1/traces").status_code == 200
    with TestClient(create_app(settings), client=("10.0.0.9", 1)) as otlp:  # the OTLP receiver too
        statuses = [otlp.post("/otlp/v1/traces", content=b"{}", headers={"Content-Type": "application/json"}).status_code for _ in range(3)]
        assert statuses[-1] == 429 and 429 not in statuses[:2]
    app = create_app(settings)
    with TestClient(app, client=("10.0.0.1", 1)) as c1:
        c1.get("/v1/traces")
        c1.get("/v1/traces")
        assert c1.get("/v1/traces").status_code == 429
        # the 429 was answered before routing, and is still timed under its route template
        text = c1.get("/metrics").text
        assert 'triage_request_duration_seconds_count{method="GET",route="/v1/traces",status="429"} 1.0' in text
        assert 'route="unmatched"' not in text
        limiter: RateLimiter = app.state.rate_limiter
        assert limiter.key is not None and limiter.key.take("local\x00addr:10.0.0.3") == 0.0


def _body(n_steps: int, i: int) -> dict[str, Any]:
    t = make_trace("tool_error", seed=i, n_steps=n_steps)
    t.id = f"q-{i}"
    t.labels = None
    return {"trace": t.model_dump(mode="json", exclude_none=True)}


def test_daily_step_quota_is_shared_through_the_store(tmp_path: Path) -> None:
    steps = len(make_trace("tool_error", seed=0, n_steps=8).steps)
    settings = dict(quota_daily_steps=2 * steps + 1, rate_limit_key_rps=0, rate_limit_tenant_rps=0)
    client, keys = _app(tmp_path, **settings)
    other = TestClient(create_app(Settings(data_dir=tmp_path, classifier=False, auth="on", **settings)))
    h = {"Authorization": f"Bearer {keys['a1']}"}
    with client as c, other as c2:
        assert c.post("/v1/diagnose", json=_body(8, 0), headers=h).status_code == 200
        assert c2.post("/v1/diagnose", json=_body(8, 1), headers=h).status_code == 200  # another worker
        r = c.post("/v1/diagnose", json=_body(8, 2), headers=h)
        assert r.status_code == 429 and r.json()["detail"][0]["type"] == "rate_limited.quota"
        assert "TRIAGE_QUOTA_DAILY_STEPS" in r.json()["detail"][0]["msg"]
        assert 0 < int(r.headers["Retry-After"]) <= 86400
        # the refused request stored nothing and counted nothing
        store = c.app.state.store  # type: ignore[attr-defined]
        assert store.usage("acme", utc_day()) == 2 * steps
        assert c.get("/v1/traces", headers=h).json()["items"].__len__() == 2
        # one step still fits: a session append of one message
        one = {"messages": [{"role": "user", "content": "hello"}]}
        assert c.post("/v1/sessions/s1/steps", json=one, headers=h).status_code == 200
        r = c2.post("/v1/sessions/s1/steps", json=one, headers=h)
        assert r.status_code == 429 and r.json()["detail"][0]["type"] == "rate_limited.quota"
        # and now this worker refuses before reading the body
        assert c2.post("/v1/diagnose", content=b"not json", headers=h).status_code == 429
        # the other tenant has its own quota
        g = {"Authorization": f"Bearer {keys['g']}"}
        assert c.post("/v1/diagnose", json=_body(8, 3), headers=g).status_code == 200


# -- two real workers: the total holds --------------------------------------------------------------
@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[tuple[LiveServer, str]]:
    store = Store(f"sqlite:///{tmp_path / 'triage.db'}")
    store.upgrade()
    key, _ = create_key(store, "acme")
    store.dispose()
    srv = LiveServer(
        env={
            "TRIAGE_DATA_DIR": str(tmp_path),
            "TRIAGE_AUTH": "on",
            "TRIAGE_CLASSIFIER": "false",
            "TRIAGE_RATE_LIMIT_KEY_RPS": "20",
            "TRIAGE_RATE_LIMIT_KEY_BURST": "10",
            "TRIAGE_RATE_LIMIT_TENANT_RPS": "0",
        },
        args=["--workers", "2"],
    ).wait_ready()
    yield srv, key
    srv.stop()


def test_two_workers_together_admit_at_most_the_limit(two_workers: tuple[LiveServer, str]) -> None:
    """16 connections for 3 s from one key against 20 req/s + a burst of 10, split over 2 workers
    (10 req/s + 5 each): admitted ≤ 20 × 3 + 10 (+ one second's slack for the start-up)."""
    srv, key = two_workers
    duration = 3.0

    async def run() -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        deadline = time.monotonic() + duration

        async def conn() -> None:
            async with httpx.AsyncClient(base_url=srv.url, headers={"Authorization": f"Bearer {key}"}) as c:
                while time.monotonic() < deadline:
                    r = await c.get("/v1/traces", params={"limit": 1})
                    out.append((r.status_code, r.headers.get("Retry-After", "")))

        await asyncio.gather(*(conn() for _ in range(16)))
        return out

    results = asyncio.run(run())
    ok = sum(1 for s, _ in results if s == 200)
    refused = [ra for s, ra in results if s == 429]
    assert {s for s, _ in results} <= {200, 429}
    assert refused and all(ra.isdigit() and int(ra) >= 1 for ra in refused)
    assert 5 <= ok <= 20 * (duration + 1) + 10, (ok, len(refused))
    # each worker counts its own 429s: some scrape shows them
    # (a new connection goes to whichever worker accepts it first; on a loaded machine one worker can
    # take every connection for a while, so scrape until one lands on a worker that refused some)
    counts: set[str] = set()
    scraped = 0
    deadline = time.monotonic() + 20
    while not counts and time.monotonic() < deadline:
        r = httpx.get(f"{srv.url}/metrics", headers={"Authorization": f"Bearer {key}"})
        scraped += 1
        counts |= {ln for ln in r.text.splitlines() if ln.startswith('triage_rate_limited_total{scope="key"')}
        if not counts:
            time.sleep(0.05)
    assert counts, f"no worker's scrape showed its 429s in {scraped} scrapes"


def test_fair_lock_serves_tenants_round_robin() -> None:
    import threading

    from serve.ratelimit import FairLock

    lock = FairLock()
    order: list[str] = []
    lock.acquire("holder")
    threads = []
    for name in ["a1", "a2", "a3", "b1", "c1"]:
        def run(n: str = name) -> None:
            with lock.hold(n[0]):
                order.append(n)

        t = threading.Thread(target=run)
        t.start()
        threads.append(t)
        deadline = time.monotonic() + 5
        while sum(len(q) for q in lock._queues.values()) < len(threads) and time.monotonic() < deadline:
            time.sleep(0.001)  # queued in this order
    lock.release()
    for t in threads:
        t.join(timeout=5)
    assert order == ["a1", "b1", "c1", "a2", "a3"]
    assert not lock._busy


def test_fair_gate_grants_slots_round_robin_and_survives_cancellation() -> None:
    from serve.ratelimit import FairGate

    async def run() -> list[str]:
        gate = FairGate(1)
        order: list[str] = []
        await gate.acquire("holder")

        async def one(name: str) -> None:
            async with gate.slot(name[0]):
                order.append(name)
                await asyncio.sleep(0)

        tasks = []
        for name in ["a1", "a2", "a3", "x1", "b1", "c1"]:
            tasks.append(asyncio.create_task(one(name)))
            await asyncio.sleep(0)  # queued in this order
        tasks[3].cancel()  # x1 gives up while waiting: its place is dropped
        await asyncio.sleep(0)
        gate.release()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert gate._free == 1 and not gate._queues
        return order

    assert asyncio.run(run()) == ["a1", "b1", "c1", "a2", "a3"]
