"""A run's agent (model/core/agents.py): the resolution order, the root agent span, what the service
stores with each trace and session, and migration 0007 on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import text

from model.core.agents import POOL_AGENT, agent_and_source, resolve_agent
from model.core.options import DiagnoseOptions
from model.core.schema import Step, StepKind, Trace
from model.diagnosis.diagnoser import Diagnoser
from model.importers import load_trace
from serve.schemas import AppendStepsRequest
from serve.services.triage import TriageService
from serve.settings import Settings
from serve.store import Stores
from serve.store.migrate import current_revision, upgrade
from serve.wiring import build_service
from tests.storefix import db_url  # noqa: F401  (fixture)


def _span(sid: str, parent: str | None, start: int, **attrs: Any) -> dict[str, Any]:
    return {"trace_id": "t" * 32, "span_id": sid, "parent_span_id": parent, "name": sid,
            "start_time_unix_nano": start, "end_time_unix_nano": start + 10, "attributes": attrs}


def _spans() -> list[dict[str, Any]]:
    """An outer agent (planner) calling an inner one (booker), which makes one LLM call."""
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "book"}]}]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant",
                                                   "parts": [{"type": "text", "content": "booked"}]}])}
    return [
        _span("c" * 16, "b" * 16, 3, **chat),
        _span("b" * 16, "a" * 16, 2, **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "booker"}),
        _span("a" * 16, None, 1, **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}),
    ]


def test_resolution_order() -> None:
    spans = load_trace(_spans(), format="otel")
    assert spans.metadata["gen_ai.agent.name"] == "planner"  # the outermost agent span, not the speaker
    assert spans.steps[-1].speaker == "booker"
    spans.task_type = "bookings"
    assert agent_and_source(spans, "front-desk") == ("front-desk", "option")
    assert agent_and_source(spans) == ("planner", "span")
    assert agent_and_source(spans, task_type_names_agent=True) == ("planner", "span")
    # the task type names the agent only when the caller asks (issue 31); else the service infers it
    assert agent_and_source(Trace(task_type=" bookings "), task_type_names_agent=True) == ("bookings", "task_type")
    assert agent_and_source(Trace(task_type=" bookings ")) == (None, "inferred")
    assert agent_and_source(Trace(task_type="  "), task_type_names_agent=True) == (None, "inferred")
    assert resolve_agent(Trace(metadata={"gen_ai.agent.name": 7})) is None  # not a name
    assert resolve_agent(Trace(), "x" * 300) == "x" * 200


@pytest.mark.parametrize("bad", ["", "   ", "a\nb", "a\x00b", "x" * 201])
def test_an_unusable_agent_name_is_refused_naming_the_field(bad: str) -> None:
    with pytest.raises(ValidationError) as e:
        DiagnoseOptions(agent=bad)
    assert e.value.errors()[0]["loc"] == ("agent",)
    with pytest.raises(ValidationError) as e:
        AppendStepsRequest(messages=[{"role": "user", "content": "hi"}], agent=bad)
    assert e.value.errors()[0]["loc"] == ("agent",)


@pytest.fixture
def service(db_url: str) -> Iterator[TriageService]:  # noqa: F811
    svc = build_service(Settings(database_url=db_url), Diagnoser())
    yield svc
    svc.stores.db.dispose()


def _agent_of(service: TriageService, tenant: str, trace_id: str) -> str:
    row = service.stores.traces.get_trace(tenant, trace_id)
    assert row is not None
    return row.agent


def test_the_service_stores_each_runs_agent(service: TriageService) -> None:
    steps = [Step(kind=StepKind.USER_INPUT, content="hi"), Step(kind=StepKind.FINAL_OUTPUT, content="hello")]
    answers = [
        service.diagnose("t", Trace(id="named", steps=steps, task_type="chat"), DiagnoseOptions(agent="greeter")),
        service.diagnose("t", Trace(id="typed", steps=steps, task_type="chat"), DiagnoseOptions(agent_from_task_type=True)),
        service.diagnose("t", Trace(id="bare", steps=steps, task_type="chat"), DiagnoseOptions()),
        service.diagnose("t", load_trace(_spans(), format="otel"), DiagnoseOptions()),
    ]
    inferred = _agent_of(service, "t", "bare")
    assert inferred.startswith("agent-") and inferred != POOL_AGENT  # no pool any more (issue 31)
    assert [_agent_of(service, "t", i) for i in ("named", "typed", "bare", "t" * 32)] == [
        "greeter", "chat", inferred, "planner"]
    assert [(a.agent, a.agent_source) for a in answers] == [
        ("greeter", "option"), ("chat", "task_type"), (inferred, "inferred"), ("planner", "span")]
    # a session: an agent inferred at its first append until it names one; then the latest named,
    # kept by later appends
    hi = [{"role": "user", "content": "hi"}]
    first = service.append_steps("t", "s1", AppendStepsRequest(messages=hi))
    assert _agent_of(service, "t", first.trace_id) == first.agent and first.agent_source == "inferred"
    service.append_steps("t", "s1", AppendStepsRequest(messages=hi, options=DiagnoseOptions(agent="desk")))
    assert _agent_of(service, "t", first.trace_id) == "desk"
    service.append_steps("t", "s1", AppendStepsRequest(messages=hi, task_type="other"))
    assert _agent_of(service, "t", first.trace_id) == "desk"
    service.append_steps("t", "s1", AppendStepsRequest(messages=hi, agent="desk-2"))
    assert _agent_of(service, "t", first.trace_id) == "desk-2"


def test_otlp_sessions_take_the_root_agent_span(service: TriageService) -> None:
    spans = _spans()
    (key,) = service.append_spans("t", {"spans": spans[:1]})  # the LLM call ends first: no agent named yet
    session = service.sessions.get_session("t", key)
    assert _agent_of(service, "t", session.trace_id).startswith("agent-")  # inferred
    assert service.append_spans("t", {"spans": spans[1:]}) == {key: None}  # the agent spans: no step
    later = {**spans[0], "span_id": "d" * 16, "start_time_unix_nano": 5}
    service.append_spans("t", {"spans": [later]})
    assert _agent_of(service, "t", session.trace_id) == "planner"


def test_migration_0007_keeps_every_row_and_gives_old_runs_their_agent(db_url: str) -> None:  # noqa: F811
    store = Stores.at(db_url)
    try:
        upgrade(store.db.engine, "0006")
        with store.db.engine.begin() as conn:
            for tid, task in (("a", "refunds"), ("b", None), ("c", "")):
                conn.execute(text(
                    "INSERT INTO traces (tenant_id, id, session_id, task_type, created_at, updated_at, n_steps, "
                    "healthy, primary_kind, model_version, shadow, trace, response, steps_in_rows) VALUES "
                    "('acme', :id, NULL, :task, '2026-12-01 10:00:00', '2026-12-01 10:00:00', 1, :h, NULL, 'm', "
                    ":f, :trace, :resp, :f)"), {"id": tid, "task": task, "h": True, "f": False,
                                                 "trace": json.dumps({"id": tid, "steps": []}), "resp": "{}"})
            conn.execute(text("INSERT INTO model_activations (tenant_id, version, activated_at, actor, action) "
                              "VALUES ('acme', 'v1-20261201T110000Z', '2026-12-01 11:00:00', 'alice', 'promote')"))
        upgrade(store.db.engine, "0007")  # (later revisions, e.g. 0008, are not what this tests)
        assert current_revision(store.db.engine) == "0007"
        with store.db.engine.connect() as conn:
            agents = dict(conn.execute(text("SELECT id, agent FROM traces ORDER BY id")).all())
        assert agents == {"a": "refunds", "b": POOL_AGENT, "c": POOL_AGENT}
        # the tenant-wide run scorer's activation stays as history, and serves no agent
        assert store.activations.model_history("acme") == [
            {"agent": None, "version": "v1-20261201T110000Z", "activated_at": store.activations.model_history("acme")[0][
                "activated_at"], "actor": "alice", "action": "promote"}]
        assert store.activations.active_model("acme", "refunds") is None
        store.activations.activate_model("acme", "v2-20261204T110000Z", actor="bob", agent="refunds")
        assert store.activations.active_model("acme", "refunds") == "v2-20261204T110000Z"
        assert store.activations.active_models("acme") == {"refunds": "v2-20261204T110000Z"}
    finally:
        store.db.dispose()
