"""A LangChain v1 agent repaired by agent-triage: a tool's and a provider's 503 retried, a loop
rolled back — offline.

The model is a scripted stand-in (:class:`ScriptedChatModel`, **not an LLM**): it answers by
rules on the conversation, and follows an instruction agent-triage injects. Faults are injected
by the tools. Nothing leaves 127.0.0.1 but the calls to your ``triage serve``::

    triage serve &                                   # or: make run
    python client/examples/langchain_middleware.py --url http://127.0.0.1:8000 --key "$(cat .triage/local.key)"

Three runs, each first without the middleware (how the agent fails) and then with it:

``503``
    the ``weather`` tool answers its first call with an HTTP 503. Without triage the exception
    ends the run; with it the service recommends ``retry`` (after its backoff) and the repeated
    call's result reaches the agent, which answers.
``provider``
    the model's first call raises a provider's 503: without triage the run ends there; with it the
    model call is sent as an error step, and repeated as the service's ``retry`` says.
``loop``
    the model keeps calling ``search`` with the same query, which finds nothing. Without triage
    the graph runs into LangGraph's recursion limit; with it the loop is caught on the third
    repeat's result, the conversation is rolled back to before the loop with the service's
    instruction, and the model (following it) asks the ``weather`` tool instead.
"""

from __future__ import annotations

import argparse
import os
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from agent_triage_client import TriageClient
from agent_triage_client.langchain_middleware import TriageMiddleware
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.errors import GraphRecursionError


class ScriptedChatModel(BaseChatModel):
    """Not an LLM: ``script(messages) -> AIMessage`` decides each answer (deterministic)."""

    script: Callable[[list[BaseMessage]], AIMessage]
    fail_first: int = 0  # its first calls raise a provider's 503
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.calls += 1
        if self.calls <= self.fail_first:
            raise HTTPError(503, "503 Service Unavailable: the provider is overloaded")
        return ChatResult(generations=[ChatGeneration(message=self.script(messages))])

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(**kwargs)  # the tools are the script's business


def _call(name: str, **args: Any) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"id": f"call_{uuid.uuid4().hex[:8]}", "name": name, "args": args}])


def weather_script(messages: list[BaseMessage]) -> AIMessage:
    """Ask the weather tool, then answer with what it said."""
    last = messages[-1]
    if isinstance(last, ToolMessage) and last.status != "error":
        return AIMessage(content=f"In Paris today: {last.content}.")
    if isinstance(last, ToolMessage):
        return AIMessage(content="Sorry, the weather service failed.")
    return _call("weather", city="Paris")


def loop_script(messages: list[BaseMessage]) -> AIMessage:
    """Search for the weather again and again, until told otherwise (an instruction from triage:
    a system message); then ask the weather tool and answer."""
    last = messages[-1]
    called = {c["id"]: c["name"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    if isinstance(last, ToolMessage) and called.get(last.tool_call_id) == "weather":
        return AIMessage(content=f"In Paris today: {last.content}.")
    if any(isinstance(m, SystemMessage) for m in messages[1:]):  # [0]: the agent's system prompt
        return _call("weather", city="Paris")
    return _call("search", query="paris weather")


class HTTPError(Exception):
    """An HTTP error from a tool's backend (``status`` is what the triage rules read)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


def make_tools(fail_first: int) -> tuple[list[Any], dict[str, int]]:
    """``weather`` (its first ``fail_first`` calls answer 503) and ``search`` (finds nothing)."""
    count = {"weather": 0, "search": 0}

    @tool
    def weather(city: str) -> str:
        """Today's weather in a city."""
        count["weather"] += 1
        if count["weather"] <= fail_first:
            raise HTTPError(503, "503 Service Unavailable")
        return "18 C, sunny"

    @tool
    def search(query: str) -> str:
        """Search the web."""
        count["search"] += 1
        return "no results"

    return [weather, search], count


def run(scenario: str, client: TriageClient | None, session_id: str, **executor_options: Any) -> dict[str, Any]:
    """One run of ``scenario`` (``"503"``, ``"provider"`` or ``"loop"``); ``client=None``: without the middleware.
    Returns what happened: ``answer``, ``error`` (the exception that ended the run), ``strategies``
    carried out, ``model_calls`` and ``tool_calls``."""
    tools, count = make_tools(fail_first=1 if scenario == "503" else 0)
    model = ScriptedChatModel(script=loop_script if scenario == "loop" else weather_script,
                              fail_first=1 if scenario == "provider" else 0)
    middleware = []
    triage = None
    if client is not None:
        triage = TriageMiddleware(client, session_id, **executor_options)
        middleware.append(triage)
    agent = create_agent(model, tools=tools, middleware=middleware, system_prompt="You answer weather questions.")
    out: dict[str, Any] = {"scenario": scenario, "triage": client is not None, "answer": None, "error": None}
    try:
        state = agent.invoke({"messages": [{"role": "user", "content": "What's the weather in Paris today?"}]},
                             config={"recursion_limit": 30})
        out["answer"] = state["messages"][-1].content
    except (HTTPError, GraphRecursionError) as exc:
        out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    out["strategies"] = [r.strategy for r in triage.bridge(session_id).repairs] if triage else []
    out["model_calls"], out["tool_calls"] = model.calls, dict(count)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=os.environ.get("TRIAGE_URL", "http://127.0.0.1:8000"))
    ap.add_argument("--key", default=os.environ.get("TRIAGE_API_KEY"))
    a = ap.parse_args()
    with TriageClient(a.url, api_key=a.key) as client:
        for scenario in ("503", "provider", "loop"):
            for c in (None, client):
                r = run(scenario, c, f"example-{scenario}-{uuid.uuid4().hex[:8]}")
                print(f"{scenario:>8} {'with' if r['triage'] else 'without'} triage: "
                      f"{r['answer'] or r['error']} | repairs {r['strategies']} | "
                      f"model calls {r['model_calls']}, tool calls {r['tool_calls']}")


if __name__ == "__main__":
    main()
