"""bench/seed.py's bulk seeding writes what the store's write path writes for the same runs.

One database, two tenants: ``bulk`` seeded by :func:`bench.seed.seed`, ``wp`` written run by run
through :meth:`TraceStore.put_trace`, :meth:`SessionStore.put_recommendation`,
:meth:`SessionStore.add_outcome`, a label with :func:`count_labels`, the daily usage and the named
agents' rows, with the clock at each run's time. Every table the runs touch must hold the same rows
(less the tenant and autoincrement ids), and the service's read paths must answer the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from bench.seed import ARM, OUTCOME_AFTER_S, plan, pool, seed, templates
from serve.services import console
from serve.store import Stores
from serve.store.counters import count_labels
from serve.store.tables import Base, LabelRow, RecommendationRow
from tests.storefix import BACKENDS, make_db_url

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
RUNS, IN_WINDOW, AGENTS = 200, 150, 6
TABLES = ("traces", "failures", "run_metrics", "recommendations", "outcomes", "labels", "canary_counts", "overview_counts",
          "metric_totals", "usage", "agents")
SKIP = {"tenant_id", "id"}  # the tenant, and the autoincrement ids (the rows' own ids stay: traces.id etc.)
KEYED = {"traces", "recommendations"}  # tables whose ``id`` is the row's own key, compared


@pytest.fixture(scope="module")
def runs() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return pool(real_groups=1, generated=30)


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from make_db_url(request.param, tmp_path)


def _write_path(store: Stores, runs: list[tuple[str, dict[str, Any], dict[str, Any]]], tenant: str,
                monkeypatch: pytest.MonkeyPatch) -> None:
    """The same runs as the seeder's plan, each through the write path at its own time."""
    store.keys.ensure_tenant(tenant)
    seen: set[str] = set()
    for spec in plan(templates(runs), runs=RUNS, in_window=IN_WINDOW, agents=AGENTS, now=NOW):
        base, trace, resp = runs[spec.template]
        at = spec.at.replace(tzinfo=UTC)
        trace = {**trace, "id": spec.tid, "task_type": spec.agent}
        rec = {**(resp.get("recommendation") or {}), "id": spec.rec_id}
        response = {**resp, "trace_id": spec.tid, "recommendation": rec, "agent": spec.agent, "agent_source": "option",
                    "arm": ARM}
        primary = resp.get("primary") or {}
        with store.db.write() as db:
            store.traces.put_trace(db, tenant=tenant, trace_id=spec.tid, trace=trace, response=response,
                                   session_id=None, task_type=spec.agent, arm=ARM, agent=spec.agent, now=at)
            store.traces.add_usage(db, tenant, at.strftime("%Y-%m-%d"), len(trace.get("steps") or []))
            if spec.agent not in seen:
                store.agents.insert_agent(db, tenant, spec.agent, source="option")
                seen.add(spec.agent)
            if not resp.get("failures"):
                continue
            monkeypatch.setattr("serve.store.sessions.utcnow", lambda at=at: at)
            store.sessions.put_recommendation(db, tenant=tenant, rec=rec, trace_id=spec.tid, session_id=None,
                                              failure_key=f"{primary.get('kind')}@{primary.get('source_index')}",
                                              kind=primary.get("kind"), rung=0, attempt=1)
            if spec.outcome is not None:
                later = at + timedelta(seconds=OUTCOME_AFTER_S)
                monkeypatch.setattr("serve.store.sessions.utcnow", lambda later=later: later)
                row = db.get(RecommendationRow, (tenant, spec.rec_id))
                assert row is not None
                store.sessions.add_outcome(db, tenant=tenant, rec=row, success=spec.outcome,
                                           duration_s=OUTCOME_AFTER_S, cost=None, note="")
            if spec.label:
                db.add(LabelRow(tenant_id=tenant, trace_id=spec.tid, failed=True, kind=primary.get("kind"),
                                author="bench", author_type="human",
                                created_at=at + timedelta(seconds=OUTCOME_AFTER_S + 1)))
                db.flush()
                count_labels(db, tenant, spec.tid)


def _rows(store: Stores, table: str, tenant: str) -> list[str]:
    t = Base.metadata.tables[table]
    skip = (SKIP - {"id"} if table in KEYED else SKIP) | ({"created_at", "updated_at"} if table == "agents" else set())
    with store.db.read() as db:
        got = db.execute(select(t).where(t.c.tenant_id == tenant)).mappings().all()
    return sorted(json.dumps({k: v for k, v in r.items() if k not in skip}, sort_keys=True, default=str) for r in got)


def test_bulk_seed_equals_the_write_path(url: str, runs: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    got = seed(url, tenant="bulk", runs=RUNS, in_window=IN_WINDOW, agents=AGENTS, now=NOW, pool_runs=runs,
               chunk=64, progress=False)
    assert got["runs"] == RUNS and got["agents"] == AGENTS and got["failing"] > 10 and got["labels"] > 0
    assert got["outcomes"] > 0 and got["bytes"] > 0
    store = Stores.at(url)
    try:
        _write_path(store, runs, "wp", monkeypatch)
        for table in TABLES:
            bulk, wp = _rows(store, table, "bulk"), _rows(store, table, "wp")
            assert bulk, table
            assert bulk == wp, table
        # the read paths: a few runs whole, the history's pages, the console's overview and runs pages
        for tid in ("bench-0000000", "bench-0000007", f"bench-{RUNS - 1:07d}"):
            a, b = store.traces.get_trace_json("bulk", tid), store.traces.get_trace_json("wp", tid)
            assert a is not None and b is not None and a[1] == b[1] and a[0].response == b[0].response
        for kind in (None, "tool_error"):
            pa = store.traces.list_traces("bulk", kind=kind, limit=40)
            pb = store.traces.list_traces("wp", kind=kind, limit=40)
            assert [r.id for r in pa.items] == [r.id for r in pb.items] and pa.next_cursor == pb.next_cursor
        since, until = console.window(7, now=NOW + timedelta(minutes=1))
        ov = console.overview(store, "bulk", since=since, until=until, agent=None)
        assert ov == console.overview(store, "wp", since=since, until=until, agent=None)
        assert ov["totals"]["runs"] == IN_WINDOW
        for f in (console.RunFilter(), console.RunFilter(verdict="failed"), console.RunFilter(labelled=True)):
            pa_ = console.runs(store, "bulk", f, page=2, per_page=5)
            assert pa_ == console.runs(store, "wp", f, page=2, per_page=5) and pa_["items"]
    finally:
        store.db.dispose()
