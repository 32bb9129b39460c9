"""The client against a real ``triage serve`` (``TRIAGE_TEST_URL``, ``TRIAGE_TEST_KEY``), and its
failure handling against small local HTTP servers that misbehave on purpose.

``tests/test_client_dist.py`` in the service's suite installs this distribution alone into a fresh
virtual environment, starts the server and runs this file there.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from agent_triage_client import (
    AsyncTriageClient,
    StepStream,
    TriageAPIError,
    TriageClient,
    TriageUnavailable,
    retry_after_s,
)

LOOP = {
    "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        *[
            m
            for i in range(3)
            for m in (
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"c{i}", "type": "function",
                     "function": {"name": "search", "arguments": '{"q": "paris weather"}'}}]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": "no results"},
            )
        ],
        {"role": "assistant", "content": "I could not find it."},
    ]
}


@pytest.fixture(scope="module")
def service() -> tuple[str, str]:
    url, key = os.environ.get("TRIAGE_TEST_URL"), os.environ.get("TRIAGE_TEST_KEY")
    if not url or not key:
        pytest.skip("TRIAGE_TEST_URL / TRIAGE_TEST_KEY not set (tests/test_client_dist.py sets them)")
    return url, key


def test_installed_alone() -> None:
    names = {(d.metadata["Name"] or "").lower() for d in importlib.metadata.distributions()}
    assert "agent-triage-client" in names
    assert not names & {"agent-triage-service", "fastapi", "sqlalchemy", "onnxruntime", "numpy"}, names
    for server_package in ("model", "serve"):
        with pytest.raises(ImportError):
            __import__(server_package)


def test_sync_whole_api(service: tuple[str, str]) -> None:
    url, key = service
    with TriageClient(url, api_key=key, budget_s=30, timeout_s=30) as c:
        assert c.health()
        d = c.diagnose(LOOP, agent="triager")
        assert d.served and d.healthy is False and d.primary is not None
        assert c.get_trace(d.trace_id).agent == "triager"  # the key of its agent model
        basis = d.failure_probability_basis  # schema 1.3: which model gave failure_probability
        assert basis is not None and (basis.model, basis.agent, basis.labelled_runs) == ("zero-shot", "triager", 0)
        assert (d.primary.kind, d.primary.source_index) == ("loop", 6)
        assert d.recommendation.strategy == "rollback" and d.coverage.steps == 8
        tools = [{"name": "search", "description": "web search", "parameters": {"type": "object"}}]
        r = c.append_steps("cli-sync", messages=LOOP["messages"][:1], tools=tools, language="en", task_type="qa",
                           agent="support-bot")
        assert r.served and r.appended == [0] and r.recommendation.strategy == "continue"
        for m in LOOP["messages"][1:7]:
            r = c.append_steps("cli-sync", messages=[m])
        assert r.primary is not None and (r.primary.kind, r.primary.step) == ("loop", 6)
        state = c.get_session("cli-sync")
        assert state.steps == 7 and [f.kind for f in state.failures] == ["loop"]
        assert state.agent == "support-bot"  # named once, kept by the later appends
        out = c.report_outcome(r.recommendation.id, False, duration_s=0.5, note="still looping")
        assert out.recorded and out.escalated and out.next is not None and out.next.strategy == "replan_global"
        page = c.list_traces(session="cli-sync", limit=5)
        assert [t.id for t in page.items] == [state.trace_id]
        detail = c.get_trace(state.trace_id)
        assert detail.trace["tools"][0]["name"] == "search" and detail.trace["language"] == "en"
        graph = c.get_graph(state.trace_id, format="mermaid")
        assert graph.mermaid and graph.graph is None
        label = c.add_label(state.trace_id, "loop", step=6, author="test")
        assert label.labels == 1 and label.label is not None and label.label.failed
        assert [(f.kind, f.step) for f in label.label.failures] == [("loop", 6)]
        # a checker's "not failed" does not outrank the human's label
        label = c.add_label(state.trace_id, failed=False, author="reward", author_type="checker")
        assert label.labels == 2 and label.label is not None and label.label.failed
        assert (label.label.author, label.label.author_type) == ("test", "human")
        # the same human, newer: the run did not fail after all
        label = c.add_label(state.trace_id, failed=False, author="test")
        assert label.label is not None and not label.label.failed and label.label.failures == []
        detail = c.get_trace(state.trace_id)
        assert detail.label is not None and not detail.label.failed and detail.label.labels == 3
        with pytest.raises(TriageAPIError) as bad_label:
            c.add_label(state.trace_id, "loop", failed=False)
        assert bad_label.value.status_code == 422 and "kind" in json.dumps(bad_label.value.detail)
        values = [100.0 + i % 5 for i in range(40)] + [400.0 + i % 5 for i in range(20)]
        obs = c.observe("latency_ms", values, agent="qa", params={"warmup": 20})
        assert obs.served and obs.n == 60 and obs.monitoring and obs.alarms and obs.alarms[0].index >= 40
        assert obs.agent == "qa"
        cp = c.changepoints("latency_ms", task_type="qa")  # the task type names the same stream
        assert cp.changepoints == [40] and cp.agent == "qa"
        assert c.changepoints("latency_ms", agent="qa").n == 60
        c.delete_trace(d.trace_id)
        with pytest.raises(TriageAPIError) as err:
            c.get_trace(d.trace_id)
        assert err.value.status_code == 404
        c.delete_session("cli-sync")
        with pytest.raises(TriageAPIError):
            c.get_session("cli-sync")
        with pytest.raises(TriageAPIError) as bad:
            c.append_steps("cli-sync", messages=[{"role": "robot", "content": "x"}])
        assert bad.value.status_code == 422 and "role" in json.dumps(bad.value.detail)


def test_async_whole_api(service: tuple[str, str]) -> None:
    url, key = service

    async def flow() -> None:
        async with AsyncTriageClient(url, api_key=key, budget_s=30, timeout_s=30) as c:
            assert await c.health()
            d = await c.diagnose(LOOP, options={"shadow": True})
            assert d.primary is not None and d.primary.kind == "loop" and d.recommendation.strategy == "continue"
            r = await c.append_steps("cli-async", messages=LOOP["messages"][:2], task_type="qa")
            assert r.appended == [0, 1]
            r = await c.append_steps("cli-async", steps=[{"kind": "tool_result", "call_id": "c0",
                                                            "content": "503 Service Unavailable", "status": "error"}])
            assert r.primary is not None and r.primary.kind == "tool_error"
            state = await c.get_session("cli-async")
            out = await c.report_outcome(state.failures[0].recommendation.id, True)  # type: ignore[union-attr]
            assert out.recorded and not out.escalated
            page = await c.list_traces(session="cli-async")
            detail = await c.get_trace(page.items[0].id)
            assert detail.outcomes and detail.outcomes[0].success is True
            assert (await c.get_graph(state.trace_id, format="json")).graph is not None
            assert (await c.add_label(state.trace_id, "healthy")).labels == 1
            got = await c.add_label(state.trace_id, failed=True, source_index=1, author="ci", author_type="checker")
            assert got.labels == 2 and got.label is not None and not got.label.failed  # the human's stands
            assert got.label.author.startswith("key:")  # no author given: the API key is the author
            assert (await c.get_trace(state.trace_id)).label.author_type == "human"  # type: ignore[union-attr]
            obs = await c.observe("tokens_out", [10.0, 11.0, 9.0], task_type="qa")
            assert obs.n == 3
            assert (await c.changepoints("tokens_out", task_type="qa")).n == 3
            await c.delete_trace(d.trace_id)
            await c.delete_session("cli-async")
            with pytest.raises(TriageAPIError):
                await c.get_session("cli-async")

    asyncio.run(flow())


def test_step_stream_against_the_service(service: tuple[str, str]) -> None:
    url, key = service
    seen: list[str] = []
    with TriageClient(url, api_key=key, budget_s=30, timeout_s=30) as c:
        stream = StepStream(c, "cli-stream", background=True, agent="streamer",
                            on_diagnosis=lambda r: seen.append(r.recommendation.strategy))
        history: list[dict[str, Any]] = [LOOP["messages"][0]]
        for i in range(3):
            stream.inputs(history)  # the whole conversation each call: only the new part goes out
            stream.assistant(None, [{"id": f"c{i}", "type": "function",
                                     "function": {"name": "search", "arguments": '{"q": "paris weather"}'}}])
            stream.tool_result(f"c{i}", "no results")
            history += LOOP["messages"][1 + 2 * i: 3 + 2 * i]
        stream.close()
        assert not stream.errors and stream.last is not None
        assert stream.last.session_steps == 7
        assert stream.last.primary is not None and (stream.last.primary.kind, stream.last.primary.step) == ("loop", 6)
        assert seen[-1] == "rollback" and len(seen) == 7  # 1 + 3 × 2: repeated history not re-sent
        assert c.get_session("cli-stream").agent == "streamer"
        c.delete_session("cli-stream")


# ------------------------------------------------------------------------------------------------
# failure handling: servers that misbehave


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Script:
    """What the misbehaving server answers, request by request (the last entry repeats)."""

    def __init__(self, answers: list[tuple[int, dict[str, str], float]]) -> None:
        self.answers = answers
        self.hits = 0


DIAGNOSIS = {"trace_id": "t", "model_version": "m", "healthy": True,
             "recommendation": {"id": "r", "strategy": "continue"}}


@pytest.fixture
def flaky() -> Iterator[tuple[str, _Script]]:
    script = _Script([])

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            self.rfile.read(length)
            status, headers, delay = script.answers[min(script.hits, len(script.answers) - 1)]
            script.hits += 1
            time.sleep(delay)
            body = json.dumps(DIAGNOSIS if status == 200 else {"detail": [{"msg": "busy"}]}).encode()
            try:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass  # the client gave up first

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", _free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", script
    server.shutdown()
    server.server_close()


def test_fail_open_when_nothing_listens() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    with TriageClient(url, budget_s=1.0, backoff_s=0.05) as c:
        t0 = time.monotonic()
        d = c.diagnose(LOOP)
        assert time.monotonic() - t0 < 1.5
        assert not d.served and d.healthy is None and d.recommendation.strategy == "continue"
        assert d.client_error and "ConnectError" in d.client_error
        r = c.append_steps("s", messages=[{"role": "user", "content": "hi"}])
        assert not r.served and r.session_id == "s" and r.recommendation.strategy == "continue"
        assert not c.report_outcome("r1", True).recorded
        assert not c.observe("x", [1.0]).served
        with pytest.raises(TriageUnavailable):
            c.get_session("s")  # not on the hot path: it raises
        assert not c.health()
    with TriageClient(url, budget_s=0.5, fail_open=False) as strict, pytest.raises(TriageUnavailable) as err:
        strict.diagnose(LOOP)
    assert err.value.attempts >= 1

    async def in_async() -> None:
        async with AsyncTriageClient(url, budget_s=0.5) as c:
            d = await c.diagnose(LOOP)
            assert not d.served and d.recommendation.strategy == "continue"

    asyncio.run(in_async())


def test_a_slow_service_costs_at_most_the_budget(flaky: tuple[str, _Script]) -> None:
    url, script = flaky
    script.answers = [(200, {}, 3.0)]
    with TriageClient(url, timeout_s=5.0, budget_s=0.5) as c:
        t0 = time.monotonic()
        d = c.diagnose(LOOP)
        elapsed = time.monotonic() - t0
    assert not d.served and "Timeout" in (d.client_error or "") and elapsed < 1.0


def test_retries_honour_retry_after(flaky: tuple[str, _Script]) -> None:
    url, script = flaky
    script.answers = [(503, {"Retry-After": "0.3"}, 0.0), (429, {"Retry-After": "0.3"}, 0.0), (200, {}, 0.0)]
    with TriageClient(url, budget_s=5.0, retries=2) as c:
        t0 = time.monotonic()
        d = c.diagnose(LOOP)
        elapsed = time.monotonic() - t0
    assert d.served and script.hits == 3 and elapsed >= 0.6


def test_the_async_client_retries_by_the_same_plan(flaky: tuple[str, _Script]) -> None:
    """One retry loop (``_Base._plan``) for both clients: the async one waits the same
    ``Retry-After`` and gives up non-idempotent appends the same way."""
    url, script = flaky
    script.answers = [(503, {"Retry-After": "0.3"}, 0.0), (429, {"Retry-After": "0.3"}, 0.0), (200, {}, 0.0)]

    async def run() -> None:
        async with AsyncTriageClient(url, budget_s=5.0, retries=2) as c:
            t0 = time.monotonic()
            d = await c.diagnose(LOOP)
            assert d.served and script.hits == 3 and time.monotonic() - t0 >= 0.6
            script.hits, script.answers = 0, [(500, {}, 0.0), (200, {}, 0.0)]
            r = await c.append_steps("s", messages=[{"role": "user", "content": "hi"}])
            assert not r.served and script.hits == 1 and "answered 500" in (r.client_error or "")

    asyncio.run(run())


def test_a_retry_after_past_the_budget_ends_the_call_at_once(flaky: tuple[str, _Script]) -> None:
    url, script = flaky
    script.answers = [(503, {"Retry-After": "30"}, 0.0)]
    with TriageClient(url, budget_s=2.0) as c:
        t0 = time.monotonic()
        d = c.diagnose(LOOP)
        elapsed = time.monotonic() - t0
    assert not d.served and script.hits == 1 and elapsed < 0.5 and "overrun the budget" in (d.client_error or "")


def test_appending_steps_is_not_retried_after_the_service_may_have_taken_them(flaky: tuple[str, _Script]) -> None:
    url, script = flaky
    script.answers = [(500, {}, 0.0), (200, {}, 0.0)]
    with TriageClient(url, budget_s=2.0, retries=3, fail_open=False) as c:
        with pytest.raises(TriageUnavailable) as err:
            c.append_steps("s", messages=[{"role": "user", "content": "hi"}])
        assert err.value.last_status == 500 and script.hits == 1
        script.hits, script.answers = 0, [(503, {"Retry-After": "0"}, 0.0), (200, {}, 0.0)]
        assert c.diagnose(LOOP).served and script.hits == 2


def test_retry_after_http_date() -> None:
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert retry_after_s("-3") == 0.0
