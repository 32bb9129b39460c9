"""Live span import (model.importers.live): an export reads only its own spans, and the steps it adds
are those the whole re-import of the session's spans added after the earlier ones (what the OTLP
receiver did before), on recorded runs of every instrumentation, one span per export and in
batches, in start and in end order; its state goes through JSON between exports. Through the
service on both stores: a session fed one span per export has the steps of one fed all at once,
and a session stored with its spans whole (the old state) goes on with the same steps."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from model.core.agents import AGENT_METADATA_KEY
from model.core.errors import TooLargeError, TraceImportError
from model.core.schema import Step
from model.diagnosis.diagnoser import Diagnoser
from model.importers.live import LiveSpans
from model.importers.spans import collect_spans, group_runs, import_spans, listed_spans
from serve.services.triage import TriageService
from serve.settings import Settings
from serve.wiring import build_service
from tests.conftest import FIXTURES
from tests.storefix import db_url  # noqa: F401  (fixture)

Exports = list[list[dict[str, Any]]]


def _reference(exports: Exports) -> list[tuple[list[Step], str | None]]:
    """The import this replaces, kept as the yardstick: every export re-imports all the session's
    spans (in arrival order) and keeps the steps past those it had; the root agent as it stood."""
    log: list[dict[str, Any]] = []
    had, root, out = 0, None, []
    for payload in exports:
        log.extend(payload)
        try:
            (run,) = import_spans(log, fmt="otel", in_order=True)
        except TraceImportError as exc:
            assert "none of its" in exc.message
            out.append(([], root))
            continue
        root = run.metadata.get(AGENT_METADATA_KEY) or root
        new, had = run.steps[had:], len(run.steps)
        by_span = run.metadata.get("span_trace_ids") or {}
        for st in new:
            st.metadata["otel.trace_id"] = by_span.get(st.span_id, run.id)
        out.append((new, root))
    return out


def _live(exports: Exports, keep_last: bool = True) -> list[tuple[list[Step], str | None]]:
    """``keep_last``: hand each export the last chat input read (as a worker does), else not (as
    another worker, or one that forgot it)."""
    state: dict[str, Any] | None = None
    root, out, last = None, [], None
    for payload in exports:
        live = LiveSpans(state, last=last if keep_last else None)
        new = live.add(payload, max_steps=5000)
        last = live.last
        state = json.loads(json.dumps(live.state()))  # as a session stores it
        if live.steps:  # (the re-import names no root agent while no span made a step)
            root = live.root_agent or root
        out.append((new, root))
    return out


def _dump(steps: list[Step]) -> list[dict[str, Any]]:
    return [s.model_dump(mode="json", exclude_none=True) for s in steps]


T0 = 1_700_000_000_000_000_000  # ns


def _chat(sid: str, t: int, history: list[dict[str, Any]], out: dict[str, Any], parent: str | None = None,
          **attrs: Any) -> dict[str, Any]:
    return {"trace_id": "f" * 32, "span_id": sid, "parent_span_id": parent, "name": "chat",
            "start_time_unix_nano": T0 + t * 1000, "end_time_unix_nano": T0 + t * 1000 + 500,
            "attributes": {"gen_ai.operation.name": "chat", "gen_ai.conversation.id": "conv",
                           "gen_ai.input.messages": json.dumps(history),
                           "gen_ai.output.messages": json.dumps([out]), **attrs}}


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def _conversation(idless: bool = True) -> list[dict[str, Any]]:
    """Chat spans repeating the conversation (a user who says "yes" twice), tool spans; ``idless``:
    a call made without an id (LiteLLM) that the next input repeats with one, its result only there."""
    history = [_text("user", "Find flights.")]
    spans = []
    for i in range(12):
        call = {"role": "assistant", "parts": [{"type": "tool_call", "id": None if idless and i == 3 else f"c{i}",
                                                "name": "search", "arguments": {"page": i % 4}}]}
        spans.append(_chat(f"{2 * i:016x}", 10 * i, history, call))
        history.append({**call, "parts": [{**call["parts"][0], "id": f"c{i}"}]})
        if idless and i == 3:  # no tool span: the result is known from the next input only
            history.append({"role": "tool", "parts": [{"type": "tool_call_response", "id": "c3", "response": "x"}]})
            continue
        spans.append({"trace_id": "f" * 32, "span_id": f"{2 * i + 1:016x}", "name": "execute_tool search",
                      "start_time_unix_nano": T0 + (10 * i + 5) * 1000, "end_time_unix_nano": T0 + (10 * i + 6) * 1000,
                      "attributes": {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                                     "gen_ai.tool.call.id": f"c{i}", "gen_ai.tool.call.result": "none"}})
        history.append({"role": "tool", "parts": [{"type": "tool_call_response", "id": f"c{i}", "response": "none"}]})
        if i in (4, 8):
            history.append(_text("user", "yes"))
    return spans


def _two_agents() -> list[dict[str, Any]]:
    """Two agent trees whose agent spans end after their children, the second tree's first: the
    root agent is the second's, then the first's."""
    def agent(sid: str, name: str, t: int) -> dict[str, Any]:
        return {"trace_id": "f" * 32, "span_id": sid, "name": f"invoke_agent {name}",
                "start_time_unix_nano": T0 + t * 1000, "end_time_unix_nano": T0 + (100 + t) * 1000,
                "attributes": {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}}

    user = [_text("user", "Plan a trip.")]
    return [
        _chat("1" * 16, 1, user, _text("assistant", "first"), parent="a" * 16),
        _chat("2" * 16, 2, user, _text("assistant", "second"), parent="b" * 16),
        agent("b" * 16, "booker", 3),
        _chat("3" * 16, 4, user, _text("assistant", "third"), parent="b" * 16),
        agent("a" * 16, "planner", 0),
    ]


def _runs() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Every recorded span run (as the receiver groups them), and the two above."""
    docs: list[tuple[str, Any]] = []
    for p in sorted((FIXTURES / "integrations").glob("*.json")):
        rec = json.loads(p.read_text())
        if rec["format"] == "spans":
            docs.append((p.stem, rec["trace"]))
    for name in ("otel_otlp", "openinference_spans", "otel_span_list_legacy"):
        docs.append((name, json.loads((FIXTURES / "importers" / f"{name}.json").read_text())))
    for name, doc in docs:
        for k, (_, _, group) in enumerate(group_runs(collect_spans(doc))):
            yield f"{name}-{k}", [s.to_json() for s in group]
    yield "conversation", _conversation()
    yield "conversation-with-ids", _conversation(idless=False)
    yield "two-agents", _two_agents()


RUNS = dict(_runs())


def _ordered(spans: list[dict[str, Any]], order: str) -> list[dict[str, Any]]:
    key = "start_time_unix_nano" if order == "start" else "end_time_unix_nano"
    return sorted(spans, key=lambda s: (s.get(key) is None, s.get(key) or 0, s.get("span_id") or ""))


@pytest.mark.parametrize("name", sorted(RUNS))
def test_each_export_adds_what_the_whole_reimport_added(name: str) -> None:
    for order in ("start", "end"):
        spans = _ordered(RUNS[name], order)
        for batch in (1, 3, len(spans)):
            exports = [spans[i:i + batch] for i in range(0, len(spans), batch)]
            ref = _reference(exports)
            for keep in (True, False):
                got = _live(exports, keep_last=keep)
                for k, ((want, want_root), (have, have_root)) in enumerate(zip(ref, got, strict=True)):
                    assert _dump(have) == _dump(want), (order, batch, keep, k)
                    assert have_root == want_root, (order, batch, keep, k)
    assert sum(len(steps) for steps, _ in _reference([RUNS[name]])) > 0


def test_what_the_runs_cover() -> None:
    """The yardstick is not trivial: the runs hold repeats, agents above the steps, several runs."""
    conv = _live([[s] for s in RUNS["conversation"]])
    kinds = [s.kind.value for steps, _ in conv for s in steps]
    assert kinds.count("user_input") == 3 and kinds.count("tool_call") == 12 and kinds.count("tool_result") == 12
    assert [root for _, root in _live([[s] for s in RUNS["two-agents"]])] == [None, None, "booker", "booker",
                                                                              "planner"]
    assert any(s.speaker for name in RUNS for steps, _ in _live([RUNS[name]]) for s in steps)
    assert len(RUNS) >= 15


def test_listed_spans_keep_their_resource_and_name_a_bad_item_as_the_export_numbers_it() -> None:
    spans = RUNS["conversation"]
    assert [s.to_json() for s in listed_spans(spans)] == [s.to_json() for s in collect_spans(spans)]
    with_resource = [{**spans[0], "resource": {"service.name": "billing"}}]
    assert listed_spans(with_resource)[0].resource == {"service.name": "billing"}
    with pytest.raises(TraceImportError) as e:
        listed_spans([spans[0], {"name": "no ids"}], first=5)
    assert e.value.path.startswith("[6]"), e.value.path
    with pytest.raises(TraceImportError) as e:
        collect_spans({"spans": [{"name": "no ids"}]})
    assert e.value.path.startswith("spans[0]"), e.value.path


def test_an_old_span_log_is_read_once_and_goes_on() -> None:
    spans = RUNS["conversation"]
    whole = _live([[s] for s in spans])
    old = {"spans": spans[:9], "steps": sum(len(s) for s, _ in whole[:9]), "base": 4}
    live = LiveSpans(old)
    assert (live.spans, live.next_source_index) == (9, 13)
    rest = [st for s in spans[9:] for st in live.add([s], max_steps=None)]
    want = [st for steps, _ in whole[9:] for st in steps]
    for st in want:
        st.source_index += 4
    assert _dump(rest) == _dump(want)
    assert "spans" not in live.state() and len(json.dumps(live.state())) < len(json.dumps(old)) / 4


# -- through the service, on both stores ---------------------------------------------------------


@pytest.fixture
def service(db_url: str) -> Iterator[TriageService]:  # noqa: F811
    svc = build_service(Settings(database_url=db_url), Diagnoser())
    yield svc
    svc.stores.db.dispose()


def _steps(svc: TriageService, key: str) -> list[dict[str, Any]]:
    row = svc.stores.sessions.get_session("t", key)
    assert row is not None
    stored = svc.stores.traces.get_trace_json("t", row.trace_id)
    assert stored is not None
    return [{k: v for k, v in s.items() if k != "metadata"} | {"trace": s["metadata"]["otel.trace_id"]}
            for s in stored[1]["steps"]]


def _doc(spans: list[dict[str, Any]], conv: str) -> dict[str, Any]:
    return {"spans": [{**s, "attributes": {**s["attributes"], "gen_ai.conversation.id": conv}} for s in spans]}


# (an id-less call given its id by a later export keeps no id: its step was stored before)
@pytest.mark.parametrize("name", ["otel-openai-v2-0", "openinference-openai-0", "conversation-with-ids"])
def test_a_session_fed_span_by_span_has_the_steps_of_one_fed_at_once(service: TriageService, name: str) -> None:
    spans = _ordered(RUNS[name], "start")
    service.append_spans("t", _doc(spans, "at-once"))
    for s in spans:
        service.append_spans("t", _doc([s], "one-by-one"))
    assert _steps(service, "one-by-one") == _steps(service, "at-once")
    assert len(_steps(service, "at-once")) >= 4
    state = service.stores.sessions.get_session("t", "one-by-one").state["otlp"]  # type: ignore[union-attr]
    assert "spans" not in state and state["n"] == len(spans)


def test_a_session_that_kept_its_spans_goes_on(service: TriageService, db_url: str) -> None:  # noqa: F811
    spans = RUNS["conversation-with-ids"]
    for s in spans:
        service.append_spans("t", _doc([s], "whole"))
    for s in spans[:9]:
        service.append_spans("t", _doc([s], "old"))
    # the session as the receiver stored it before: its spans whole (redacted), the steps they made
    made = sum(len(st) for st, _ in _live([[s] for s in spans[:9]]))
    old = {"spans": [_doc([s], "old")["spans"][0] for s in spans[:9]], "steps": made, "base": 0}
    with service.stores.db.write() as db:
        row = service.stores.sessions.lock_session(db, "t", "old", create_trace_id=None)
        assert row is not None
        service.stores.sessions.save_session_state(row, {**row.state, "otlp": old})
    fresh = build_service(Settings(database_url=db_url), Diagnoser())  # another worker: no cache
    try:
        for s in spans[9:]:
            fresh.append_spans("t", _doc([s], "old"))
        assert _steps(fresh, "old") == _steps(fresh, "whole")
        state = fresh.stores.sessions.get_session("t", "old").state["otlp"]  # type: ignore[union-attr]
        assert "spans" not in state and state["n"] == len(spans)
    finally:
        fresh.stores.db.dispose()


def test_the_limits(tmp_path: Path) -> None:
    svc = build_service(Settings(database_url=f"sqlite:///{tmp_path / 'triage.db'}", max_steps=10), Diagnoser())
    try:
        spans = RUNS["conversation"]
        svc.append_spans("t", _doc(spans[:8], "c"))  # 9 steps
        with pytest.raises(TooLargeError, match="more than 10 steps"):
            svc.append_spans("t", _doc(spans[8:10], "c"))
        agents = [{"trace_id": "e" * 32, "span_id": f"{i:016x}", "parent_span_id": "f" * 16, "name": "invoke_agent",
                   "attributes": {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}}
                  for i in range(11)]  # spans that make no step
        assert svc.append_spans("t", _doc(agents[:10], "a")) == {"a": None}
        with pytest.raises(TooLargeError, match="11 spans; the limit is 10") as exc:
            svc.append_spans("t", _doc(agents[10:], "a"))
        assert exc.value.path == "spans"
    finally:
        svc.stores.db.dispose()
