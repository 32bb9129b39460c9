"""LangChain v1 agent middleware that carries out agent-triage's repairs: :class:`TriageMiddleware`.

Needs ``langchain>=1`` (``pip install 'agent-triage-client[langchain]'``); importing this module
imports it, importing :mod:`agent_triage_client` does not.

>>> from langchain.agents import create_agent                                     # doctest: +SKIP
>>> from agent_triage_client import TriageClient                                  # doctest: +SKIP
>>> from agent_triage_client.langchain_middleware import TriageMiddleware         # doctest: +SKIP
>>> triage = TriageMiddleware(TriageClient(api_key="trg_…"), equivalents={"weather": ["weather_alt"]})
>>> agent = create_agent(model, tools=[weather, weather_alt], middleware=[triage])  # doctest: +SKIP
>>> agent.invoke({"messages": [...]}, config={"configurable": {"thread_id": "conv-42"}})  # doctest: +SKIP

A thin adapter over :class:`~agent_triage_client.executor.RepairExecutor` (through
:class:`agent_triage_client._bridge.Bridge`), at LangChain's two interception points:

``wrap_model_call``
    The conversation's messages not sent before go to the session (``/v1/sessions/{id}/steps``),
    then the model is called — given the executor's messages instead of the graph's once a repair
    changed them (a rollback, an injected instruction). A model call that raises (a provider's
    503) is sent as an ``error`` step and repeated as the service says (``retry`` with its backoff
    and ``retry_after``, ``adjust_parameters`` through ``model_settings``, ``fallback_model`` with a
    model from ``fallback_models``). The answer is sent; a recommendation on it is carried out
    (a repeated call's answer replaces it; after an instruction or a rollback the model answers
    again). A handoff that stops the run ends it with an answer saying so
    (``response_metadata["agent_triage"] == "handoff"``), and no further model call is made.
``wrap_tool_call``
    The tool runs; its result (or its exception, or an error ``ToolMessage``) is sent, and a
    ``retry`` / ``adjust_parameters`` / ``switch_tool`` (to a tool of ``equivalents`` the agent
    has) repeats it: the graph gets the repaired result. A loop caught on a result is rolled back
    (the model's next call sees the conversation from before the loop, with the service's
    instruction). A blocked result (a poisoned tool output) reaches the graph withheld.
``after_agent``
    Repairs whose outcome waits for the agent's next turn are reported, by how the run ended.

One session per thread: ``session_id`` when given, else the graph's ``thread_id``
(``config={"configurable": {"thread_id": …}}``). The graph's state keeps every message (the run's
log); the model sees the repaired conversation. With ``continue`` (the shadow arm of a canary, or
triage unreachable) every call is left as it was, exceptions included: the agent behaves as
without the middleware. Synchronous runs only (``invoke`` / ``stream``); the async hooks are not
implemented.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import (
        AIMessage,
        AnyMessage,
        BaseMessage,
        ToolMessage,
        convert_to_openai_messages,
    )
    from langchain_core.messages import convert_to_messages as _to_langchain
    from langchain_core.tools import BaseTool
    from langgraph.config import get_config
    from langgraph.prebuilt.tool_node import ToolCallRequest
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "agent_triage_client.langchain_middleware needs langchain>=1: pip install 'agent-triage-client[langchain]'"
    ) from exc

from agent_triage_client._bridge import Bridge, ToolFailed
from agent_triage_client._client import TriageClient
from agent_triage_client.executor import HandoffCallback, Message, RepairExecutor, ReplanCallback


def to_openai(message: BaseMessage) -> Message:
    """A LangChain message in OpenAI chat shape (an error ``ToolMessage`` keeps ``status: error``, a
    ``ToolMessage`` loses its tool name)."""
    out = dict(convert_to_openai_messages(message))
    if isinstance(message, ToolMessage):
        # linked to its call by id alone: a result from the equivalent a switch_tool called answers the
        # failed call (named, it would read as another tool's, and the failed call's error as ignored)
        out.pop("name", None)
        if message.status == "error":
            out["status"] = "error"
    return out


def to_langchain(messages: Sequence[Mapping[str, Any]]) -> list[AnyMessage]:
    """OpenAI chat messages as LangChain messages."""
    return list(_to_langchain([{k: v for k, v in m.items() if k != "status"} for m in messages]))  # type: ignore[arg-type]


def _tool_definition(tool: BaseTool) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool.name, "description": tool.description or ""}
    schema = tool.tool_call_schema
    with contextlib.suppress(Exception):  # a tool whose schema pydantic can't write: the name is enough
        out["parameters"] = schema if isinstance(schema, dict) else schema.model_json_schema()  # type: ignore[union-attr]
    return out


def _with_id(message: BaseMessage) -> BaseMessage:
    if message.id is None:
        message.id = f"triage-{uuid.uuid4().hex}"
    return message


def _answer(response: Any) -> AIMessage:
    """The model's answer in what the handler returned."""
    if isinstance(response, AIMessage):
        return response
    for m in reversed(getattr(response, "result", None) or []):
        if isinstance(m, AIMessage):
            return m
    raise TypeError(f"the model call returned no AIMessage (got {type(response).__name__})")


class TriageMiddleware(AgentMiddleware):
    """Carries out agent-triage's repairs inside a LangChain v1 agent (see the module docstring).

    Parameters
    ----------
    client:
        A :class:`~agent_triage_client.TriageClient` (fail-open by default).
    session_id:
        The session; default: the graph's ``thread_id``.
    equivalents:
        Tool name → equivalent tools (the agent's own tools), for ``switch_tool``.
    fallback_models:
        Model name → chat model, in order of preference, for ``fallback_model``.
    on_replan, on_handoff:
        The executor's callbacks (:class:`~agent_triage_client.executor.Replan`,
        :class:`~agent_triage_client.executor.Handoff`; ``on_handoff`` may block while a person
        decides, and returns their reply or ``None`` to stop the run).
    max_redo:
        How often one call may be repeated or re-asked, whatever the service says.
    **executor_options:
        Passed to :class:`~agent_triage_client.executor.RepairExecutor` (``task_type``,
        ``language``, ``max_wait_s``, ``sleep``, ``clock``, ``rng``, …).
    """

    def __init__(
        self,
        client: TriageClient,
        session_id: str | None = None,
        *,
        equivalents: Mapping[str, Sequence[str]] | None = None,
        fallback_models: Mapping[str, BaseChatModel] | None = None,
        on_replan: ReplanCallback | None = None,
        on_handoff: HandoffCallback | None = None,
        max_redo: int = 8,
        **executor_options: Any,
    ) -> None:
        super().__init__()
        self.client = client
        self.session_id = session_id
        self.equivalents = {k: list(v) for k, v in (equivalents or {}).items()}
        self.fallback_models = dict(fallback_models or {})
        self.on_replan = on_replan
        self.on_handoff = on_handoff
        self.max_redo = max_redo
        self.executor_options = executor_options
        self.known_tools: dict[str, BaseTool] = {}  # (``tools`` is AgentMiddleware's: tools it adds)
        self.bridges: dict[str, Bridge] = {}
        self._lock = threading.Lock()

    # -- one bridge (executor) per session ------------------------------------------------------------
    def _session(self) -> str:
        if self.session_id is not None:
            return self.session_id
        thread = (get_config().get("configurable") or {}).get("thread_id")
        if thread is None:
            raise ValueError(
                "TriageMiddleware without session_id names the session by the graph's thread_id: "
                "invoke with config={'configurable': {'thread_id': ...}}"
            )
        return str(thread)

    def bridge(self, session_id: str | None = None) -> Bridge:
        """The session's :class:`~agent_triage_client._bridge.Bridge` (its executor: ``.executor``)."""
        sid = session_id or self._session()
        with self._lock:
            b = self.bridges.get(sid)
            if b is None:
                executor = RepairExecutor(
                    self.client, sid, tools=[_tool_definition(t) for t in self.known_tools.values()] or None,
                    equivalents=self.equivalents, fallback_models=list(self.fallback_models),
                    on_replan=self.on_replan, on_handoff=self.on_handoff, **self.executor_options,
                )
                b = self.bridges[sid] = Bridge(executor, max_redo=self.max_redo)
            return b

    # -- the hooks -------------------------------------------------------------------------------------
    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResponse[Any] | AIMessage:
        for t in request.tools:
            if isinstance(t, BaseTool):
                self.known_tools.setdefault(t.name, t)
        b = self.bridge()
        b.forward([(str(_with_id(m).id), to_openai(m)) for m in request.messages])

        def call(messages: list[Message] | None, model: str | None, params: dict[str, Any]) -> tuple[Any, Message]:
            req = request
            if messages is not None:
                req = req.override(messages=to_langchain(messages))
            if model is not None:
                if model not in self.fallback_models:
                    raise LookupError(f"no fallback model {model!r} (have {sorted(self.fallback_models)})")
                req = req.override(model=self.fallback_models[model])
            if params != request.model_settings:
                req = req.override(model_settings=params)
            response = handler(req)
            return response, to_openai(_with_id(_answer(response)))

        def llm(messages: list[Message], **params: Any) -> Message:
            return to_openai(request.model.invoke(to_langchain(messages)))

        turn = b.model_call(call, lambda response: str(_answer(response).id),
                            params=dict(request.model_settings), llm=llm)
        if turn.stopped is not None:
            answer = AIMessage(content=b.handoff_text(), id=f"triage-{uuid.uuid4().hex}",
                               response_metadata={"agent_triage": "handoff"})
            b.mark_sent(str(answer.id))
            return answer
        if turn.error is not None:
            raise turn.error
        result: ModelResponse[Any] = turn.result
        return result

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        b = self.bridge()
        tc = request.tool_call

        def run(name: str, args: dict[str, Any]) -> tuple[Any, Message]:
            req = request
            if name != tc["name"] or args != tc["args"]:
                tool = request.tool if name == tc["name"] else self.known_tools.get(name)
                if tool is None:
                    raise LookupError(f"no tool {name!r} (have {sorted(self.known_tools)})")
                req = request.override(tool_call={**tc, "name": name, "args": args}, tool=tool)
            out = handler(req)
            if not isinstance(out, ToolMessage):  # a Command: nothing to judge it by
                return out, {"role": "tool", "tool_call_id": tc["id"], "content": str(out)}
            msg = to_openai(_with_id(out))
            if out.status == "error":
                raise ToolFailed(out, msg)
            return out, msg

        turn = b.tool_call(tc["name"], dict(tc["args"]), tc["id"], run,
                           lambda out: str(getattr(out, "id", "") or ""))
        if turn.result is None or turn.blocked:
            if turn.error is not None and turn.stopped is None and not turn.waiting:
                raise turn.error  # nothing repaired it: as without the middleware
            assert turn.message is not None
            out = ToolMessage(content=str(turn.message.get("content") or ""), tool_call_id=tc["id"],
                              name=tc["name"], status="error", id=f"triage-{uuid.uuid4().hex}")
            b.mark_sent(str(out.id))
            return out
        if turn.error is not None and not isinstance(turn.error, ToolFailed):
            raise turn.error
        return turn.result

    def after_agent(self, state: AgentState[Any], runtime: Any) -> dict[str, Any] | None:
        b = self.bridge()
        last = state["messages"][-1] if state.get("messages") else None
        done = isinstance(last, AIMessage) and not last.tool_calls and b.stopped is None
        b.finish(done)
        return None


__all__ = ["TriageMiddleware", "to_langchain", "to_openai"]
