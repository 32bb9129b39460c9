"""Stream an agent's steps to ``/v1/sessions/{id}/steps`` as it takes them, framework-free.

:class:`StepStream` is what the framework adapters build on: they translate their callbacks into
:meth:`~StepStream.inputs` (the conversation handed to the model: only the messages not sent
before go out), :meth:`~StepStream.assistant` (the model's answer and tool calls),
:meth:`~StepStream.tool_result` and :meth:`~StepStream.tool_error`. Each call appends right away
(or, with ``background=True``, from one worker thread in order, so the agent never waits on
triage); :attr:`~StepStream.last` holds the newest diagnosis and ``on_diagnosis`` is called with
each one. Sending goes through the client, so it is fail-open: a triage outage costs the agent
at most the client's time budget per step (none with ``background=True``).

>>> from agent_triage_client import TriageClient
>>> stream = StepStream(TriageClient("http://127.0.0.1:9", budget_s=0.2), "conv-1")
>>> stream.inputs([{"role": "user", "content": "Weather in Paris?"}]).served   # nobody on :9
False
>>> stream.inputs([{"role": "user", "content": "Weather in Paris?"}]) is None  # already sent
True
"""

from __future__ import annotations

import json
import queue
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent_triage_client._client import TriageClient
from agent_triage_client.models import SessionStep


def _content(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts
        return "".join(str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in value)
    return json.dumps(value, sort_keys=True, default=str)


def _args(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _fingerprint(msg: Mapping[str, Any]) -> str:
    """What identifies a message across the ways frameworks write it (``None`` or ``""`` content,
    arguments as text or an object, extra keys such as ``name``)."""
    calls = []
    for c in msg.get("tool_calls") or []:
        fn = c.get("function") or {}
        calls.append([c.get("id"), fn.get("name"), _args(fn.get("arguments"))])
    return json.dumps([msg.get("role"), _content(msg.get("content")), calls, msg.get("tool_call_id")],
                      sort_keys=True, default=str)


def tool_call(call_id: str | None, name: str, arguments: Any) -> dict[str, Any]:
    """An OpenAI ``tool_calls`` item (arguments as JSON text, as the API sends them)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, default=str)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


class StepStream:
    """One agent session's steps, sent to the service as they happen.

    Parameters
    ----------
    client:
        A :class:`~agent_triage_client.TriageClient` (its budget bounds each send).
    session_id:
        The agent's own session / conversation id.
    options, task_type, language:
        Sent with every append (``options`` as ``/v1/diagnose`` takes them).
    agent:
        The agent running the session, sent with every append: the key of its agent model on the
        service (default: the root agent span's name, else the task type, else the tenant's pool).
    background:
        Send from a worker thread, in order; :meth:`flush` waits for it.
    on_diagnosis:
        Called with every :class:`~agent_triage_client.models.SessionStep` answer.
    """

    def __init__(
        self,
        client: TriageClient,
        session_id: str,
        *,
        options: Mapping[str, Any] | None = None,
        task_type: str | None = None,
        language: str | None = None,
        agent: str | None = None,
        background: bool = False,
        on_diagnosis: Callable[[SessionStep], None] | None = None,
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.options = dict(options or {})
        self.task_type = task_type
        self.language = language
        self.agent = agent
        self.background = background
        self.on_diagnosis = on_diagnosis
        self.last: SessionStep | None = None
        #: what background sends raised (a 4xx: the request was wrong); fail-open sends never raise
        self.errors: list[Exception] = []
        self._sent: Counter[str] = Counter()
        self._tools_sent: set[str] = set()
        self._calls: set[str] = set()  # tool call ids sent
        self._results: set[str] = set()  # call ids whose result was sent
        self._lock = threading.Lock()
        self._queue: queue.Queue[dict[str, Any] | None] | None = None
        self._worker: threading.Thread | None = None

    # -- what the adapters call --------------------------------------------------------------------
    def inputs(self, messages: Sequence[Mapping[str, Any]],
               tools: Sequence[Mapping[str, Any]] | None = None) -> SessionStep | None:
        """The conversation handed to the model: send the messages not sent before (a multiset,
        so a user who says "yes" twice keeps both; a tool result or a tool call whose call id
        went out already is not sent again)."""
        budget = Counter(self._sent)
        new: list[dict[str, Any]] = []
        for m in messages:
            fp = _fingerprint(m)
            if budget[fp] > 0:
                budget[fp] -= 1
                continue
            if m.get("role") == "tool" and m.get("tool_call_id") in self._results:
                continue  # its result went out already (perhaps as an error step)
            ids = [c.get("id") for c in m.get("tool_calls") or []]
            if ids and not _content(m.get("content")) and all(i in self._calls for i in ids):
                continue
            new.append(dict(m))
        new_tools = [dict(t) for t in tools or [] if str(t.get("name")) not in self._tools_sent]
        if not new:
            return None
        return self._send({"messages": new}, tools=new_tools or None)

    def assistant(self, text: str | None, tool_calls: Sequence[Mapping[str, Any]] = ()) -> SessionStep | None:
        """The model's answer: text and/or tool calls (OpenAI ``tool_calls`` items, see :func:`tool_call`)."""
        msg: dict[str, Any] = {"role": "assistant", "content": text or None}
        if tool_calls:
            msg["tool_calls"] = [dict(c) for c in tool_calls]
        elif not text:
            msg["content"] = ""
        return self._send({"messages": [msg]})

    def tool_result(self, call_id: str | None, content: Any, *, name: str | None = None) -> SessionStep | None:
        """A tool's output, linked to its call by ``call_id``."""
        text = content if isinstance(content, str) else json.dumps(content, default=str)
        msg: dict[str, Any] = {"role": "tool", "tool_call_id": call_id, "content": text}
        if name:
            msg["name"] = name
        return self._send({"messages": [msg]})

    def tool_error(self, call_id: str | None, error: str, *, name: str | None = None,
                   timeout: bool = False) -> SessionStep | None:
        """A tool that raised: a ``tool_result`` step with status ``error`` (or ``timeout``)."""
        step = {"kind": "tool_result", "content": error, "call_id": call_id, "tool_name": name,
                "status": "timeout" if timeout else "error"}
        return self._send({"steps": [{k: v for k, v in step.items() if v is not None}]})

    # -- sending -----------------------------------------------------------------------------------
    def _send(self, body: dict[str, Any], tools: list[dict[str, Any]] | None = None) -> SessionStep | None:
        for m in body.get("messages", []):
            self._sent[_fingerprint(m)] += 1
            self._calls.update(c.get("id") for c in m.get("tool_calls") or [] if c.get("id"))
            if m.get("role") == "tool" and m.get("tool_call_id"):
                self._results.add(m["tool_call_id"])
        for st in body.get("steps", []):
            if st.get("kind") == "tool_result" and st.get("call_id"):
                self._results.add(st["call_id"])
        if tools:
            self._tools_sent.update(str(t.get("name")) for t in tools)
            body["tools"] = tools
        if self.background:
            self._ensure_worker().put(body)
            return None
        return self._post(body)

    def _post(self, body: dict[str, Any]) -> SessionStep:
        resp = self.client.append_steps(
            self.session_id, messages=body.get("messages"), steps=body.get("steps"), options=self.options,
            task_type=self.task_type, language=self.language,  # type: ignore[arg-type]
            tools=body.get("tools"), agent=self.agent,
        )
        with self._lock:
            self.last = resp
        if self.on_diagnosis is not None:
            self.on_diagnosis(resp)
        return resp

    def _ensure_worker(self) -> queue.Queue[dict[str, Any] | None]:
        if self._queue is None:
            self._queue = queue.Queue()
            self._worker = threading.Thread(target=self._run, name=f"triage-{self.session_id}", daemon=True)
            self._worker.start()
        return self._queue

    def _run(self) -> None:
        assert self._queue is not None
        while True:
            body = self._queue.get()
            try:
                if body is None:
                    return
                self._post(body)
            except Exception as exc:  # a failed send must never reach the agent's thread: kept here
                self.errors.append(exc)
            finally:
                self._queue.task_done()

    def flush(self) -> None:
        """Wait until every step queued so far has been sent (background mode)."""
        if self._queue is not None:
            self._queue.join()

    def close(self) -> None:
        """Flush and stop the worker thread."""
        if self._queue is not None and self._worker is not None:
            self._queue.put(None)
            self._worker.join()
            self._queue = None
            self._worker = None


__all__ = ["StepStream", "tool_call"]
