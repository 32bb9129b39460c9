"""The failure-history store on SQLite and PostgreSQL: migrations, tenant scoping, filters and
pages, retention, keys, and serialised writes to one session."""

from __future__ import annotations

import math
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from model.core.errors import InputError, StoreError
from serve.store import Stores, open_stores
from serve.store.migrate import current_revision, downgrade, head_revision
from serve.store.tables import Base, FailureRow, ObservationRow, OutcomeRow, RecommendationRow, TraceRow
from tests.storefix import db_url, store_fixture  # noqa: F401  (fixtures)


def _resp(*kinds: str, signal: str | None = None) -> dict[str, Any]:
    failures = [
        {"kind": k, "severity": "high", "confidence": 0.9, "detector": k, "step": i, "source_index": i}
        for i, k in enumerate(kinds)
    ]
    signals = (
        [{"kind": signal, "severity": "low", "confidence": 0.2, "detector": "x", "step": 0}] if signal else []
    )
    return {
        "healthy": not kinds,
        "model_version": "m1",
        "failures": failures,
        "signals": signals,
        "primary": failures[0] if failures else None,
    }


def _put(store: Stores, tenant: str, tid: str, *kinds: str, session: str | None = None, **kw: Any) -> None:
    with store.db.write() as db:
        store.traces.put_trace(
            db,
            tenant=tenant,
            trace_id=tid,
            trace={"id": tid, "steps": [{"kind": "user_input"}]},
            response=_resp(*kinds, **kw),
            session_id=session,
            task_type=None,
            agent="bot",
        )


def test_migrations_match_models_and_are_idempotent(store: Stores) -> None:
    assert current_revision(store.db.engine) == head_revision()
    store.db.upgrade()  # again: nothing to do
    with store.db.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    downgrade(store.db.engine, "base")
    assert set(inspect(store.db.engine).get_table_names()) <= {"alembic_version"}
    store.db.upgrade()
    assert {"traces", "sessions", "api_keys", "outcomes", "streams"} <= set(
        inspect(store.db.engine).get_table_names()
    )


def test_sqlite_is_wal(tmp_path: Any) -> None:
    s = Stores.at(f"sqlite:///{tmp_path / 'x' / 'w.db'}")
    s.db.upgrade()
    with s.db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 10000


def test_reads_are_tenant_scoped(store: Stores) -> None:
    _put(store, "a", "t1", "loop")
    _put(store, "b", "t1", "tool_error")  # the same trace id in another tenant is another trace
    assert store.traces.get_trace("a", "t1").primary_kind == "loop"  # type: ignore[union-attr]
    assert store.traces.get_trace("b", "t1").primary_kind == "tool_error"  # type: ignore[union-attr]
    assert store.traces.get_trace("c", "t1") is None
    assert [r.id for r in store.traces.list_traces("a", kind="tool_error").items] == []
    assert store.traces.delete_trace("c", "t1") is False
    assert store.traces.get_trace("a", "t1") is not None


def test_list_filters_and_pages(store: Stores) -> None:
    for i in range(5):
        _put(
            store,
            "a",
            f"t{i}",
            *(["loop"] if i % 2 == 0 else []),
            session="s1" if i < 3 else "s2",
            signal="refusal",
        )
        time.sleep(0.002)  # distinct created_at
    ids = [r.id for r in store.traces.list_traces("a").items]
    assert ids == ["t4", "t3", "t2", "t1", "t0"]
    assert [r.id for r in store.traces.list_traces("a", kind="loop").items] == ["t4", "t2", "t0"]
    assert [r.id for r in store.traces.list_traces("a", kind="refusal").items] == []  # signals don't count
    assert [r.id for r in store.traces.list_traces("a", session="s2").items] == ["t4", "t3"]
    t2 = store.traces.get_trace("a", "t2")
    assert t2 is not None
    assert [r.id for r in store.traces.list_traces("a", since=t2.created_at).items] == ["t4", "t3", "t2"]
    naive = t2.created_at.replace(tzinfo=None)  # a caller's `since=…` without an offset is UTC
    assert [r.id for r in store.traces.list_traces("a", since=naive).items] == ["t4", "t3", "t2"]
    page1 = store.traces.list_traces("a", limit=2)
    page2 = store.traces.list_traces("a", limit=2, cursor=page1.next_cursor)
    page3 = store.traces.list_traces("a", limit=2, cursor=page2.next_cursor)
    assert [r.id for p in (page1, page2, page3) for r in p.items] == ids
    assert page3.next_cursor is None
    with pytest.raises(InputError):
        store.traces.list_traces("a", cursor="garbage")


def test_replacing_a_trace_replaces_its_failures(store: Stores) -> None:
    _put(store, "a", "t", "loop", "tool_error")
    _put(store, "a", "t", "timeout")
    assert store.reports.count_rows(FailureRow, "a") == 1
    assert [r.id for r in store.traces.list_traces("a", kind="loop").items] == []


def test_a_trace_inserted_only_when_new_writes_nothing_over_a_stored_one(store: Stores) -> None:
    """``put_trace(only_new=True)``: a new id is written with its failures and counted once; a stored one is
    left as it was (``False``), its failures and counts too."""

    def put(tid: str, *kinds: str) -> bool:
        with store.db.unit() as db:
            return store.traces.put_trace(db, tenant="a", trace_id=tid, trace={"id": tid, "steps": []},
                                          response=_resp(*kinds), session_id=None, task_type=None, agent="bot",
                                          only_new=True)

    assert put("t", "loop") is True
    assert put("t", "timeout") is False
    assert [r.id for r in store.traces.list_traces("a", kind="loop").items] == ["t"]
    assert store.reports.count_rows(FailureRow, "a") == 1
    assert store.agents.agent_stats("a")["bot"].runs == 1
    _put(store, "a", "t", "timeout")  # replaced as usual
    assert [r.id for r in store.traces.list_traces("a", kind="timeout").items] == ["t"]
    assert store.reports.count_rows(FailureRow, "a") == 1 and store.agents.agent_stats("a")["bot"].runs == 1


def test_rows_made_before_the_transaction_are_stored_as_put_trace_stores_them(store: Stores) -> None:
    """``trace_rows`` (made outside any transaction, JSON encoded) then ``write_trace`` store what ``put_trace``
    stores: the same JSON values (on SQLite a NaN as ``json.dumps`` writes it; PostgreSQL's JSON refuses one),
    failures and counts; a later diagnosis of the run keeps its ``created_at``, which its new failure rows carry."""
    first, later = datetime(2026, 12, 1, 10, tzinfo=UTC), datetime(2026, 12, 1, 12, tzinfo=UTC)
    odd = float("nan") if store.db.dialect == "sqlite" else 0.25
    response = {**_resp("loop", signal="timeout"), "failure_probability": odd}
    args = {"tenant": "a", "trace": {"id": "x", "steps": [{"kind": "tool_call", "tool_name": "search"}]},
            "response": response, "session_id": None, "task_type": "qa", "agent": "bot",
            "policy_state": {"n": 1}}
    rows = store.traces.trace_rows(trace_id="made", now=first, **args)
    with store.db.unit() as db:
        assert store.traces.write_trace(db, rows, only_new=True) is True
    with store.db.unit() as db:
        store.traces.put_trace(db, trace_id="put", now=first, **args)
    with store.db.read() as db:
        got = {r.id: r for r in db.query(TraceRow).filter(TraceRow.tenant_id == "a")}
        fails = {(f.trace_id, f.kind): f for f in db.query(FailureRow).filter(FailureRow.tenant_id == "a")}
    for col in ("trace", "policy_state", "healthy", "verdict", "primary_kind", "n_steps", "created_at"):
        assert getattr(got["made"], col) == getattr(got["put"], col), col
    made_p = got["made"].response["failure_probability"]
    assert math.isnan(made_p) if store.db.dialect == "sqlite" else made_p == 0.25
    assert {k: v for k, v in got["made"].response.items() if k != "failure_probability"} == \
        {k: v for k, v in got["put"].response.items() if k != "failure_probability"}
    assert {k for k in fails if k[0] == "made"} == {("made", "loop"), ("made", "timeout")}
    assert fails[("made", "loop")].tool == fails[("put", "loop")].tool == "search"
    assert fails[("made", "loop")].details == fails[("put", "loop")].details == {}
    rows = store.traces.trace_rows(trace_id="made", now=later, **{**args, "response": _resp("tool_error")})
    with store.db.unit() as db:
        assert store.traces.write_trace(db, rows) is True  # prior: not read yet
    with store.db.read() as db:
        again = db.get(TraceRow, ("a", "made"))
        kept = db.query(FailureRow).filter(FailureRow.tenant_id == "a", FailureRow.trace_id == "made").all()
        assert again is not None and again.created_at == first and again.updated_at == later
    assert [(f.kind, f.created_at) for f in kept] == [("tool_error", first)]
    assert store.agents.agent_stats("a")["bot"].runs == 2


def test_delete_trace_session_and_retention(store: Stores) -> None:
    _put(store, "a", "t1", "loop", session="s")
    _put(store, "a", "t2", session="s")
    _put(store, "a", "t3")
    with store.db.write() as db:
        store.sessions.lock_session(db, "a", "s", create_trace_id="t1")
        store.sessions.put_recommendation(
            db,
            tenant="a",
            rec={"id": "r1", "strategy": "retry"},
            trace_id="t1",
            session_id="s",
            failure_key="loop@0",
            kind="loop",
            rung=0,
            attempt=1,
        )
        rec = store.sessions.get_recommendation(db, "a", "r1")
        assert rec is not None
        store.sessions.add_outcome(db, tenant="a", rec=rec, success=True, duration_s=1.0, cost=None, note="")
    assert store.traces.delete_session("a", "s") is True
    assert store.sessions.get_session("a", "s") is None
    assert [r.id for r in store.traces.list_traces("a").items] == ["t3"]
    for table in (FailureRow, RecommendationRow, OutcomeRow):
        assert store.reports.count_rows(table, "a") == 0
    assert store.traces.delete_session("a", "s") is False
    # retention: nothing is older than a day; everything is older than "now + 2 days - 1 day"
    assert sum(p.runs for p in store.upkeep.apply_retention(default_days=1)) == 0
    assert sum(p.runs for p in store.upkeep.apply_retention(default_days=1, now=datetime.now(UTC) + timedelta(days=2))) == 1
    assert store.reports.count_rows(TraceRow) == 0


def test_api_keys_hash_only_and_revoke(store: Stores) -> None:
    store.keys.add_api_key("acme", "k1", "h" * 64, "ci")
    assert store.keys.find_api_key("h" * 64).tenant_id == "acme"  # type: ignore[union-attr]
    assert [k.id for k in store.keys.list_api_keys("acme")] == ["k1"]
    assert store.keys.revoke_api_key("k1") is True
    assert store.keys.revoke_api_key("k1") is False
    assert store.keys.find_api_key("h" * 64) is None
    with pytest.raises(InputError):
        store.keys.ensure_tenant("bad name!")


def test_concurrent_writes_to_one_session_are_serialised(store: Stores) -> None:
    """Read-modify-write under the session lock from 8 threads: no update is lost."""
    n_threads, per_thread = 8, 5
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(per_thread):
                with store.db.write() as db:
                    row = store.sessions.lock_session(db, "a", "s", create_trace_id="t")
                    assert row is not None
                    seen = row.n_steps
                    time.sleep(0.001)  # widen the race window
                    row.n_steps = seen + 1
                    row.state = {**row.state, "log": [*row.state.get("log", []), seen]}
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    row = store.sessions.get_session("a", "s")
    assert row is not None
    assert row.n_steps == n_threads * per_thread
    assert row.state["log"] == list(range(n_threads * per_thread))


def test_stream_rows_and_values(store: Stores) -> None:
    with store.db.write() as db:
        row = store.streams.lock_stream(db, "a", "latency", "", detector="cusum", params={"shift": 1.0})
        db.add_all(
            [
                ObservationRow(tenant_id="a", stream="latency", agent="", seq=i, value=float(i))
                for i in range(5)
            ]
        )
        row.n = 5
    assert store.streams.stream_values("a", "latency", "", last=3) == [(2, 2.0), (3, 3.0), (4, 4.0)]
    assert store.streams.stream_values("b", "latency", "", last=3) == []
    assert store.streams.get_stream("a", "latency", "").n == 5  # type: ignore[union-attr]


def test_open_store_uses_settings(tmp_path: Any) -> None:
    from serve.settings import Settings

    s = open_stores(Settings(data_dir=tmp_path / "d"))
    assert (tmp_path / "d" / "triage.db").exists()
    assert s.db.ping()


def test_bad_url_is_a_store_error() -> None:
    with pytest.raises(StoreError):
        Stores.at("nosuchdb://x")


def test_sqlite_writer_waits_for_another_process_then_gives_up(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    holder, waiter = Stores.at(url), Stores.at(url, busy_timeout_s=0.3)
    holder.db.upgrade()
    released = threading.Event()

    def hold(seconds: float) -> None:
        with holder.db.write() as db:
            holder.sessions.lock_session(db, "a", "s", create_trace_id="t")
            released.wait(seconds)

    t = threading.Thread(target=hold, args=(5.0,))
    t.start()
    time.sleep(0.1)
    start = time.monotonic()
    with pytest.raises(StoreError, match="stayed locked"), waiter.db.write() as db:
        waiter.sessions.lock_session(db, "a", "s", create_trace_id="t")
    assert 0.25 <= time.monotonic() - start < 2.0
    released.set()
    t.join()
    # a short hold is waited out (polling, not SQLite's sleepy busy handler)
    released.clear()
    t = threading.Thread(target=hold, args=(0.05,))
    t.start()
    time.sleep(0.01)
    with waiter.db.write() as db:
        assert waiter.sessions.lock_session(db, "a", "s", create_trace_id="t") is not None
    t.join()


def test_stores_share_one_database_and_a_composed_write_is_one_transaction(store: Stores) -> None:
    """Every per-resource store is built on the one database; a write that spans two of them
    (a session's lock and the tenant's usage, as a session step does) commits or rolls back whole."""
    resources = [store.keys, store.traces, store.labels, store.sessions, store.activations, store.agents,
                 store.streams, store.reports, store.console]
    assert all(r.db is store.db for r in resources)
    with pytest.raises(RuntimeError, match="midway"), store.sessions.write() as db:
        store.sessions.lock_session(db, "acme", "s1", create_trace_id="t1")
        assert store.traces.add_usage(db, "acme", "2026-12-01", 3) == 3
        raise RuntimeError("midway")
    assert store.sessions.get_session("acme", "s1") is None
    assert store.traces.usage("acme", "2026-12-01") == 0
    with store.db.write() as db:
        store.sessions.lock_session(db, "acme", "s1", create_trace_id="t1")
        store.traces.add_usage(db, "acme", "2026-12-01", 3)
    row = store.sessions.get_session("acme", "s1")
    assert row is not None and row.trace_id == "t1"
    assert store.traces.usage("acme", "2026-12-01") == 3


def test_an_authors_labels_are_read_from_an_index_of_those_still_counted(store: Stores) -> None:
    """Revision 0022: ``ix_labels_author`` holds the labels not withdrawn, by author; the label queue's count
    of an author's runs reads it (not every label of the tenant), and an undo takes its entry out."""
    for tid in ("t1", "t2", "t3"):
        _put(store, "a", tid)
    store.labels.add_label("a", "t1", failed=True, author="ann")
    store.labels.add_label("a", "t2", failed=False, author="ann")
    store.labels.add_label("a", "t2", failed=True, author="bob")
    store.labels.add_label("a", "t3", failed=True, author="ann")
    assert store.labels.withdraw_label("a", "ann", trace_id="t3") is not None
    assert store.labels.review_rows("a", "ann")[1] == 2 and store.labels.review_rows("a", "bob")[1] == 1
    with store.db.engine.connect() as conn:
        if store.db.dialect == "sqlite":
            assert conn.exec_driver_sql(  # the entries: the labels still counted (ann's t3 withdrawn)
                "SELECT count(*) FROM labels INDEXED BY ix_labels_author "
                "WHERE tenant_id = 'a' AND author = 'ann' AND withdrawn_at IS NULL").scalar() == 2
            plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN SELECT count(DISTINCT trace_id) FROM labels "
                "WHERE tenant_id = 'a' AND author = 'ann' AND withdrawn_at IS NULL"))
            assert "ix_labels_author" in plan, plan
        else:
            ddl = conn.exec_driver_sql("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_labels_author'").scalar()
            assert str(ddl).endswith("WHERE (withdrawn_at IS NULL)"), ddl


def test_reads_by_session_and_by_time_keep_an_index_without_a_session_less_runs_entry(store: Stores) -> None:
    """Revision 0021: ``ix_traces_tenant_session`` holds the runs with a session only (a run without one
    writes no entry at its commit) and still serves a session's reads; a tenant's runs by time are read
    from ``ix_traces_console``'s leading columns (``ix_traces_tenant_created`` is gone)."""
    _put(store, "a", "t1", "loop", session="s")
    _put(store, "a", "t2")
    indexes = {ix["name"]: ix for ix in inspect(store.db.engine).get_indexes("traces")}
    assert "ix_traces_tenant_created" not in indexes and "ix_traces_console" in indexes
    with store.db.engine.connect() as conn:
        if store.db.dialect == "sqlite":
            ddl = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE name = 'ix_traces_tenant_session'").scalar()
            assert str(ddl).endswith("WHERE session_id IS NOT NULL"), ddl
            assert conn.exec_driver_sql(  # the index's entries: the run with a session only
                "SELECT count(*) FROM traces INDEXED BY ix_traces_tenant_session "
                "WHERE tenant_id = 'a' AND session_id IS NOT NULL").scalar() == 1

            def plan(sql: str) -> str:
                return " ".join(str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))

            assert "ix_traces_tenant_session" in plan("SELECT id FROM traces WHERE tenant_id = 'a' AND session_id = 's'")
            assert "ix_traces_console" in plan("SELECT id FROM traces WHERE tenant_id = 'a' AND created_at >= '2026-01-01' "
                                               "ORDER BY created_at DESC, id DESC LIMIT 50")
        else:
            ddl = conn.exec_driver_sql("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_traces_tenant_session'").scalar()
            assert str(ddl).endswith("WHERE (session_id IS NOT NULL)"), ddl
    assert [r.id for r in store.traces.list_traces("a", session="s").items] == ["t1"]
    assert store.traces.delete_session("a", "s") is True
    assert [r.id for r in store.traces.list_traces("a").items] == ["t2"]


def test_a_runs_count_returns_its_agents_profile_when_due(store: Stores) -> None:
    """``count_agent_run(profile_at=(every, sample))``: the new count, and the agent's profile (read in the same
    statement) when that count is at most ``every`` or a multiple of ``sample``; None for an alias or no row."""
    with store.db.write() as db:
        store.agents.insert_agent(db, "a", "bot", source="inferred", profile={"v": 1})
        store.agents.insert_agent(db, "a", "old", source="inferred", profile={"v": 2})
        store.agents.save_agent(db, "a", "old", alias_of="bot")
    got = []
    for _ in range(7):
        with store.db.unit() as u:
            got.append(store.agents.count_agent_run(u, "a", "bot", profile_at=(2, 3)))
    assert got == [(1, {"v": 1}), (2, {"v": 1}), (3, {"v": 1}), (4, None), (5, None), (6, {"v": 1}), (7, None)]
    with store.db.unit() as u:
        assert store.agents.count_agent_run(u, "a", "bot") == (8, None)
        assert store.agents.count_agent_run(u, "a", "old", profile_at=(2, 3)) is None
        assert store.agents.count_agent_run(u, "a", "nobody", profile_at=(2, 3)) is None


def test_sqlite_writes_run_on_one_kept_connection_given_back_after_a_failure(tmp_path: Any) -> None:
    """A SQLite file's write transactions run on one connection kept out of the pool, its busy timeout 0
    (``BEGIN IMMEDIATE`` is polled; no ``PRAGMA`` pair a transaction); a ``peek`` reads on it when no write
    holds it (its cache is valid), else on the pool's, whose busy timeout stays. A failed transaction gives
    the writer back to the pool, its busy timeout restored, and the next one takes a connection anew."""
    s = Stores.at(f"sqlite:///{tmp_path / 'w.db'}")
    s.db.upgrade()

    def busy(db: Any) -> int:
        return int(db.dbapi.execute("PRAGMA busy_timeout").fetchone()[0])

    with s.db.unit() as u:
        first = u.dbapi
        assert busy(u) == 0
    with s.db.unit() as u:
        assert u.dbapi is first
    with s.db.peek() as r:
        assert r.dbapi is first
    writing, done = threading.Event(), threading.Event()

    def write() -> None:
        with s.db.unit():
            writing.set()
            done.wait(5)

    t = threading.Thread(target=write)
    t.start()
    writing.wait(5)
    with s.db.peek() as r:  # the writer is another thread's now: a pool connection
        assert r.dbapi is not first and busy(r) == 10000
        assert r.dbapi.execute("SELECT count(*) FROM traces").fetchone()[0] == 0
    done.set()
    t.join()
    with pytest.raises(RuntimeError), s.db.unit() as u:
        raise RuntimeError("the request failed")
    assert int(first.execute("PRAGMA busy_timeout").fetchone()[0]) == 10000  # back in the pool as it was
    _put(s, "a", "t1", "loop")  # an ORM write on a new writer
    with s.db.unit() as u:
        assert busy(u) == 0
    assert s.traces.get_trace("a", "t1") is not None
    s.db.dispose()


_HELD_ROWS = {  # revision before, a row of the table whose index the next revision builds, that index, its DDL
    "0021": ("0020", "INSERT INTO traces (tenant_id, id, created_at, updated_at, n_steps, healthy, model_version, "
                     "shadow, trace, response, steps_in_rows) "
                     "VALUES ('a', :t, now(), now(), 0, true, '', false, '{}', '{}', false)",
             "ix_traces_tenant_session", "(tenant_id, session_id) WHERE (session_id IS NOT NULL)"),
    "0022": ("0021", "INSERT INTO labels (tenant_id, trace_id, author, failed, author_type, created_at) "
                     "VALUES ('a', :t, 'ann', true, 'human', now())",
             "ix_labels_author", "(tenant_id, author, trace_id) WHERE (withdrawn_at IS NULL)"),
}


@pytest.mark.parametrize("revision", sorted(_HELD_ROWS))
def test_an_upgrade_builds_its_index_on_postgresql_while_the_tables_writers_go_on(tmp_path: Any, revision: str
                                                                                  ) -> None:
    """PostgreSQL: revisions 0021's and 0022's indexes are built concurrently (``serve/store/migrate.py``:
    each revision in its own transaction, under the upgrade's session-level advisory lock). While a
    transaction holds an insert into the table open, the upgrade waits for it, but another writer of the
    table is not held behind the build (a plain ``CREATE INDEX`` would queue it: its lock waits for the open
    one); once the open transaction ends the upgrade finishes, the index valid and as the revision defines
    it, and a second upgrade finds head."""
    from sqlalchemy import create_engine, text

    from serve.store.migrate import upgrade
    from tests.storefix import _psycopg, make_db_url

    before, row, index, ddl = _HELD_ROWS[revision]
    table = row.split()[2]
    urls = make_db_url("postgresql", tmp_path)
    url = _psycopg(next(urls))
    engine = create_engine(url)
    try:
        upgrade(engine, before)
        with engine.connect() as held, engine.connect() as other:
            held.execute(text(row), {"t": "held"})  # its transaction stays open
            done: list[BaseException | None] = []

            def run() -> None:
                try:
                    upgrade(engine)
                    done.append(None)
                except BaseException as exc:  # noqa: BLE001  (the test reads it)
                    done.append(exc)

            migrating = threading.Thread(target=run)
            migrating.start()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and other.execute(text(  # the build has started (and waits)
                    "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'CREATE INDEX CONCURRENTLY%'")).scalar() == 0:
                other.rollback()
                time.sleep(0.05)
            other.rollback()
            other.execute(text("SET lock_timeout = '3s'"))
            other.execute(text(row), {"t": "other"})  # not held behind the build
            other.commit()
            assert migrating.is_alive()  # the build waits for the open insert
            held.commit()
            migrating.join(30)
            assert done == [None]
        with engine.connect() as conn:
            valid, made = conn.execute(text(
                "SELECT i.indisvalid, pg_get_indexdef(i.indexrelid) FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = :n"), {"n": index}).one()
            assert valid is True and made.endswith(ddl), made
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == head_revision()
            assert conn.execute(text(f"SELECT count(*) FROM {table}")).scalar() == 2
            indexes = set(conn.execute(text("SELECT indexname FROM pg_indexes WHERE tablename = :t"),
                                       {"t": table}).scalars())
            assert "ix_traces_tenant_created" not in indexes and "ix_traces_tenant_session_partial" not in indexes
        upgrade(engine)  # at head: nothing to do
    finally:
        engine.dispose()
        for _ in urls:  # drops the database
            pass


def test_an_upgrade_stopped_inside_revision_0021_goes_on(tmp_path: Any) -> None:
    """PostgreSQL: revision 0021 builds its partial index under a name of its own, drops the old indexes
    (each outside the revision's transaction), then renames it. Stopped after the build and one drop, the
    revision has not been recorded; run again, it keeps what was built and ends with the indexes it defines."""
    from sqlalchemy import create_engine, text

    from serve.store.migrate import upgrade
    from tests.storefix import _psycopg, make_db_url

    urls = make_db_url("postgresql", tmp_path)
    engine = create_engine(_psycopg(next(urls)))
    try:
        upgrade(engine, "0020")
        with engine.connect() as conn:  # what a stopped 0021 leaves
            conn.execute(text("CREATE INDEX ix_traces_tenant_session_partial ON traces (tenant_id, session_id) "
                              "WHERE session_id IS NOT NULL"))
            conn.execute(text("DROP INDEX ix_traces_tenant_created"))
            conn.commit()
        upgrade(engine, "0021")
        with engine.connect() as conn:
            made = dict(conn.execute(text("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'traces'")).all())
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0021"
    finally:
        engine.dispose()
        for _ in urls:  # drops the database
            pass
    assert "ix_traces_tenant_created" not in made and "ix_traces_tenant_session_partial" not in made, sorted(made)
    assert made["ix_traces_tenant_session"].endswith("(tenant_id, session_id) WHERE (session_id IS NOT NULL)")


def test_an_index_a_broken_concurrent_build_left_invalid_is_built_again(tmp_path: Any) -> None:
    """PostgreSQL: a ``CREATE INDEX CONCURRENTLY`` that stopped part-way leaves an invalid index of its name,
    which ``IF NOT EXISTS`` would keep; the upgrade drops it and builds it again (here the invalid index is
    made by marking a built one so, as the cluster's superuser)."""
    from sqlalchemy import create_engine, text

    from serve.store.migrate import upgrade
    from tests.storefix import _psycopg, make_db_url

    urls = make_db_url("postgresql", tmp_path)
    engine = create_engine(_psycopg(next(urls)))
    try:
        upgrade(engine, "0021")
        with engine.connect() as conn:
            if not conn.execute(text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")).scalar():
                pytest.skip("marking an index invalid needs a superuser")
            conn.execute(text("CREATE INDEX ix_labels_author ON labels (tenant_id)"))  # not the index 0022 builds
            conn.execute(text("UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'ix_labels_author'::regclass"))
            conn.commit()
        upgrade(engine)
        with engine.connect() as conn:
            valid, ddl = conn.execute(text(
                "SELECT i.indisvalid, pg_get_indexdef(i.indexrelid) FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = 'ix_labels_author'")).one()
        assert valid is True and "(tenant_id, author, trace_id) WHERE (withdrawn_at IS NULL)" in ddl, ddl
    finally:
        engine.dispose()
        for _ in urls:  # drops the database
            pass
