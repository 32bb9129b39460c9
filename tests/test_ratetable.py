"""The shared token-bucket table (serve/ratetable.py): one bucket across processes, no lost update
under concurrent takes, collisions that only ever limit more, stale slots reused, the file swept
when its master is gone; the limiter on it (the whole rate, not 1/workers) and its fallbacks; the
refusals a server on PostgreSQL remembers in it."""

from __future__ import annotations

import logging
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from serve.app import create_app
from serve.auth import create_key
from serve.ratelimit import RateLimiter
from serve.ratetable import WAYS, SharedTable
from serve.settings import Settings
from serve.store import Stores


def _taker(path: str, n: int, start: Any, out: Any) -> None:
    table = SharedTable.attach(path)
    start.wait(timeout=60)  # all at once
    granted = sum(1 for _ in range(n) if table.take(0, "acme\x00k1", rate=1e-9, burst=300_000.0) == 0.0)
    table.close()
    out.put(granted)


def test_processes_share_one_bucket_without_lost_updates(tmp_path: Path) -> None:
    """4 processes try 200,000 takes each, at once, from one bucket of 300,000 that does not refill:
    exactly 300,000 are granted (an unlocked read-modify-write would lose updates and grant more)."""
    path = SharedTable.create(str(tmp_path))
    ctx = multiprocessing.get_context("spawn")
    out, start = ctx.Queue(), ctx.Barrier(4)
    procs = [ctx.Process(target=_taker, args=(path, 200_000, start, out)) for _ in range(4)]
    for p in procs:
        p.start()
    granted = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert sum(granted) == 300_000, granted
    assert all(g > 0 for g in granted)  # the processes really competed for it
    table = SharedTable.attach(path)
    assert table.take(0, "acme\x00k1", rate=1e-9, burst=300_000.0) > 0  # and it is empty for everyone
    assert table.take(1, "acme\x00k1", rate=1e-9, burst=300_000.0) == 0.0  # another region, another bucket
    table.close()
    SharedTable.remove(path)
    assert not Path(path).exists()


def test_a_full_set_shares_a_bucket_and_stale_slots_are_reused() -> None:
    table = SharedTable.private(sets=1, regions=1)  # one set: every name lands in it
    kw = dict(rate=1.0, burst=2.0)
    owners = [f"k{i}" for i in range(WAYS)]
    for name in owners:
        assert table.take(0, name, now=0.0, **kw) == 0.0  # 8 live buckets, one token left each
    assert table.live(0, now=0.0, **kw) == WAYS
    # a 9th name finds no slot: it shares one with its owner; together they are limited more
    assert table.take(0, "newcomer", now=0.0, **kw) == 0.0
    assert table.take(0, "newcomer", now=0.0, **kw) > 0  # the shared bucket is empty...
    shared = [name for name in owners if table.take(0, name, now=0.0, **kw) > 0]
    assert len(shared) == 1  # ...for its owner too; the other 7 keep their token
    assert table.live(0, now=0.0, **kw) == WAYS  # never more buckets than slots
    # 2 s later every bucket has refilled: a slot that is full again is reused without loss
    assert table.take(0, "later", now=2.0, **kw) == 0.0
    assert table.take(0, "later", now=2.0, **kw) == 0.0
    assert table.take(0, "later", now=2.0, **kw) > 0  # its own bucket (burst 2), not a shared one


def test_attach_refuses_what_is_not_a_table_and_sweep_removes_orphans(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus"
    bogus.write_bytes(b"x" * 100)
    with pytest.raises(ValueError, match="not a rate-limit table"):
        SharedTable.attach(str(bogus))
    # a file whose master is gone (a pid that cannot be running) is removed by the next create
    orphan = tmp_path / "triage-rate-4194999-abc"
    orphan.write_bytes(b"")
    mine = SharedTable.create(str(tmp_path))
    assert not orphan.exists() and Path(mine).exists()
    SharedTable.remove(mine)


def test_limiter_on_a_shared_table_enforces_the_whole_rate(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = SharedTable.create(str(tmp_path))
    base = dict(rate_limit_key_rps=10, rate_limit_key_burst=8, rate_limit_tenant_rps=0, quota_daily_steps=0)
    shared = RateLimiter.from_settings(Settings(workers=4, rate_limit_table=path, **base))
    assert shared.processes == 1 and shared.key is not None and (shared.key.rate, shared.key.burst) == (10.0, 8.0)
    assert shared.table.path == path and shared.tenant is None and shared.shared is None
    with caplog.at_level(logging.WARNING, logger="triage.serve"):
        # workers without a table (uvicorn started by hand): each keeps its own, 1/workers of the rate
        alone = RateLimiter.from_settings(Settings(workers=4, **base))
        assert alone.processes == 4 and alone.table.path is None
        assert "without a shared rate-limit table" in caplog.text
        broken = RateLimiter.from_settings(Settings(workers=4, rate_limit_table=str(tmp_path / "gone"), **base))
        assert broken.processes == 4 and "not usable" in caplog.text
    one = RateLimiter.from_settings(Settings(workers=1, **base))  # one worker, no supervisor: all of it
    assert one.processes == 1 and one.key is not None and one.key.rate == 10.0
    # the setting that split the rates over a number of servers is gone (the buckets are in PostgreSQL)
    assert "rate_limit_replicas" not in Settings.model_fields
    SharedTable.remove(path)


def test_blocks_are_shared_by_processes_and_expire(tmp_path: Path) -> None:
    """A refusal the database answered, remembered in the table: every process of the server sees it
    until it ends; other names and regions are not blocked; a full set records nothing more."""
    path = SharedTable.create(str(tmp_path))
    one, two = SharedTable.attach(path), SharedTable.attach(path)
    one.block(0, "acme\x00k1", until=10.0, now=0.0)
    assert two.blocked(0, "acme\x00k1", now=4.0) == pytest.approx(6.0)
    assert two.blocked(0, "acme\x00k1", now=10.0) == 0.0
    assert two.blocked(1, "acme\x00k1", now=4.0) == 0.0 and two.blocked(0, "acme\x00k2", now=4.0) == 0.0
    one.block(0, "acme\x00k1", until=12.0, now=4.0)  # a later refusal moves its end
    assert two.blocked(0, "acme\x00k1", now=11.0) == pytest.approx(1.0)
    one.close()
    two.close()
    SharedTable.remove(path)
    small = SharedTable.private(sets=1, regions=1)
    for i in range(WAYS):
        small.block(0, f"k{i}", until=5.0, now=0.0)
    small.block(0, "ninth", until=5.0, now=0.0)  # no free slot: not recorded (the next request asks)
    assert small.blocked(0, "ninth", now=1.0) == 0.0 and small.blocked(0, "k0", now=1.0) == pytest.approx(4.0)
    small.block(0, "ninth", until=9.0, now=6.0)  # expired blocks free their slots
    assert small.blocked(0, "ninth", now=7.0) == pytest.approx(2.0)


def test_two_apps_on_one_table_spend_one_bucket(tmp_path: Path) -> None:
    """Two in-process apps (two workers) on one table: the key's burst spent on one is spent on both."""
    path = SharedTable.create(str(tmp_path))
    settings = Settings(data_dir=tmp_path, classifier=False, auth="on", auth_cache_s=60, workers=2,
                        rate_limit_table=path, rate_limit_key_rps=0.01, rate_limit_key_burst=3,
                        rate_limit_tenant_rps=0)
    store = Stores.at(settings.resolved_database_url)
    store.db.upgrade()
    key = create_key(store.keys, "acme")[0]
    store.db.dispose()
    h = {"Authorization": f"Bearer {key}"}
    with TestClient(create_app(settings)) as one, TestClient(create_app(settings)) as two:
        assert [one.get("/v1/traces", headers=h).status_code for _ in range(2)] == [200, 200]
        assert two.get("/v1/traces", headers=h).status_code == 200
        assert two.get("/v1/traces", headers=h).status_code == 429
        r = one.get("/v1/traces", headers=h)
        assert r.status_code == 429 and "0.01 requests a second from this key" in r.json()["detail"][0]["msg"]
    SharedTable.remove(path)
    assert os.path.exists(path) is False
