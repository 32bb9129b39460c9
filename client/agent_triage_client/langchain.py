"""A LangChain callback handler that streams an agent's steps to agent-triage as it runs.

Needs ``langchain-core`` (``pip install 'agent-triage-client[langchain]'``); importing this module
imports it, importing :mod:`agent_triage_client` does not.

>>> from agent_triage_client import TriageClient                               # doctest: +SKIP
>>> from agent_triage_client.langchain import TriageCallbackHandler             # doctest: +SKIP
>>> handler = TriageCallbackHandler(TriageClient(api_key="trg_…"), "conv-42")   # doctest: +SKIP
>>> agent.invoke({"messages": [...]}, config={"callbacks": [handler]})          # doctest: +SKIP
>>> handler.stream.last.recommendation.strategy                                # doctest: +SKIP

What is sent: the conversation handed to each chat model call (only messages not sent before),
the model's answer with its tool calls, each tool's output (its ``ToolMessage``, linked by
``tool_call_id``) and each tool error (a ``tool_result`` with status ``error``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

try:
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.messages import BaseMessage, ToolMessage, convert_to_openai_messages
    from langchain_core.outputs import LLMResult
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "agent_triage_client.langchain needs langchain-core: pip install 'agent-triage-client[langchain]'"
    ) from exc

from agent_triage_client._client import TriageClient
from agent_triage_client.stream import StepStream, tool_call


def _openai(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    out = convert_to_openai_messages(list(messages))
    return [dict(m) for m in (out if isinstance(out, list) else [out])]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return json.dumps(content, default=str)


class TriageCallbackHandler(BaseCallbackHandler):
    """Streams chat-model inputs and outputs, tool outputs and tool errors to ``/v1/sessions``.

    Parameters
    ----------
    client:
        A :class:`~agent_triage_client.TriageClient`.
    session_id:
        The conversation's id (one handler per conversation).
    **stream_options:
        Passed to :class:`~agent_triage_client.StepStream` (``background``, ``options``,
        ``task_type``, ``on_diagnosis``…).
    """

    raise_error = False  # a triage problem never stops the agent

    def __init__(self, client: TriageClient, session_id: str, **stream_options: Any) -> None:
        super().__init__()
        self.stream = StepStream(client, session_id, **stream_options)
        self._tools: dict[UUID, tuple[str, str | None]] = {}

    def on_chat_model_start(self, serialized: dict[str, Any], messages: list[list[BaseMessage]], *,
                            run_id: UUID, **kwargs: Any) -> None:
        tools = None
        invocation = kwargs.get("invocation_params") or {}
        if isinstance(invocation.get("tools"), list):
            tools = [_tool_definition(t) for t in invocation["tools"]]
        for batch in messages:
            self.stream.inputs(_openai(batch), tools=[t for t in tools or [] if t])

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        for generations in response.generations:
            for gen in generations[:1]:
                message = getattr(gen, "message", None)
                if message is None:
                    self.stream.assistant(gen.text)
                    continue
                calls = [tool_call(c.get("id"), c["name"], c.get("args", {}))
                         for c in getattr(message, "tool_calls", None) or []]
                self.stream.assistant(_text(message.content), calls)

    def on_tool_start(self, serialized: dict[str, Any], input_str: str, *, run_id: UUID, **kwargs: Any) -> None:
        name = str((serialized or {}).get("name") or kwargs.get("name") or "tool")
        self._tools[run_id] = (name, kwargs.get("tool_call_id"))

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        name, call_id = self._tools.pop(run_id, (kwargs.get("name") or "tool", None))
        if isinstance(output, ToolMessage):
            if output.status == "error":
                self.stream.tool_error(output.tool_call_id or call_id, _text(output.content), name=name)
            else:
                self.stream.tool_result(output.tool_call_id or call_id, _text(output.content), name=name)
            return
        content = getattr(output, "content", output)
        self.stream.tool_result(call_id, _text(content), name=name)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        name, call_id = self._tools.pop(run_id, (kwargs.get("name") or "tool", None))
        timeout = isinstance(error, TimeoutError) or "timeout" in type(error).__name__.lower()
        self.stream.tool_error(call_id, f"{type(error).__name__}: {error}", name=name, timeout=timeout)


def _tool_definition(tool: Mapping[str, Any]) -> dict[str, Any] | None:
    fn = tool.get("function")
    if not isinstance(fn, Mapping):
        fn = tool
    name = fn.get("name")
    if not isinstance(name, str):
        return None
    out: dict[str, Any] = {"name": name, "description": str(fn.get("description") or "")}
    if isinstance(fn.get("parameters"), Mapping):
        out["parameters"] = dict(fn["parameters"])
    return out


__all__ = ["TriageCallbackHandler"]
