"""Record one library's trace of the stub agent as a fixture (run by ``make integrations``, inside
that library's own venv; see tests/integrations/README.md).

    python tests/integrations/record.py LIBRARY OUT_DIR on|off

Writes ``OUT_DIR/LIBRARY.json`` (``on``: content capture on) or ``OUT_DIR/LIBRARY-content-off.json``
(``off``: the library's default, or its switch for hiding content; a process of its own, as the
libraries read their settings once), each ``{"library", "package",
"version", "content", "trace"}`` where ``trace`` is what the library emitted: OTLP/JSON for the
span instrumentations, encoded by the OpenTelemetry SDK's own OTLP encoder.
"""

from __future__ import annotations

import base64
import importlib.metadata
import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import agent  # noqa: E402
import stub_openai  # noqa: E402


def _otlp_json(spans: Any) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    doc: dict[str, Any] = MessageToDict(encode_spans(spans))
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for s in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if s.get(key):
                        s[key] = base64.b64decode(s[key]).hex()
    return doc


def _with_spans(instrument: Callable[[Any], Callable[[], None]], parent: bool = True) -> dict[str, Any]:
    """Run the agent under a fresh tracer provider with ``instrument(provider)`` applied."""
    from openai import OpenAI
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    uninstrument = instrument(provider)
    server = stub_openai.serve(0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = OpenAI(base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", api_key="sk-stub")
        if parent:  # the README's recipe: one parent span per run
            with provider.get_tracer("travel-agent").start_as_current_span(
                    "invoke_agent travel-agent",
                    attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "travel-agent"}):
                agent.run(client)
        else:
            agent.run(client)
    finally:
        server.shutdown()
        uninstrument()
    return _otlp_json(exporter.get_finished_spans())


def otel_openai_v2(content: bool) -> tuple[str, dict[str, Any]]:
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    if content:  # off: the default (NO_CONTENT)
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    def instrument(provider: Any) -> Callable[[], None]:
        inst = OpenAIInstrumentor()
        inst.instrument(tracer_provider=provider)
        return inst.uninstrument

    return "opentelemetry-instrumentation-openai-v2", _with_spans(instrument)


def openinference_openai(content: bool) -> tuple[str, dict[str, Any]]:
    os.environ["OPENINFERENCE_HIDE_INPUTS"] = "false" if content else "true"
    os.environ["OPENINFERENCE_HIDE_OUTPUTS"] = "false" if content else "true"
    from openinference.instrumentation.openai import OpenAIInstrumentor

    def instrument(provider: Any) -> Callable[[], None]:
        inst = OpenAIInstrumentor()
        inst.instrument(tracer_provider=provider)
        return inst.uninstrument

    return "openinference-instrumentation-openai", _with_spans(instrument)


def openllmetry_openai(content: bool) -> tuple[str, dict[str, Any]]:
    os.environ["TRACELOOP_TRACE_CONTENT"] = "true" if content else "false"
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    def instrument(provider: Any) -> Callable[[], None]:
        inst = OpenAIInstrumentor()
        inst.instrument(tracer_provider=provider)
        return inst.uninstrument

    return "opentelemetry-instrumentation-openai", _with_spans(instrument)


def _stub() -> tuple[Any, str]:
    server = stub_openai.serve(0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


def _langchain_agent(url: str) -> dict[str, Any]:
    """Run LangChain 1.x ``create_agent`` (``ChatOpenAI`` against the stub); its final state."""
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def search(query: str) -> str:
        """Search the web."""
        return agent.run_tool("search", {"query": query})

    @tool
    def get_weather(city: str, day: str = "today") -> str:
        """The forecast for a city."""
        return agent.run_tool("get_weather", {"city": city, "day": day})

    model = ChatOpenAI(model="gpt-4o-mini", base_url=url, api_key="sk-stub")  # type: ignore[arg-type]
    graph = create_agent(model=model, tools=[search, get_weather],
                         system_prompt="You are a travel assistant. Use the tools.")
    result: dict[str, Any] = graph.invoke({"messages": [{"role": "user", "content": agent.QUESTION}]})
    return result


def openinference_langchain(content: bool) -> tuple[str, dict[str, Any]]:
    """OpenInference's LangChain instrumentation on ``create_agent`` (its own root span per run)."""
    os.environ["OPENINFERENCE_HIDE_INPUTS"] = "false" if content else "true"
    os.environ["OPENINFERENCE_HIDE_OUTPUTS"] = "false" if content else "true"
    from openinference.instrumentation.langchain import LangChainInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    inst = LangChainInstrumentor()
    inst.instrument(tracer_provider=provider)
    server, url = _stub()
    try:
        _langchain_agent(url)
    finally:
        server.shutdown()
        inst.uninstrument()
    return "openinference-instrumentation-langchain", _otlp_json(exporter.get_finished_spans())


def langchain_create_agent(content: bool) -> tuple[str, Any]:
    """LangChain 1.x ``create_agent`` with ``ChatOpenAI``; the run's messages as
    ``messages_to_dict`` writes them (a message log: no content switch)."""
    from langchain_core.messages import messages_to_dict

    server, url = _stub()
    try:
        result = _langchain_agent(url)
    finally:
        server.shutdown()
    return "langchain", {"messages": messages_to_dict(result["messages"])}


def openai_agents(content: bool) -> tuple[str, Any]:
    """The OpenAI Agents SDK (Chat Completions model against the stub); the run as
    ``result.to_input_list()`` gives it: Responses API items (a message log)."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    @function_tool
    def search(query: str) -> str:
        """Search the web."""
        return agent.run_tool("search", {"query": query})

    @function_tool
    def get_weather(city: str, day: str = "today") -> str:
        """The forecast for a city."""
        return agent.run_tool("get_weather", {"city": city, "day": day})

    server, url = _stub()
    try:
        model = OpenAIChatCompletionsModel(model="gpt-4o-mini",
                                           openai_client=AsyncOpenAI(base_url=url, api_key="sk-stub"))
        bot = Agent(name="travel-agent", instructions="You are a travel assistant. Use the tools.",
                    tools=[search, get_weather], model=model)
        result = Runner.run_sync(bot, agent.QUESTION)
    finally:
        server.shutdown()
    return "openai-agents", result.to_input_list()


class _LiteLLMClient:
    """``client.chat.completions.create`` over ``litellm.completion`` (what the agent calls)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.chat = self
        self.completions = self

    def create(self, **kwargs: Any) -> Any:
        import litellm

        model = kwargs.pop("model")
        return litellm.completion(model=f"openai/{model}", api_base=self.url, api_key="sk-stub", **kwargs)


def _litellm_run(callback: Any) -> None:
    import time

    import litellm

    # no parent span: with one, LiteLLM writes every call's attributes onto the current span
    # instead of a span of its own (the calls collapse into one span holding the last call)
    litellm.callbacks = [callback]
    server, url = _stub()
    try:
        agent.run(_LiteLLMClient(url))
        time.sleep(2.0)  # LiteLLM runs its success callbacks on a worker thread
    finally:
        server.shutdown()


def litellm_otel(content: bool) -> tuple[str, dict[str, Any]]:
    """LiteLLM's own OpenTelemetry callback (``litellm.callbacks = [OpenTelemetry(...)]``)."""
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    import litellm
    from litellm.integrations.opentelemetry import OpenTelemetry, OpenTelemetryConfig
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    litellm.turn_off_message_logging = not content
    exporter = InMemorySpanExporter()
    _litellm_run(OpenTelemetry(config=OpenTelemetryConfig(exporter=exporter, skip_set_global=True)))
    return "litellm", _otlp_json(exporter.get_finished_spans())


def litellm_logging(content: bool) -> tuple[str, Any]:
    """LiteLLM's logging payload (``StandardLoggingPayload``, what a custom callback or its
    proxy logs) of the run's last call: the whole conversation and the answer."""
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    from litellm.integrations.custom_logger import CustomLogger

    payloads: list[Any] = []

    class Keep(CustomLogger):  # type: ignore[misc]
        def log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
            payloads.append(kwargs.get("standard_logging_object"))

    _litellm_run(Keep())
    return "litellm", json.loads(json.dumps(payloads[-1], default=str))


def openai_agents_trace(content: bool) -> tuple[str, Any]:
    """The OpenAI Agents SDK's native trace export: what its exporter posts (``{"data": [trace.export(),
    span.export(), …]}``), collected by a processor, for the same run (Chat Completions model)."""
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        RunConfig,
        Runner,
        function_tool,
        set_trace_processors,
    )
    from agents.tracing import TracingProcessor
    from openai import AsyncOpenAI

    items: list[Any] = []

    class Keep(TracingProcessor):  # type: ignore[misc]
        def on_trace_start(self, trace: Any) -> None: ...
        def on_trace_end(self, trace: Any) -> None:
            items.append(trace.export())
        def on_span_start(self, span: Any) -> None: ...
        def on_span_end(self, span: Any) -> None:
            items.append(span.export())
        def shutdown(self) -> None: ...
        def force_flush(self) -> None: ...

    set_trace_processors([Keep()])

    @function_tool
    def search(query: str) -> str:
        """Search the web."""
        return agent.run_tool("search", {"query": query})

    @function_tool
    def get_weather(city: str, day: str = "today") -> str:
        """The forecast for a city."""
        return agent.run_tool("get_weather", {"city": city, "day": day})

    server, url = _stub()
    try:
        model = OpenAIChatCompletionsModel(model="gpt-4o-mini",
                                           openai_client=AsyncOpenAI(base_url=url, api_key="sk-stub"))
        bot = Agent(name="travel-agent", instructions="You are a travel assistant. Use the tools.",
                    tools=[search, get_weather], model=model)
        Runner.run_sync(bot, agent.QUESTION, run_config=RunConfig(trace_include_sensitive_data=content))
    finally:
        server.shutdown()
    return "openai-agents", json.loads(json.dumps({"data": items}, default=str))


def langfuse_openai(content: bool) -> tuple[str, dict[str, Any]]:
    """Langfuse's SDK: its OpenAI drop-in (generations) and tool observations under an agent
    observation, exported by the SDK's own span pipeline; content off: a ``mask`` function, as
    Langfuse documents for hiding inputs and outputs."""
    from langfuse import Langfuse, propagate_attributes
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    lf = Langfuse(public_key="pk-lf-stub", secret_key="sk-lf-stub", host="http://127.0.0.1:9",
                  span_exporter=exporter, flush_at=1,
                  mask=None if content else (lambda *, data, **_: "[REDACTED]"))
    from langfuse.openai import OpenAI  # the drop-in, after the client exists

    plain = agent.run_tool

    def traced_tool(name: str, args: dict[str, Any]) -> str:
        with lf.start_as_current_observation(as_type="tool", name=name, input=args) as obs:
            out = plain(name, args)
            obs.update(output=out)
            return out

    agent.run_tool = traced_tool  # type: ignore[assignment]
    server, url = _stub()
    try:
        with lf.start_as_current_observation(as_type="agent", name="travel-agent", input=agent.QUESTION), \
                propagate_attributes(session_id="langfuse-conv"):
            agent.run(OpenAI(base_url=url, api_key="sk-stub"))
        lf.flush()
    finally:
        server.shutdown()
        agent.run_tool = plain  # type: ignore[assignment]
    return "langfuse", _otlp_json(exporter.get_finished_spans())


#: one trace per LLM call and no session attribute on the spans
ONE_TRACE_PER_CALL = {"litellm-otel"}
#: libraries whose output is a message log (no content-capture switch: recorded once)
MESSAGE_LOGS = {"langchain-create-agent", "openai-agents", "litellm-logging"}
#: native trace exports (content off: the library's own switch)
EXPORTS = {"openai-agents-trace"}

RECORDERS: dict[str, Callable[[bool], tuple[str, Any]]] = {
    "langchain-create-agent": langchain_create_agent,
    "openinference-langchain": openinference_langchain,
    "openai-agents": openai_agents,
    "openai-agents-trace": openai_agents_trace,
    "langfuse-openai": langfuse_openai,
    "litellm-otel": litellm_otel,
    "litellm-logging": litellm_logging,
    "otel-openai-v2": otel_openai_v2,
    "openinference-openai": openinference_openai,
    "openllmetry-openai": openllmetry_openai,
}


def main() -> None:
    library, out, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    content = {"on": True, "off": False}[mode]
    out.mkdir(parents=True, exist_ok=True)
    package, trace = RECORDERS[library](content)
    if library in MESSAGE_LOGS and not content:
        print(f"{library}: a message log has no content switch; nothing to record with content off")
        return
    record = {"library": library, "package": package, "version": importlib.metadata.version(package),
              "content": content, "trace": trace,
              "format": "messages" if library in MESSAGE_LOGS else "trace export" if library in EXPORTS else "spans"}
    if library in ONE_TRACE_PER_CALL:  # no parent, no session attribute: diagnosed with options.session
        record["options"] = {"session": f"{library}-run"}
    name = f"{library}.json" if content else f"{library}-content-off.json"
    (out / name).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {out / name}")


if __name__ == "__main__":
    main()
