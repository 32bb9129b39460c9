"""Diagnoses back into the user's traces: ``gen_ai.evaluation.result`` events, parented to the
failing spans, sent by a real ``triage serve`` to a local OTLP/HTTP logs receiver."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from model.diagnosis.diagnoser import Diagnoser
from model.diagnosis.otel_events import evaluation_events
from model.importers import load_trace
from tests.conftest import FIXTURES, LiveServer
from tests.spanfix import otlp, span

pytestmark = pytest.mark.slow

FIXTURE = FIXTURES / "integrations" / "otel-openai-v2.json"


class Receiver:
    """A local OTLP/HTTP logs endpoint that keeps every log record it gets."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                req = ExportLogsServiceRequest()
                req.ParseFromString(self.rfile.read(int(self.headers["content-length"])))
                outer.headers.append(dict(self.headers))
                for rl in req.resource_logs:
                    for sl in rl.scope_logs:
                        for rec in sl.log_records:
                            attrs = {a.key: (a.value.double_value if a.value.HasField("double_value")
                                             else a.value.string_value) for a in rec.attributes}
                            outer.records.append({"trace_id": rec.trace_id.hex(), "span_id": rec.span_id.hex(),
                                                  "event_name": rec.event_name, **attrs})
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/logs"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, n: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.records) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        return list(self.records)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Receiver]]:
    receiver = Receiver()
    srv = LiveServer(env={"TRIAGE_AUTH": "off", "TRIAGE_DATA_DIR": str(tmp_path_factory.mktemp("evx")),
                          "TRIAGE_EVAL_EXPORT_ENDPOINT": receiver.url,
                          "TRIAGE_EVAL_EXPORT_HEADERS": "Authorization=Bearer%20collector-key"}).wait_ready()
    yield srv, receiver
    srv.stop()
    receiver.server.shutdown()


def test_events_are_parented_to_the_failing_spans(setup: tuple[LiveServer, Receiver]) -> None:
    srv, receiver = setup
    trace = json.loads(Path(FIXTURE).read_text())["trace"]
    r = httpx.post(f"{srv.url}/v1/diagnose", json={"trace": trace}, timeout=60)
    assert r.status_code == 200, r.text
    resp = r.json()
    got = receiver.wait(len(resp["failures"]) + 1)
    assert receiver.headers[0]["Authorization"] == "Bearer collector-key"
    by_name = {g["gen_ai.evaluation.name"]: g for g in got}
    imported = load_trace(trace)
    for f in resp["failures"]:
        ev = by_name[f"agent_triage.{f['kind']}"]
        assert ev["event_name"] == "gen_ai.evaluation.result" == ev["event.name"]
        assert ev["span_id"] == f["span_id"] == imported.steps[f["step"]].span_id
        assert ev["trace_id"] == imported.id and ev["gen_ai.evaluation.score.label"] == "failure"
        assert ev["gen_ai.evaluation.score.value"] == pytest.approx(f["confidence"])
    verdict = by_name["agent_triage.verdict"]
    assert verdict["gen_ai.evaluation.score.label"] == "failed"
    assert verdict["span_id"] == resp["primary"]["span_id"]
    assert "ignored_error" in verdict["gen_ai.evaluation.explanation"]


def test_live_session_events_carry_each_span_trace_id(setup: tuple[LiveServer, Receiver]) -> None:
    srv, receiver = setup
    before = len(receiver.records)
    spans = [span(f"{i + 1:032x}", f"{i + 1:016x}", "chat", 10.0 + i, {
        "gen_ai.operation.name": "chat", "session.id": "evx-live",
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": ""}]}])})
        for i in range(2)]
    r = httpx.post(f"{srv.url}/otlp/v1/traces", json=otlp(spans), timeout=60)
    assert r.status_code == 200, r.text
    got = receiver.wait(before + 3)[before:]
    empties = [g for g in got if g["gen_ai.evaluation.name"] == "agent_triage.empty_response"]
    # each call is its own trace: every event names its own span's trace
    assert {(g["trace_id"], g["span_id"]) for g in empties} <= {(f"{i + 1:032x}", f"{i + 1:016x}") for i in range(2)}
    assert empties


def test_no_span_ids_no_events() -> None:
    t = load_trace({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]})
    assert evaluation_events(t, Diagnoser().diagnose(t)) == []
