"""An OpenAI Agents SDK agent repaired by agent-triage: a tool's 503 and a provider's 503
retried, a loop rolled back — offline.

The model is a scripted stand-in (:class:`ScriptedModel`, an ``agents.Model``, **not an LLM**):
it answers by rules on its input, and follows an instruction agent-triage injects. Faults are
injected by the tool and by the model. Nothing leaves 127.0.0.1 but the calls to your
``triage serve``::

    triage serve &                                   # or: make run
    python client/examples/openai_agents_repair.py --url http://127.0.0.1:8000 --key "$(cat .triage/local.key)"

Each scenario runs without triage (how the agent fails) and with :class:`TriageRepair`:

``503``       the ``weather`` tool's first call raises an HTTP 503: ``retry``.
``provider``  the model's first call raises a provider's 503: ``retry`` of the model call.
``loop``      the model searches for the same thing again and again: caught on the third repeat's
              result, rolled back to before the loop with the service's instruction, which the
              model follows (it asks ``weather``).
"""

from __future__ import annotations

import argparse
import json
import os
import uuid
from typing import Any

from agent_triage_client import TriageClient
from agent_triage_client.openai_agents import TriageRepair
from agents import (
    Agent,
    MaxTurnsExceeded,
    Model,
    ModelResponse,
    RunConfig,
    Runner,
    Usage,
    UserError,
    function_tool,
)
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText


class HTTPError(Exception):
    """An HTTP error (``status`` is what the triage rules read)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


class ScriptedModel(Model):
    """Not an LLM: a deterministic script over the input items. ``fail_first``: its first calls
    raise a provider's 503."""

    def __init__(self, scenario: str, fail_first: int = 0) -> None:
        self.scenario = scenario
        self.fail_first = fail_first
        self.calls = 0

    async def get_response(self, system_instructions: str | None, input: Any, model_settings: Any, tools: Any,
                           output_schema: Any, handoffs: Any, tracing: Any, **kwargs: Any) -> ModelResponse:
        self.calls += 1
        if self.calls <= self.fail_first:
            raise HTTPError(503, "503 Service Unavailable: the provider is overloaded")
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        names = {_get(i, "call_id"): _get(i, "name") for i in items if _get(i, "type") == "function_call"}
        last = items[-1]
        if _get(last, "type") == "function_call_output" and names.get(_get(last, "call_id")) == "weather":
            return self._text(f"In Paris today: {_get(last, 'output')}.")
        told = any(_get(i, "role") == "system" for i in items)  # an instruction from triage
        if self.scenario == "loop" and not told:
            return self._call("search", query="paris weather")
        return self._call("weather", city="Paris")

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    @staticmethod
    def _text(text: str) -> ModelResponse:
        msg = ResponseOutputMessage(id=f"msg_{uuid.uuid4().hex[:8]}", role="assistant", status="completed",
                                    type="message",
                                    content=[ResponseOutputText(type="output_text", text=text, annotations=[])])
        return ModelResponse(output=[msg], usage=Usage(), response_id=None)

    @staticmethod
    def _call(name: str, **args: Any) -> ModelResponse:
        cid = f"call_{uuid.uuid4().hex[:8]}"
        call = ResponseFunctionToolCall(type="function_call", id=f"fc_{cid}", call_id=cid, name=name,
                                        arguments=json.dumps(args), status="completed")
        return ModelResponse(output=[call], usage=Usage(), response_id=None)


def make_tools(fail_first: int) -> tuple[list[Any], dict[str, int]]:
    """``weather`` (its first ``fail_first`` calls raise a 503) and ``search`` (finds nothing).
    ``failure_error_function=None``: the exception itself reaches triage (not the SDK's sentence)."""
    count = {"weather": 0, "search": 0}

    @function_tool(failure_error_function=None)
    def weather(city: str) -> str:
        """Today's weather in a city."""
        count["weather"] += 1
        if count["weather"] <= fail_first:
            raise HTTPError(503, "503 Service Unavailable")
        return "18 C, sunny"

    @function_tool(failure_error_function=None)
    def search(query: str) -> str:
        """Search the web."""
        count["search"] += 1
        return "no results"

    return [weather, search], count


def run(scenario: str, client: TriageClient | None, session_id: str, **executor_options: Any) -> dict[str, Any]:
    """One run of ``scenario`` (``"503"``, ``"provider"``, ``"loop"``); ``client=None``: without triage."""
    tools, count = make_tools(fail_first=1 if scenario == "503" else 0)
    model: Model = ScriptedModel(scenario, fail_first=1 if scenario == "provider" else 0)
    scripted = model
    repair = None
    hooks = None
    if client is not None:
        repair = TriageRepair(client, session_id, **executor_options)
        model, tools, hooks = repair.model(model), repair.tools(tools), repair.hooks
    agent = Agent(name="weather", instructions="You answer weather questions.", model=model, tools=tools)
    out: dict[str, Any] = {"scenario": scenario, "triage": client is not None, "answer": None, "error": None}
    try:
        result = Runner.run_sync(agent, "What's the weather in Paris today?", hooks=hooks, max_turns=15,
                                 run_config=RunConfig(tracing_disabled=True))
        out["answer"] = result.final_output
    except (HTTPError, MaxTurnsExceeded, UserError) as exc:  # UserError: how the SDK re-raises a tool exception
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["strategies"] = [r.strategy for r in repair.bridge.repairs] if repair else []
    out["model_calls"] = scripted.calls  # type: ignore[attr-defined]
    out["tool_calls"] = dict(count)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=os.environ.get("TRIAGE_URL", "http://127.0.0.1:8000"))
    ap.add_argument("--key", default=os.environ.get("TRIAGE_API_KEY"))
    a = ap.parse_args()
    with TriageClient(a.url, api_key=a.key) as client:
        for scenario in ("503", "provider", "loop"):
            for c in (None, client):
                r = run(scenario, c, f"example-oa-{scenario}-{uuid.uuid4().hex[:8]}")
                print(f"{scenario:>8} {'with' if r['triage'] else 'without'} triage: "
                      f"{r['answer'] or r['error']} | repairs {r['strategies']} | "
                      f"model calls {r['model_calls']}, tool calls {r['tool_calls']}")


if __name__ == "__main__":
    main()
