"""Metric streams per agent (issue 20, item 8): keyed (tenant, agent, stream), a new agent warms up
its own baseline, and ``degradation`` is a failure of a run only on its own agent's stream with
its own value beyond that agent's baseline by the alarm's shift. Revision 0008 carries the streams
keyed by task type over, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import MetaData, Table, select

from model.core.agents import AGENT_METADATA_KEY, POOL_AGENT
from model.core.options import DiagnoseOptions
from model.core.schema import Step, StepKind, Trace
from model.diagnosis.diagnoser import Diagnoser
from model.streams import Cusum
from serve.schemas import AppendStepsRequest, ObservationsRequest
from serve.services.triage import TriageService
from serve.settings import Settings
from serve.store import Stores
from serve.store.migrate import alembic_config, downgrade
from serve.store.migrate import upgrade as migrate_to
from serve.wiring import build_service
from tests.storefix import db_url  # noqa: F401  (fixture)

_WORDS = "The refund for order 4411 was issued to the original card today. " * 80


def _run(chars: int, trace_id: str, *, agent: str | None = None, task_type: str | None = None) -> Trace:
    """A two-step run whose final answer is ``chars`` characters long (its ``output_chars``)."""
    return Trace(
        id=trace_id,
        task_type=task_type,
        metadata={AGENT_METADATA_KEY: agent} if agent else {},
        steps=[
            Step(kind=StepKind.USER_INPUT, content="Where is my refund for order 4411?"),
            Step(kind=StepKind.FINAL_OUTPUT, content=_WORDS[:chars]),
        ],
    )


def _degradation(resp: Any) -> list[tuple[str, str, bool]]:
    return [
        (where, f.details["agent"], f.details["beyond"])
        for where, found in (("failure", resp.failures), ("signal", resp.signals))
        for f in found
        if f.kind == "degradation"
    ]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TriageService]:
    # every default but one: each run's values are fed in its own transaction (TRIAGE_STREAM_FEED_S 0), as runs
    # spaced further apart than the feed's gathering are; tests/test_stream_feed.py tests the gathered feed
    svc = build_service(Settings(data_dir=tmp_path, stream_feed_s=0), Diagnoser())
    yield svc
    svc.close()


def test_each_agent_warms_up_and_alarms_on_its_own(service: TriageService) -> None:
    rng = np.random.default_rng(3)
    # agent "faq" answers in about 60 characters; 130 runs: 100 warm up its baseline, 30 monitored
    for i, n in enumerate(rng.normal(60.0, 5.0, 130).round().astype(int)):
        resp = service.diagnose("t", _run(int(n), f"faq{i}", agent="faq"), DiagnoseOptions())
        assert resp.healthy and not _degradation(resp)
    faq = service.stores.streams.get_stream("t", "output_chars", "faq")
    assert faq is not None and faq.n == 130 and not faq.alarm_open
    # A new agent whose answers are five times as long: judged against the faq agent's baseline it
    # would alarm within a few runs and fail every run (issue 20: 54 of 60). It warms up its own.
    for i, n in enumerate(rng.normal(300.0, 20.0, 60).round().astype(int)):
        resp = service.diagnose("t", _run(int(n), f"writer{i}", agent="writer"), DiagnoseOptions())
        assert resp.healthy and not _degradation(resp), i
    writer = service.stores.streams.get_stream("t", "output_chars", "writer")
    assert writer is not None and writer.n == 60 and writer.state["ready"] is False  # still warming up
    assert service.stores.streams.get_stream("t", "output_chars", "faq").n == 130  # type: ignore[union-attr]
    # The faq agent drifts: its answers double. Its own stream alarms...
    alarm_at = None
    for i in range(20):
        resp = service.diagnose("t", _run(120, f"faq-long{i}", agent="faq"), DiagnoseOptions())
        if alarm_at is None and service.stores.streams.get_stream("t", "output_chars", "faq").alarm_open:  # type: ignore[union-attr]
            alarm_at = i
    assert alarm_at is not None and alarm_at <= 3
    (opened,) = service.stores.streams.open_alarms("t", "faq")
    alarm = opened["alarm"]
    assert (opened["agent"], alarm["direction"], alarm["index"]) == ("faq", "up", 130 + alarm_at)
    assert alarm["bound"] == pytest.approx(alarm["mean"] + alarm["std"])  # shift 1σ of faq's baseline
    # ... a faq run beyond faq's bound is a failure, one within it a signal ...
    long = service.diagnose("t", _run(120, "faq-a", agent="faq"), DiagnoseOptions())
    short = service.diagnose("t", _run(60, "faq-b", agent="faq"), DiagnoseOptions())
    assert _degradation(long) == [("failure", "faq", True)] and not long.healthy
    assert _degradation(short) == [("signal", "faq", False)] and short.healthy
    # ... and the other agents' runs get nothing from it: not the writer, not a run naming no agent
    # (an agent inferred from the run, with a stream of its own: issue 31).
    other = service.diagnose("t", _run(120, "writer-x", agent="writer"), DiagnoseOptions())
    unnamed = service.diagnose("t", _run(120, "nobody"), DiagnoseOptions())
    assert other.healthy and not _degradation(other)
    assert unnamed.healthy and not _degradation(unnamed)
    assert unnamed.agent_source == "inferred" and unnamed.agent not in ("faq", "writer")
    assert service.stores.streams.get_stream("t", "output_chars", unnamed.agent).n == 1  # type: ignore[arg-type, union-attr]
    # A live session of the faq agent gets its alarm too; the writer's session does not (sessions
    # feed no stream: their runs are unfinished).
    answer = [{"role": "user", "content": "Where is my refund?"}, {"role": "assistant", "content": _WORDS[:120]}]
    live = service.append_steps("t", "s-faq", AppendStepsRequest(messages=answer, agent="faq"))
    assert [(f.kind, f.details["agent"], f.details["beyond"]) for f in live.failures] == [("degradation", "faq", True)]
    other_live = service.append_steps("t", "s-writer", AppendStepsRequest(messages=answer, agent="writer"))
    assert not _degradation(other_live)
    assert service.stores.streams.get_stream("t", "output_chars", "faq").n == 152  # type: ignore[union-attr]


def test_a_stream_of_every_agent_signals_and_never_fails_a_run(service: TriageService) -> None:
    rng = np.random.default_rng(5)
    values = np.r_[rng.normal(60.0, 5.0, 120), rng.normal(90.0, 5.0, 10)].tolist()
    r = service.observe("t", "output_chars", ObservationsRequest(values=values))  # agent "": every agent
    assert r.agent == "" and [(a.index, a.direction) for a in r.alarms] == [(120, "up")]
    resp = service.diagnose("t", _run(120, "a", agent="faq"), DiagnoseOptions())
    # its own value is beyond the bound, but the bound is no baseline of this agent's
    assert _degradation(resp) == [("signal", "", True)] and resp.healthy
    posted = service.observe("t", "output_chars", ObservationsRequest(values=values, agent="faq"))
    assert posted.agent == "faq" and posted.task_type == "faq" and posted.alarms
    both = service.diagnose("t", _run(120, "b", agent="faq"), DiagnoseOptions())
    # the agent's own alarm fails the run (fusion keeps one degradation finding per place)
    assert _degradation(both) == [("failure", "faq", True)]


def test_task_type_names_the_stream_of_runs_that_name_no_agent_when_asked(service: TriageService) -> None:
    rng = np.random.default_rng(5)
    values = np.r_[rng.normal(60.0, 5.0, 120), rng.normal(90.0, 5.0, 10)].tolist()
    r = service.observe("t", "output_chars", ObservationsRequest(values=values, task_type="faq"))
    assert (r.agent, r.task_type) == ("faq", "faq") and r.alarms
    # a run of task type faq that names no agent is agent "faq" when the caller asks for it
    # (options.agent_from_task_type, issue 31); one that names another is not
    asked = service.diagnose("t", _run(120, "x", task_type="faq"), DiagnoseOptions(agent_from_task_type=True))
    assert _degradation(asked) == [("failure", "faq", True)] and (asked.agent, asked.agent_source) == ("faq", "task_type")
    assert not _degradation(service.diagnose("t", _run(120, "y", task_type="faq", agent="bot"),
                                             DiagnoseOptions(agent_from_task_type=True)))
    # without asking, the task type names no agent: the run's agent is inferred, faq's alarm is not its
    plain = service.diagnose("t", _run(120, "z", task_type="faq"), DiagnoseOptions())
    assert plain.agent_source == "inferred" and plain.agent != "faq" and not _degradation(plain)
    # the 130 posted values and the faq run fed "faq"; the bot's run fed its own stream
    assert service.changepoints("t", "output_chars", None, None, task_type="faq").n == 131
    assert service.stores.streams.get_stream("t", "output_chars", "bot").n == 1  # type: ignore[union-attr]
    assert service.changepoints("t", "output_chars", "faq", None).agent == "faq"
    assert service.changepoints("t", "output_chars", " faq ", None).n == 131  # cleaned as a run's name is


def test_agent_and_a_different_task_type_are_refused(service: TriageService) -> None:
    from model.core.errors import InputError

    with pytest.raises(InputError) as exc:
        service.observe("t", "q", ObservationsRequest(values=[1.0], agent="a", task_type="b"))
    assert exc.value.path == "task_type"
    with pytest.raises(InputError) as exc:
        service.changepoints("t", "q", "a", None, task_type="b")
    assert exc.value.path == "query.task_type"
    assert service.stores.streams.get_stream("t", "q", "a") is None and service.stores.streams.get_stream("t", "q", "b") is None


def test_http_agent_of_a_stream(live_server: Any) -> None:
    import httpx

    base = live_server.url
    r = httpx.post(f"{base}/v1/streams/q.agent/observations", json={"values": [1.0, 2.0], "agent": "bot"}, timeout=30)
    assert r.status_code == 200 and (r.json()["agent"], r.json()["n"]) == ("bot", 2), r.text
    r = httpx.get(f"{base}/v1/streams/q.agent/changepoints", params={"agent": "bot"}, timeout=30)
    assert r.status_code == 200 and r.json()["agent"] == "bot" and r.json()["n"] == 2, r.text
    r = httpx.get(f"{base}/v1/streams/q.agent/changepoints", params={"agent": "other"}, timeout=30)
    assert r.status_code == 404
    r = httpx.post(f"{base}/v1/streams/q.agent/observations",
                   json={"values": [1.0], "agent": "bot", "task_type": "qa"}, timeout=30)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "task_type"], r.text
    r = httpx.post(f"{base}/v1/streams/q.agent/observations", json={"values": [1.0], "agent": "b\x00t"}, timeout=30)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "agent"], r.text
    r = httpx.get(f"{base}/v1/streams/q.agent/changepoints", params={"agent": "bot", "task_type": "qa"}, timeout=30)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "task_type"], r.text


# -- revision 0008 ------------------------------------------------------------------------------


def _before_0008() -> str:
    rev = ScriptDirectory.from_config(alembic_config()).get_revision("0008")
    assert rev is not None and isinstance(rev.down_revision, str)
    return rev.down_revision


def test_migration_0008_carries_streams_keyed_by_task_type_over(db_url: str, tmp_path: Path) -> None:  # noqa: F811
    rng = np.random.default_rng(5)
    faq = Cusum()  # a stream of task type "faq" with an open alarm
    alarms = [a for x in np.r_[rng.normal(60.0, 5.0, 120), rng.normal(90.0, 5.0, 10)] if (a := faq.update(x))]
    pooled = Cusum()  # runs without a task type fed "default"
    for x in rng.normal(60.0, 5.0, 30):
        pooled.update(x)
    now = datetime(2026, 12, 1, tzinfo=UTC).replace(tzinfo=None)
    old = [  # (task_type, state, n, alarm_open, alarm)
        ("faq", faq.get_state(), 130, True, alarms[-1].model_dump()),
        ("default", pooled.get_state(), 30, False, None),
        ("", Cusum().get_state(), 0, False, None),
    ]
    store = Stores.at(db_url)
    try:
        migrate_to(store.db.engine, _before_0008())
        with store.db.engine.begin() as conn:
            streams = Table("streams", MetaData(), autoload_with=conn)
            observations = Table("observations", MetaData(), autoload_with=conn)
            conn.execute(streams.insert(), [
                {"tenant_id": "t", "name": "output_chars", "task_type": task, "detector": "cusum", "params": {},
                 "state": state, "n": n, "alarm_open": is_open, "alarm": alarm, "updated_at": now}
                for task, state, n, is_open, alarm in old
            ])
            conn.execute(observations.insert(), [
                {"tenant_id": "t", "stream": "output_chars", "task_type": task, "seq": i, "value": 1.0 + i,
                 "trace_id": None, "alarm": False, "created_at": now}
                for task in ("faq", "default") for i in range(3)
            ])
        migrate_to(store.db.engine, "0012")  # (0013 gives unnamed runs agents of their own: tests/test_agents_service.py)
        with store.db.engine.connect() as conn:
            streams = Table("streams", MetaData(), autoload_with=conn)
            got = {r.agent: r for r in conn.execute(select(streams))}
            observations = Table("observations", MetaData(), autoload_with=conn)
            seen = sorted((r.agent, r.seq) for r in conn.execute(select(observations)))
        assert set(got) == {"faq", POOL_AGENT, ""}
        assert got["faq"].state == faq.get_state() and got["faq"].n == 130 and got["faq"].alarm_open
        assert got[POOL_AGENT].state == pooled.get_state() and got[POOL_AGENT].n == 30
        assert seen == [(POOL_AGENT, i) for i in range(3)] + [("faq", i) for i in range(3)]
        assert store.streams.stream_values("t", "output_chars", POOL_AGENT, last=2) == [(1, 2.0), (2, 3.0)]

        # The service continues them: faq's open alarm fails a faq run beyond its bound (the task
        # type names the agent when asked); a run naming nothing gets an inferred agent and its own
        # stream, the pool's stays as it was (its observations name no run to follow: revision 0013).
        svc = build_service(Settings(data_dir=tmp_path, database_url=db_url), Diagnoser())
        try:
            resp = svc.diagnose("t", _run(120, "after", task_type="faq"), DiagnoseOptions(agent_from_task_type=True))
            assert _degradation(resp) == [("failure", "faq", True)]
            unnamed = svc.diagnose("t", _run(60, "pool-run"), DiagnoseOptions())
            assert unnamed.agent_source == "inferred" and unnamed.agent is not None
            svc.streams.drain()  # what the worker's feeder runs within TRIAGE_STREAM_FEED_S
            mine = svc.stores.streams.get_stream("t", "output_chars", unnamed.agent)
            assert mine is not None and mine.n == 1
            assert svc.stores.streams.get_stream("t", "output_chars", POOL_AGENT).n == 30  # type: ignore[union-attr]
        finally:
            svc.close()

        downgrade(store.db.engine, _before_0008())
        with store.db.engine.connect() as conn:
            streams = Table("streams", MetaData(), autoload_with=conn)
            back = {r.task_type: r.n for r in conn.execute(select(streams))}
        # faq fed by the run above too; the inferred agent's stream keeps its key (revision 0013's downgrade)
        assert back == {"faq": 131, "default": 30, "": 0, unnamed.agent: 1}
    finally:
        store.db.dispose()


def test_the_autofeed_runs_the_refusal_rule_again_only_for_a_refusal_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """A diagnosis's autofed values run the refusal rule a second time (its metric's own threshold) only
    when ``refusal`` is one of the autofed streams; the other values are the same either way."""
    from model.data.tracebuilder import TraceBuilder
    from model.detectors.rules.refusal import RefusalRule
    from serve.services.streams import Streams

    b = TraceBuilder(seed=0)
    b.user("please")
    b.say("thinking it over")
    b.final("I'm sorry, but I can't help with that.")
    trace = b.build()
    diagnoser = Diagnoser()
    resp = diagnoser.diagnose(trace)
    calls: list[int] = []
    inspect = RefusalRule.inspect
    monkeypatch.setattr(RefusalRule, "inspect", lambda self, t: calls.append(1) or inspect(self, t))
    fed = Streams(None, diagnoser, autofeed=("refusal", "output_chars")).observed(trace, resp)  # type: ignore[arg-type]
    assert fed["refusal"] == 1.0 and calls == [1]
    plain = Streams(None, diagnoser, autofeed=("output_chars",)).observed(trace, resp)  # type: ignore[arg-type]
    assert plain == {"output_chars": fed["output_chars"]} and calls == [1]
