"""The console at scale (issue 35): the verdict columns of revision 0015 and their online backfill,
the label queue read from the console's index, per-tenant retention. Each test runs on SQLite and
on the throwaway PostgreSQL (tests/storefix.py)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import exists, func, select, update
from typer.testing import CliRunner

import serve.services.console as ui_data
from serve.services.label_queue import queue_head, review_queue
from serve.store import Stores
from serve.store.counters import hour_of
from serve.store.migrate import downgrade, head_revision
from serve.store.migrate import upgrade as migrate_to
from serve.store.tables import (
    CanaryCountRow,
    FailureRow,
    LabelRow,
    ObservationRow,
    OutcomeRow,
    OverviewCountRow,
    RecommendationRow,
    RunMetricRow,
    SessionRow,
    Tenant,
    TraceRow,
    TraceStepRow,
)
from serve.store.verdict import queue_key, run_columns
from tests.storefix import db_url, store_fixture  # noqa: F401  (fixtures)

NOW = datetime.now(UTC).replace(microsecond=0)
AGENTS = ("billing", "search", "_pool")
KINDS = ("tool_error", "loop", "hallucination", "refusal")


def _response(rng: random.Random, tid: str) -> dict[str, Any]:
    """A stored diagnosis with every shape the verdict and the queue's margin read: healthy, failed
    or unknown; with or without a probability; a run scorer's finding that keeps its threshold; findings
    near and far from their thresholds, as failures and as signals."""
    healthy = rng.choice([True, False, None])
    failures: list[dict[str, Any]] = []
    signals: list[dict[str, Any]] = []
    if healthy is False:
        for _ in range(rng.randint(1, 3)):
            failures.append({"kind": rng.choice(KINDS), "severity": "high", "confidence": round(rng.uniform(0.5, 1), 3),
                             "detector": "rules", "step": rng.randint(0, 3), "evidence": "x"})
        if rng.random() < 0.4:
            failures.append({"kind": "hallucination", "severity": "medium", "confidence": 0.7, "detector": "runscore",
                             "step": 1, "details": {"threshold": round(rng.uniform(0.3, 0.6), 3)}})
    if rng.random() < 0.5:
        signals.append({"kind": rng.choice(KINDS), "severity": "low", "confidence": round(rng.uniform(0, 0.5), 3),
                        "detector": "rules", "step": 0, "evidence": "y"})
    p = None if rng.random() < 0.2 else round(rng.random(), 4)
    primary = failures[0] if failures else None
    return {"trace_id": tid, "healthy": healthy, "failure_probability": p, "failures": failures, "signals": signals,
            "primary": primary, "model_version": "m",
            "recommendation": {"id": f"rec-{tid}", "strategy": "retry" if failures else "continue"}}


def _seed(store: Stores, n: int, *, tenant: str = "t", seed: int = 0, days: float = 6.0) -> list[str]:
    """``n`` runs of three agents over the last ``days`` days, with repairs, outcomes and labels
    (some by ``ana``, one withdrawn)."""
    rng = random.Random(seed)
    store.keys.ensure_tenant(tenant)
    ids = []
    with store.db.write() as db:
        for i in range(n):
            tid = f"{tenant}-run-{i:05d}"
            resp = _response(rng, tid)
            at = NOW - timedelta(days=days * rng.random())
            store.traces.put_trace(db, tenant=tenant, trace_id=tid, trace={"id": tid, "steps": [
                {"kind": "user_input", "content": "hi", "source_index": 0},
                {"kind": "tool_call", "content": "", "tool_name": "lookup", "source_index": 1},
                {"kind": "tool_result", "content": "err", "source_index": 2},
                {"kind": "final_output", "content": "done", "source_index": 3}]},
                response=resp, session_id=None, task_type=None, agent=AGENTS[i % 3], now=at)
            if resp["failures"]:
                store.sessions.put_recommendation(db, tenant=tenant, rec=resp["recommendation"], trace_id=tid,
                                                  session_id=None, failure_key="k", kind=resp["primary"]["kind"],
                                                  rung=0, attempt=1)
                if rng.random() < 0.5:
                    row = db.get(RecommendationRow, (tenant, resp["recommendation"]["id"]))
                    assert row is not None
                    store.sessions.add_outcome(db, tenant=tenant, rec=row, success=rng.random() < 0.5,
                                               duration_s=1.0, cost=None, note="")
            if rng.random() < 0.15:
                db.add(LabelRow(tenant_id=tenant, trace_id=tid, failed=True, author=rng.choice(["ana", "bob"])))
            ids.append(tid)
        db.add(LabelRow(tenant_id=tenant, trace_id=ids[0], failed=True, author="ana", withdrawn_at=NOW))
    return ids



def _unfill(store: Stores, ids: Sequence[str]) -> None:
    """Make these rows look stored before revision 0015."""
    with store.db.write() as db:
        db.execute(update(TraceRow).where(TraceRow.id.in_(list(ids))).values(
            verdict=None, failure_probability=None, judged_threshold=None, finding_margin=None))


def _pages(store: Stores) -> tuple[Any, ...]:
    since, until = NOW - timedelta(days=7), NOW + timedelta(minutes=1)
    ov = ui_data.overview(store, "t", since=since, until=until, agent=None)
    ov_agent = ui_data.overview(store, "t", since=since, until=until, agent="search")
    failed = ui_data.runs(store, "t", ui_data.RunFilter(verdict="failed"), page=2, per_page=7)
    unknown = ui_data.runs(store, "t", ui_data.RunFilter(verdict="unknown", agent="billing"), page=1, per_page=50)
    return ov, ov_agent, failed, unknown


def test_verdict_columns_backfill_in_batches_and_pages_stay_right_meanwhile(store: Stores) -> None:
    ids = _seed(store, 120)
    with store.db.read() as db:
        rows = db.execute(select(TraceRow.response, TraceRow.verdict, TraceRow.failure_probability,
                                 TraceRow.judged_threshold, TraceRow.finding_margin)).all()
    for resp, *cols in rows:  # written at diagnosis time, as run_columns says
        assert dict(zip(("verdict", "failure_probability", "judged_threshold", "finding_margin"), cols,
                        strict=True)) == run_columns(resp)
    assert {r[1] for r in rows} == {"failed", "healthy", "unknown"}
    before = _pages(store)
    ov = before[0]
    assert ov["totals"]["runs"] == 120 and ov["totals"]["failed"] + ov["totals"]["healthy"] + ov["totals"]["unknown"] == 120
    assert sum(sum(v) for v in ov["spectrum"]["kinds"].values()) == ov["totals"]["failed"]
    assert ov["totals"]["repairs"] > 0 and ov["totals"]["outcomes"] > 0

    _unfill(store, ids[::2])  # 60 rows stored "before 0015"
    assert store.upkeep.unfilled() == 60 and store.upkeep.unfilled("t") == 60
    assert _pages(store) == before  # read from their JSON meanwhile
    assert store.upkeep.backfill_verdicts(batch=25, max_batches=1) == 25  # one batch, then stop
    assert store.upkeep.unfilled() == 35
    assert _pages(store) == before
    assert store.upkeep.backfill_verdicts(batch=25) == 35  # resumes where it stopped
    assert store.upkeep.unfilled() == 0 and store.upkeep.backfill_verdicts() == 0
    with store.db.read() as db:
        again = db.execute(select(TraceRow.response, TraceRow.verdict, TraceRow.failure_probability,
                                  TraceRow.judged_threshold, TraceRow.finding_margin)).all()
    assert sorted(map(repr, again)) == sorted(map(repr, rows))
    assert _pages(store) == before


def test_backfill_keeps_a_diagnosis_written_after_it_read_the_row(store: Stores) -> None:
    ids = _seed(store, 10)
    _unfill(store, ids)
    with store.db.write() as db:  # a new diagnosis of run 3 lands first: its columns are the new ones
        db.execute(update(TraceRow).where(TraceRow.id == ids[3]).values(verdict="healthy"))
    assert store.upkeep.backfill_verdicts() == 9
    with store.db.read() as db:
        assert db.scalar(select(TraceRow.verdict).where(TraceRow.id == ids[3])) == "healthy"


def test_migration_0015_adds_the_columns_and_goes_back(store: Stores) -> None:
    assert head_revision() >= "0015"
    _seed(store, 5)
    downgrade(store.db.engine, "0014")
    migrate_to(store.db.engine, "0015")
    assert store.upkeep.unfilled() == 5  # the rows kept, their verdict to fill
    assert store.upkeep.backfill_verdicts() == 5
    store.db.upgrade()


def test_cli_backfill_fills_and_says_so(store: Stores) -> None:
    from serve.cli.main import app

    ids = _seed(store, 12)
    _unfill(store, ids[:7])
    _unkey(store, ids[5:])
    got = CliRunner().invoke(app, ["store", "backfill", "--store", store.db.url, "--batch", "3"])
    assert got.exit_code == 0, got.output
    assert "filled 7 of 7 runs; 0 left" in got.output
    assert "label queue keys: filled 7 of 7 runs; 0 left" in got.output


class _Walk:
    """The history as the queue walked it before revision 0015 (every stored trace)."""

    def __init__(self, store: Stores) -> None:
        self.store = store

    def iter_history(self, tenant: str) -> Iterator[dict[str, Any]]:
        return self.store.labels.iter_history(tenant)


class _Console:
    """What queue_head asks of the console service, over a store."""

    def __init__(self, store: Stores) -> None:
        self.s = store

    def agents(self, tenant: str) -> list[str]:
        return self.s.agents.agents_with_runs(tenant)

    def review_head(self, tenant: str, author: str, **kw: Any) -> Any:
        return self.s.labels.review_head(tenant, author, **kw)

    def review_rows(self, tenant: str, author: str) -> Any:
        return self.s.labels.review_rows(tenant, author)

    def responses(self, tenant: str, ids: Sequence[str]) -> Any:
        return self.s.labels.responses(tenant, ids)

    def findings_of(self, tenant: str, ids: Sequence[str]) -> Any:
        return self.s.labels.findings_of(tenant, ids)

    def iter_history(self, tenant: str) -> Iterator[dict[str, Any]]:
        return self.s.labels.iter_history(tenant)


def test_queue_from_the_index_is_the_walks_queue(store: Stores) -> None:
    ids = _seed(store, 1500, seed=3)
    thresholds = {"billing": 0.42, "search": None, "_pool": 0.61}

    def thr(agent: str | None) -> float | None:
        return thresholds.get(agent or "")

    def key(cs: list[Any]) -> list[tuple[str, float, str]]:
        return [(c.trace_id, c.margin, c.basis) for c in cs]

    for order in ("random", "margin"):
        walked, done = review_queue(_Walk(store), "t", author="ana", threshold_for=thr, order=order)
        indexed, done2 = review_queue(store.labels, "t", author="ana", threshold_for=thr, order=order)
        assert key(indexed) == key(walked) and done2 == done > 0
        assert [c.response for c in indexed] == [c.response for c in walked]
        head, left, done3 = queue_head(_Console(store), "t", author="ana", threshold_for=thr,  # type: ignore[arg-type]
                                       order=order, size=300)
        assert key(head) == key(walked[:300]) and left == len(walked) and done3 == done
        # while the backfill has rows to fill, the same queue (read from their JSON)
        _unfill(store, ids[::3])
        head, left, _ = queue_head(_Console(store), "t", author="ana", threshold_for=thr,  # type: ignore[arg-type]
                                   order=order, size=300)
        assert key(head) == key(walked[:300]) and left == len(walked)
        store.upkeep.backfill_verdicts()


def _unkey(store: Stores, ids: Sequence[str]) -> None:
    """Make these rows look stored before revision 0018."""
    with store.db.write() as db:
        db.execute(update(TraceRow).where(TraceRow.id.in_(list(ids))).values(review_key=None))


def test_random_queue_reads_the_keys_from_the_index_and_the_backfill_fills_them(store: Stores) -> None:
    ids = _seed(store, 400, seed=5)
    with store.db.read() as db:
        keys = dict(db.execute(select(TraceRow.id, TraceRow.review_key)).all())
    assert keys == {i: queue_key(i) for i in ids}  # written at diagnosis time
    # the page's agents: from the counts kept on write, the same as a DISTINCT
    assert store.agents.agents_with_runs("t") == sorted(AGENTS) and store.agents.agents_with_runs("none") == []

    def thr(agent: str | None) -> float | None:
        return 0.5

    def head(author: str, size: int) -> tuple[list[str], int]:
        got, left, _ = queue_head(_Console(store), "t", author=author, threshold_for=thr,  # type: ignore[arg-type]
                                  order="random", size=size)
        return [c.trace_id for c in got], left

    walked = {a: [c.trace_id for c in review_queue(_Walk(store), "t", author=a, threshold_for=thr, order="random")[0]]
              for a in ("ana", "bob", "cy")}
    for a, w in walked.items():
        start = queue_key(a)  # from the author's start up, then round from the lowest key (module docstring)
        assert w == sorted(w, key=lambda i: (keys[i] < start, keys[i], i))
        assert head(a, 1000) == (w, len(w))  # the whole queue: both reads, round to the start again
        assert head(a, 25) == (w[:25], len(w))
    assert len({tuple(w[:10]) for w in walked.values()}) == 3  # each reviewer starts elsewhere
    # a label takes its run out of the author's queue, the rest keep their order
    store.labels.add_label("t", walked["cy"][1], failed=False, author="cy")
    assert head("cy", 30) == ([walked["cy"][0], *walked["cy"][2:31]], len(walked["cy"]) - 1)

    _unkey(store, ids[::2])  # 200 rows stored "before 0018": ordered in Python meanwhile, the same queue
    assert store.upkeep.unfilled(column="review_key") == 200 and store.upkeep.unfilled() == 0
    assert head("ana", 50) == (walked["ana"][:50], len(walked["ana"]))
    assert store.upkeep.backfill_keys(batch=64, max_batches=1) == 64  # one batch, then stop
    assert store.upkeep.unfilled(column="review_key") == 136
    assert store.upkeep.backfill_keys(batch=64) == 136 and store.upkeep.backfill_keys() == 0
    with store.db.read() as db:
        assert dict(db.execute(select(TraceRow.id, TraceRow.review_key)).all()) == keys
    assert head("ana", 50) == (walked["ana"][:50], len(walked["ana"]))


def test_migration_0018_adds_the_queue_key_and_goes_back(store: Stores) -> None:
    from sqlalchemy import inspect

    _seed(store, 5)
    downgrade(store.db.engine, "0016")
    assert "review_key" not in {c["name"] for c in inspect(store.db.engine).get_columns("traces")}
    migrate_to(store.db.engine, "0018")
    assert store.upkeep.unfilled(column="review_key") == 5  # the rows kept, their key to fill
    assert store.upkeep.backfill_keys() == 5 and store.upkeep.unfilled(column="review_key") == 0
    store.db.upgrade()


def _count(store: Stores, table: Any, tenant: str) -> int:
    with store.db.read() as db:
        return int(db.scalar(select(func.count()).select_from(table).where(table.tenant_id == tenant)) or 0)


def _hourly_rows(store: Stores) -> dict[tuple[str, int], list[tuple[Any, ...]]]:
    """Each (tenant, hour)'s canary and overview count rows, sorted."""
    out: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
    with store.db.read() as db:
        for row in (CanaryCountRow, OverviewCountRow):
            cols = [c for c in row.__table__.columns if c.name not in ("tenant_id", "hour")]
            for r in db.execute(select(row.tenant_id, row.hour, *cols)).all():
                out.setdefault((r[0], r[1]), []).append((row.__tablename__, *r[2:]))
    return {k: sorted(v, key=repr) for k, v in out.items()}


def test_retention_deletes_old_runs_and_what_derives_from_them(store: Stores) -> None:
    _seed(store, 200, tenant="t", seed=1, days=20)
    _seed(store, 50, tenant="keep", seed=2, days=20)
    with store.db.write() as db:  # a session per run of t, and stream observations at the runs' times
        runs = db.execute(select(TraceRow.id, TraceRow.created_at).where(TraceRow.tenant_id == "t")).all()
        for k, (tid, at) in enumerate(runs):
            db.execute(update(TraceRow).where(TraceRow.tenant_id == "t", TraceRow.id == tid).values(session_id=f"s{k}"))
            db.add(SessionRow(tenant_id="t", id=f"s{k}", trace_id=tid, created_at=at, updated_at=at))
            db.add(TraceStepRow(tenant_id="t", trace_id=tid, idx=0, step={"kind": "user_input", "content": "x"}))
        store.streams.add_observations(db, [
            {"tenant_id": tn, "stream": "latency", "agent": "billing", "seq": k, "value": 1.0, "trace_id": tid,
             "alarm": False, "created_at": at}
            for tn in ("t", "keep") for k, (tid, at) in enumerate(runs)])
    cutoff = NOW - timedelta(days=10)
    old = {r[0] for r in runs if r[1] < cutoff}
    assert 40 < len(old) < 160
    metrics_before = store.reports.metrics_snapshot("keep")
    hourly = _hourly_rows(store)
    assert {h for tn, h in hourly if tn == "t" and h < hour_of(cutoff)}  # hours that only old runs started in
    store.upkeep.set_retention("t", 10)
    assert store.upkeep.retentions() == {"t": 10, "keep": None}
    purged = store.upkeep.apply_retention(now=NOW)
    assert [(p.tenant, p.runs, p.observations) for p in purged] == [("t", len(old), len(old))]
    # the hourly count rows of the hours before the cutoff's went with their runs; the rest stayed, each count as it was
    after = _hourly_rows(store)
    assert purged[0].count_rows == sum(len(v) for (tn, h), v in hourly.items() if tn == "t" and h < hour_of(cutoff)) > 0
    assert not {h for tn, h in after if tn == "t" and h < hour_of(cutoff)}
    # (the cutoff's own hour may have lost runs started before it: its counts move, its rows stay)
    assert {k: v for k, v in after.items() if k != ("t", hour_of(cutoff))} == \
        {k: v for k, v in hourly.items() if k[0] != "t" or k[1] > hour_of(cutoff)}
    with store.db.read() as db:
        left = set(db.scalars(select(TraceRow.id).where(TraceRow.tenant_id == "t")))
        assert left == {r[0] for r in runs} - old
        for table in (FailureRow, OutcomeRow, LabelRow, TraceStepRow, RunMetricRow):
            assert not set(db.scalars(select(table.trace_id).where(table.tenant_id == "t"))) & old, table
        assert not set(db.scalars(select(RecommendationRow.trace_id).where(RecommendationRow.tenant_id == "t"))) & old
        assert not set(db.scalars(select(SessionRow.trace_id).where(SessionRow.tenant_id == "t"))) & old
        assert len(left) == _count(store, SessionRow, "t") == _count(store, RunMetricRow, "t")
        assert not set(db.scalars(select(ObservationRow.trace_id).where(ObservationRow.tenant_id == "t"))) & old
    # the counters: as if the deleted runs had never been written
    m = store.reports.metrics_snapshot("t")
    assert m["traces"] == len(left)
    with store.db.read() as db:
        assert m["failures"] == dict(db.execute(select(FailureRow.kind, func.count()).where(
            FailureRow.tenant_id == "t", FailureRow.is_signal.is_(False)).group_by(FailureRow.kind)).all())
        assert sum(m["recommendations"].values()) == _count(store, RecommendationRow, "t")
        assert sum(m["outcomes"].values()) == _count(store, OutcomeRow, "t")
    assert store.reports.metrics_snapshot("keep") == metrics_before and _count(store, TraceRow, "keep") == 50
    assert _count(store, ObservationRow, "keep") == len(runs)
    # a service-wide default applies to a tenant without a retention of its own
    purged = store.upkeep.apply_retention(default_days=5, now=NOW)
    assert {p.tenant: p.runs > 0 for p in purged} == {"t": False, "keep": True}
    store.upkeep.set_retention("t", None)
    with pytest.raises(Exception, match="no tenant 'nobody'"):
        store.upkeep.set_retention("nobody", 3)
    with pytest.raises(Exception, match="above 0"):
        store.upkeep.set_retention("t", 0)


def test_retention_deletes_in_batches(store: Stores) -> None:
    _seed(store, 30, days=20)
    n_old = _count(store, TraceRow, "t") - len(store.traces.list_traces("t", since=NOW - timedelta(days=10),
                                                                           limit=500).items)
    got = store.upkeep.purge_tenant("t", 10, now=NOW, batch=4)
    assert got.runs == n_old > 4


def test_cli_retention_and_purge(store: Stores, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from serve.cli.main import app
    from serve.settings import get_settings

    _seed(store, 20, days=20)
    monkeypatch.setenv("TRIAGE_DATABASE_URL", store.db.url)
    monkeypatch.setenv("TRIAGE_DATA_DIR", str(tmp_path))
    get_settings.cache_clear()
    try:
        runner = CliRunner()
        got = runner.invoke(app, ["store", "retention", "--tenant", "t"])
        assert got.exit_code != 0 and "give --days DAYS or --keep" in got.output
        got = runner.invoke(app, ["store", "retention", "--tenant", "t", "--days", "-1"])
        assert got.exit_code != 0 and "retention days must be above 0" in got.output
        got = runner.invoke(app, ["store", "retention", "--tenant", "t", "--days", "10"])
        assert got.exit_code == 0 and "runs deleted 10 days after they started" in got.output
        with store.db.read() as db:
            assert db.scalar(select(Tenant.retention_days).where(Tenant.id == "t")) == 10
        got = runner.invoke(app, ["store", "purge"])
        assert got.exit_code == 0 and "t: deleted" in got.output
        assert all(r.created_at >= NOW - timedelta(days=10, minutes=5)
                   for r in store.traces.list_traces("t", limit=500).items)
    finally:
        get_settings.cache_clear()


def test_keyset_pages_list_every_run_once_in_order_across_equal_times(store: Stores) -> None:
    store.keys.ensure_tenant("t")
    at = NOW - timedelta(hours=1)
    with store.db.write() as db:  # 25 runs, in 5 groups stored at the same instant (ties broken by id)
        for i in range(25):
            tid = f"k{i:02d}"
            store.traces.put_trace(db, tenant="t", trace_id=tid, trace={"id": tid, "steps": []},
                                   response={"healthy": True, "failures": [], "signals": []}, session_id=None,
                                   task_type=None, agent="a", now=at - timedelta(minutes=i // 5))
    seen: list[str] = []
    cursor = None
    while True:
        page = store.traces.list_traces("t", limit=4, cursor=cursor)
        seen += [r.id for r in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    expected = sorted((f"k{i:02d}" for i in range(25)), key=lambda t: (int(t[1:]) // 5, -int(t[1:])))
    assert seen == expected


def test_client_iterates_every_trace_by_keyset_pages(live_server: Any) -> None:
    from agent_triage_client import AsyncTriageClient, TriageClient, aiter_traces, iter_traces

    from serve.examples import OPENAI_LOOP

    start = datetime.now(UTC) - timedelta(seconds=1)
    with TriageClient(live_server.url, budget_s=30, timeout_s=30) as c:
        made = [c.diagnose(OPENAI_LOOP["trace"], options={"shadow": True}).trace_id for _ in range(7)]
        got = [t.id for t in iter_traces(c, since=start, page_size=3)]
        assert sorted(got) == sorted(made) and len(got) == 7
        assert got == [t.id for t in c.list_traces(since=start, limit=50).items]

    async def walk() -> list[str]:
        async with AsyncTriageClient(live_server.url, budget_s=30, timeout_s=30) as ac:
            return [t.id async for t in aiter_traces(ac, since=start, page_size=2)]

    assert asyncio.run(walk()) == got


def test_patterns_read_incrementally_equal_a_whole_read(store: Stores) -> None:
    from serve.services import patterns as P

    ids = _seed(store, 300, seed=5)
    since, until = P.window(since=None, until=None, days=3)

    def both() -> tuple[dict[str, Any], dict[str, Any]]:
        kept = P.tenant_patterns(store.reports, "t", since=since, until=until, limit=500).model_dump(exclude={"as_of"})
        with P._cache_lock:
            P._cache.clear()
            P._rows.clear()
        whole = P.tenant_patterns(store.reports, "t", since=since, until=until, limit=500).model_dump(exclude={"as_of"})
        return kept, whole

    kept, whole = both()
    assert kept == whole and whole["total_patterns"] > 5
    rng = random.Random(9)
    steps = [
        ("new runs", lambda: _seed(store, 20, seed=11, days=2) and None),
        ("re-diagnosed", lambda: _rediagnose(store, ids[:30], rng, healthy=False)),
        ("re-diagnosed healthy", lambda: _rediagnose(store, ids[30:40], rng, healthy=True)),
        ("deleted", lambda: store.traces.delete_trace("t", ids[50]) and None),
    ]
    reads: list[int | None] = []
    whole_read = store.reports.failure_rows

    def failure_rows(tenant: str, **kw: Any) -> Any:
        reads.append(kw.get("after_id"))
        return whole_read(tenant, **kw)

    store.reports.failure_rows = failure_rows  # type: ignore[method-assign]
    for name, step in steps:
        P.tenant_patterns(store.reports, "t", since=since, until=until, limit=500)  # the copy is warm
        step()
        reads.clear()
        kept, whole = both()
        assert kept == whole, name
        # a write read the new rows only; a deletion read them all again
        assert (reads[0] is not None) == (name in ("new runs", "re-diagnosed")), (name, reads)


def _rediagnose(store: Stores, ids: Sequence[str], rng: random.Random, *, healthy: bool) -> None:
    with store.db.write() as db:
        for tid in ids:
            resp = _response(rng, tid)
            if healthy:
                resp.update(healthy=True, failures=[], signals=[], primary=None)
            store.traces.put_trace(db, tenant="t", trace_id=tid, trace={"id": tid, "steps": []}, response=resp,
                                   session_id=None, task_type=None, agent="billing")


# -- revision 0017: the runs pager's total with kind=…, deep pages, the agents' counts ----------------------
def _runs_by_hand(store: Stores, f: ui_data.RunFilter) -> list[str]:
    """The ids of the runs that pass ``f``, newest first (ties by id, descending), read whole from the tables."""
    with store.db.read() as db:
        runs = db.execute(select(TraceRow.id, TraceRow.created_at, TraceRow.agent, TraceRow.verdict)
                          .where(TraceRow.tenant_id == "t")).all()
        kinds = {(tid, k) for tid, k in db.execute(select(FailureRow.trace_id, FailureRow.kind).where(
            FailureRow.tenant_id == "t", FailureRow.is_signal.is_(False)))}
        labelled = set(db.scalars(select(LabelRow.trace_id).where(LabelRow.tenant_id == "t",
                                                                  LabelRow.withdrawn_at.is_(None))))
    keep = [r for r in runs
            if (f.agent is None or r.agent == f.agent) and (f.verdict is None or r.verdict == f.verdict)
            and (f.kind is None or (r.id, f.kind) in kinds) and (f.labelled is None or (r.id in labelled) == f.labelled)
            and (f.since is None or r.created_at >= f.since) and (f.until is None or r.created_at < f.until)]
    return [r.id for r in sorted(keep, key=lambda r: (r.created_at, r.id), reverse=True)]


def test_run_pages_by_number_are_the_offset_querys_rows(store: Stores) -> None:
    """Every page of the runs page (the ids read first from an index, then the rows; the total with
    ``kind`` alone counted from the failures' index) holds the runs the one-statement ``OFFSET`` query
    gave, in its order: newest first, equal times by id, whatever the filters."""
    _seed(store, 240, seed=11)
    with store.db.write() as db:  # 12 runs stored at one instant: the order among them is by id
        for i in range(12):
            tid = f"t-tie-{i:02d}"
            store.traces.put_trace(db, tenant="t", trace_id=tid, trace={"id": tid, "steps": []},
                                   response=_response(random.Random(i), tid), session_id=None, task_type=None,
                                   agent=AGENTS[i % 2], now=NOW - timedelta(days=2))
    filters = [ui_data.RunFilter(), ui_data.RunFilter(kind="tool_error"), ui_data.RunFilter(kind="loop", agent="search"),
               ui_data.RunFilter(verdict="failed"), ui_data.RunFilter(labelled=True),
               ui_data.RunFilter(labelled=False, kind="refusal"),
               ui_data.RunFilter(since=NOW - timedelta(days=3), until=NOW - timedelta(days=1))]
    for f in filters:
        want = _runs_by_hand(store, f)
        assert want, f
        for per_page in (7, 50):
            pages = -(-len(want) // per_page)
            for page in range(1, pages + 2):  # and one past the last
                total, rows = store.console.run_page("t", agent=f.agent, verdict=f.verdict, kind=f.kind, since=f.since,
                                                     until=f.until, labelled=f.labelled, page=page, per_page=per_page)
                assert total == len(want), f
                assert [r.id for r in rows] == want[(page - 1) * per_page: page * per_page], (f, page, per_page)
                if f.agent is f.verdict is f.since is f.labelled is None:  # and as the one statement read them
                    old = select(TraceRow.id).where(TraceRow.tenant_id == "t")
                    if f.kind is not None:
                        old = old.where(exists().where(FailureRow.tenant_id == "t", FailureRow.trace_id == TraceRow.id,
                                                       FailureRow.kind == f.kind, FailureRow.is_signal.is_(False)))
                    with store.db.read() as db:
                        assert [r.id for r in rows] == list(db.scalars(
                            old.order_by(TraceRow.created_at.desc(), TraceRow.id.desc())
                            .offset((page - 1) * per_page).limit(per_page)))


def _plans(store: Stores, call: Any) -> list[str]:
    """The query plan of each SELECT ``call`` runs (PostgreSQL's with sequential scans priced out, so
    that a tiny table still shows the index a big one gets)."""
    from sqlalchemy import event, text

    seen: list[tuple[str, Any]] = []

    def grab(conn: Any, cur: Any, statement: str, params: Any, ctx: Any, many: bool) -> None:
        if statement.lstrip().startswith("SELECT") and not statement.lstrip().startswith("SELECT pg_"):
            seen.append((statement, params))

    event.listen(store.db.engine, "before_cursor_execute", grab)
    try:
        call()
    finally:
        event.remove(store.db.engine, "before_cursor_execute", grab)
    out = []
    with store.db.engine.connect() as conn:
        pg = store.db.dialect == "postgresql"
        if pg:
            conn.execute(text("ANALYZE"))
            conn.execute(text("SET enable_seqscan = off"))
            conn.execute(text("SET enable_bitmapscan = off"))
        for statement, params in seen:
            rows = conn.exec_driver_sql(("EXPLAIN " if pg else "EXPLAIN QUERY PLAN ") + statement, params).all()
            out.append(" | ".join(str(r[-1]) for r in rows))
        conn.rollback()
    return out


def test_agents_counts_kind_totals_and_deep_pages_read_indexes_not_the_history(store: Stores) -> None:
    """The agents' list reads the counts kept on write and two index probes per agent; the runs page's
    total with ``kind`` reads ``ix_failures_tenant_kind`` alone; a deep page's ids come from
    ``ix_traces_console`` (none of them reads the runs' rows to count or skip them)."""
    _seed(store, 60, seed=2)
    stats = _plans(store, lambda: store.agents.agent_stats("t"))
    kind = _plans(store, lambda: store.console.run_page("t", kind="loop", page=1, per_page=50))
    deep = _plans(store, lambda: store.console.run_page("t", page=3, per_page=10))
    assert len(stats) == 1 and len(kind) == 3 and len(deep) == 3, (stats, kind, deep)
    if store.db.dialect == "postgresql":
        assert "ix_traces_agent_created" in stats[0] and "ix_traces_agent_updated" in stats[0], stats
        assert "Index Only Scan using ix_failures_tenant_kind" in kind[0], kind
        assert "Index Only Scan" in deep[1] and "ix_traces_console" in deep[1], deep
        scans = [p for p in stats + kind[:1] + deep[:2] if "Seq Scan" in p]
    else:
        assert "COVERING INDEX ix_traces_agent_created (tenant_id=? AND agent=?)" in stats[0], stats
        assert "COVERING INDEX ix_traces_agent_updated (tenant_id=? AND agent=?)" in stats[0], stats
        assert "COVERING INDEX ix_failures_tenant_kind (tenant_id=? AND kind=?" in kind[0], kind
        assert "COVERING INDEX ix_traces_console (tenant_id=?)" in deep[1], deep
        scans = [p for p in stats + kind[:1] + deep[:2] if "SCAN " in p]
    assert not scans, scans


def test_migration_0017_fills_the_agents_counts_and_goes_back(store: Stores) -> None:
    from sqlalchemy import inspect

    from tests.storefix import full_agents

    rng = random.Random(4)
    store.keys.ensure_tenant("t")
    with store.db.write() as db:
        for i in range(40):
            tid = f"m-{i:02d}"
            store.traces.put_trace(db, tenant="t", trace_id=tid, trace={"id": tid, "steps": []},
                                   response=_response(rng, tid), session_id=None, task_type=None, agent=AGENTS[i % 3],
                                   now=NOW - timedelta(hours=i))
    for i in range(0, 40, 4):
        store.labels.add_label("t", f"m-{i:02d}", failed=True, author="ana", author_type="human")
    assert store.labels.withdraw_label("t", "ana", trace_id="m-08") is not None
    want = full_agents(store, "t")
    assert {k: tuple(v) for k, v in store.agents.agent_stats("t").items()} == want
    assert sum(v[1] for v in want.values()) == 9

    def indexes(table: str) -> dict[str, list[str]]:
        return {str(i["name"]): list(i["column_names"]) for i in inspect(store.db.engine).get_indexes(table)}

    downgrade(store.db.engine, "0016")
    assert indexes("failures")["ix_failures_tenant_kind"] == ["tenant_id", "kind"]
    assert "ix_traces_tenant_agent" in indexes("traces") and "ix_traces_agent_created" not in indexes("traces")
    assert "agent" not in {c["name"] for c in inspect(store.db.engine).get_columns("run_metrics")}
    with store.db.read() as db:
        assert db.scalar(select(func.count()).select_from(RunMetricRow)) == 40  # the rows kept
    migrate_to(store.db.engine, "0017")
    assert indexes("failures")["ix_failures_tenant_kind"] == ["tenant_id", "kind", "is_signal", "trace_id"]
    assert {k: tuple(v) for k, v in store.agents.agent_stats("t").items()} == want  # filled from the history
    store.db.upgrade()
