"""Runs assembled from spans: per-call traces grouped by session, OTLP file-exporter JSON Lines
merged by trace id, and ``/v1/diagnose`` taking a bare trace (model, CLI and a real server)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from model.core.errors import TraceImportError
from model.importers import load_text, load_trace, load_traces, read_path
from model.importers.spans import unkeyed_warning
from serve.examples import OPENAI_LOOP
from tests.conftest import ROOT, LiveServer
from tests.spanfix import otlp, span


def _call(tid: str, sid: str, start: float, session: str | None, out: dict[str, Any],
          inputs: list[dict[str, Any]]) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.input.messages": json.dumps(inputs), "gen_ai.output.messages": json.dumps([out]),
    }
    if session:
        attrs["gen_ai.conversation.id"] = session
    return span(tid, sid, "chat gpt-4o-mini", start, attrs)


USER = {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}
CALL = {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "weather",
                                        "arguments": {"city": "Paris"}}]}
RESULT = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "18C, sunny"}]}
ANSWER = {"role": "assistant", "parts": [{"type": "text", "content": "18C and sunny."}]}


def _two_calls(session: str | None) -> list[dict[str, Any]]:
    """Only the LLM client instrumented: each call is a root span with a trace id of its own."""
    return [
        _call("1" * 32, "1" * 16, 100.0, session, CALL, [USER]),
        _call("2" * 32, "2" * 16, 101.0, session, ANSWER, [USER, CALL, RESULT]),
    ]


def test_per_call_traces_of_one_session_are_one_run() -> None:
    trace = load_trace(otlp(_two_calls("conv-7")))
    assert trace.id == "1" * 32 and trace.session_id == "conv-7"
    assert trace.metadata["trace_ids"] == ["1" * 32, "2" * 32]
    assert [(s.kind.value, s.source_index) for s in trace.steps] == [
        ("user_input", 0), ("tool_call", 0), ("tool_result", 1), ("final_output", 1)]


def test_without_a_session_the_calls_of_one_input_are_one_run_with_a_warning() -> None:
    """Traces that name no session, read as one run (a whole-trace request): one run, spans in time
    order, and a warning naming the attributes that would separate runs; read apart (the live
    receiver's way) each is a run; ``session`` names the run; input still holding several runs
    (one session and traces naming none) is refused, the runs listed."""
    calls = _two_calls(None)
    spans = otlp(calls)
    assert len(load_traces(spans)) == 2
    one = load_trace(spans)
    assert one.id == "1" * 32 and one.session_id is None
    assert one.metadata["trace_ids"] == ["1" * 32, "2" * 32]
    assert [(s.kind.value, s.source_index) for s in one.steps] == [
        ("user_input", 0), ("tool_call", 0), ("tool_result", 1), ("final_output", 1)]
    warning = unkeyed_warning(one)
    assert warning is not None and "gen_ai.conversation.id" in warning and "session.id" in warning
    backwards = load_trace(otlp(calls[::-1]))  # time order, not the order given
    assert [(s.kind.value, s.source_index) for s in backwards.steps] == [
        (s.kind.value, s.source_index) for s in one.steps]
    merged = load_trace(spans, session="mine")
    assert merged.session_id == "mine" and len(merged.steps) == 4 and unkeyed_warning(merged) is None
    keyed = load_trace(otlp(_two_calls("conv-7")))
    assert unkeyed_warning(keyed) is None
    mixed = otlp(_two_calls("conv-a") + [_call("3" * 32, "3" * 16, 102.0, None, ANSWER, [USER])])
    with pytest.raises(TraceImportError, match=r"expected one run, got 2.*options\.session"):
        load_trace(mixed)


def test_the_session_option_picks_its_run_and_names_the_others() -> None:
    a = _two_calls("conv-a")
    b = [_call("3" * 32, "3" * 16, 102.0, "conv-b", ANSWER, [USER])]
    data = otlp(a + b)
    assert [t.session_id for t in load_traces(data)] == ["conv-a", "conv-b"]
    assert load_trace(data, session="conv-b").id == "3" * 32
    with pytest.raises(TraceImportError, match="holds sessions conv-a, conv-b") as err:
        load_trace(data, session="conv-z")
    assert err.value.path == "options.session"


def _exporter_lines() -> str:
    """One trace written over two lines (two export batches), as the OTLP/JSON file exporter does."""
    tid = "4" * 32
    first = span(tid, "a" * 16, "chat", 100.0, {"gen_ai.operation.name": "chat",
                 "gen_ai.input.messages": json.dumps([USER]), "gen_ai.output.messages": json.dumps([CALL])})
    tool = span(tid, "b" * 16, "execute_tool weather", 100.6, {"gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "weather", "gen_ai.tool.call.id": "c1", "gen_ai.tool.call.result": "18C"})
    last = span(tid, "c" * 16, "chat", 101.0, {"gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps([USER, CALL, RESULT]),
                "gen_ai.output.messages": json.dumps([ANSWER])})
    return "\n".join(json.dumps(otlp(batch)) for batch in ([first, tool], [last])) + "\n"


def test_file_exporter_jsonl_is_one_trace(tmp_path: Path) -> None:
    text = _exporter_lines()
    traces = load_text(text)
    assert len(traces) == 1 and traces[0].steps[-1].kind.value == "final_output"
    f = tmp_path / "spans.jsonl"
    f.write_text(text)
    assert [len(t.steps) for t in read_path(f)] == [4]


def test_cli_on_exporter_jsonl_and_on_an_archive(tmp_path: Path) -> None:
    f = tmp_path / "spans.jsonl"
    f.write_text(_exporter_lines())
    r = subprocess.run([sys.executable, "-m", "serve.cli.main", "diagnose", str(f), "--json"], cwd=ROOT,
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    out = json.loads(r.stdout)
    assert out["steps"] == 4 and _rule_failures(out) == []
    archive = tmp_path / "archive.jsonl"
    archive.write_text(json.dumps(OPENAI_LOOP["trace"]) + "\n" + json.dumps(OPENAI_LOOP["trace"]) + "\n")
    r = subprocess.run([sys.executable, "-m", "serve.cli.main", "diagnose", str(archive)], cwd=ROOT,
                       capture_output=True, timeout=120)
    assert r.returncode == 2
    assert "--jsonl" in r.stderr.decode()  # says what to do


def _rule_failures(resp: dict[str, Any]) -> list[str]:
    """The failures the detectors found (the run scorer's verdict on a run this small is its own matter)."""
    return [f["kind"] for f in resp["failures"] if f["detector"] != "runscore"]


def _post(server: LiveServer, content: bytes, **params: str) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/diagnose", content=content, params=params,
                      headers={"Content-Type": "application/json"}, timeout=60)


def test_http_bare_trace_jsonl_and_session(live_server: LiveServer) -> None:
    bare = _post(live_server, json.dumps(OPENAI_LOOP["trace"]).encode())
    assert bare.status_code == 200, bare.text
    assert [f["source_index"] for f in bare.json()["failures"] if f["kind"] == "loop"] == [6]
    r = _post(live_server, _exporter_lines().encode())
    assert r.status_code == 200, r.text
    assert r.json()["steps"] == 4 and _rule_failures(r.json()) == []
    two = json.dumps(otlp(_two_calls(None))).encode()
    r = _post(live_server, two)  # several traces naming no session: one run, and a warning
    assert r.status_code == 200, r.text
    assert r.json()["steps"] == 4 and _rule_failures(r.json()) == []
    assert "gen_ai.conversation.id" in r.json()["warnings"][0]
    stored = httpx.get(f"{live_server.url}/v1/traces/{r.json()['trace_id']}", timeout=60)
    assert stored.status_code == 200, stored.text
    assert stored.json()["diagnosis"]["warnings"][0] == r.json()["warnings"][0]  # kept with the diagnosis
    mixed = otlp(_two_calls("conv-a") + [_call("3" * 32, "3" * 16, 102.0, None, ANSWER, [USER])])
    r = _post(live_server, json.dumps(mixed).encode())
    assert r.status_code == 422 and "options.session" in r.json()["detail"][0]["msg"]
    r = _post(live_server, two, session="conv-q")
    assert r.status_code == 200, r.text
    assert r.json()["steps"] == 4 and _rule_failures(r.json()) == []
    r = _post(live_server, json.dumps({"trace": otlp(_two_calls("conv-a")), "options": {"session": "nope"}}).encode())
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "options", "session"]
    off = json.dumps(otlp([span("5" * 32, "5" * 16, "chat", 1.0, {"gen_ai.operation.name": "chat"})])).encode()
    r = _post(live_server, off)
    assert r.status_code == 200 and r.json()["healthy"] is None and r.json()["coverage"]["without_content"] == 1
