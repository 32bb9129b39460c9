"""/metrics' counts kept on write (serve/store/counters.py) against a full read of the history, on SQLite
and PostgreSQL: re-diagnoses, labels and their undo, outcomes, two arms, an arm left, deletions and
retention, the canary's window, concurrent writers, and revision 0012 filling the counts of a history
stored before it. Each write test runs with the counts changed in the write, and deferred to the count
feed as a server's worker defers them (``defer``: a diagnosis's changes wait there, and every later
writer and reader of the counts applies them first)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import inspect, select, text

from serve.services.canary import snapshot
from serve.services.run_labels import effective_label
from serve.store import Stores
from serve.store.base import group_rows
from serve.store.counters import hour_of
from serve.store.migrate import downgrade
from serve.store.migrate import upgrade as migrate_to
from serve.store.tables import CountFeedRow, FailureRow, LabelRow, OutcomeRow, RecommendationRow, TraceRow
from tests.storefix import db_url, full_agents, full_overview, kept_overview, old_window_counts  # noqa: F401  (fixture)

NOW = datetime.now(UTC).replace(minute=30, second=0, microsecond=0)
WEEK = timedelta(days=7)


# -- the reference: a full read of the tables, as /metrics read them before the counters --------------
def full_canary(store: Stores, tenant: str | None, window: timedelta = WEEK, now: datetime = NOW) -> dict[str, dict[str, int]]:
    since = datetime.fromtimestamp(hour_of(now - window) * 3600, UTC)
    out = {arm: {"runs": 0, "failed": 0, "recovered": 0, "labelled": 0, "succeeded": 0} for arm in ("repair", "shadow")}
    with store.db.read() as db:
        # the columns it reads (not the whole row: revisions after 0012 add columns an older schema lacks)
        q = select(TraceRow.tenant_id, TraceRow.id, TraceRow.arm, TraceRow.failed_at, TraceRow.healthy).where(
            TraceRow.arm.is_not(None), TraceRow.created_at >= since)
        if tenant is not None:
            q = q.where(TraceRow.tenant_id == tenant)
        rows = list(db.execute(q).all())
        labels = group_rows(db, LabelRow, [(r.tenant_id, r.id) for r in rows])
    for r in rows:
        o = out[str(r.arm)]
        o["runs"] += 1
        o["failed"] += r.failed_at is not None
        o["recovered"] += r.failed_at is not None and r.healthy
        eff = effective_label(labels.get((r.tenant_id, r.id), []))
        if eff is not None:
            o["labelled"] += 1
            o["succeeded"] += not eff.failed
    return out


def full_totals(store: Stores, tenant: str) -> dict[str, Any]:
    with store.db.read() as db:
        traces = db.scalar(select(text("count(*)")).select_from(TraceRow).where(TraceRow.tenant_id == tenant))
        failures: dict[str, int] = {}
        for f in db.scalars(select(FailureRow).where(FailureRow.tenant_id == tenant, FailureRow.is_signal.is_(False))):
            failures[f.kind] = failures.get(f.kind, 0) + 1
        recs = list(db.scalars(select(RecommendationRow).where(RecommendationRow.tenant_id == tenant)))
        outs = list(db.scalars(select(OutcomeRow).where(OutcomeRow.tenant_id == tenant)))
    strategies: dict[str, int] = {}
    for r in recs:
        strategies[r.strategy] = strategies.get(r.strategy, 0) + 1
    outcomes: dict[tuple[str, bool], int] = {}
    for o in outs:
        outcomes[(o.strategy, o.success)] = outcomes.get((o.strategy, o.success), 0) + 1
    by_id = {r.id: r for r in recs}
    durations = []
    for o in outs:
        rec = by_id[o.recommendation_id]
        if o.success and rec.failure_key is not None:
            first = min(r.created_at for r in recs if r.trace_id == rec.trace_id and r.failure_key == rec.failure_key)
            durations.append(max(0.0, (o.created_at - first).total_seconds()))
    return {"traces": traces, "failures": failures, "recommendations": strategies, "outcomes": outcomes,
            "recoveries": len(durations), "mttr_s": sum(durations) / len(durations) if durations else None}


def counted(store: Stores, tenant: str, window: timedelta = WEEK) -> dict[str, dict[str, int]]:
    snap = snapshot(store.reports, tenant, window=window, now=NOW)
    return {arm: {k: v[k] for k in ("runs", "failed", "recovered", "labelled", "succeeded")} for arm, v in snap.items()}


def totals(store: Stores, tenant: str) -> dict[str, Any]:
    snap = store.reports.metrics_snapshot(tenant)
    snap.pop("open_alarms")
    return snap


def agree(store: Stores, tenant: str, *, agents: bool = True) -> None:
    """The counts kept on write are what a full read counts (``agents``: the agents' counts too, which
    revision 0017 added)."""
    waited = _waiting(store)
    for window in (WEEK, timedelta(days=30), timedelta(hours=1)):
        assert counted(store, tenant, window) == full_canary(store, tenant, window)
    got, want = totals(store, tenant), full_totals(store, tenant)
    assert got.pop("mttr_s") == pytest.approx(want.pop("mttr_s"))
    assert got == want
    if agents:
        assert {k: tuple(v) for k, v in store.agents.agent_stats(tenant).items()} == full_agents(store, tenant)
        overview_agrees(store, tenant)
    if store.db.defer_counts:  # the first read applied what waited: none waits now
        assert not _waiting(store), f"still waiting after the reads ({waited} before)"
    elif waited:
        raise AssertionError("rows in the count feed of a store that does not defer")


def _waiting(store: Stores) -> int:
    if "count_feed" not in inspect(store.db.engine).get_table_names():  # a revision before 0024's
        return 0
    return store.reports.count_rows(CountFeedRow)


@pytest.fixture(params=[False, True], ids=["direct", "deferred"])
def defer(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def overview_agrees(store: Stores, tenant: str) -> None:
    """The overview's counts kept per hour (revision 0020) are a full GROUP BY of the tables, the runs of
    each verdict are counted, and the overview reads what the four grouped reads over the index read,
    whatever its window's edges: partial hours at both ends, whole hours, inside one hour."""
    assert kept_overview(store, tenant) == full_overview(store, tenant)
    by_verdict: dict[str, int] = {}
    for (_, _, v, _), (n, *_) in full_overview(store, tenant).items():
        by_verdict[v] = by_verdict.get(v, 0) + n
    for v in ("failed", "healthy", "unknown"):
        assert store.console.run_page(tenant, verdict=v, page=1, per_page=1)[0] == by_verdict.get(v, 0)
    top = NOW.replace(minute=0)
    t0 = top - timedelta(days=1)
    for since, until in ((NOW - WEEK, NOW), (NOW - timedelta(days=30), NOW + timedelta(minutes=1)),
                         (top - timedelta(hours=48), top), (t0 - timedelta(minutes=20), t0 + timedelta(minutes=50)),
                         (t0 + timedelta(minutes=25), t0 + timedelta(minutes=35)), (t0, t0 + timedelta(hours=1)),
                         (t0 - timedelta(minutes=1), t0 + timedelta(hours=1, minutes=1)),
                         (t0.replace(tzinfo=None), (t0 + timedelta(hours=3)).replace(tzinfo=None))):
        for agent in (None, "bot", "helper", "nobody"):
            assert store.console.window_counts(tenant, since=since, until=until, agent=agent) == old_window_counts(
                store, tenant, since=since, until=until, agent=agent), (since, until, agent)


# -- writing through the store's write path ----------------------------------------------------------
def diagnose(store: Stores, tenant: str, tid: str, at: datetime, *, arm: str | None, kinds: tuple[str, ...] = (),
             session: str | None = None, agent: str = "bot") -> None:
    failures = [{"kind": k, "severity": "high", "confidence": 0.9, "step": 0} for k in kinds]
    response = {"healthy": not kinds, "failures": failures, "signals": [
        {"kind": "slow_tool", "severity": "low", "confidence": 0.5}]}
    with store.db.write() as db:
        store.traces.put_trace(db, tenant=tenant, trace_id=tid, trace={"id": tid, "steps": [{"kind": "user_input"}]},
                        response=response, session_id=session, task_type=None, arm=arm, now=at, agent=agent)
        if kinds:
            store.sessions.put_recommendation(db, tenant=tenant, rec={"id": f"rec-{tid}-{kinds[0]}", "strategy": "retry"},
                                     trace_id=tid, session_id=session, failure_key=f"{kinds[0]}@0", kind=kinds[0],
                                     rung=0, attempt=1)


def outcome(store: Stores, tenant: str, rec_id: str, success: bool, label: str | None = None) -> None:
    with store.db.write() as db:
        rec = store.sessions.get_recommendation(db, tenant, rec_id)
        assert rec is not None
        store.sessions.add_outcome(db, tenant=tenant, rec=rec, success=success, duration_s=None, cost=None, note="")
        if label is not None:
            store.sessions.add_outcome_label(db, tenant=tenant, trace_id=rec.trace_id, failed=label != "healthy",
                                    kind=None if label == "healthy" else label, step=None, source_index=None)


def test_counts_kept_on_write_agree_with_a_full_read(db_url: str, defer: bool) -> None:  # noqa: F811
    store = Stores.at(db_url)
    store.db.upgrade()
    store.db.defer_counts = defer
    try:
        t0 = NOW - timedelta(days=1)
        diagnose(store, "acme", "r1", t0, arm="repair", kinds=("tool_error",))
        assert _waiting(store) == int(defer)  # the run's changes wait in the feed: one row (its recommendation in it)
        diagnose(store, "acme", "r1", t0 + timedelta(seconds=120), arm="repair")  # healthy again: 120 s
        diagnose(store, "acme", "r2", t0, arm="repair", kinds=("loop", "loop"))
        diagnose(store, "acme", "s1", t0, arm="shadow", kinds=("tool_error",))
        diagnose(store, "acme", "s1", t0 + timedelta(seconds=30), arm="shadow")  # recovered after 30 s …
        diagnose(store, "acme", "s1", t0 + timedelta(seconds=60), arm="shadow", kinds=("refusal",))  # … not any more
        diagnose(store, "acme", "s2", t0, arm="shadow", session="conv-2")
        diagnose(store, "acme", "own", t0, arm=None, kinds=("loop",))  # the caller chose shadow: in neither arm
        diagnose(store, "acme", "old", NOW - timedelta(days=10), arm="repair", kinds=("loop",))  # before the window
        diagnose(store, "acme", "old", NOW - timedelta(days=10, seconds=-40), arm="repair")
        diagnose(store, "globex", "g1", t0, arm="repair", kinds=("loop",))
        agree(store, "acme")
        assert counted(store, "acme") == {
            "repair": {"runs": 2, "failed": 2, "recovered": 1, "labelled": 0, "succeeded": 0},
            "shadow": {"runs": 2, "failed": 1, "recovered": 0, "labelled": 0, "succeeded": 0}}
        snap = snapshot(store.reports, "acme", now=NOW)
        assert snap["repair"]["recovery_s"] == 120.0 and snap["repair"]["le"] == [0, 0, 0, 1, 1, 1, 1, 1]
        assert counted(store, "acme", timedelta(days=30))["repair"]["recovered"] == 2  # the old run's 40 s
        assert totals(store, "acme")["failures"] == {"loop": 3, "refusal": 1}  # latest diagnoses, no signals

        diagnose(store, "acme", "s1", t0 + timedelta(seconds=600), arm="shadow")  # healthy again: 600 s from the first
        assert snapshot(store.reports, "acme", now=NOW)["shadow"]["recovery_s"] == 600.0
        # labels: a checker's verdict, a human's over it, the human's undo, an outcome's label
        store.labels.add_label("acme", "r1", failed=False, author="agent", author_type="checker")
        store.labels.add_label("acme", "r1", failed=True, author="ann", author_type="human")
        assert counted(store, "acme")["repair"]["succeeded"] == 0
        agree(store, "acme")
        assert store.labels.withdraw_label("acme", "ann", trace_id="r1") is not None
        assert counted(store, "acme")["repair"] == {"runs": 2, "failed": 2, "recovered": 1, "labelled": 1, "succeeded": 1}
        store.labels.add_label("acme", "s1", failed=True, author="agent", author_type="checker")
        outcome(store, "acme", "rec-r1-tool_error", True)
        outcome(store, "acme", "rec-r2-loop", False, label="healthy")
        outcome(store, "acme", "rec-old-loop", True)
        agree(store, "acme")
        assert counted(store, "acme")["repair"]["succeeded"] == 2  # r2's outcome label says healthy
        assert totals(store, "acme")["recoveries"] == 2
        # the run leaves its arm (a later append chose shadow itself) and its agent, and comes back to the arm
        diagnose(store, "acme", "r2", t0 + timedelta(seconds=5), arm=None, kinds=("loop",), agent="helper")
        assert counted(store, "acme")["repair"]["runs"] == 1
        assert store.agents.agent_stats("acme")["helper"].runs == 1
        agree(store, "acme")
        diagnose(store, "acme", "r2", t0 + timedelta(seconds=6), arm="repair", kinds=("loop",), agent="helper")
        agree(store, "acme")
        # runs on an hour's edges (the overview's kept hours against its edges read from the index), an
        # outcome on one, a re-diagnosis that changes its verdict and kind, then a split, a merge, a rename
        top = NOW.replace(minute=0) - timedelta(days=1)
        diagnose(store, "acme", "e1", top, arm="repair", kinds=("loop",))
        diagnose(store, "acme", "e2", top - timedelta(microseconds=1), arm="repair", kinds=("tool_error",))
        diagnose(store, "acme", "e3", top + timedelta(hours=1, microseconds=-1), arm="repair", agent="helper")
        outcome(store, "acme", "rec-e1-loop", True)
        agree(store, "acme")
        diagnose(store, "acme", "e1", top + timedelta(minutes=5), arm="repair", kinds=("refusal",))
        diagnose(store, "acme", "e2", top + timedelta(minutes=5), arm="repair")  # healthy now: its repair stays
        agree(store, "acme")
        with store.db.write() as db:
            store.agents.rekey(db, "acme", "bot", "bot-2", trace_ids=["e1", "e2"])  # split
        agree(store, "acme")
        assert store.console.window_counts("acme", since=NOW - WEEK, until=NOW, agent="bot-2").outcomes == {"bot-2": (1, 1)}
        with store.db.write() as db:
            store.agents.rekey(db, "acme", "bot-2", "helper")  # merge
        agree(store, "acme")
        with store.db.write() as db:
            store.agents.rekey(db, "acme", "helper", "bot")  # rename
        agree(store, "acme")
        # deletions: a trace, a session, retention
        assert store.traces.delete_trace("acme", "r1")
        assert store.traces.delete_session("acme", "conv-2")
        agree(store, "acme")
        with store.db.write() as db:  # the old run started 10 days ago
            db.execute(TraceRow.__table__.update().where(TraceRow.id == "old").values(created_at=NOW - timedelta(days=10)))
        assert store.upkeep.purge_tenant("acme", 9, now=NOW).runs == 1
        agree(store, "acme")
        assert totals(store, "acme")["recoveries"] == 1 and totals(store, "acme")["traces"] == 6  # e1 recovered
        assert counted(store, "globex")["repair"]["runs"] == 1  # another tenant's, untouched
        assert snapshot(store.reports, None, now=NOW)["repair"]["runs"] == 5  # every tenant's (an operator): r2, e1–e3, g1
    finally:
        store.db.dispose()


def test_concurrent_writers_lose_no_count(db_url: str, defer: bool) -> None:  # noqa: F811
    """Four writers, each its own engine (as workers are), new runs and labels on one tenant at once;
    deferred, each label applies what waits in the feed (its own run's first diagnosis among it)."""
    Stores.at(db_url).db.upgrade()
    stores = [Stores.at(db_url, busy_timeout_s=30) for _ in range(4)]
    for s in stores:
        s.db.defer_counts = defer
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i in range(15):
                tid = f"w{k}-{i}"
                diagnose(stores[k], "acme", tid, NOW - timedelta(hours=i % 3), arm=("repair", "shadow")[i % 2],
                         kinds=("loop",) if i % 3 else ())
                stores[k].labels.add_label("acme", tid, failed=bool(i % 2), author="agent", author_type="checker")
        except BaseException as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        assert sum(v["runs"] for v in counted(stores[0], "acme").values()) == 60
        assert counted(stores[0], "acme")["repair"]["labelled"] == 32  # i even: 8 of 15, 4 writers
        agree(stores[0], "acme")
    finally:
        for s in stores:
            s.db.dispose()


def test_migration_0012_fills_the_counts_from_the_history(db_url: str) -> None:  # noqa: F811
    store = Stores.at(db_url)
    try:
        migrate_to(store.db.engine, "0011")  # the revision 0012 revises
        day = (NOW - timedelta(days=2)).replace(tzinfo=None)
        old = (NOW - timedelta(days=20)).replace(tzinfo=None)
        runs = [  # id, arm, created, failed_at, healthy, updated
            ("a", "repair", day, day, True, day + timedelta(seconds=45)),
            ("b", "repair", day, day, False, day),
            ("c", "shadow", day, None, True, day),
            ("d", "shadow", day, day, True, day + timedelta(seconds=4000)),
            ("e", None, day, day, False, day),
            ("f", "repair", old, old, True, old),
        ]
        with store.db.engine.begin() as conn:
            for tid, arm, created, failed_at, healthy, updated in runs:
                conn.execute(TraceRow.__table__.insert().values(
                    tenant_id="acme", id=tid, created_at=created, updated_at=updated, n_steps=1, healthy=healthy,
                    model_version="", shadow=False, trace={}, response={}, steps_in_rows=False, arm=arm,
                    failed_at=failed_at, agent="_pool"))
            for tid, kind in (("a", "loop"), ("b", "loop"), ("b", "tool_error"), ("e", "loop")):
                conn.execute(text("INSERT INTO failures (tenant_id, trace_id, kind, is_signal, severity, confidence, "
                                  "detector, evidence, details) VALUES ('acme', :t, :k, false, 'high', 0.9, 'r', '', '{}')"),
                             {"t": tid, "k": kind})
            conn.execute(text("INSERT INTO failures (tenant_id, trace_id, kind, is_signal, severity, confidence, "
                              "detector, evidence, details) VALUES ('acme', 'a', 'slow', true, 'low', 0.5, 'r', '', '{}')"))
            for i, (tid, failed, atype, withdrawn) in enumerate((
                ("a", False, "checker", False), ("a", True, "human", False), ("b", True, "checker", False),
                ("c", False, "checker", False), ("c", True, "human", True),  # the human withdrew theirs
            )):
                conn.execute(LabelRow.__table__.insert().values(
                    tenant_id="acme", trace_id=tid, failed=failed, author="x", author_type=atype,
                    created_at=day + timedelta(seconds=i), withdrawn_at=day if withdrawn else None))
            for rid, tid, at in (("r1", "a", day), ("r2", "a", day + timedelta(seconds=10)), ("r3", "b", day)):
                conn.execute(RecommendationRow.__table__.insert().values(
                    tenant_id="acme", id=rid, trace_id=tid, failure_key="loop@0", kind="loop", strategy="retry",
                    rung=0, attempt=1, status="open", created_at=at, body={}))
            for rid, tid, ok, at in (("r2", "a", True, day + timedelta(seconds=70)), ("r3", "b", False, day)):
                conn.execute(OutcomeRow.__table__.insert().values(
                    tenant_id="acme", recommendation_id=rid, trace_id=tid, strategy="retry", success=ok, note="",
                    created_at=at))
        assert "canary_counts" not in inspect(store.db.engine).get_table_names()
        migrate_to(store.db.engine, "0012")
        agree(store, "acme", agents=False)
        assert counted(store, "acme") == {
            "repair": {"runs": 2, "failed": 2, "recovered": 1, "labelled": 2, "succeeded": 0},
            "shadow": {"runs": 2, "failed": 1, "recovered": 1, "labelled": 1, "succeeded": 1}}
        snap = snapshot(store.reports, "acme", now=NOW)
        assert snap["repair"]["recovery_s"] == 45.0 and snap["shadow"]["recovery_s"] == 4000.0  # to the last update
        t = totals(store, "acme")
        assert (t["traces"], t["failures"], t["recommendations"]) == (6, {"loop": 3, "tool_error": 1}, {"retry": 3})
        assert t["outcomes"] == {("retry", True): 1, ("retry", False): 1}
        assert (t["recoveries"], t["mttr_s"]) == (1, 70.0)  # from r1, the failure's first recommendation
        # writes after the upgrade move the filled counts (the store's code writes the head schema: later
        # revisions add tables a write also touches, e.g. 0014's run_encodings on a delete)
        store.db.upgrade()
        agree(store, "acme")  # revision 0017 filled the agents' counts from the history
        store.labels.add_label("acme", "b", failed=False, author="ann", author_type="human")
        assert store.traces.delete_trace("acme", "a")
        agree(store, "acme")
        downgrade(store.db.engine, "0011")
        assert "canary_counts" not in inspect(store.db.engine).get_table_names()
        store.db.upgrade()
        agree(store, "acme")  # filled again
    finally:
        store.db.dispose()
