"""Failure patterns: the signature, the grouping and ranking (model/diagnosis/patterns.py), the store's query on
SQLite and PostgreSQL, real τ-bench runs whose identical tool errors (up to ids and amounts) fall in
one pattern, ``GET /v1/patterns`` over real HTTP (tenant-scoped, 422 naming the parameter) and
``triage patterns``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from model.core.errors import InputError
from model.core.options import DiagnoseOptions
from model.core.schema import Trace
from model.data.builder import make_trace
from model.data.realdata import load_source
from model.diagnosis.diagnoser import Diagnoser
from model.diagnosis.patterns import PROBABILITY_SIGNATURE, Occurrence, RepairEvent, group_patterns, signature
from serve.auth import create_key
from serve.cli.main import app as cli_app
from serve.schemas import PatternsOut
from serve.services.patterns import tenant_patterns, window
from serve.services.triage import TriageService
from serve.settings import Settings
from serve.store import Stores
from serve.wiring import build_service
from tests.conftest import LiveServer
from tests.storefix import db_url  # noqa: F401  (fixture)

T0 = datetime(2026, 12, 1, tzinfo=UTC)
PAYMENT = "Error: payment amount does not add up"


def _occ(tid: str, at: datetime, *, kind: str = "tool_error", tool: str | None = "search", evidence: str = "",
         detector: str = "tool_error", signal: bool = False, severity: str = "high", step: int | None = 2,
         agent: str | None = None) -> Occurrence:
    return Occurrence(tid, at, agent, kind, severity, signal, detector, step, tool, evidence)


# -- the signature ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("a", "b"), [
    ("Error: flight HAT030 not available on date 2024-05-13", "Error: flight HAT229 not available on date 2024-05-20"),
    ("order 'W2378156' not found", "order 'W9911' not found"),
    ("request 3f2b8c1d-aaaa-4bbb-8ccc-0123456789ab failed after 3 retries",
     "request 00000000-1111-4222-8333-444444444444 failed after 12 retries"),
    ("GET https://api.x.com/u/1 returned 502", "GET https://api.x.com/u/77?q=2 returned 503"),
    ("mail to ann@example.com bounced", "mail to bob.smith@corp.example.org bounced"),
    ('Traceback: File "/testbed/django/db/models/base.py", line 7', 'Traceback: File "/testbed/sympy/core.py", line 12'),
    ('Traceback: File "/testbed/djan…', 'Traceback: File "/testbed/sympy/co…'),  # a quoted path cut off
])
def test_signature_masks_what_differs_between_runs(a: str, b: str) -> None:
    assert signature(a) == signature(b)


@pytest.mark.parametrize(("a", "b"), [
    ('{"error": "missing query_list/query"}', '{"error": "Unknown tool: tool_name"}'),  # JSON messages stay
    ("Error: gift card balance is not enough", "Error: payment method not found"),
    ("search failed: timeout", "lookup failed: timeout"),
])
def test_signature_keeps_what_tells_failures_apart(a: str, b: str) -> None:
    assert signature(a) != signature(b)


# -- the grouping and the ranking ------------------------------------------------------------------
def test_group_ranks_by_runs_severity_and_repair_success() -> None:
    at = T0 + timedelta(hours=1)
    occ = [
        # 4 runs of one search error (high), 2 of whose repairs worked out of 3 tried
        *[_occ(f"s{i}", at + timedelta(minutes=i), evidence=f"search failed: HTTP 503 (req {i}a{i}f)") for i in range(4)],
        # the same error twice in one run counts one run, two occurrences
        _occ("s0", at, evidence="search failed: HTTP 503 (req 9z9)", step=5),
        # 2 runs of a critical ignored error, never repaired
        *[_occ(f"i{i}", at, kind="ignored_error", tool="db", severity="critical", detector="ignored_error",
               evidence=f"step {i} (db) failed: denied; the final answer does not say so") for i in range(2)],
        # a signal of the same search error: its own pattern
        _occ("s9", at, evidence="search failed: HTTP 500 (req 1b)", signal=True),
        # outside the window: ignored
        _occ("old", T0 - timedelta(days=1), evidence="search failed: HTTP 503"),
    ]
    repairs = [RepairEvent("s0", "tool_error", "retry", 1, True), RepairEvent("s1", "tool_error", "retry", 2, False),
               RepairEvent("s1", "tool_error", "switch_tool", 1, True), RepairEvent("s2", "tool_error", "retry", 1, False),
               RepairEvent("s3", "tool_error", "retry", 0, None), RepairEvent("i0", "loop", "rollback", 1, True)]
    prev = [_occ("p1", T0 - timedelta(hours=5), evidence="search failed: HTTP 504 (req 7c)")]
    got = group_patterns(occ, repairs, since=T0, until=T0 + timedelta(days=1), previous=prev, examples=2)
    assert [(p.kind, p.level, p.runs) for p in got] == [("ignored_error", "failure", 2), ("tool_error", "failure", 4),
                                                          ("tool_error", "signal", 1)]
    ign, search, sig = got
    assert ign.repair_success is None and ign.score == 2 * 4 and ign.trend == "new"  # the loop's repair is not its
    assert search.occurrences == 5 and search.repaired_runs == 3 and search.repair_success == pytest.approx(2 / 3)
    assert search.score == pytest.approx(4 * 3 * (1 - 2 / 3))
    assert (search.previous_runs, search.trend) == (1, "up")
    assert [(r.strategy, r.recommended, r.outcomes, r.succeeded) for r in search.repairs] == [
        ("retry", 4, 4, 1), ("switch_tool", 1, 1, 1)]
    assert [e.trace_id for e in search.examples] == ["s3", "s2"]  # newest first
    assert sig.signature == search.signature and sig.id != search.id
    assert group_patterns(occ, repairs, since=T0, until=T0 + timedelta(days=1), level="signal")[0].id == sig.id
    with pytest.raises(InputError) as exc:
        group_patterns(occ, [], since=T0, until=T0)
    assert exc.value.path == "until"


def test_probability_only_runs_group_by_kind_and_tool_at_the_attribution() -> None:
    at = T0 + timedelta(hours=1)
    ev = "runscore: failure_probability {p} ≥ operating point 0.41; most likely at message {m} (p=0.3)"
    occ = [
        _occ("a", at, kind="hallucination", tool=None, detector="runscore", evidence=ev.format(p=0.71, m=7), step=7),
        _occ("b", at, kind="hallucination", tool=None, detector="runscore", evidence=ev.format(p=0.52, m=3), step=3),
        _occ("c", at, kind="malformed_call", tool="book", detector="runscore", evidence=ev.format(p=0.6, m=2)),
        # a run whose rules found its failure: its runscore failure adds no pattern
        _occ("d", at, kind="hallucination", tool=None, detector="runscore", evidence=ev.format(p=0.9, m=4)),
        _occ("d", at, kind="loop", tool="search", detector="loop", evidence="loop: search called 3 times"),
    ]
    got = {(p.basis, p.kind, p.tool): p for p in group_patterns(occ, [], since=T0, until=T0 + timedelta(days=1))}
    assert set(got) == {("probability", "hallucination", None), ("probability", "malformed_call", "book"),
                        ("rule", "loop", "search")}
    hall = got[("probability", "hallucination", None)]
    assert hall.runs == 2 and hall.signature == PROBABILITY_SIGNATURE


def test_agents_are_kept_apart() -> None:
    at = T0 + timedelta(hours=1)
    occ = [_occ("a", at, agent="airline", evidence="x failed"), _occ("b", at, agent="retail", evidence="x failed")]
    got = group_patterns(occ, [], since=T0, until=T0 + timedelta(days=1))
    assert sorted(p.agent or "" for p in got) == ["airline", "retail"]


def test_window_validation() -> None:
    now = datetime(2026, 12, 4, 12, tzinfo=UTC)
    assert window(since=None, until=None, days=None, now=now) == (now - timedelta(days=7), now)
    assert window(since=None, until=now, days=1.5, now=now) == (now - timedelta(days=1.5), now)
    for kwargs, path in [({"since": now, "until": now, "days": None}, "query.until"),
                         ({"since": now, "until": None, "days": 2.0}, "query.days"),
                         ({"since": None, "until": None, "days": 0.0}, "query.days"),
                         ({"since": now - timedelta(days=400), "until": now, "days": None}, "query.since"),
                         ({"since": datetime(1, 1, 2, tzinfo=UTC), "until": datetime(1, 2, 1, tzinfo=UTC),
                           "days": None}, "query.since")]:
        with pytest.raises(InputError) as exc:
            window(now=now, **kwargs)  # type: ignore[arg-type]
        assert exc.value.path == path


# -- real runs through the service and the store -----------------------------------------------------
def _window() -> tuple[datetime, datetime]:
    """A day's window as the default makes it (ending at a whole minute), but five minutes ahead: the runs a test
    diagnoses after taking it are inside it. (Ending at the next whole minute, a test that crossed one while it
    ran left its later runs out.)"""
    return window(since=None, until=None, days=1.0, now=datetime.now(UTC) + timedelta(minutes=5))


def _service(url: str) -> TriageService:
    return build_service(Settings(database_url=url), Diagnoser.with_shipped_models(classifier=False, runscore=False))


def _payment_runs() -> list[Trace]:
    """τ-bench airline runs whose book_reservation call got the payment error (amounts differ)."""
    out = []
    for run in load_source("tau_airline"):
        if any(s.tool_name == "book_reservation" and s.content.startswith(PAYMENT) for s in run.trace.steps):
            t = run.trace.model_copy(deep=True)
            t.labels = None
            out.append(t)
    return out


@pytest.fixture(scope="module")
def payment_runs() -> list[Trace]:
    runs = _payment_runs()
    assert len(runs) >= 5
    return runs


def test_identical_tool_errors_of_real_runs_are_one_pattern(payment_runs: list[Trace], tmp_path: Path) -> None:
    service = _service(f"sqlite:///{tmp_path / 't.db'}")
    try:
        for t in payment_runs:
            service.diagnose("acme", t, DiagnoseOptions())
        service.diagnose("other", payment_runs[0].model_copy(update={"id": "theirs"}), DiagnoseOptions())
        until = datetime.now(UTC) + timedelta(minutes=1)
        out = tenant_patterns(service.stores.reports, "acme", since=until - timedelta(days=1), until=until, limit=500,
                              examples=20)
    finally:
        service.stores.db.dispose()
    ours = [p for p in out.patterns if p.kind == "tool_error" and p.tool == "book_reservation"
            and p.signature.startswith(f"tool_error: {PAYMENT}")]
    # failures and signals (a handled error is a signal) each in one pattern of every payment run
    assert {p.level for p in ours} <= {"failure", "signal"} and len({p.level for p in ours}) == len(ours)
    raw = {s.content for t in payment_runs for s in t.steps if s.content.startswith(PAYMENT)}
    assert len(raw) >= 3  # the error texts differ (amounts) …
    runs = {e.trace_id for p in ours for e in p.examples}
    assert runs == {t.id for t in payment_runs}  # … yet every run with it is in the pattern(s)
    assert out.runs == len(payment_runs)  # another tenant's run is never counted


def test_store_query_on_both_backends(db_url: str) -> None:  # noqa: F811
    service = _service(db_url)
    try:
        traces = [make_trace("ignored_error", seed=s, n_steps=8) for s in range(6)]
        for t in traces:
            t.task_type = "support"
            resp = service.diagnose("t1", t, DiagnoseOptions(agent_from_task_type=True))  # the task type names it
            if resp.recommendation.strategy.value != "continue":
                from serve.schemas import OutcomeRequest

                service.report_outcome("t1", OutcomeRequest(recommendation_id=resp.recommendation.id,
                                                            success=t.id.endswith(("0", "2", "4"))))
        # the run's resolved agent (model/core/agents.py), not its task type: one that names its agent, one
        # that names nothing (an agent inferred from the run: issue 31)
        named, pooled = make_trace("loop", seed=40, n_steps=8), make_trace("loop", seed=41, n_steps=8)
        named.task_type, pooled.task_type = "support", None
        service.diagnose("t1", named, DiagnoseOptions(agent="billing-bot"))
        inferred = service.diagnose("t1", pooled, DiagnoseOptions()).agent
        assert inferred is not None and inferred not in ("billing-bot", "support")
        until = datetime.now(UTC) + timedelta(minutes=1)
        occ, repairs = service.stores.reports.pattern_inputs("t1", since=until - timedelta(hours=1), until=until)
        agent_of = {o.trace_id: o.agent for o in occ}
        assert agent_of.get(named.id) == "billing-bot" and agent_of.get(pooled.id) == inferred
        occ = [o for o in occ if o.trace_id not in (named.id, pooled.id)]
        assert {o.trace_id for o in occ} <= {t.id for t in traces} and occ
        assert all(o.agent == "support" for o in occ)
        for o in occ:  # the tool of each failure row is the tool of its step (or the one it names)
            t = next(t for t in traces if t.id == o.trace_id)
            assert o.tool in {None, *(s.tool_name for s in t.steps)}
        assert any(o.tool for o in occ if o.kind == "tool_error")
        assert repairs and all(r.outcomes in (0, 1) for r in repairs)
        assert service.stores.reports.pattern_inputs("nobody", since=until - timedelta(hours=1), until=until) == ([], [])
    finally:
        service.stores.db.dispose()


# -- HTTP and the CLI -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def patterns_server(tmp_path_factory: pytest.TempPathFactory, payment_runs: list[Trace]) -> Iterator[
        tuple[LiveServer, str, str, Path]]:
    data = tmp_path_factory.mktemp("patterns")
    url = f"sqlite:///{data / 'triage.db'}"
    store = Stores.at(url)
    store.db.upgrade()
    key_a, _ = create_key(store.keys, "acme")
    key_b, _ = create_key(store.keys, "other")
    store.db.dispose()
    srv = LiveServer(env={"TRIAGE_DATA_DIR": str(data), "TRIAGE_DATABASE_URL": url, "TRIAGE_AUTH": "on",
                          "TRIAGE_CLASSIFIER": "false"}).wait_ready()
    try:
        for t in payment_runs[:6]:
            r = httpx.post(f"{srv.url}/v1/diagnose", headers={"Authorization": f"Bearer {key_a}"},
                           json={"trace": t.model_dump(mode="json", exclude_none=True)}, timeout=60)
            assert r.status_code == 200, r.text
        yield srv, key_a, key_b, data
    finally:
        srv.stop()


def test_http_patterns_scoped_and_validated(patterns_server: tuple[LiveServer, str, str, Path]) -> None:
    srv, key_a, key_b, _ = patterns_server
    a = {"Authorization": f"Bearer {key_a}"}
    r = httpx.get(f"{srv.url}/v1/patterns", headers=a, params={"days": 1}, timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tenant"] == "acme" and body["runs"] == 6
    top = [p for p in body["patterns"] if p["tool"] == "book_reservation" and PAYMENT in p["signature"]]
    assert top and sum(p["runs"] for p in top) >= 6  # every payment run in the payment pattern(s)
    assert all(p["examples"] for p in top)
    other = httpx.get(f"{srv.url}/v1/patterns", headers={"Authorization": f"Bearer {key_b}"}, timeout=30)
    assert other.status_code == 200 and other.json()["patterns"] == [] and other.json()["runs"] == 0
    cases: list[tuple[dict[str, str | int], list[str]]] = [
                        ({"days": 0}, ["query", "days"]), ({"days": "x"}, ["query", "days"]),
                        ({"since": "2026-12-01T00:00:00Z", "until": "2026-11-01T00:00:00Z"}, ["query", "until"]),
                        ({"since": "2026-12-01T00:00:00Z", "days": 2}, ["query", "days"]),
                        ({"since": "12"}, ["query", "since"]), ({"level": "bad"}, ["query", "level"]),
                        ({"limit": 0}, ["query", "limit"]), ({"examples": 99}, ["query", "examples"]),
                        ({"agent": "a\x01"}, ["query", "agent"])]
    for params, loc in cases:
        r = httpx.get(f"{srv.url}/v1/patterns", headers=a, params=params, timeout=30)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == loc, (params, r.text)
    assert httpx.get(f"{srv.url}/v1/patterns", timeout=30).status_code == 401


def test_cli_patterns(patterns_server: tuple[LiveServer, str, str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, _, data = patterns_server
    from serve.settings import get_settings

    monkeypatch.setenv("TRIAGE_DATA_DIR", str(data))
    monkeypatch.setenv("TRIAGE_DATABASE_URL", f"sqlite:///{data / 'triage.db'}")
    get_settings.cache_clear()
    try:
        runner = CliRunner()
        res = runner.invoke(cli_app, ["patterns", "--tenant", "acme", "--days", "1", "--json"])
        assert res.exit_code == 0, res.output
        body = json.loads(res.output)
        assert body["runs"] == 6 and any(p["tool"] == "book_reservation" for p in body["patterns"])
        res = runner.invoke(cli_app, ["patterns", "--tenant", "acme", "--days", "1"])
        assert res.exit_code == 0 and "book_reservation" in res.output and "score" in res.output
        res = runner.invoke(cli_app, ["patterns", "--tenant", "acme", "--days", "1", "--since", "2026-01-01"])
        assert res.exit_code == 2 and "days" in res.output
        res = runner.invoke(cli_app, ["patterns", "--tenant", "acme", "--since", "yesterday"])
        assert res.exit_code == 2 and "--since" in res.output
    finally:
        get_settings.cache_clear()


def test_while_runs_are_written_an_answer_lags_them_at_most_max_stale_s(payment_runs: list[Trace], tmp_path: Path
                                                                         ) -> None:
    """The service's answers (``TRIAGE_PATTERNS_MAX_STALE_S``, 30 s by default): after a write, the answer made
    for the window is given again at once, with no new one made before it is ``max_stale_s / 2`` old; then a
    thread makes the new one while it is given again, and the next request gets the new one; the next minute's
    window of the same length gets it too; a window ending before it (history) is made while the caller waits;
    and past ``max_stale_s`` a write is counted by the next answer."""
    import time as _time

    from serve.services import patterns as P

    service = _service(f"sqlite:///{tmp_path / 's.db'}")

    def ask(s: datetime, u: datetime, patterns: P.Patterns = service.patterns) -> PatternsOut:
        return patterns.tenant_patterns("acme", since=s, until=u)

    def settled() -> None:  # the background answers made
        deadline = _time.monotonic() + 20
        while P._refreshing and _time.monotonic() < deadline:
            _time.sleep(0.02)
        assert not P._refreshing

    try:
        assert service.patterns.max_stale_s == 30.0
        for t in payment_runs[:2]:
            service.diagnose("acme", t, DiagnoseOptions())
        since, until = _window()
        first = ask(since, until)
        service.diagnose("acme", payment_runs[2], DiagnoseOptions())
        assert ask(since, until) is first and not P._refreshing  # the last answer, at once, not yet made anew
        with P._cache_lock:  # as if it were made 16 s ago
            for k, r in P._recent.items():
                if k[2] == "acme" and r.out is first:
                    P._recent[k] = P._Recent(r.until, r.started - 16, r.made - 16, r.out)
        assert ask(since, until) is first  # the last answer, while a thread makes the new one
        settled()
        fresh = ask(since, until)
        assert fresh.runs == first.runs + 1 and fresh.as_of > first.as_of
        minute = timedelta(minutes=1)
        assert ask(since + minute, until + minute) is fresh  # the next minute's window: the last answer first
        history = ask(since - timedelta(hours=1), until - timedelta(hours=1))
        assert history.until == until - timedelta(hours=1)  # made while waiting, not the last answer
        strict = P.Patterns(service.stores.reports, max_stale_s=0.2)
        before = ask(since, until, strict)
        _time.sleep(0.3)
        service.diagnose("acme", payment_runs[3], DiagnoseOptions())
        assert ask(since, until, strict).runs == before.runs + 1  # past max_stale_s: made while waiting
    finally:
        settled()
        service.stores.db.dispose()


def test_past_max_stale_s_a_request_waits_for_the_answer_under_way(payment_runs: list[Trace], tmp_path: Path
                                                                   ) -> None:
    """When the last answer is older than ``max_stale_s`` because the next one takes longer than ``max_stale_s / 2``
    to make (a 30-day window at 1,000,000 runs), a request waits for that one instead of making another (in the
    same helper, after it)."""
    import threading
    import time as _time

    from serve.services import patterns as P

    service = _service(f"sqlite:///{tmp_path / 'w.db'}")

    def ask() -> PatternsOut:
        return service.patterns.tenant_patterns("acme", since=since, until=until)

    try:
        for t in payment_runs[:2]:
            service.diagnose("acme", t, DiagnoseOptions())
        since, until = _window()
        first = ask()
        service.diagnose("acme", payment_runs[2], DiagnoseOptions())
        with P._cache_lock:  # made 40 s ago, its successor under way
            params = next(k for k, r in P._recent.items() if r.out is first)
            r = P._recent[params]
            P._recent[params] = P._Recent(r.until, r.started - 40, r.made - 40, r.out)
            making = P._refreshing[params] = threading.Event()
        box: list[PatternsOut] = []
        asker = threading.Thread(target=lambda: box.append(ask()))
        asker.start()
        asker.join(0.5)
        assert asker.is_alive() and not box  # waiting for it
        successor = first.model_copy(update={"runs": 99})  # told apart from one made now (3 runs)
        with P._cache_lock:
            now = _time.monotonic()
            P._recent[params] = P._Recent(until, now - 1, now, successor)
            del P._refreshing[params]
        making.set()
        asker.join(30)
        assert box == [successor] and box[0] is successor
    finally:
        service.close()


def test_the_service_makes_its_answers_in_a_helper_process(payment_runs: list[Trace], db_url: str,  # noqa: F811
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The service's answers are made in its helper process, not in the caller's (whose GIL the worker's requests
    share): this process reads none of the tenant's failure rows, and the answer equals the one made in the
    caller's thread; the helper outlives the thread that started it. A helper that dies, and one that takes longer than ``HELPER_TIMEOUT_S``, is stopped and that
    answer made in the caller's thread; the next one starts a new helper."""
    import os
    import signal
    import threading
    import time

    from serve.services import patterns as P

    service = _service(db_url)
    reports = service.stores.reports
    helper = service.patterns.helper
    assert helper is not None
    rows_key = (reports.db.url, id(reports), "acme")

    def ask() -> PatternsOut:
        P.clear_cache()  # made now, not an answer of the last 30 s
        return service.patterns.tenant_patterns("acme", since=since, until=until, limit=500)

    def inline() -> PatternsOut:
        P.clear_cache()
        return tenant_patterns(reports, "acme", since=since, until=until, limit=500)

    try:
        for t in payment_runs[:3]:
            service.diagnose("acme", t, DiagnoseOptions())
        since, until = _window()
        box: list[PatternsOut] = []
        asker = threading.Thread(target=lambda: box.append(ask()))  # a request's thread: it ends, the helper stays
        asker.start()
        asker.join()
        (got,) = box
        assert rows_key not in P._rows  # not read here
        time.sleep(0.5)
        pid = helper.executor().submit(os.getpid).result(timeout=30)
        assert pid != os.getpid() and helper.started == 1
        assert got.runs == 3 and got.model_dump(exclude={"as_of"}) == inline().model_dump(exclude={"as_of"})
        assert rows_key in P._rows  # made in this process this time
        P._rows.clear()

        os.kill(pid, signal.SIGKILL)  # a helper that dies: this answer made here, the next by a new helper
        service.diagnose("acme", payment_runs[3], DiagnoseOptions())
        assert ask().runs == 4 and helper.started == 1 and rows_key in P._rows
        P._rows.clear()
        service.diagnose("acme", payment_runs[4], DiagnoseOptions())
        assert ask().model_dump(exclude={"as_of"}) == inline().model_dump(exclude={"as_of"})
        assert helper.started == 2 and helper.executor().submit(os.getpid).result(timeout=30) not in (pid, os.getpid())

        monkeypatch.setattr(P, "HELPER_TIMEOUT_S", 0.0)  # one that takes too long: stopped, made here
        P._rows.clear()
        assert ask().runs == 5 and rows_key in P._rows and helper._pool is None and helper.started == 2
    finally:
        service.close()


def test_a_helper_that_cannot_start_is_not_started_again_at_every_answer() -> None:
    """A helper whose start fails (here: a store it cannot open) fails the answer over to the caller; after two
    failures in a row no new helper is started for ``HELPER_BACKOFF_S`` seconds (doubled at each further
    failure), then one is tried again."""
    import time

    from serve.services import patterns as P

    helper = P._Helper("bogus://nowhere", 1.0)
    since, until = _window()

    def make() -> PatternsOut | None:
        return helper.make("acme", since=since, until=until, level="kind", limit=10, examples=1, agent=None)

    def waits() -> float:  # the seconds until a new helper may start
        return helper.retry_at - time.monotonic()

    try:
        assert make() is None and helper.started == 1 and helper.failures == 1 and waits() <= 0
        assert make() is None and helper.started == 2 and helper.failures == 2  # the first failure: tried again
        assert P.HELPER_BACKOFF_S - 5 < waits() <= P.HELPER_BACKOFF_S  # two in a row: none started meanwhile
        assert make() is None and helper.started == 2
        helper.retry_at -= P.HELPER_BACKOFF_S  # its time has come
        assert make() is None and helper.started == 3 and helper.failures == 3
        assert 2 * P.HELPER_BACKOFF_S - 5 < waits() <= 2 * P.HELPER_BACKOFF_S  # the wait doubled
    finally:
        helper.close()


def test_cache_answers_until_the_data_changes(payment_runs: list[Trace], tmp_path: Path) -> None:
    service = _service(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        for t in payment_runs[:2]:
            service.diagnose("acme", t, DiagnoseOptions())
        since, until = _window()
        assert until.second == 0 and until.microsecond == 0  # the default end: the whole minute
        first = tenant_patterns(service.stores.reports, "acme", since=since, until=until)
        assert tenant_patterns(service.stores.reports, "acme", since=since, until=until) is first  # unchanged: cached
        service.diagnose("acme", payment_runs[2], DiagnoseOptions())  # a write changes the data version
        after = tenant_patterns(service.stores.reports, "acme", since=since, until=until)
        assert after is not first and after.runs == first.runs + 1
        service.history.delete_trace("acme", payment_runs[2].id)
        assert tenant_patterns(service.stores.reports, "acme", since=since, until=until).runs == first.runs
    finally:
        service.stores.db.dispose()
