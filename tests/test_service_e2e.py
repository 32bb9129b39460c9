"""End to end against real uvicorn servers on 127.0.0.1: the real-time session flow, outcomes
climbing the ladder, budgets ending in human_handoff, tenant isolation, auth, and no acknowledged
trace lost when the server is SIGKILLed mid-load (SQLite WAL)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_triage_client import AsyncTriageClient, TriageAPIError, TriageClient

from serve.auth import create_key
from serve.store import Stores
from tests.conftest import LiveServer

pytestmark = pytest.mark.slow

#: these tests check the service: no fail-open fallbacks, generous budgets on a loaded machine
STRICT: dict[str, Any] = {"fail_open": False, "timeout_s": 60.0, "budget_s": 120.0}


def _keys(data_dir: Path, *tenants: str) -> dict[str, str]:
    store = Stores.at(f"sqlite:///{data_dir / 'triage.db'}")
    store.db.upgrade()
    keys = {t: create_key(store.keys, t)[0] for t in tenants}
    store.db.dispose()
    return keys


#: TRIAGE_ALARM_CACHE_S of the two-worker server.
ALARM_CACHE_S = 0.3

@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    """Two uvicorn workers sharing one SQLite store: any worker may take any step."""
    data = tmp_path_factory.mktemp("e2e")
    keys = _keys(data, "acme", "globex")
    srv = LiveServer(
        env={
            "TRIAGE_DATA_DIR": str(data),
            "TRIAGE_AUTH": "on",
            "TRIAGE_AUTH_CACHE_S": "0",
            "TRIAGE_OPERATOR_TENANTS": "acme",  # acme's key sees every tenant in /metrics
            # a worker reuses the open alarms it read for this long (another worker's change shows after it)
            "TRIAGE_ALARM_CACHE_S": str(ALARM_CACHE_S),
        },
        args=["--workers", "2"],
    ).wait_ready()
    yield srv, keys
    srv.stop()


def _call(i: int, tool: str = "search", args: str = '{"q": "paris weather"}') -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": tool, "arguments": args}}],
    }


def _result(i: int, content: str = "no results") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"c{i}", "content": content}


def test_auth_is_required_on_v1(server: tuple[LiveServer, dict[str, str]]) -> None:
    srv, _ = server
    assert httpx.get(f"{srv.url}/healthz").status_code == 200
    r = httpx.get(f"{srv.url}/v1/traces")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    r = httpx.get(f"{srv.url}/v1/traces", headers={"Authorization": "Bearer trg_nope_nope"})
    assert r.status_code == 401 and r.json()["detail"][0]["msg"] == "unknown or revoked API key"


def test_session_loop_caught_on_third_repeat_then_outcomes_climb_to_handoff(
    server: tuple[LiveServer, dict[str, str]],
) -> None:
    srv, keys = server
    with TriageClient(srv.url, api_key=keys["acme"], **STRICT) as c:
        r = c.append_steps(
            "conv-loop", messages=[{"role": "user", "content": "Weather in Paris? I'm bob@example.com"}]
        )
        assert r.appended == [0] and r.recommendation.strategy == "continue"
        loop_at = None
        for i in range(3):
            r = c.append_steps("conv-loop", messages=[_call(i)])
            assert r.appended == [1 + 2 * i] and r.healthy, r.failures
            r = c.append_steps("conv-loop", messages=[_result(i)])
            assert r.appended == [2 + 2 * i]
            if i < 2:
                assert r.healthy and r.recommendation.strategy == "continue"
            else:
                loop_at = r
        assert loop_at is not None and loop_at.primary is not None
        # caught on the result of the third repeat (step 6, message 6), not after the run
        assert (loop_at.primary.kind, loop_at.primary.step, loop_at.primary.source_index) == ("loop", 6, 6)
        first = loop_at.recommendation
        assert first.strategy == "rollback" and first.params["to_step"] == 0
        assert first.next == ["replan_global", "human_handoff"]
        # the failure stays open: the next diagnosis repeats the same recommendation
        again = c.append_steps("conv-loop", messages=[{"role": "assistant", "content": "Let me think."}])
        assert again.appended == [7] and again.recommendation.id == first.id
        # a failed outcome moves it one rung up
        out = c.report_outcome(first.id, success=False, duration_s=1.5)
        assert out.escalated and out.next is not None and out.next.strategy == "replan_global"
        assert out.model_version and out.detector_versions
        state = c.get_session("conv-loop")
        assert [(f.key, f.status, f.rung) for f in state.failures] == [("loop@6", "open", 1)]
        assert state.steps == 8 and state.next_source_index == 8
        r = c.append_steps("conv-loop", messages=[{"role": "assistant", "content": "Replanning."}])
        assert r.recommendation.id == out.next.id
        # reporting the same failed outcome again does not escalate twice
        dup = c.report_outcome(first.id, success=False)
        assert not dup.escalated and dup.next is None
        last = c.report_outcome(out.next.id, success=False)
        assert last.next is not None and last.next.strategy == "human_handoff"
        end = c.report_outcome(last.next.id, success=False)  # never a loop past human_handoff
        assert not end.escalated
        # the stored trace is redacted; the history holds the recommendations and outcomes
        detail = c.get_trace(state.trace_id)
        assert "[REDACTED:email]" in detail.trace["steps"][0]["content"]
        assert [o.success for o in detail.outcomes] == [False, False, False]  # the repeat is not stored
        assert [x.strategy for x in detail.recommendations] == ["rollback", "replan_global", "human_handoff"]
    # what this test did shows in /metrics (here, not in a later test: under xdist that one may run first)
    assert httpx.get(f"{srv.url}/metrics").status_code == 401  # /metrics needs a key
    text = httpx.get(f"{srv.url}/metrics", headers={"Authorization": f"Bearer {keys['acme']}"}).text
    assert 'triage_failures_total{kind="loop"}' in text
    assert 'triage_outcomes_total{result="failure",strategy="rollback"}' in text
    assert "# TYPE triage_request_duration_seconds histogram" in text  # buckets: per worker, once it served one


def test_appends_name_the_source_index_of_each_message(server: tuple[LiveServer, dict[str, str]]) -> None:
    """``appended`` are step indices; ``source_indices`` one per message (what an executor that
    keeps messages maps a rollback's ``to_source_index`` with)."""
    srv, keys = server
    with TriageClient(srv.url, api_key=keys["acme"], **STRICT) as c:
        r = c.append_steps("conv-indices", messages=[{"role": "user", "content": "Weather in Paris and Rome?"}])
        assert (r.appended, r.source_indices) == ([0], [0])
        both = {"role": "assistant", "content": "Checking both.", "tool_calls": [
            {**_call(0)["tool_calls"][0], "id": "a"}, {**_call(1, args='{"q": "rome weather"}')["tool_calls"][0], "id": "b"}]}
        r = c.append_steps("conv-indices", messages=[both])
        assert (r.appended, r.source_indices) == ([1, 2, 3], [1])  # text and two calls: three steps, one message
        r = c.append_steps("conv-indices", messages=[{"role": "tool", "tool_call_id": "a", "content": "18 C"},
                                                     {"role": "tool", "tool_call_id": "b", "content": "21 C"}])
        assert (r.appended, r.source_indices) == ([4, 5], [2, 3])


def test_tools_in_the_providers_own_shapes_are_read(server: tuple[LiveServer, dict[str, str]]) -> None:
    """OpenAI's ``{"type": "function", "function": {…}}`` and Anthropic's ``input_schema`` tool
    definitions (a 422 before), so a call that breaks the schema is found either way."""
    srv, keys = server
    h = {"Authorization": f"Bearer {keys['acme']}"}
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    shapes = {"openai": {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                                          "parameters": schema, "strict": True}},
              "anthropic": {"name": "get_weather", "description": "Weather.", "input_schema": schema}}
    for name, tool in shapes.items():
        r = httpx.post(f"{srv.url}/v1/sessions/tools-{name}/steps", headers=h, json={
            "tools": [tool],
            "messages": [{"role": "user", "content": "Weather in Oslo?"}, _call(0, "get_weather", '{"town": "Oslo"}')]})
        assert r.status_code == 200, r.text
        kinds = {f["kind"] for f in r.json()["failures"] + r.json()["signals"]}
        assert "malformed_call" in kinds, (name, r.json())
    r = httpx.post(f"{srv.url}/v1/sessions/tools-bad/steps", headers=h, json={
        "tools": [{"type": "function", "function": {"name": "f", "colour": "red"}}],
        "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 422 and "colour" in r.text


def test_budget_spent_ends_in_human_handoff(server: tuple[LiveServer, dict[str, str]]) -> None:
    srv, keys = server
    opts = {"fallback_models": ["gpt-small"]}
    with TriageClient(srv.url, api_key=keys["acme"], **STRICT) as c:
        c.append_steps("conv-timeout", messages=[{"role": "user", "content": "Book it."}], options=opts)
        c.append_steps("conv-timeout", messages=[_call(0, "book", '{"id": 7}')], options=opts)
        r = c.append_steps(
            "conv-timeout",
            steps=[
                {
                    "kind": "tool_result",
                    "tool_name": "book",
                    "call_id": "c0",
                    "content": "timed out",
                    "status": "timeout",
                }
            ],
            options=opts,
        )
        assert r.primary is not None and (r.primary.kind, r.primary.step) == ("timeout", 2)
        rec = r.recommendation
        seen = [(rec.strategy, rec.params.get("attempt"))]
        for _ in range(6):
            out = c.report_outcome(rec.id, success=False)
            if out.next is None:
                break
            rec = out.next
            seen.append((rec.strategy, rec.params.get("attempt")))
        assert seen == [
            ("retry", 1),
            ("retry", 2),
            ("retry", 3),
            ("adjust_parameters", None),
            ("fallback_model", None),
            ("human_handoff", None),
        ]
        assert rec.params["reason"] == "per-failure budget spent: 3 rungs"
        assert rec.budgets["task_recommendations_left"] == 0
        assert c.report_outcome(rec.id, success=False).next is None  # handed off: nothing further


def test_tenants_cannot_read_each_other(server: tuple[LiveServer, dict[str, str]]) -> None:
    srv, keys = server
    trace = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    with TriageClient(srv.url, api_key=keys["acme"], **STRICT) as a, TriageClient(srv.url, api_key=keys["globex"], **STRICT) as b:
        mine = a.diagnose(trace)
        a.append_steps("shared-name", messages=[{"role": "user", "content": "acme's"}])
        assert a.get_trace(mine.trace_id).id == mine.trace_id
        for call in (lambda: b.get_trace(mine.trace_id), lambda: b.get_session("shared-name")):
            with pytest.raises(TriageAPIError) as exc:
                call()
            assert exc.value.status_code == 404
        assert mine.trace_id not in [t.id for t in b.list_traces(limit=500).items]
        # the same session name in another tenant is another session
        theirs = b.append_steps("shared-name", messages=[{"role": "user", "content": "globex's"}])
        assert theirs.appended == [0]
        r = httpx.get(
            f"{srv.url}/v1/traces/{mine.trace_id}/graph",
            headers={"Authorization": f"Bearer {keys['globex']}"},
        )
        assert r.status_code == 404


def test_concurrent_appends_to_one_session_lose_nothing(server: tuple[LiveServer, dict[str, str]]) -> None:
    srv, keys = server
    with TriageClient(srv.url, api_key=keys["acme"], **STRICT) as c:

        def append(i: int) -> list[int]:
            return c.append_steps(
                "conv-race", messages=[{"role": "user", "content": f"message {i}"}]
            ).appended

        with ThreadPoolExecutor(max_workers=6) as pool:
            got = list(pool.map(append, range(24)))
        assert sorted(i for a in got for i in a) == list(range(24))
        state = c.get_session("conv-race")
        assert state.steps == 24 and state.next_source_index == 24
        detail = c.get_trace(state.trace_id)
        assert sorted(s["content"] for s in detail.trace["steps"]) == sorted(
            f"message {i}" for i in range(24)
        )
        assert [s["source_index"] for s in detail.trace["steps"]] == list(range(24))


def test_bad_input_and_unknown_ids(server: tuple[LiveServer, dict[str, str]]) -> None:
    srv, keys = server
    h = {"Authorization": f"Bearer {keys['acme']}"}
    r = httpx.post(f"{srv.url}/v1/sessions/s/steps", json={"options": {}}, headers=h)
    assert r.status_code == 422 and "exactly one of `messages` or `steps`" in r.text
    r = httpx.post(
        f"{srv.url}/v1/sessions/s/steps", json={"messages": [{"role": "robot", "content": "x"}]}, headers=h
    )
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:3] == ["body", "messages", 0]
    r = httpx.post(
        f"{srv.url}/v1/sessions/s/steps",
        content=b'{"messages": [',
        headers={**h, "Content-Type": "application/json"},
    )
    assert r.status_code == 422
    assert httpx.get(f"{srv.url}/v1/sessions/never-seen", headers=h).status_code == 404
    r = httpx.post(f"{srv.url}/v1/outcomes", json={"recommendation_id": "nope", "success": True}, headers=h)
    assert r.status_code == 404
    big = {"messages": [{"role": "user", "content": "x" * (6 * 1024 * 1024)}]}
    assert httpx.post(f"{srv.url}/v1/sessions/s/steps", json=big, headers=h).status_code == 413


def test_sigkill_mid_load_loses_no_acknowledged_trace(tmp_path: Path) -> None:
    """Two workers under load, the master SIGKILLed: every acknowledged trace is stored, and each
    stored trace's stream observations were applied exactly once, in order (the agent's streams
    count them with no gap and no repeat), whichever worker took it."""
    keys = _keys(tmp_path, "acme")
    env = {"TRIAGE_DATA_DIR": str(tmp_path), "TRIAGE_AUTH": "on", "TRIAGE_CLASSIFIER": "false"}
    srv = LiveServer(env=env, args=["--workers", "2"]).wait_ready()
    acked: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def load(worker: int) -> None:
        with httpx.Client(
            base_url=srv.url, headers={"Authorization": f"Bearer {keys['acme']}"}, timeout=5
        ) as h:
            n = 0
            while not stop.is_set():
                tid = f"w{worker}-{n}"
                n += 1
                body = {
                    "trace": {
                        "id": tid,
                        "steps": [
                            {"kind": "user_input", "content": "hi"},
                            {"kind": "final_output", "content": "ok"},
                        ],
                    }
                }
                try:
                    r = h.post("/v1/diagnose", json=body)
                except httpx.HTTPError:
                    return  # the server is gone
                if r.status_code == 200:
                    with lock:
                        acked.append(r.json()["trace_id"])

    threads = [threading.Thread(target=load, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while len(acked) < 150 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(srv.proc.pid, signal.SIGKILL)  # mid-load: requests are in flight
    srv.proc.wait()
    stop.set()
    for t in threads:
        t.join()
    assert len(acked) >= 150
    restarted = LiveServer(env=env).wait_ready()
    try:
        with TriageClient(restarted.url, api_key=keys["acme"], **STRICT) as c:
            stored: set[str] = set()
            cursor = None
            while True:
                page = c.list_traces(limit=500, cursor=cursor)
                stored |= {t.id for t in page.items}
                cursor = page.next_cursor
                if cursor is None:
                    break
        assert set(acked) <= stored
    finally:
        restarted.stop()
    from sqlalchemy import create_engine, text

    engine = create_engine(f"sqlite:///{tmp_path / 'triage.db'}")
    with engine.connect() as conn:
        streams = {r.name: r.n for r in conn.execute(text("SELECT name, n FROM streams WHERE tenant_id = 'acme'"))}
        obs = conn.execute(text("SELECT stream, seq, trace_id FROM observations WHERE tenant_id = 'acme'")).all()
    engine.dispose()
    assert {"output_chars", "failure_probability"} <= set(streams)
    for name, n in streams.items():
        mine = [o for o in obs if o.stream == name]
        assert sorted(o.seq for o in mine) == list(range(n))  # each applied once, in one order
        fed = [o.trace_id for o in mine]
        assert len(fed) == len(set(fed)) and set(fed) == stored  # one per stored trace, none of a lost one


def _degradation(resp: Any) -> list[tuple[str, str, bool]]:
    return [
        (where, f.details["stream"], f.details["beyond"])
        for where, found in (("failure", resp.failures), ("signal", resp.signals))
        for f in found
        if f.kind == "degradation"
    ]


def test_stream_alarm_is_a_fleet_signal_a_failure_out_of_band_until_rebaselined(
    server: tuple[LiveServer, dict[str, str]],
) -> None:
    import numpy as np

    from model.streams import detect, detect_changepoints

    srv, keys = server
    rng = np.random.default_rng(1)
    values = [round(float(v), 6) for v in np.r_[rng.normal(0.0, 1.0, 60), rng.normal(3.0, 1.0, 20)]]
    params = {"mean": 0.0, "std": 1.0, "shift": 1.0, "arl0": 500.0}
    expected = [a.index for a in detect(values, **params)]
    assert expected == [61]  # seeded: the shift at 60 is caught at 61, once
    h = {"Authorization": f"Bearer {keys['acme']}"}
    got: list[int] = []
    # three calls: the CUSUM state lives in the store between them (either worker may answer)
    for lo, hi in ((0, 25), (25, 61), (61, 80)):
        body: dict[str, Any] = {"values": values[lo:hi], "task_type": "ops", "params": params}
        r = httpx.post(f"{srv.url}/v1/streams/meta.quality/observations", json=body, headers=h)
        assert r.status_code == 200, r.text
        got += [a["index"] for a in r.json()["alarms"]]
        if lo == 61:
            assert r.json()["alarms"][0]["bound"] == 1.0  # mean + shift * std
    assert got == expected
    assert r.json()["n"] == 80 and r.json()["alarm_open"] is True
    gauge = 'triage_stream_alarm_open{agent="ops",direction="up",stream="meta.quality",tenant="acme"} 1.0'
    assert gauge in httpx.get(f"{srv.url}/metrics", headers=h).text  # acme: an operator here
    globex = {"Authorization": f"Bearer {keys['globex']}"}
    assert 'stream="meta.quality"' not in httpx.get(f"{srv.url}/metrics", headers=globex).text  # its own only

    def native(quality: float, task_type: str = "ops") -> dict[str, Any]:
        return {
            "task_type": task_type,
            "metadata": {"quality": quality},
            "steps": [{"kind": "user_input", "content": "hi"}, {"kind": "final_output", "content": "hello"}],
        }

    by_task = {"agent_from_task_type": True}  # these runs say which agent they are by their task type
    with TriageClient(srv.url, api_key=keys["acme"], **STRICT) as c:
        plain = c.diagnose(
            {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
        )
        # (the run scorer may find these two-step runs failed; what is asserted is degradation)
        assert not _degradation(plain)  # an inferred agent ≠ "ops"
        within = c.diagnose(native(0.4), options=by_task)  # the fleet drifted; this trace did not
        assert _degradation(within) == [("signal", "meta.quality", False)]
        d = c.diagnose(native(2.5), options=by_task)  # this trace's own quality is beyond the bound
        assert _degradation(d) == [("failure", "meta.quality", True)]
        deg = [f for f in d.failures if f.kind == "degradation"]
        assert deg[0].details["alarm"]["index"] == 61 and deg[0].details["value"] == 2.5
        assert not d.healthy
        other = c.diagnose(native(2.5, "chat"), options=by_task)
        assert not _degradation(other)
        unnamed = c.diagnose({k: v for k, v in native(2.5).items() if k != "task_type"})
        assert not _degradation(unnamed)  # a task type names no agent unless the caller says so
        # the same stream name in another tenant is another stream
        r = httpx.get(
            f"{srv.url}/v1/streams/meta.quality/changepoints",
            params={"task_type": "ops"},
            headers={"Authorization": f"Bearer {keys['globex']}"},
        )
        assert r.status_code == 404
        r = httpx.get(
            f"{srv.url}/v1/streams/meta.quality/changepoints", params={"task_type": "ops"}, headers=h
        )
        assert r.status_code == 200
        assert r.json()["changepoints"] == detect_changepoints(values, max_points=None).changepoints
        assert any(abs(cp - 60) <= 2 for cp in r.json()["changepoints"])
        r = httpx.post(
            f"{srv.url}/v1/streams/meta.quality/observations",
            json={"values": [3.1], "task_type": "ops", "rebaseline": True},
            headers=h,
        )
        assert r.status_code == 200 and r.json()["alarm_open"] is False
        time.sleep(ALARM_CACHE_S)  # the worker that answers next may have read the alarm just before
        assert not _degradation(c.diagnose(native(2.5), options=by_task))
    assert 'stream="meta.quality"' not in httpx.get(f"{srv.url}/metrics", headers=h).text


def test_async_client(server: tuple[LiveServer, dict[str, str]]) -> None:
    import asyncio


    srv, keys = server

    async def run() -> tuple[str, list[int], bool]:
        async with AsyncTriageClient(srv.url, api_key=keys["acme"], **STRICT) as c:
            r = await c.append_steps("conv-async", messages=[{"role": "user", "content": "hi"}])
            d = await c.diagnose(
                {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]}
            )
            out = (
                await c.report_outcome(d.recommendation.id, success=True)
                if d.recommendation.strategy != "continue"
                else None
            )
            return d.primary.kind if d.primary else "", r.appended, bool(out and out.recorded)

    kind, appended, recorded = asyncio.run(run())
    assert appended == [0] and kind == "empty_response" and recorded


def test_diagnosed_traces_feed_streams_after_the_answer(server: tuple[LiveServer, dict[str, str]]) -> None:
    from model.data.builder import make_trace

    srv, keys = server
    h = {"Authorization": f"Bearer {keys['globex']}"}
    with TriageClient(srv.url, api_key=keys["globex"], **STRICT) as c:
        for seed in range(3):
            t = make_trace(None, seed=seed, n_steps=6)
            t.task_type = "autofeed"
            c.diagnose(t.model_dump(mode="json", exclude_none=True), options={"agent_from_task_type": True})
    deadline = time.monotonic() + 5
    n = 0
    while time.monotonic() < deadline and n < 3:
        r = httpx.get(
            f"{srv.url}/v1/streams/latency_ms/changepoints", params={"task_type": "autofeed"}, headers=h
        )
        n = r.json()["n"] if r.status_code == 200 else 0
        time.sleep(0.05)
    assert n == 3
