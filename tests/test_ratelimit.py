"""Rate limits and the daily step quota (serve/ratelimit.py): 429 with Retry-After, per key, per
client address with auth off, per tenant; the quota shared through the store; metrics; and the
total holding with 2 real uvicorn workers."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from model.core.errors import RateLimitedError, StoreUnavailableError
from model.data.builder import make_trace
from serve.app import create_app
from serve.auth import create_key
from serve.ratelimit import RateLimiter, RefusalLogFilter, TokenBuckets, seconds_to_midnight, utc_day
from serve.settings import Settings
from serve.store import Stores
from tests.conftest import LiveServer, child_pids


def test_token_bucket_burst_refill_and_wait() -> None:
    b = TokenBuckets(rate=2.0, burst=3.0)
    assert [b.take("k", now=10.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take("k", now=10.0) == pytest.approx(0.5)  # one token comes back in 1/rate s
    assert b.take("k", now=10.5) == 0.0
    assert b.take("other", now=10.5) == 0.0  # buckets are per name
    assert b.take("k", now=100.0) == 0.0  # refilled (capped at the burst)
    assert [b.take("k", now=100.0) for _ in range(3)][-1] > 0


def test_split_per_process() -> None:
    lim = RateLimiter(key_rps=10, key_burst=8, tenant_rps=0, tenant_burst=0, daily_steps=0, processes=4)
    assert lim.key is not None and (lim.key.rate, lim.key.burst) == (2.5, 2.0)
    assert lim.tenant is None


def test_seconds_to_midnight() -> None:
    from datetime import UTC, datetime

    assert seconds_to_midnight(datetime(2026, 1, 1, 23, 59, 30, tzinfo=UTC)) == 30
    assert utc_day(datetime(2026, 1, 2, 0, 0, tzinfo=UTC)) == "2026-01-02"


def _app(tmp_path: Path, **kw: Any) -> tuple[TestClient, dict[str, str]]:
    settings = Settings(data_dir=tmp_path, classifier=False, auth="on", auth_cache_s=60, **kw)
    store = Stores.at(settings.resolved_database_url)
    store.db.upgrade()
    keys = {name: create_key(store.keys, tenant)[0] for name, tenant in [("a1", "acme"), ("a2", "acme"), ("g", "globex")]}
    store.db.dispose()
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
        # the route templates (the OpenAPI schema) were built at start, not by the first 429 on the event loop
        assert app.openapi_schema is not None and any(t == "/v1/traces" for _, t, _ in app.state.route_templates)
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
        store = c.app.state.service.stores  # type: ignore[attr-defined]
        assert store.traces.usage("acme", utc_day()) == 2 * steps
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


# -- two real workers: one bucket between them -------------------------------------------------------
RPS, BURST = 20.0, 10.0


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[tuple[LiveServer, str, Path]]:
    db = tmp_path / "triage.db"
    store = Stores.at(f"sqlite:///{db}")
    store.db.upgrade()
    key, _ = create_key(store.keys, "acme")
    store.db.dispose()
    srv = LiveServer(
        env={
            "TRIAGE_DATA_DIR": str(tmp_path),
            "TRIAGE_AUTH": "on",
            "TRIAGE_CLASSIFIER": "false",
            "TRIAGE_RATE_LIMIT_KEY_RPS": f"{RPS:g}",
            "TRIAGE_RATE_LIMIT_KEY_BURST": f"{BURST:g}",
            "TRIAGE_RATE_LIMIT_TENANT_RPS": "0",
        },
        args=["--workers", "2"],
    ).wait_ready()
    # /healthz answered by one worker; the test needs both accepting (else every connection goes to the first)
    deadline = time.monotonic() + 60
    while sum("Application startup complete" in line for line in list(srv.output)) < 2:
        assert time.monotonic() < deadline, "".join(srv.output)[-2000:]
        time.sleep(0.05)
    yield srv, key, db
    srv.stop()


class _Conn:
    """One keep-alive HTTP/1.1 connection (raw asyncio streams: its local port is known)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.port = int(writer.get_extra_info("sockname")[1])

    async def get(self, path: str, key: str) -> int:
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
        status = int((await self.reader.readline()).split(b" ", 2)[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        await self.reader.readexactly(length)
        return status


def _owners(master: int, server_port: int) -> dict[int, int]:
    """client port → pid of the worker holding the server side of that connection (Linux /proc)."""
    inode_of: dict[int, int] = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        local, remote = f[1].split(":"), f[2].split(":")
        if local[0] == "0100007F" and int(local[1], 16) == server_port and remote[1] != "0000":
            inode_of[int(f[9])] = int(remote[1], 16)
    out: dict[int, int] = {}
    for child in child_pids(master):
        for fd in Path(f"/proc/{child}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and int(target[8:-1]) in inode_of:
                out[inode_of[int(target[8:-1])]] = child
    return out


def _data_version(c: sqlite3.Connection) -> int:
    """Changes when another connection commits a write (compare values of one connection only)."""
    return int(c.execute("PRAGMA data_version").fetchone()[0])


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="finds each connection's worker in /proc (Linux)")
def test_two_workers_spend_one_bucket_at_the_configured_rate(two_workers: tuple[LiveServer, str, Path]) -> None:
    """One key against 2 workers (20 req/s, burst 10): flooded through both workers, and then through
    one of them only, the server admits burst + 20 × seconds (±10 %) each time: the workers spend
    one bucket (a bucket per worker with the whole rate would admit twice that through both; split
    per worker, one worker alone would admit half). No request writes the store."""
    srv, key, db = two_workers
    table = [p for d in {"/dev/shm", tempfile.gettempdir()} for p in Path(d).glob(f"triage-rate-{srv.proc.pid}-*")]
    assert table, "triage serve --workers 2 made no shared rate table"

    async def flood(conns: list[_Conn], seconds: float) -> tuple[int, int, float]:
        ok = refused = 0
        t0 = time.monotonic()
        deadline = t0 + seconds

        async def loop(c: _Conn) -> None:
            nonlocal ok, refused
            while time.monotonic() < deadline:
                status = await c.get("/v1/traces?limit=1", key)
                assert status in (200, 429), status
                ok += status == 200
                refused += status == 429

        await asyncio.gather(*(loop(c) for c in conns))
        return ok, refused, time.monotonic() - t0

    async def run() -> None:
        by_worker: dict[int, list[_Conn]] = {}
        conns: list[_Conn] = []
        for _ in range(64):  # connections until each worker holds at least 3
            conns.append(_Conn(*await asyncio.open_connection("127.0.0.1", srv.port)))
            await conns[-1].get("/healthz", key)  # accepted by its worker
            owners = _owners(srv.proc.pid, srv.port)
            by_worker = {}
            for c in conns:
                by_worker.setdefault(owners[c.port], []).append(c)
            if len(by_worker) == 2 and min(len(v) for v in by_worker.values()) >= 3:
                break
        assert len(by_worker) == 2, f"64 connections, all on one worker: {by_worker.keys()}"
        (a, on_a), (b, on_b) = sorted(by_worker.items())
        for c in (on_a[0], on_b[0]):
            assert await c.get("/v1/traces?limit=1", key) == 200  # each worker has authenticated the key
        await asyncio.sleep(2 * BURST / RPS)  # the bucket is full again
        watch = sqlite3.connect(db)
        version = _data_version(watch)
        for conns_used in (on_a + on_b, on_a):
            ok, refused, took = await flood(conns_used, 3.0)
            expected = BURST + RPS * took
            assert abs(ok - expected) <= 0.1 * expected, (len(conns_used), ok, refused, round(took, 2), expected)
            assert refused > ok  # well above the limit
            await asyncio.sleep(2 * BURST / RPS)
        assert _data_version(watch) == version, "requests wrote the store"
        watch.close()
        for c in conns:
            c.writer.close()

    asyncio.run(run())
    # each worker counts its own 429s: the scrape shows some
    r = httpx.get(f"{srv.url}/metrics", headers={"Authorization": f"Bearer {key}"})
    assert 'triage_rate_limited_total{scope="key",tenant="acme"}' in r.text
    srv.stop()
    assert not any(p.exists() for p in table), "the table file outlived its server"


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


def test_fair_gate_serves_a_tenant_that_just_had_a_turn_after_one_that_waits() -> None:
    """The abuser holds the slot and has requests queued; the victim queues after them. When the
    abuser's request ends the victim is next (round-robin in queue order would grant the abuser's
    queued request first: the victim would wait for two of the abuser's requests)."""
    from serve.ratelimit import FairGate, FairLock

    async def run() -> list[str]:
        gate = FairGate(1)
        order: list[str] = []
        await gate.acquire("abuser")

        async def one(tenant: str, name: str) -> None:
            async with gate.slot(tenant):
                order.append(name)
                await asyncio.sleep(0)

        tasks = []
        for tenant, name in [("abuser", "a2"), ("abuser", "a3"), ("victim", "v1")]:
            tasks.append(asyncio.create_task(one(tenant, name)))
            await asyncio.sleep(0)
        gate.release()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(run()) == ["v1", "a2", "a3"]
    import threading

    lock, done = FairLock(), []
    lock.acquire("abuser")
    threads = [threading.Thread(target=lambda t=t, n=n: (lock.acquire(t), done.append(n), lock.release()))
               for t, n in [("abuser", "a2"), ("victim", "v1")]]
    for t in threads:
        t.start()
        deadline = time.monotonic() + 5
        while sum(len(q) for q in lock._queues.values()) < threads.index(t) + 1 and time.monotonic() < deadline:
            time.sleep(0.001)
    lock.release()
    for t in threads:
        t.join(timeout=5)
    assert done == ["v1", "a2"]


def test_refusals_stay_out_of_the_access_log_with_a_summary_line(caplog: pytest.LogCaptureFixture) -> None:
    f = RefusalLogFilter(every_s=0.05)

    def record(status: int) -> logging.LogRecord:
        return logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                                 ("127.0.0.1:5000", "GET", "/v1/traces", "1.1", status), None)

    assert f.filter(record(200)) and f.filter(record(404))
    assert not f.filter(record(429)) and not f.filter(record(429))
    with caplog.at_level(logging.WARNING, logger="triage.serve"):
        time.sleep(0.06)
        assert not f.filter(record(429))
    assert "3 requests answered 429 in the last" in caplog.text and f.dropped == 0
    RefusalLogFilter.install()
    RefusalLogFilter.install()
    assert sum(isinstance(x, RefusalLogFilter) for x in logging.getLogger("uvicorn.access").filters) == 1


# -- the buckets in PostgreSQL, shared by every server on the database (serve/store/limits.py) ---------
@pytest.fixture
def pg_stores(tmp_path: Path) -> Iterator[Stores]:
    from tests.storefix import make_db_url

    db = make_db_url("postgresql", tmp_path)
    s = Stores.at(next(db))
    s.db.upgrade()
    yield s
    s.limits.close()
    s.db.dispose()
    next(db, None)


@pytest.mark.postgres
def test_shared_buckets_grant_the_burst_then_the_rate_and_stop_at_the_first_empty(pg_stores: Stores) -> None:
    lim = pg_stores.limits
    assert lim.available and not Stores.at("sqlite://").limits.available
    assert [lim.take([("k:a", 10.0, 3.0)])[0] for _ in range(3)] == [-1, -1, -1]  # the burst at once
    refused, wait = lim.take([("k:a", 10.0, 3.0)])
    assert refused == 0 and 0.0 < wait <= 0.1  # a token comes back within 1/rate
    time.sleep(wait + 0.02)
    assert lim.take([("k:a", 10.0, 3.0)]) == (-1, 0.0)
    # in order: a refusal stops there; the buckets after it are not spent, those before it are
    assert lim.take([("k:b", 1e-6, 1.0), ("t:b", 1e-6, 1.0)]) == (-1, 0.0)
    assert lim.take([("k:c", 1e-6, 1.0), ("t:b", 1e-6, 1.0)])[0] == 1
    assert lim.take([("k:b", 1e-6, 1.0), ("t:c", 1e-6, 1.0)])[0] == 0
    assert lim.take([("t:c", 1e-6, 1.0)]) == (-1, 0.0)
    time.sleep(0.35)  # k:a is full again (the others do not refill): the same as no row, swept
    assert lim.sweep(0.0) == 1


@pytest.mark.postgres
def test_shared_buckets_lose_no_update_under_concurrent_takes(pg_stores: Stores) -> None:
    """4 threads, each on a connection of its own (as 4 workers), take 150 tokens each from one bucket
    of 300 that does not refill: exactly 300 are granted."""
    import threading

    stores = [Stores.at(pg_stores.db.url) for _ in range(4)]
    granted = [0] * 4
    start = threading.Barrier(4)

    def run(i: int) -> None:
        start.wait()
        granted[i] = sum(stores[i].limits.take([("k:hot", 1e-9, 300.0)])[0] == -1 for _ in range(150))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.limits.close()
        s.db.dispose()
    assert sum(granted) == 300 and all(g > 0 for g in granted), granted


@pytest.mark.postgres
def test_two_servers_limiters_spend_one_bucket_and_remember_refusals(pg_stores: Stores,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Two limiters with tables of their own (two servers) on one database: the key's burst is spent once
    over both; a refusal is answered from the table until its bucket can hold a token, with no query;
    with the database gone, each counts with its own table for a while, and says so."""
    from serve.store.limits import LimitStore

    servers = [RateLimiter(key_rps=0.5, key_burst=3, tenant_rps=100, tenant_burst=100, daily_steps=0,
                           processes=4, shared=pg_stores.limits) for _ in range(2)]
    assert all(s.processes == 1 and s.key is not None and s.key.rate == 0.5 for s in servers)  # no split
    codes = []
    for i in range(6):
        try:
            servers[i % 2].check_request("acme", "k1")
            codes.append(200)
        except RateLimitedError as exc:
            assert exc.scope == "key"
            codes.append(429)
    assert codes == [200, 200, 200, 429, 429, 429]
    calls = []
    take = pg_stores.limits.take
    pg_stores.limits.take = lambda b: calls.append(b) or take(b)  # type: ignore[method-assign]
    for _ in range(20):  # refused from each server's table (the block), not the database
        with pytest.raises(RateLimitedError):
            servers[0].check_request("acme", "k1")
    assert calls == []
    servers[0].check_request("acme", "k2")  # another key: asks the database
    assert len(calls) == 1
    dead = LimitStore(Stores.at("postgresql://triage@127.0.0.1:1/nowhere").db, timeout_s=0.2)
    with pytest.raises(StoreUnavailableError, match="did not answer"):
        dead.take([("k:a", 1.0, 1.0)])
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailableError, match="a moment ago"):  # the calls behind it do not wait in turn
        dead.take([("k:a", 1.0, 1.0)])
    assert time.monotonic() - t0 < 0.1
    gone = RateLimiter(key_rps=1, key_burst=2, tenant_rps=0, tenant_burst=0, daily_steps=0,
                       shared=LimitStore(Stores.at("postgresql://triage@127.0.0.1:1/nowhere").db, timeout_s=0.2))
    with caplog.at_level(logging.WARNING, logger="triage.serve"):
        gone.check_request("acme", "k1")  # admitted on the server's own table
        gone.check_request("acme", "k1")
        with pytest.raises(RateLimitedError):
            gone.check_request("acme", "k1")
    assert "shared rate-limit buckets are unavailable" in caplog.text
