"""Two real ``triage serve`` replicas (two workers each, data folders of their own) on one throwaway
PostgreSQL, as behind a load balancer (docs/deployment.md): a session whose steps alternate between them
gets the answers one server gives; inferred agents agree, none twice; each run's stream observations are
applied once, in commit order; a promoted agent model is served by both within the poll interval (the
registry a path both point at); rate limits and the daily quota hold over both with no replica count;
SIGKILL of one replica under load loses no acknowledged run; readiness, and drain on SIGTERM (exit 0).

The modules' tests share the two servers and run in order (each part on a tenant of its own)."""

from __future__ import annotations

import functools
import math
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from model.data.realdata import load_source as _load_source
from model.streams.catalog import make_stream_detector
from serve.auth import create_key
from serve.store import Stores
from tests.conftest import LiveServer, child_pids
from tests.storefix import make_db_url

pytestmark = [pytest.mark.postgres, pytest.mark.slow,
              pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads worker pids from /proc (Linux)")]

KEY_RPS, TENANT_RPS, QUOTA, POLL_S, DRAIN_S = 8.0, 12.0, 1000, 1.0, 2.0


@functools.cache
def _runs(source: str) -> list[Any]:
    return _load_source(source)


@dataclass
class Cluster:
    servers: list[LiveServer]
    stores: Stores
    registry: Path
    keys: Callable[[str, int], list[str]]  # tenant, how many → API keys
    model: Future[Any]  # the agent model the promotion test serves, fitted while the servers start


def _fit_airline() -> Any:
    """A tiny agent model of the airline agent (30 runs), as `triage retrain` would promote one."""
    from model.scoring.agentmodel.model import AgentModel, AgentModelConfig
    from serve.services.retrain import ZeroShotCache

    train = _runs("tau_airline")[:30]
    traces = [r.trace.model_copy(update={"labels": None}) for r in train]
    return AgentModel.fit(traces, [r.failed for r in train], [r.group for r in train], agent="airline",
                          prior=ZeroShotCache(None).probabilities(traces),
                          config=AgentModelConfig(internal_folds=3, target_false_alarm=0.2))


def _bare(trace: Any, tid: str, steps: int = 8) -> dict[str, Any]:
    """A real run as a stranger sends it (no set-prefixed id, task id, agent name, labels or metadata),
    cut to ``steps`` steps (repeated to that many when it has fewer)."""
    reps = (steps + len(trace.steps) - 1) // len(trace.steps)
    t = trace.model_copy(update={"labels": None, "metadata": {}, "task_type": None, "id": tid,
                                 "session_id": None, "steps": (trace.steps * reps)[:steps]}, deep=True)
    return t.model_dump(mode="json", exclude_none=True)


def _ready_answers(srv: LiveServer, timeout: float = 120.0) -> list[tuple[int, dict[str, Any]]]:
    """Poll ``/readyz`` from the process's start until it answers 200; every answer it gave."""
    seen: list[tuple[int, dict[str, Any]]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if srv.proc.poll() is not None:
            raise RuntimeError("server exited:\n" + "".join(srv.output))
        try:
            r = httpx.get(f"{srv.url}/readyz", timeout=2.0)
            seen.append((r.status_code, r.json()))
            if r.status_code == 200:
                return seen
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    srv.stop()
    raise RuntimeError("no /readyz 200 in time:\n" + "".join(srv.output)[-3000:])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("replicas")
    db = make_db_url("postgresql", tmp)
    url = next(db)
    stores = Stores.at(url)
    stores.db.upgrade()
    registry = tmp / "registry"  # the agent-model registry: one path both replicas point at
    env = {"TRIAGE_DATABASE_URL": url, "TRIAGE_MODEL_REGISTRY": str(registry), "TRIAGE_CLASSIFIER": "false",
           "TRIAGE_MODEL_POLL_S": str(POLL_S), "TRIAGE_DRAIN_S": str(DRAIN_S), "TRIAGE_RATE_LIMIT_KEY_RPS": str(KEY_RPS),
           "TRIAGE_RATE_LIMIT_KEY_BURST": str(KEY_RPS), "TRIAGE_RATE_LIMIT_TENANT_RPS": str(TENANT_RPS),
           "TRIAGE_RATE_LIMIT_TENANT_BURST": str(TENANT_RPS), "TRIAGE_QUOTA_DAILY_STEPS": str(QUOTA)}
    servers = [LiveServer(env={**env, "TRIAGE_DATA_DIR": str(tmp / f"replica{i}")}, args=["--workers", "2"])
               for i in range(2)]
    fitting = ThreadPoolExecutor(1)
    model = fitting.submit(_fit_airline)
    try:
        for srv in servers:  # not ready until the models are loaded and the store answers
            answers = _ready_answers(srv)
            assert all(code == 503 for code, _ in answers[:-1]), answers
            assert answers[-1][1]["checks"] == {"rules": True, "runscore": True, "not_draining": True, "store": True}

        def keys(tenant: str, n: int) -> list[str]:
            return [create_key(stores.keys, tenant)[0] for _ in range(n)]

        yield Cluster(servers, stores, registry, keys, model)
    finally:
        fitting.shutdown(wait=True)
        for srv in servers:
            srv.stop()
        stores.db.dispose()
        next(db, None)


def _call(client: httpx.Client, method: str, url: str, key: str, **kw: Any) -> httpx.Response:
    """As a client does: a 429 for a request rate is retried after its Retry-After."""
    while True:
        r = client.request(method, url, headers={"Authorization": f"Bearer {key}"}, timeout=60, **kw)
        if r.status_code != 429 or "quota" in r.text:
            return r
        time.sleep(float(r.headers["retry-after"]))


def _same(answer: dict[str, Any], session: str) -> dict[str, Any]:
    """An answer without what names its session."""
    return {k: v for k, v in answer.items() if k not in ("session_id", "trace_id")} | {"ids": session}


def test_a_session_alternating_between_replicas_gets_one_servers_answers(cluster: Cluster) -> None:
    runs = [r for r in _runs("tau_airline") if r.failed][:2]
    key = cluster.keys("sess", 1)[0]
    a, b = (s.url for s in cluster.servers)
    with httpx.Client() as c:
        for n, run in enumerate(runs):
            steps = _bare(run.trace, "x", steps=9)["steps"]
            chunks = [steps[i : i + 3] for i in range(0, len(steps), 3)]
            one = [_call(c, "POST", f"{a}/v1/sessions/one-{n}/steps", key, json={"steps": ch}) for ch in chunks]
            alt = [_call(c, "POST", f"{(a, b)[i % 2]}/v1/sessions/alt-{n}/steps", key, json={"steps": ch})
                   for i, ch in enumerate(chunks)]
            assert [r.status_code for r in one + alt] == [200] * 2 * len(chunks), [r.text for r in one + alt]
            for i, (x, y) in enumerate(zip(one, alt, strict=True)):
                ax, ay = x.json(), y.json()
                recs = ax["recommendation"].pop("id"), ay["recommendation"].pop("id")
                assert (recs[0] is None) == (recs[1] is None)
                assert _same(ax, "S") == _same(ay, "S"), f"append {i} of run {n}"
            # and either replica reads the stored session as the other does
            views = [_call(c, "GET", f"{u}/v1/sessions/alt-{n}", key).json() for u in (a, b)]
            assert views[0] == views[1]


def test_inferred_agents_agree_across_replicas_with_no_duplicates(cluster: Cluster) -> None:
    shapes = {"airline": _runs("tau_airline")[:6], "shop": _runs("webshop")[:6]}
    keys = cluster.keys("agents", 4)
    jobs = [(shape, f"{shape}-{i}", r.trace) for shape, rs in shapes.items() for i, r in enumerate(rs)]
    random.Random(7).shuffle(jobs)

    def post(i: int) -> tuple[str, dict[str, Any]]:
        shape, tid, trace = jobs[i]
        srv = cluster.servers[i % 2]
        with httpx.Client() as c:
            r = _call(c, "POST", f"{srv.url}/v1/diagnose", keys[i % 4], json={"trace": _bare(trace, tid)})
        assert r.status_code == 200, r.text
        return shape, r.json()

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(post, range(len(jobs))))
    by_shape: dict[str, set[str]] = {}
    for shape, ans in answers:
        assert ans["agent_source"] == "inferred"
        by_shape.setdefault(shape, set()).add(ans["agent"])
    assert all(len(v) == 1 for v in by_shape.values()), by_shape  # one agent per shape, whoever answered
    assert by_shape["airline"] != by_shape["shop"]
    lists = []
    for srv in cluster.servers:
        with httpx.Client() as c:
            r = _call(c, "GET", f"{srv.url}/v1/agents", keys[0])
        assert r.status_code == 200, r.text
        lists.append(sorted((a["key"], a["runs"]) for a in r.json()["agents"]))
    assert lists[0] == lists[1]
    assert sorted(k for k, _ in lists[0]) == sorted(v.pop() for v in by_shape.values())  # no duplicate agent
    assert sum(n for _, n in lists[0]) == len(jobs)


def _feed_waiting(cluster: Cluster, tenant: str, *, within_s: float, table: str = "stream_feed") -> int:
    """The tenant's runs still waiting in the streams' feed (``table``: or the count feed) once none is, or
    ``within_s`` seconds have passed."""
    assert table in ("stream_feed", "count_feed")
    deadline = time.monotonic() + within_s
    while True:
        with cluster.stores.db.engine.connect() as conn:
            waiting = int(conn.execute(text(f"SELECT count(*) FROM {table} WHERE tenant_id = :t"),  # noqa: S608
                                       {"t": tenant}).scalar() or 0)
        if not waiting or time.monotonic() > deadline:
            return waiting
        time.sleep(0.2)


def test_each_runs_stream_observations_are_applied_once_in_commit_order(cluster: Cluster) -> None:
    """The runs of the test above fed their agents' streams from four workers on two replicas at once: each
    wrote its values to the streams' feed, which the replicas' feeders apply within TRIAGE_STREAM_FEED_S."""
    assert _feed_waiting(cluster, "agents", within_s=30) == 0
    with cluster.stores.db.engine.connect() as conn:
        streams = conn.execute(text("SELECT name, agent, detector, params, state, n FROM streams "
                                    "WHERE tenant_id = 'agents'")).all()
        runs = {r[0]: r[1] for r in conn.execute(text("SELECT id, agent FROM traces WHERE tenant_id = 'agents'"))}
        assert streams and len(runs) == 12
        for name, agent, detector, params, state, n in streams:
            obs = conn.execute(text("SELECT seq, value, trace_id FROM observations WHERE tenant_id = 'agents' "
                                    "AND stream = :s AND agent = :a ORDER BY seq"), {"s": name, "a": agent}).all()
            assert [o[0] for o in obs] == list(range(n)), (name, agent)  # no gap, no seq twice
            ids = [o[2] for o in obs]
            assert len(ids) == len(set(ids)), (name, agent)  # no run applied twice
            if name == "failure_probability":  # every run has one: each of the agent's runs exactly once
                assert sorted(ids) == sorted(t for t, a in runs.items() if a == agent)
            det = make_stream_detector(detector, **params)  # replayed in seq order, it is the stored state
            for o in obs:
                det.update(o[1])
            replay = det.get_state()
            assert replay.keys() == state.keys()
            for k, v in state.items():
                w = replay[k]
                assert w == v or (isinstance(v, float) and math.isclose(w, v, rel_tol=1e-9, abs_tol=1e-12)), (name, k)


def test_a_promoted_agent_model_is_served_by_both_within_the_poll_interval(cluster: Cluster) -> None:
    from model.scoring.agent_registry import Registry

    model = cluster.model.result(timeout=300)
    probe = _runs("tau_airline")[150]
    keys = cluster.keys("models", 6)
    body = {"trace": _bare(probe.trace, "probe"), "options": {"agent": "airline"}}
    turn = [0]

    def basis(srv: LiveServer) -> dict[str, Any]:
        with httpx.Client() as c:
            turn[0] += 1
            r = _call(c, "POST", f"{srv.url}/v1/diagnose", keys[turn[0] % len(keys)], json=body)
        assert r.status_code == 200, r.text
        return dict(r.json()["failure_probability_basis"])

    assert [basis(s)["model"] for s in cluster.servers] == ["zero-shot", "zero-shot"]
    mv = Registry(cluster.registry).save("models", "airline", model, parent=None, card="test", report={}, data={})
    cluster.stores.activations.activate_model("models", mv.version, actor="test", agent="airline")
    promoted = time.monotonic()
    # every worker polls the active versions every POLL_S and loads a new one from the shared path; a
    # round of 4 requests a replica (new connections: both of its workers) all answer with it soon after
    while True:
        began = time.monotonic() - promoted
        answers = [basis(s) for s in cluster.servers for _ in range(4)]
        if all(a["model"] == "agent" for a in answers) or began > 2 * POLL_S + 8:
            break
    assert all(a["model"] == "agent" and a["version"] == answers[0]["version"] for a in answers), (began, answers)
    assert answers[0]["version"].endswith(mv.version)
    print(f"promotion served by both replicas' workers in a round of requests from {began:.2f} to "
          f"{time.monotonic() - promoted:.2f} s after it (poll {POLL_S} s)")


def _offer(urls: list[str], keys: list[str], seconds: float, rps: float) -> tuple[int, float]:
    """Requests at ``rps`` a second in all (5× the limit: the limit, not the clients, decides), round-robin
    over the replicas and keys, for ``seconds``: how many were admitted, and the time from the first
    request sent to the last (as sent: a loaded machine delays the clients too). The path is a run that
    does not exist: an admitted request costs a primary-key read and answers 404, so that the servers
    keep up on a loaded machine."""
    threads_n = 4
    clients = [httpx.Client() for _ in range(threads_n)]
    for c in clients:  # connections open, before the clock starts
        for u in urls:
            c.get(f"{u}/healthz")
    ok, sends = [0], []
    lock = threading.Lock()
    start = time.monotonic() + 0.05

    def run(n: int) -> None:
        c, i = clients[n], n
        while (at := start + i / rps) < start + seconds:
            time.sleep(max(0.0, at - time.monotonic()))
            sent = time.monotonic()
            r = c.get(f"{urls[i % len(urls)]}/v1/traces/none", headers={"Authorization": f"Bearer {keys[i % len(keys)]}"})
            assert r.status_code in (404, 429), r.text
            with lock:
                ok[0] += r.status_code == 404
                sends.append(sent)
            i += threads_n

    threads = [threading.Thread(target=run, args=(n,)) for n in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        c.close()
    return ok[0], max(sends) - min(sends)


def _warm(urls: list[str], key: str) -> None:
    """Each worker's first refusals (its first 429 builds the route table it labels them with) before
    anything is timed: a key's burst and more, over new connections (both workers of each replica)."""
    for u in urls:
        for _ in range(3):
            with httpx.Client() as c:
                codes = {c.get(f"{u}/v1/traces/none", headers={"Authorization": f"Bearer {key}"}).status_code
                         for _ in range(int(KEY_RPS) + 2)}
            assert 429 in codes, codes


def test_rate_limits_and_the_daily_quota_hold_across_replicas(cluster: Cluster) -> None:
    urls = [s.url for s in cluster.servers]
    _warm(urls, cluster.keys("warm", 1)[0])
    # one key over both replicas: its burst and rate once, not once per replica (nor per worker)
    got, window = _offer(urls, cluster.keys("rate-key", 1), 3.0, 5 * KEY_RPS)
    expected = KEY_RPS + KEY_RPS * window
    print(f"one key over both replicas: {got} admitted, {expected:.1f} expected over {window:.2f} s")
    assert abs(got - expected) <= 0.1 * expected, (got, expected)
    # three keys of one tenant (3 × 8 a second) meet the tenant's 12 a second
    got, window = _offer(urls, cluster.keys("rate-tenant", 3), 3.0, 5 * TENANT_RPS)
    expected = TENANT_RPS + TENANT_RPS * window
    print(f"one tenant's three keys over both replicas: {got} admitted, {expected:.1f} expected over {window:.2f} s")
    assert abs(got - expected) <= 0.1 * expected, (got, expected)
    # the daily quota: 50-step runs from 5 keys on both replicas at once; exactly QUOTA steps stored
    keys = cluster.keys("quota", 5)
    trace = _runs("tau_airline")[3].trace

    def post(i: int) -> int:
        with httpx.Client() as c:
            r = _call(c, "POST", f"{urls[i % 2]}/v1/diagnose", keys[i % 5],
                      json={"trace": _bare(trace, f"q{i}", steps=50)})
        assert r.status_code in (200, 429), r.text
        return r.status_code

    with ThreadPoolExecutor(5) as pool:
        codes = list(pool.map(post, range(QUOTA // 50 + 5)))
    assert codes.count(200) == QUOTA // 50 and codes.count(429) == 5
    with cluster.stores.db.engine.connect() as conn:
        assert conn.execute(text("SELECT sum(steps) FROM usage WHERE tenant_id = 'quota'")).scalar() == QUOTA
        assert conn.execute(text("SELECT count(*) FROM traces WHERE tenant_id = 'quota'")).scalar() == QUOTA // 50


def test_sigkill_of_one_replica_under_load_loses_nothing_acknowledged(cluster: Cluster) -> None:
    survivor, victim = cluster.servers
    keys = cluster.keys("kill", 6)
    trace = _runs("tau_airline")[5].trace
    acked: list[str] = []
    stop = threading.Event()
    lock = threading.Lock()

    def load(n: int) -> None:
        with httpx.Client() as c:
            i = 0
            while not stop.is_set():
                tid, i = f"k{n}-{i}", i + 1
                srv = (survivor, victim)[i % 2]
                try:
                    r = c.post(f"{srv.url}/v1/diagnose", json={"trace": _bare(trace, tid, steps=4)},
                               headers={"Authorization": f"Bearer {keys[n]}"}, timeout=30)
                except httpx.HTTPError:
                    continue  # the victim died under this request: not acknowledged
                if r.status_code == 200:
                    with lock:
                        acked.append(tid)

    threads = [threading.Thread(target=load, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    peak = 0
    for _ in range(10):  # connections to the database under load (the budget of docs/deployment.md: 18 a worker)
        time.sleep(0.2)
        with cluster.stores.db.engine.connect() as conn:
            peak = max(peak, int(conn.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")).scalar() or 0))
    print(f"connections to the database under load: at most {peak} (the test's own included)")
    assert peak <= 2 * 2 * 18 + 2
    with lock:
        before = len(acked)
    for pid in [victim.proc.pid, *child_pids(victim.proc.pid)]:  # the master and its workers, at once
        os.kill(pid, signal.SIGKILL)
    victim.proc.wait(timeout=10)
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join()
    assert before > 5 and len(acked) > before, (before, len(acked))
    with httpx.Client() as c:  # each read as a client makes it (a 429 retried: the keys' limits hold)
        missing = [tid for i, tid in enumerate(acked)
                   if _call(c, "GET", f"{survivor.url}/v1/traces/{tid}", keys[i % len(keys)]).status_code != 200]
    assert missing == []
    with cluster.stores.db.engine.connect() as conn:
        stored = {r[0] for r in conn.execute(text("SELECT id FROM traces WHERE tenant_id = 'kill'"))}
    assert set(acked) <= stored
    # and each acknowledged run's values reach its agent's streams, once: what the victim left in the streams'
    # feed, the survivor's feeder applies with its own runs' (within TRIAGE_STREAM_FEED_S)
    assert _feed_waiting(cluster, "kill", within_s=30) == 0
    with cluster.stores.db.engine.connect() as conn:
        fed = [r[0] for r in conn.execute(text("SELECT trace_id FROM observations WHERE tenant_id = 'kill' "
                                                 "AND stream = 'failure_probability'"))]
    assert len(fed) == len(set(fed)) and set(acked) <= set(fed)
    # and its counts (serve/store/counters.py, "the count feed"): what the victim left is applied by the
    # survivor's feeder too, each stored run counted once (the totals as a full read of the runs counts them)
    assert _feed_waiting(cluster, "kill", within_s=30, table="count_feed") == 0
    with cluster.stores.db.engine.connect() as conn:
        counted = {r[0] for r in conn.execute(text("SELECT trace_id FROM run_metrics WHERE tenant_id = 'kill'"))}
        total = conn.execute(text("SELECT n FROM metric_totals WHERE tenant_id = 'kill' AND name = 'traces' "
                                  "AND key = ''")).scalar()
    assert counted == stored and total == len(stored)


def test_drain_on_sigterm_answers_in_flight_refuses_new_and_exits_0(cluster: Cluster) -> None:
    srv = cluster.servers[0]
    keys = cluster.keys("drain", 2)
    # a body over TRIAGE_HEAVY_BODY_BYTES: served by the worker's helper process, started on first use
    # (seconds): certainly still in flight when the drain period ends and the shutdown begins
    long = _bare(_runs("tau_airline")[7].trace, "long", steps=800)
    result: dict[str, Any] = {}

    def slow() -> None:
        with httpx.Client() as c:
            result["r"] = c.post(f"{srv.url}/v1/diagnose", json={"trace": long},
                                 headers={"Authorization": f"Bearer {keys[0]}"}, timeout=120)
            result["at"] = time.monotonic()

    with httpx.Client() as c:
        assert c.get(f"{srv.url}/readyz").status_code == 200
        srv.proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        draining = None
        while time.monotonic() < signalled + DRAIN_S - 0.5 and draining is None:
            r = c.get(f"{srv.url}/readyz")
            if r.status_code == 503:
                draining = r.json()
            time.sleep(0.05)
        assert draining is not None and draining["checks"]["not_draining"] is False, draining
        # not ready, yet it still serves: the balancer has time to stop sending it requests
        assert _call(c, "GET", f"{srv.url}/v1/traces?limit=1", keys[1]).status_code == 200
        time.sleep(max(0.0, signalled + DRAIN_S - 0.3 - time.monotonic()))
        t = threading.Thread(target=slow)
        t.start()
        # the drain period is over (the master passes SIGTERM on within 0.5 s): a new connection is not
        # taken, while the request above is still being answered
        time.sleep(max(0.0, signalled + DRAIN_S + 1.0 - time.monotonic()))
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{srv.url}/healthz", timeout=1.0)
        t.join(timeout=120)
        assert result["r"].status_code == 200, result["r"].text
        assert result["at"] > signalled + DRAIN_S  # it was answered during the shutdown, not before it
        assert srv.proc.wait(timeout=60) == 0
    with pytest.raises(httpx.HTTPError):  # and the replica takes no new connection
        httpx.get(f"{srv.url}/healthz", timeout=2)
    assert cluster.stores.traces.get_trace("drain", "long") is not None
