"""The client's framework adapters with the real frameworks, streaming to a real ``triage serve``:
a LangChain callback handler on chat-model and tool runs, and an OpenAI Agents SDK tracing
processor on the SDK's own spans. A 503 the agent ignored and a 3× repeated call are caught at
the right step while the run goes on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from agent_triage_client import TriageClient

from tests.conftest import LiveServer

pytestmark = pytest.mark.slow


@pytest.fixture
def client(live_server: LiveServer) -> Iterator[TriageClient]:
    with TriageClient(live_server.url, timeout_s=60, budget_s=120, fail_open=False) as c:
        yield c


def test_langchain_callback_handler_streams_the_run(client: TriageClient) -> None:
    from agent_triage_client.langchain import TriageCallbackHandler
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
    from langchain_core.tools import tool

    @tool
    def search(q: str) -> str:
        """Search the web."""
        return "no results"

    @tool
    def weather(city: str) -> str:
        """Today's weather in a city."""
        raise RuntimeError("503 Service Unavailable")

    calls = [AIMessage(content="", tool_calls=[{"id": f"c{i}", "name": "search", "args": {"q": "paris weather"}}])
             for i in range(3)]
    model = FakeMessagesListChatModel(responses=[*calls, AIMessage(content="Paris is sunny, 18C.")])
    seen: list[Any] = []
    handler = TriageCallbackHandler(client, "lc-loop", on_diagnosis=seen.append)
    config: Any = {"callbacks": [handler]}
    messages: list[BaseMessage] = [HumanMessage(content="Weather in Paris?")]
    for _ in range(4):
        ai = model.invoke(messages, config=config)
        messages.append(ai)
        for tc in getattr(ai, "tool_calls", []):
            messages.append(search.invoke(tc, config=config))
    last = handler.stream.last
    assert last is not None and last.session_steps == 8 and len(seen) == 8  # history not sent twice
    # caught on the result of the third repeat, while the run went on
    assert [(f.kind, f.source_index) for f in seen[6].failures] == [("loop", 6)]
    assert ("loop", 6) in {(f.kind, f.source_index) for f in last.failures}
    view = client.get_session("lc-loop")
    assert view.last is not None and view.last.primary is not None
    # the answer after "no results" is made up too: with a classifier whose gate trusts hallucination
    # (gate.json) that critical failure is primary, else the loop is
    assert (view.last.primary.kind, view.last.primary.source_index) in {("loop", 6), ("hallucination", 7)}

    # a tool that raised, then an answer that ignores it
    handler = TriageCallbackHandler(client, "lc-503")
    model = FakeMessagesListChatModel(responses=[
        AIMessage(content="", tool_calls=[{"id": "w1", "name": "weather", "args": {"city": "Lisbon"}}]),
        AIMessage(content="Tomorrow in Lisbon it will be sunny with a high of 24C."),
    ])
    messages = [HumanMessage(content="Weather in Lisbon tomorrow?")]
    ai = model.invoke(messages, config=config | {"callbacks": [handler]})
    messages.append(ai)
    with pytest.raises(RuntimeError):
        weather.invoke(ai.tool_calls[0], config={"callbacks": [handler]})
    messages.append(ToolMessage(content="503 Service Unavailable", tool_call_id="w1", status="error"))
    model.invoke(messages, config={"callbacks": [handler]})
    last = handler.stream.last
    assert last is not None
    kinds = {(f.kind, f.step) for f in last.failures}
    assert ("tool_error", 2) in kinds and ("ignored_error", 3) in kinds, kinds
    assert last.session_steps == 4  # the error ToolMessage repeated in the input is not sent twice


def test_openai_agents_tracing_processor_streams_the_run(client: TriageClient) -> None:
    from agent_triage_client.openai_agents import TriageTracingProcessor
    from agents.tracing import (
        SpanError,
        agent_span,
        function_span,
        generation_span,
        response_span,
        set_trace_processors,
        trace,
    )
    from openai.types.responses import Response

    processor = TriageTracingProcessor(client)
    set_trace_processors([processor])
    try:
        user = {"role": "user", "content": "Weather in Paris?"}
        history: list[dict[str, Any]] = [user]
        with trace("weather agent", group_id="oa-loop"), agent_span("forecaster"):
            for i in range(3):
                call = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"c{i}", "type": "function",
                     "function": {"name": "search", "arguments": '{"q": "paris weather"}'}}]}
                with generation_span(input=list(history), output=[call], model="gpt-4o-mini"):
                    pass
                with function_span("search", input='{"q": "paris weather"}') as fs:
                    fs.span_data.output = "no results"
                history += [call, {"role": "tool", "tool_call_id": f"c{i}", "content": "no results"}]
            processor.force_flush()
            view = client.get_session("oa-loop")  # read while the run goes on
            assert view.steps == 7 and [(f.kind, f.source_index) for f in view.failures] == [("loop", 6)]
            assert view.agent == "forecaster"  # the run's agent span names the session's agent

        # Responses API items, a tool span that failed, and an answer that ignores it
        def response(output: list[dict[str, Any]]) -> Response:
            return Response.model_validate({"id": "resp", "created_at": 0, "model": "gpt-4o-mini",
                                            "object": "response", "output": output, "parallel_tool_calls": True,
                                            "tool_choice": "auto", "tools": []})

        fc = {"type": "function_call", "id": "fc1", "call_id": "w1", "name": "weather",
              "arguments": json.dumps({"city": "Lisbon"}), "status": "completed"}
        with trace("weather agent", group_id="oa-503"):
            with response_span(response=response([fc])) as rs:
                rs.span_data.input = "Weather in Lisbon tomorrow?"
            with function_span("weather", input='{"city": "Lisbon"}') as fs:
                fs.set_error(SpanError(message="Error running tool", data={"error": "503 Service Unavailable"}))
            answer = {"type": "message", "id": "m1", "role": "assistant", "status": "completed",
                      "content": [{"type": "output_text", "text": "Tomorrow it will be sunny, 24C.",
                                   "annotations": []}]}
            with response_span(response=response([answer])) as rs:
                rs.span_data.input = [{"role": "user", "content": "Weather in Lisbon tomorrow?"}, fc,
                                      {"type": "function_call_output", "call_id": "w1", "output": "error"}]
        view = client.get_session("oa-503")
        assert view.steps == 4 and view.last is not None
        kinds = {(f.kind, f.source_index) for f in view.last.failures}
        assert ("tool_error", 2) in kinds and ("ignored_error", 3) in kinds, kinds
    finally:
        set_trace_processors([])


def _example(name: str) -> Any:
    """A module of client/examples/, imported from its file (the examples are scripts, not a package)."""
    import importlib.util
    import sys

    from tests.conftest import ROOT

    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "client" / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the example's annotations through it
    spec.loader.exec_module(module)
    return module


def test_langchain_middleware_example_recovers_a_503_and_a_loop(client: TriageClient) -> None:
    """The done-when test of issue 14 item 2: the example's LangChain v1 agent (a scripted stand-in
    model, create_agent, the real graph) against a real `triage serve`."""
    ex = _example("langchain_middleware")
    waits: list[float] = []

    # without the middleware the injected faults end the runs: the 503 raises, the loop hits the recursion limit
    bare = ex.run("503", None, "unused")
    assert bare["answer"] is None and bare["error"].startswith("HTTPError: 503")
    bare = ex.run("loop", None, "unused")
    assert bare["answer"] is None and bare["error"].startswith("GraphRecursionError")
    assert bare["tool_calls"] == {"weather": 0, "search": 15}

    # the 503: retried after the service's backoff; the repeated call's result reaches the model
    r = ex.run("503", client, "lc-mw-503", sleep=waits.append)
    assert r["answer"] == "In Paris today: 18 C, sunny." and r["error"] is None
    assert r["strategies"] == ["retry"] and r["tool_calls"] == {"weather": 2, "search": 0}
    assert r["model_calls"] == 2 and len(waits) == 1 and waits[0] > 0  # one wait, the service's delay
    view = client.get_session("lc-mw-503")
    assert [(f.key, f.status) for f in view.failures] == [("tool_error@2", "resolved")]
    detail = client.get_trace(view.trace_id)
    assert [(o.strategy, o.success) for o in detail.outcomes] == [("retry", True)]
    # the session saw the failed call, then the repaired one (two results for call 1), then the answer
    steps = detail.trace["steps"]
    assert [s["kind"] for s in steps] == ["user_input", "tool_call", "tool_result", "tool_result", "final_output"]
    assert steps[2]["status"] == "error" and steps[3].get("status", "ok") == "ok"

    # a provider's 503 on the model call: an error step, the model call repeated
    r = ex.run("provider", client, "lc-mw-provider", sleep=waits.append)
    assert r["answer"] == "In Paris today: 18 C, sunny." and r["strategies"] == ["retry"]
    assert r["model_calls"] == 3 and len(waits) == 2  # calls: the failed one, its retry, the answer; one more wait
    view = client.get_session("lc-mw-provider")
    assert [(f.key, f.status) for f in view.failures] == [("provider_error@1", "resolved")]
    detail = client.get_trace(view.trace_id)
    assert [(o.strategy, o.success) for o in detail.outcomes] == [("retry", True)]

    # the loop: caught on the third repeat's result, rolled back, the model follows the instruction
    r = ex.run("loop", client, "lc-mw-loop")
    assert r["answer"] == "In Paris today: 18 C, sunny." and r["error"] is None
    assert r["strategies"] == ["rollback"] and r["tool_calls"] == {"weather": 1, "search": 3}
    view = client.get_session("lc-mw-loop")
    assert [(f.key, f.status) for f in view.failures] == [("loop@6", "resolved")]
    detail = client.get_trace(view.trace_id)
    assert [(o.strategy, o.success) for o in detail.outcomes] == [("rollback", True)]
    # what the model was given after the rollback: the conversation before the loop + the instruction
    kinds = [s["kind"] for s in detail.trace["steps"]]
    assert kinds[:7] == ["user_input", *["tool_call", "tool_result"] * 3]
    assert kinds[7] == "system" and "undone" in detail.trace["steps"][7]["content"]


def test_openai_agents_repair_example_recovers_503s_and_a_loop(client: TriageClient) -> None:
    ex = _example("openai_agents_repair")
    bare = {sc: ex.run(sc, None, "unused") for sc in ("503", "provider", "loop")}
    assert bare["503"]["error"].startswith("UserError: Error running tool weather: 503")
    assert bare["provider"]["error"].startswith("HTTPError: 503")
    assert bare["loop"]["error"].startswith("MaxTurnsExceeded") and bare["loop"]["tool_calls"]["search"] == 15
    waits: list[float] = []
    for sc, steps in (("503", {"weather": 2, "search": 0}), ("provider", {"weather": 1, "search": 0})):
        r = ex.run(sc, client, f"oa-rep-{sc}", sleep=waits.append)
        assert r["answer"] == "In Paris today: 18 C, sunny." and r["strategies"] == ["retry"], r
        assert r["tool_calls"] == steps
        detail = client.get_trace(client.get_session(f"oa-rep-{sc}").trace_id)
        assert [(o.strategy, o.success) for o in detail.outcomes] == [("retry", True)]
    assert len(waits) == 2 and all(w > 0 for w in waits)
    r = ex.run("loop", client, "oa-rep-loop")
    assert r["answer"] == "In Paris today: 18 C, sunny." and r["strategies"] == ["rollback"], r
    assert r["tool_calls"] == {"weather": 1, "search": 3} and r["model_calls"] == 5
    view = client.get_session("oa-rep-loop")
    assert [(f.key, f.status) for f in view.failures] == [("loop@6", "resolved")]
    assert view.agent == "weather"  # the run's Agent names the session's agent (repair.hooks)
    detail = client.get_trace(view.trace_id)
    assert [(o.strategy, o.success) for o in detail.outcomes] == [("rollback", True)]


def test_the_adapters_leave_the_agent_alone_in_the_shadow_arm_and_when_triage_is_down(tmp_path: Any) -> None:
    """``continue`` everywhere — a canary's shadow arm (TRIAGE_REPAIR_CANARY_PERCENT=0), or no
    service at all — and the agents fail exactly as without triage, having been observed."""
    lc, oa = _example("langchain_middleware"), _example("openai_agents_repair")
    server = LiveServer(env={"TRIAGE_AUTH": "off", "TRIAGE_DATA_DIR": str(tmp_path), "TRIAGE_CLASSIFIER": "false",
                             "TRIAGE_REPAIR_CANARY_PERCENT": "0"}).wait_ready()
    try:
        with TriageClient(server.url, timeout_s=60, budget_s=120, fail_open=False) as c:
            r = lc.run("503", c, "shadow-lc")
            assert r["error"].startswith("HTTPError: 503") and r["strategies"] == []
            r = oa.run("loop", c, "shadow-oa")
            assert r["error"].startswith("MaxTurnsExceeded") and r["strategies"] == []
            view = c.get_session("shadow-lc")  # diagnosed and recorded all the same
            assert view.last is not None and view.last.arm == "shadow"
            assert [f.kind for f in view.last.failures] == ["tool_error"]
    finally:
        server.stop()
    with TriageClient("http://127.0.0.1:9", budget_s=0.2) as down:  # nothing listens: fail-open
        r = lc.run("loop", down, "down-lc")
        assert r["error"].startswith("GraphRecursionError") and r["strategies"] == []
        r = oa.run("503", down, "down-oa")
        assert r["error"].startswith("UserError") and r["strategies"] == []


def test_langchain_middleware_switches_tools_hands_off_and_falls_back(client: TriageClient) -> None:
    """The rest of the ladder through the middleware: a tool gone for good switches to its
    equivalent; without one the run ends in a handoff; a provider down for good falls back to
    another model; a call of a tool outside the allow-list is blocked before it runs."""
    from agent_triage_client.langchain_middleware import TriageMiddleware
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langchain_core.tools import tool

    ex = _example("langchain_middleware")
    ran: list[str] = []

    @tool
    def weather(city: str) -> str:
        """Today's weather in a city."""
        ran.append("weather")
        raise ex.HTTPError(404, "404 Not Found: this weather service was retired")

    @tool
    def weather_alt(city: str) -> str:
        """Today's weather in a city (another provider)."""
        ran.append("weather_alt")
        return "19 C, clear"

    @tool
    def delete_files(path: str) -> str:
        """Delete files."""
        ran.append("delete_files")
        return "deleted"

    def answer(messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage) and last.status != "error":
            return AIMessage(content=f"In Paris today: {last.content}.")
        return ex._call("weather", city="Paris")

    def answer_alt(messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return AIMessage(content=f"In Paris today: {last.content}.")
        return ex._call("weather_alt", city="Paris")

    def invoke(model: Any, tools: list[Any], mw: TriageMiddleware) -> Any:
        agent = create_agent(model, tools=tools, middleware=[mw])
        return agent.invoke({"messages": [{"role": "user", "content": "Weather in Paris?"}]},
                            config={"recursion_limit": 30})["messages"][-1]

    # a permanent 404 (no retry rung): switch_tool to the equivalent, whose result answers the call
    mw = TriageMiddleware(client, "lc-switch", equivalents={"weather": ["weather_alt"]}, sleep=lambda s: None)
    last = invoke(ex.ScriptedChatModel(script=answer), [weather, weather_alt], mw)
    assert last.content == "In Paris today: 19 C, clear." and ran == ["weather", "weather_alt"]
    assert [r.strategy for r in mw.bridge().repairs] == ["switch_tool"]
    assert [(f.key, f.status) for f in client.get_session("lc-switch").failures] == [("tool_error@2", "resolved")]

    # no equivalent: replan_local (the model tries again), then the end of the ladder: a handoff ends the run
    ran.clear()
    mw = TriageMiddleware(client, "lc-handoff", sleep=lambda s: None)
    last = invoke(ex.ScriptedChatModel(script=answer), [weather], mw)
    assert last.response_metadata["agent_triage"] == "handoff" and "end of the ladder" in last.content
    assert [(r.strategy, r.status) for r in mw.bridge().repairs] == [("replan_local", "pending"),
                                                                     ("human_handoff", "stopped")]
    assert ran == ["weather", "weather"]
    assert [(f.key, f.status) for f in client.get_session("lc-handoff").failures] == [("tool_error@2", "handoff")]

    # the provider stays down: retry (3 attempts), adjust_parameters, then the fallback model answers
    ran.clear()
    down = ex.ScriptedChatModel(script=answer_alt, fail_first=100)
    backup = ex.ScriptedChatModel(script=answer_alt)
    mw = TriageMiddleware(client, "lc-fallback", fallback_models={"backup": backup}, sleep=lambda s: None)
    last = invoke(down, [weather_alt], mw)
    assert last.content == "In Paris today: 19 C, clear."
    assert [r.strategy for r in mw.bridge().repairs] == ["retry", "adjust_parameters", "fallback_model"]
    assert down.calls == 5 and backup.calls == 2  # the call, 3 retries, 1 adjusted; the fallback's 2 turns
    assert mw.bridge().executor.model == "backup"

    # a call of a tool outside the allow-list: handed off with block, before the tool runs
    ran.clear()
    mw = TriageMiddleware(client, "lc-block", allowed_tools=["weather_alt"])
    last = invoke(ex.ScriptedChatModel(script=lambda m: ex._call("delete_files", path="/")),
                  [weather_alt, delete_files], mw)
    assert last.response_metadata["agent_triage"] == "handoff" and "withheld" in last.content
    assert ran == [] and [(r.strategy, r.status, r.blocked) for r in mw.bridge().repairs] == [
        ("human_handoff", "stopped", True)]


def test_openai_agents_repair_switches_tools_and_falls_back(client: TriageClient) -> None:
    """The Agents SDK side of the ladder: a retired tool switches to its equivalent, a provider
    down for good falls back to another model, and without an equivalent the run is handed off."""
    from agent_triage_client.openai_agents import TriageRepair
    from agents import Agent, RunConfig, Runner, function_tool

    ex = _example("openai_agents_repair")
    ran: list[str] = []

    @function_tool(failure_error_function=None)
    def weather(city: str) -> str:
        """Today's weather in a city."""
        ran.append("weather")
        raise ex.HTTPError(404, "404 Not Found: this weather service was retired")

    @function_tool(failure_error_function=None)
    def weather_alt(city: str) -> str:
        """Today's weather in a city (another provider)."""
        ran.append("weather_alt")
        return "19 C, clear"

    def run(repair: TriageRepair, model: Any, tools: list[Any]) -> Any:
        agent = Agent(name="weather", model=repair.model(model), tools=repair.tools(tools))
        return Runner.run_sync(agent, "Weather in Paris?", hooks=repair.hooks, max_turns=15,
                               run_config=RunConfig(tracing_disabled=True)).final_output

    repair = TriageRepair(client, "oa-switch", equivalents={"weather": ["weather_alt"]}, sleep=lambda s: None)
    answer = run(repair, ex.ScriptedModel("weather"), [weather, weather_alt])
    assert answer == "In Paris today: 19 C, clear." and ran == ["weather", "weather_alt"]
    assert [r.strategy for r in repair.bridge.repairs] == ["switch_tool"]
    assert [(f.key, f.status) for f in client.get_session("oa-switch").failures] == [("tool_error@2", "resolved")]

    ran.clear()
    repair = TriageRepair(client, "oa-handoff", sleep=lambda s: None)
    answer = run(repair, ex.ScriptedModel("weather"), [weather])
    assert answer == "[agent-triage handed this run off to a person: end of the ladder.]"
    assert [r.strategy for r in repair.bridge.repairs] == ["replan_local", "human_handoff"]

    @function_tool(name_override="weather", failure_error_function=None)
    def weather_up(city: str) -> str:
        """Today's weather in a city."""
        return "18 C, sunny"

    down, backup = ex.ScriptedModel("weather", fail_first=100), ex.ScriptedModel("weather")
    repair = TriageRepair(client, "oa-fallback", fallback_models={"backup": backup}, sleep=lambda s: None)
    answer = run(repair, down, [weather_up])
    assert answer == "In Paris today: 18 C, sunny."
    assert [r.strategy for r in repair.bridge.repairs] == ["retry", "adjust_parameters", "fallback_model"]
    assert down.calls == 5 and backup.calls == 2 and repair.executor.model == "backup"
