"""The OTLP/HTTP receiver with the real OpenTelemetry SDK exporter (``OTLPSpanExporter`` configured
only by ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``_HEADERS``) against a real uvicorn server: the
spans feed a live session, read while the agent runs, with the loop and the ignored 503 at the
right ``source_index``; OTLP/JSON and gzip; auth and bad bodies."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode, format_trace_id

from serve.auth import create_key
from serve.store import Stores
from tests.conftest import LiveServer
from tests.spanfix import otlp, span

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, str]]:
    data = tmp_path_factory.mktemp("otlp")
    store = Stores.at(f"sqlite:///{Path(data) / 'triage.db'}")
    store.db.upgrade()
    key = create_key(store.keys, "acme")[0]
    store.db.dispose()
    srv = LiveServer(env={"TRIAGE_DATA_DIR": str(data), "TRIAGE_AUTH": "on", "TRIAGE_AUTH_CACHE_S": "0"})
    srv.wait_ready()
    yield srv, key
    srv.stop()


class Conversation(SpanProcessor):
    """Stamps the conversation id on every span as it starts (what OpenInference's
    ``using_session`` or a baggage span processor do)."""

    def __init__(self, conversation: str) -> None:
        self.conversation = conversation

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        span.set_attribute("gen_ai.conversation.id", self.conversation)


def _provider(monkeypatch: pytest.MonkeyPatch, srv: LiveServer, key: str, *, conversation: str | None,
              gzip_on: bool) -> TracerProvider:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{srv.url}/otlp/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", f"Authorization=Bearer%20{key}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip" if gzip_on else "none")
    provider = TracerProvider()
    if conversation:
        provider.add_span_processor(Conversation(conversation))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))  # every span exported as it ends
    return provider


USER = {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris, then Lisbon tomorrow?"}]}


def _call(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "parts": [{"type": "tool_call", "id": cid, "name": name, "arguments": args}]}


def _result(cid: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "parts": [{"type": "tool_call_response", "id": cid, "response": text}]}


def _run_agent(provider: TracerProvider, read: Any) -> str:
    """A weather agent traced with GenAI spans (content capture on) under one parent span: three
    identical searches, then a weather call that fails with 503, then an answer that ignores it."""
    tracer = provider.get_tracer("weather-agent")
    history: list[dict[str, Any]] = [USER]

    def chat(output: dict[str, Any]) -> None:
        with tracer.start_as_current_span("chat gpt-4o-mini", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.input.messages": json.dumps(history), "gen_ai.output.messages": json.dumps([output])}):
            pass
        history.append(output)

    def tool(cid: str, name: str, args: dict[str, Any], result: str, error: str | None = None) -> None:
        with tracer.start_as_current_span(f"execute_tool {name}", attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": cid,
            "gen_ai.tool.call.arguments": json.dumps(args), "gen_ai.tool.call.result": result}) as sp:
            if error:
                sp.set_attribute("error.type", "503")
                sp.set_status(Status(StatusCode.ERROR, error))
        history.append(_result(cid, result))

    with tracer.start_as_current_span("invoke_agent weather", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather"}) as parent:
        trace_id = format_trace_id(parent.get_span_context().trace_id)
        for i in range(3):
            chat(_call(f"c{i}", "search", {"q": "paris weather"}))
            tool(f"c{i}", "search", {"q": "paris weather"}, "no results")
        read("after the loop", trace_id)
        chat(_call("w1", "weather", {"city": "Lisbon", "day": "tomorrow"}))
        tool("w1", "weather", {"city": "Lisbon"}, '{"error": {"code": 503}}', error="503 Service Unavailable")
        chat({"role": "assistant", "parts": [{"type": "text", "content": "Tomorrow in Lisbon: sunny, 24C."}]})
        read("after the answer", trace_id)
    return trace_id


@pytest.mark.parametrize(("conversation", "gzip_on"), [("otel-live", True), (None, False)])
def test_sdk_exporter_feeds_a_live_session(
    server: tuple[LiveServer, str], monkeypatch: pytest.MonkeyPatch, conversation: str | None, gzip_on: bool
) -> None:
    srv, key = server
    views: dict[str, dict[str, Any]] = {}

    def read(when: str, trace_id: str) -> None:
        r = httpx.get(f"{srv.url}/v1/sessions/{conversation or trace_id}",
                      headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert r.status_code == 200, r.text
        views[when] = r.json()

    provider = _provider(monkeypatch, srv, key, conversation=conversation, gzip_on=gzip_on)
    trace_id = _run_agent(provider, read)
    provider.shutdown()
    # spans in arrival order: chat 0, search 1, chat 2, search 3, chat 4, search 5, chat 6, weather 7, chat 8
    mid = views["after the loop"]
    assert mid["steps"] == 7 and mid["next_source_index"] == 6
    assert [(f["kind"], f["source_index"]) for f in mid["last"]["failures"]] == [("loop", 5)]
    end = views["after the answer"]
    kinds = {(f["kind"], f["source_index"]) for f in end["last"]["failures"]}
    assert {("loop", 5), ("tool_error", 7), ("ignored_error", 8)} <= kinds, kinds
    assert end["last"]["primary"]["kind"] == "ignored_error"
    # the parent span came last: no step, and the session did not split
    final = httpx.get(f"{srv.url}/v1/sessions/{conversation or trace_id}",
                      headers={"Authorization": f"Bearer {key}"}, timeout=30).json()
    assert final["steps"] == end["steps"] == 10 and final["next_source_index"] == 10


def _post(srv: LiveServer, key: str | None, body: bytes, content_type: str, **headers: str) -> httpx.Response:
    h = {"Content-Type": content_type, **headers}
    if key:
        h["Authorization"] = f"Bearer {key}"
    return httpx.post(f"{srv.url}/otlp/v1/traces", content=body, headers=h, timeout=30)


def test_otlp_json_gzip_auth_and_bad_bodies(server: tuple[LiveServer, str]) -> None:
    srv, key = server
    doc = otlp([span("d" * 32, "1" * 16, "chat", 1.0, {
        "gen_ai.operation.name": "chat", "session.id": "json-conv",
        "gen_ai.input.messages": json.dumps([USER]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Hi."}]}])})])
    body = json.dumps(doc).encode()
    assert _post(srv, None, body, "application/json").status_code == 401
    r = _post(srv, key, gzip.compress(body), "application/json", **{"Content-Encoding": "gzip"})
    assert r.status_code == 200 and r.json() == {} and r.headers["content-type"] == "application/json"
    view = httpx.get(f"{srv.url}/v1/sessions/json-conv", headers={"Authorization": f"Bearer {key}"}).json()
    assert view["steps"] == 2 and view["last"]["healthy"] is True
    r = _post(srv, key, b"\x0a\xff\xff", "application/x-protobuf")
    assert r.status_code == 400 and "ExportTraceServiceRequest" in r.json()["detail"][0]["msg"]
    r = _post(srv, key, body, "text/plain")
    assert r.status_code == 400 and r.json()["detail"][0]["loc"] == ["content-type"]
    r = _post(srv, key, b"not gzip", "application/json", **{"Content-Encoding": "gzip"})
    assert r.status_code == 400
    bomb = gzip.compress(b" " * (6 * 1024 * 1024))  # expands past TRIAGE_MAX_BODY_BYTES
    assert _post(srv, key, bomb, "application/json", **{"Content-Encoding": "gzip"}).status_code == 413
    # spans without GenAI attributes (HTTP, DB …) are accepted and left out
    other = otlp([span("e" * 32, "2" * 16, "GET /", 1.0, {"http.method": "GET"})])
    assert _post(srv, key, json.dumps(other).encode(), "application/json").status_code == 200
    assert httpx.get(f"{srv.url}/v1/sessions/{'e' * 32}", headers={"Authorization": f"Bearer {key}"}).status_code == 404
