"""Agents the service infers for runs that name none (issue 31, items 1-2): real runs posted the way a
stranger sends them (no agent name, no task id, no set-prefixed id, no labels) end as one agent per
real agent, whose streams do not alarm on each other's runs; every answer says which agent and how;
a session's agent is fixed at its first append; creation makes no duplicate under concurrency; a
tenant lists, renames, merges and splits agents over real HTTP and the next runs follow; bad input
gets a 4xx naming the field; revision 0013 gives the pool's stored runs their agents (SQLite and
PostgreSQL)."""

from __future__ import annotations

import json
import random
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from model.core.options import DiagnoseOptions
from model.core.schema import Trace
from model.data.realdata import RealRun, load_source
from model.data.stranger import stranger as as_stranger
from model.diagnosis.diagnoser import Diagnoser
from serve.auth import create_key
from serve.schemas import AppendStepsRequest
from serve.services.agents import Agents
from serve.services.triage import TriageService
from serve.settings import Settings
from serve.store import Stores
from serve.store.migrate import downgrade
from serve.store.migrate import upgrade as migrate_to
from serve.store.tables import AgentRow, FailureRow, ObservationRow, SessionRow, StreamRow, TraceRow
from serve.wiring import build_service
from tests.conftest import LiveServer
from tests.storefix import db_url, full_agents  # noqa: F401  (fixture)

A, B = "tau_airline", "agentprocessbench"


def stranger(trace: Trace) -> Trace:
    """The run as a stranger sends it (:func:`model.data.stranger.stranger`), under an id of its own."""
    return as_stranger(trace, uuid.uuid4().hex)


@pytest.fixture(scope="module")
def real() -> dict[str, list[RealRun]]:
    out = {}
    for name in (A, B):
        runs = load_source(name)
        random.Random(0).shuffle(runs)
        out[name] = runs
    return out


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TriageService]:
    # every default but one: each run's values are fed in its own transaction (TRIAGE_STREAM_FEED_S 0), as runs
    # spaced further apart than the feed's gathering are; tests/test_stream_feed.py tests the gathered feed
    svc = build_service(Settings(data_dir=tmp_path, stream_feed_s=0), Diagnoser())
    yield svc
    svc.close()


def _degraded(resp: Any) -> bool:
    return any(f.kind == "degradation" for f in resp.failures)


def test_two_real_agents_posted_unnamed_under_one_key_are_two_agents(
        service: TriageService, real: dict[str, list[RealRun]]) -> None:
    # 105 runs of one agent (past the streams' 100-run warm-up), then the successful runs of another,
    # one key, nothing named: the false-alarm case (one pool: degradation on 50 of 60).
    first = [service.diagnose("t", stranger(r.trace), DiagnoseOptions()) for r in real[A][:105]]
    ok_b = [r for r in real[B] if not r.failed][:40]
    second = [service.diagnose("t", stranger(r.trace), DiagnoseOptions()) for r in ok_b]
    assert all(x.agent_source == "inferred" for x in first + second)
    a_agents, b_agents = Counter(x.agent for x in first), Counter(x.agent for x in second)
    (a_key, a_n), (b_key, b_n) = a_agents.most_common(1)[0], b_agents.most_common(1)[0]
    assert a_key != b_key and a_n >= 0.9 * len(first) and b_n >= 0.9 * len(second), (a_agents, b_agents)
    assert all(x.failure_probability_basis is None or x.failure_probability_basis.agent == x.agent
               for x in first + second)
    # the other agent's streams raise no degradation on these successful runs
    assert not [x.trace_id for x in second if _degraded(x)]
    listed = {a["key"]: a for a in service.agents.list("t")}
    assert listed[a_key]["runs"] == a_n and listed[a_key]["source"] == "inferred"
    assert listed[a_key]["profile"]["n_runs"] == a_n and listed[b_key]["runs"] == b_n
    # The control: the same runs through one stream (all under one name, as the pool was) do alarm on
    # the second agent's successful runs, so the assertion above is one that can fail.
    for r in real[A][:105]:
        service.diagnose("u", stranger(r.trace), DiagnoseOptions(agent="one"))
    pooled = [service.diagnose("u", stranger(r.trace), DiagnoseOptions(agent="one")) for r in ok_b]
    assert sum(_degraded(x) for x in pooled) >= 5


def test_a_session_keeps_its_agent_and_a_repost_resolves_to_the_stored_one(
        service: TriageService, real: dict[str, list[RealRun]]) -> None:
    a_run, b_run = stranger(real[A][0].trace), stranger(real[B][0].trace)
    a = service.diagnose("t", a_run, DiagnoseOptions())
    b = service.diagnose("t", b_run, DiagnoseOptions())
    assert a.agent != b.agent
    # a whole-trace post of a session first seen through A's run: A's agent, whatever its steps show
    first = service.diagnose("t", a_run.model_copy(update={"id": "s-run", "session_id": "s1"}), DiagnoseOptions())
    later = service.diagnose("t", b_run.model_copy(update={"id": "s-run-2", "session_id": "s1"}), DiagnoseOptions())
    assert first.agent == later.agent == a.agent
    # the same trace id again (content changed): the stored run's agent
    again = service.diagnose("t", b_run.model_copy(update={"id": a_run.id}), DiagnoseOptions())
    assert (again.agent, again.agent_source) == (a.agent, "inferred")
    # a caller's name still wins
    named = service.diagnose("t", a_run.model_copy(update={"id": "n1"}), DiagnoseOptions(agent="desk"))
    assert (named.agent, named.agent_source) == ("desk", "option")


def test_a_stray_first_run_is_merged_into_the_agent_that_later_takes_it(service: TriageService) -> None:
    """An agent's odd first run (no tool) starts a provisional agent the next runs do not join; at the
    real agent's tenth run (a checkpoint) it takes that run, and the service merges the stray into it: the stored run
    is re-keyed, the stray's key becomes an alias, the agent's streams keep their warm-up, and a
    run like the stray's later answers the agent it joined. An agent named by a person is left alone."""
    from tests.test_identity import team_run

    rng = random.Random(0)
    stray = service.diagnose("t", team_run(rng, tool=False).model_copy(update={"id": "odd"}), DiagnoseOptions())
    main = [service.diagnose("t", team_run(rng).model_copy(update={"id": f"r{i}"}), DiagnoseOptions())
            for i in range(9)]
    assert stray.agent != main[0].agent and len({x.agent for x in main}) == 1
    assert service.stores.agents.stored_agent("t", "odd") == (stray.agent, "inferred")
    streams_before = _stream_counts(service, main[0].agent)
    tenth = service.diagnose("t", team_run(rng).model_copy(update={"id": "r9"}), DiagnoseOptions())
    assert tenth.agent == main[0].agent
    assert service.stores.agents.stored_agent("t", "odd") == (main[0].agent, "inferred")  # re-keyed
    listed = service.agents.list("t")
    assert [a["key"] for a in listed] == [main[0].agent] and listed[0]["runs"] == 11
    assert listed[0]["aliases"] == [stray.agent]
    after = _stream_counts(service, main[0].agent)
    assert after and all(after[k] >= streams_before.get(k, 0) for k in after)  # kept (not emptied)
    assert all(_stream_state(service, main[0].agent).values())  # no warm-up restarted
    later = service.diagnose("t", team_run(rng, tool=False).model_copy(update={"id": "odd2"}), DiagnoseOptions())
    assert later.agent == main[0].agent
    # the same on a tenant where a person named the stray's agent: it stays as it is
    rng = random.Random(0)
    odd = service.diagnose("u", team_run(rng, tool=False).model_copy(update={"id": "odd"}), DiagnoseOptions())
    service.agents.rename("u", odd.agent, "kept-apart", actor="test")
    keys = {service.diagnose("u", team_run(rng).model_copy(update={"id": f"r{i}"}), DiagnoseOptions()).agent
            for i in range(12)}
    assert len(keys) == 1 and "kept-apart" not in keys
    assert {a["key"] for a in service.agents.list("u")} == {"kept-apart", *keys}


def _changepoints_n(srv: dict[str, Any], agent: str) -> int:
    r = httpx.get(f"{srv['url']}/v1/streams/output_chars/changepoints", params={"agent": agent},
                  headers={"Authorization": f"Bearer {srv['key']}"}, timeout=30)
    assert r.status_code == 200, r.text
    return int(r.json()["n"])


def _stream_counts(service: TriageService, agent: str) -> dict[str, int]:
    with service.stores.db.read() as db:
        return {r.name: int(r.n) for r in db.execute(select(StreamRow.name, StreamRow.n)
                                                     .where(StreamRow.tenant_id == "t", StreamRow.agent == agent))}


def _stream_state(service: TriageService, agent: str) -> dict[str, bool]:
    with service.stores.db.read() as db:
        return {r.name: bool(r.state) for r in db.execute(select(StreamRow.name, StreamRow.state)
                                                          .where(StreamRow.tenant_id == "t", StreamRow.agent == agent))}


def test_concurrent_workers_create_one_agent(db_url: str, real: dict[str, list[RealRun]]) -> None:  # noqa: F811
    stores = [Stores.at(db_url) for _ in range(4)]
    stores[0].db.upgrade()
    try:
        workers = [Agents(s.agents) for s in stores]  # four workers, each with its own copy of the profiles
        runs = [stranger(r.trace) for r in real[A][:16]]
        got: list[str] = []
        start = threading.Barrier(4)

        def work(i: int) -> None:
            start.wait()
            for t in runs[i::4]:
                got.append(workers[i].resolve("t", t, DiagnoseOptions()).agent)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert len(set(got)) == 1 and len(got) == 16
        assert [r["key"] for r in stores[0].agents.agent_rows("t")] == got[:1]
    finally:
        for s in stores:
            s.db.dispose()


# -- over real HTTP: list, rename, merge, split ---------------------------------------------------------
@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("agents-http")
    store = Stores.at(f"sqlite:///{work / 'triage.db'}")
    store.db.upgrade()
    key, _ = create_key(store.keys, "acme")
    op_key, _ = create_key(store.keys, "ops", operator=True)
    server = LiveServer(env={"TRIAGE_DATA_DIR": str(work), "TRIAGE_AUTH": "on", "TRIAGE_CLASSIFIER": "false"}).wait_ready()
    try:
        yield {"url": server.url, "key": key, "op": op_key, "store": store}
    finally:
        server.stop()
        store.db.dispose()


def _post(srv: dict[str, Any], run: RealRun, **options: Any) -> dict[str, Any]:
    body = {"trace": stranger(run.trace).model_dump(mode="json", exclude_none=True), "options": options}
    r = httpx.post(f"{srv['url']}/v1/diagnose", json=body, headers={"Authorization": f"Bearer {srv['key']}"}, timeout=60)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    assert out["schema_version"] == "1.6"
    return out


def _act(srv: dict[str, Any], what: str, body: dict[str, Any], *, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key or srv['op']}", "X-Triage-Tenant": "acme"}
    return httpx.post(f"{srv['url']}/v1/agents/{what}", json=body, headers=headers, timeout=60)


def test_rename_merge_and_split_over_http_and_the_next_run_follows(
        srv: dict[str, Any], real: dict[str, list[RealRun]]) -> None:
    api = {"Authorization": f"Bearer {srv['key']}"}
    a_runs, b_runs = real[A][200 - 12:], real[B][200 - 12:]
    a_first = [_post(srv, r) for r in a_runs[:4]]
    b_first = [_post(srv, r) for r in b_runs[:4]]
    a_key, b_key = a_first[0]["agent"], b_first[0]["agent"]
    assert {x["agent"] for x in a_first} == {a_key} and {x["agent"] for x in b_first} == {b_key} and a_key != b_key
    assert a_first[0]["agent_source"] == "inferred" and a_first[0]["failure_probability_basis"]["agent"] == a_key
    listed = httpx.get(f"{srv['url']}/v1/agents", headers=api, timeout=30).json()
    by_key = {a["key"]: a for a in listed["agents"]}
    assert by_key[a_key]["runs"] == 4 and by_key[a_key]["source"] == "inferred" and by_key[a_key]["name"] is None
    assert by_key[a_key]["profile"]["n_runs"] == 4 and by_key[a_key]["first_seen"] is not None
    srv["store"].labels.add_label("acme", b_first[0]["trace_id"], failed=True, author="ann", author_type="human")

    # rename: the next run matched to it, and a run naming the old key, get the name
    r = _act(srv, "rename", {"agent": a_key, "name": "hotpot-bot"})
    assert r.status_code == 200, r.text
    assert r.json()["agents"][0] | {"first_seen": None, "last_seen": None, "profile": None} == {
        "key": "hotpot-bot", "name": "hotpot-bot", "source": "inferred", "runs": 4, "labelled_runs": 0,
        "aliases": [a_key], "first_seen": None, "last_seen": None, "profile": None}
    nxt = _post(srv, a_runs[4])
    assert (nxt["agent"], nxt["agent_source"]) == ("hotpot-bot", "inferred")
    old = _post(srv, a_runs[5], agent=a_key)
    assert (old["agent"], old["agent_source"]) == ("hotpot-bot", "option")
    assert srv["store"].traces.get_trace("acme", a_first[0]["trace_id"]).agent == "hotpot-bot"  # the past moved

    # merge the other agent into it: its runs and streams move; its next runs come here (the stream read over
    # HTTP first: a reader applies the runs' values still waiting in the feed, TRIAGE_STREAM_FEED_S)
    assert _changepoints_n(srv, "hotpot-bot") == 6
    streams_before = srv["store"].streams.get_stream("acme", "output_chars", "hotpot-bot")
    assert streams_before is not None and streams_before.n == 6
    r = _act(srv, "merge", {"agent": b_key, "into": "hotpot-bot"})
    assert r.status_code == 200, r.text
    merged = r.json()["agents"][0]
    assert merged["runs"] == 10 and sorted(merged["aliases"]) == sorted([a_key, b_key])
    after = srv["store"].streams.get_stream("acme", "output_chars", "hotpot-bot")
    # the merge applied the feed before it moved the streams: b's four runs counted in b's stream, then moved
    assert after is not None and after.n == 10 and after.state == {}  # warm-up again (documented)
    assert srv["store"].streams.get_stream("acme", "output_chars", b_key) is None
    assert _post(srv, b_runs[4])["agent"] == "hotpot-bot"
    keys = [a["key"] for a in httpx.get(f"{srv['url']}/v1/agents", headers=api, timeout=30).json()["agents"]]
    assert b_key not in keys and a_key not in keys

    # split the airline runs back off into an agent of their own: the next airline run follows them
    b_ids = [x["trace_id"] for x in b_first]
    r = _act(srv, "split", {"agent": "hotpot-bot", "trace_ids": b_ids, "name": "airline-bot"})
    assert r.status_code == 200, r.text
    assert r.json()["agents"][0]["runs"] == 4 and r.json()["agents"][0]["source"] == "split"
    assert srv["store"].traces.get_trace("acme", b_ids[0]).agent == "airline-bot"
    assert _post(srv, b_runs[6])["agent"] == "airline-bot"
    assert _post(srv, a_runs[6])["agent"] == "hotpot-bot"
    # back to an old name of its own: the alias becomes the agent again, the name it had an alias
    r = _act(srv, "rename", {"agent": "hotpot-bot", "name": a_key})
    assert r.status_code == 200 and "hotpot-bot" in r.json()["agents"][0]["aliases"], r.text
    assert _post(srv, a_runs[7])["agent"] == a_key
    assert _post(srv, a_runs[8], agent="hotpot-bot")["agent"] == a_key
    # the counts kept on write moved with the runs at each step: as a full read of the history counts them
    # (this store is not the server's: it applies the runs' count changes still waiting in the feed first)
    srv["store"].agents.apply_counts()
    got = {k: tuple(v) for k, v in srv["store"].agents.agent_stats("acme").items()}
    assert got == full_agents(srv["store"], "acme") and got[a_key][:2] == (10, 0) and got["airline-bot"][:2] == (5, 1)


def test_bad_corrections_get_a_4xx_naming_the_field(srv: dict[str, Any], real: dict[str, list[RealRun]]) -> None:
    one = _post(srv, real[A][150])
    key = one["agent"]
    r = _act(srv, "rename", {"agent": key, "name": "x"}, key=srv["key"])  # not an operator
    assert r.status_code == 403, r.text
    r = _act(srv, "rename", {"agent": "nobody", "name": "x"})
    assert r.status_code == 404 and "nobody" in r.text, r.text
    r = _act(srv, "merge", {"agent": key, "into": key})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "into"], r.text
    r = _act(srv, "merge", {"agent": key, "into": "nobody"})
    assert r.status_code == 404 and "into" in r.text and "nobody" in r.text, r.text
    r = _act(srv, "split", {"agent": key, "trace_ids": []})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "trace_ids"], r.text
    r = _act(srv, "split", {"agent": key, "trace_ids": ["not-a-run"]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "trace_ids"], r.text
    solo = _post(srv, real[A][151], agent="solo")
    r = _act(srv, "split", {"agent": "solo", "trace_ids": [solo["trace_id"]]})  # all its runs: rename instead
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "trace_ids"], r.text
    other = _post(srv, real[B][150], agent="named-one")
    r = _act(srv, "rename", {"agent": key, "name": other["agent"]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "name"], r.text
    r = _act(srv, "rename", {"agent": key, "name": " spaced "})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "name"], r.text
    r = _act(srv, "merge", {"agent": key})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "into"], r.text


# -- revision 0013 -----------------------------------------------------------------------------------------
def test_migration_0013_gives_the_pools_runs_inferred_agents(
        db_url: str, tmp_path: Path, real: dict[str, list[RealRun]]) -> None:  # noqa: F811
    store = Stores.at(db_url)
    try:
        migrate_to(store.db.engine, "0012")
        now = datetime(2026, 12, 1, 10, 0)
        runs = [(f"{name}-{i}", stranger(r.trace)) for name in (A, B) for i, r in enumerate(real[name][100:106])]
        runs.sort(key=lambda x: x[0][-1])  # the two agents interleaved
        with store.db.engine.begin() as conn:
            for n, (tid, trace) in enumerate(runs):
                conn.execute(TraceRow.__table__.insert().values(
                    tenant_id="acme", id=tid, created_at=now.replace(minute=n), updated_at=now.replace(minute=n),
                    n_steps=len(trace.steps), healthy=True, model_version="", shadow=False,
                    trace=trace.model_dump(mode="json", exclude_none=True) | {"id": tid}, response={},
                    steps_in_rows=False, agent="_pool"))
                conn.execute(FailureRow.__table__.insert().values(
                    tenant_id="acme", trace_id=tid, kind="loop", is_signal=True, severity="high", confidence=0.4,
                    detector="r", evidence="", details={}, agent="_pool"))
                conn.execute(ObservationRow.__table__.insert().values(
                    tenant_id="acme", stream="output_chars", agent="_pool", seq=n, value=float(n), trace_id=tid,
                    alarm=False, created_at=now))
            a_tid, a_trace = next(x for x in runs if x[0].startswith(A))  # a live session of the pool's, too
            conn.execute(SessionRow.__table__.insert().values(
                tenant_id="acme", id="live", trace_id=a_tid, created_at=now, updated_at=now, n_steps=len(a_trace.steps),
                next_source_index=max(st.source_index for st in a_trace.steps) + 1, version=1, state={}))
            conn.execute(TraceRow.__table__.update().where(TraceRow.id == a_tid).values(session_id="live"))
            conn.execute(StreamRow.__table__.insert().values(
                tenant_id="acme", name="output_chars", agent="_pool", detector="cusum", params={}, state={"n": 12},
                n=len(runs), alarm_open=False, updated_at=now))
            conn.execute(TraceRow.__table__.insert().values(
                tenant_id="acme", id="named", created_at=now, updated_at=now, n_steps=0, healthy=True,
                model_version="", shadow=False, trace={"id": "named", "steps": []}, response={}, steps_in_rows=False,
                agent="desk"))
        store.db.upgrade()
        with store.db.read() as db:
            agent_of = {r.id: r.agent for r in db.scalars(select(TraceRow))}
            rows = {r.key: r for r in db.scalars(select(AgentRow))}
            fails = {r.trace_id: r.agent for r in db.scalars(select(FailureRow))}
            obs = sorted((o.agent, o.seq, o.trace_id) for o in db.scalars(select(ObservationRow)))
            streams = {s.agent: s for s in db.scalars(select(StreamRow))}
        a_keys = {agent_of[t] for t, _ in runs if t.startswith(A)}
        b_keys = {agent_of[t] for t, _ in runs if t.startswith(B)}
        assert len(a_keys) == len(b_keys) == 1 and a_keys != b_keys and "_pool" not in a_keys | b_keys
        (a_key,), (b_key,) = a_keys, b_keys
        assert rows[a_key].source == "inferred" and rows[a_key].n_runs == 6 and rows[b_key].n_runs == 6
        assert rows["desk"].source == "option" and agent_of["named"] == "desk"
        assert fails == {t: agent_of[t] for t, _ in runs}
        # the observations follow their runs, numbered again per agent; each stream warms up again
        assert [(a, s) for a, s, _ in obs] == [(a_key, i) for i in range(6)] + [(b_key, i) for i in range(6)] or \
            [(a, s) for a, s, _ in obs] == [(b_key, i) for i in range(6)] + [(a_key, i) for i in range(6)]
        assert all(agent_of[t] == a for a, _, t in obs)
        assert set(streams) == {a_key, b_key} and streams[a_key].n == 6 and streams[a_key].state == {}
        # the running service matches a new run of either agent to its migrated agent
        svc = build_service(Settings(data_dir=tmp_path, database_url=db_url), Diagnoser())
        try:
            assert svc.diagnose("acme", stranger(real[A][120].trace), DiagnoseOptions()).agent == a_key
            assert svc.diagnose("acme", stranger(real[B][120].trace), DiagnoseOptions()).agent == b_key
            # the session stored before: its next append (of a B-like message) keeps its run's agent
            step = svc.append_steps("acme", "live", AppendStepsRequest(messages=[{"role": "user", "content": "ok"}]))
            assert (step.agent, step.agent_source) == (a_key, "inferred")
        finally:
            svc.close()
        downgrade(store.db.engine, "0012")
        with store.db.read() as db:
            # the two columns read: the ORM row has columns of later revisions (0015's verdict)
            back = {tid: agent for tid, agent in db.execute(select(TraceRow.id, TraceRow.agent))}
        assert {back[t] for t, _ in runs} == {"_pool"} and back["named"] == "desk"
    finally:
        store.db.dispose()


def test_console_and_cli_list_the_agents_as_the_api_does(
        srv: dict[str, Any], real: dict[str, list[RealRun]], monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from serve.cli.main import app as cli_app
    from serve.settings import get_settings

    _post(srv, real[A][160])
    api = httpx.get(f"{srv['url']}/v1/agents", headers={"Authorization": f"Bearer {srv['key']}"}, timeout=30).json()
    want = {(a["key"], a["name"], a["runs"]) for a in api["agents"]}
    assert want
    from agent_triage_client import TriageClient

    with TriageClient(base_url=srv["url"], api_key=srv["key"]) as client:  # the client reads the same
        assert {(a.key, a.name, a.runs) for a in client.list_agents().agents} == want
        answer = client.diagnose(stranger(real[A][161].trace).model_dump(mode="json", exclude_none=True))
        assert answer.agent and answer.agent_source == "inferred"
    want = {(k, n, r + (k == answer.agent)) for k, n, r in want}
    c = httpx.Client(base_url=srv["url"], timeout=60)
    assert c.post("/ui/signin", data={"key": srv["key"], "next": "/ui/models"}).status_code == 303
    page = c.get("/ui/models?format=json").json()
    assert {(a["key"], a["name"], a["runs"]) for a in page["known_agents"]} == want
    html = c.get("/ui/models").text
    assert all(f'data-agent="{k}"' in html for k, _, _ in want)
    data = Path(srv["store"].db.url.removeprefix("sqlite:///")).parent
    monkeypatch.setenv("TRIAGE_DATA_DIR", str(data))
    monkeypatch.setenv("TRIAGE_DATABASE_URL", srv["store"].db.url)
    get_settings.cache_clear()
    try:
        runner = CliRunner()
        res = runner.invoke(cli_app, ["agents", "list", "--tenant", "acme", "--json"])
        assert res.exit_code == 0, res.output
        assert {(a["key"], a["name"], a["runs"]) for a in json.loads(res.output)} == want
        res = runner.invoke(cli_app, ["agents", "list", "--tenant", "acme"])
        some = sorted(want)[0][0]
        assert res.exit_code == 0 and some[:28] in res.output and "source" in res.output, res.output
        res = runner.invoke(cli_app, ["agents", "merge", some, some, "--tenant", "acme"])
        assert res.exit_code == 2 and "itself" in res.output, res.output
        res = runner.invoke(cli_app, ["agents", "rename", "nobody", "x", "--tenant", "acme"])
        assert res.exit_code == 2 and "nobody" in res.output, res.output
    finally:
        get_settings.cache_clear()
