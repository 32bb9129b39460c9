"""``TriageClient`` (sync) and ``AsyncTriageClient``: the whole HTTP API, fail-open, with retries.

Every call has a **time budget** (``budget_s``, default 3 s) that bounds it end to end, retries
included; one attempt waits at most ``timeout_s`` (and never past the budget). Retried: 408, 429,
500, 502, 503, 504 and transport errors, with exponential backoff and full jitter, waiting what
``Retry-After`` says (seconds or an HTTP date) when the service sends it — unless that wait would
overrun the budget, which then ends the call. Appending session steps is not idempotent, so it
is retried only when the service cannot have taken the steps (connection refused, 429, 503).

**Fail-open** (``fail_open=True``, the default): when the budget runs out, the calls on an
agent's hot path — :meth:`~TriageClient.diagnose`, :meth:`~TriageClient.append_steps`,
:meth:`~TriageClient.report_outcome`, :meth:`~TriageClient.observe` — return a fallback whose
``served`` is ``False``, ``client_error`` says why, and whose recommendation is ``continue``, so
the agent keeps running while triage is down or slow. Every other call raises
:class:`TriageUnavailable`. Any other 4xx answer (bad input, bad key) raises :class:`TriageAPIError`:
it is the caller's bug, and retrying will not fix it.

>>> with TriageClient("http://127.0.0.1:8000", api_key="trg_…") as triage:   # doctest: +SKIP
...     r = triage.append_steps("conv-42", messages=[{"role": "user", "content": "hi"}])
...     r.recommendation.strategy
'continue'
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from agent_triage_client._errors import TriageAPIError, TriageUnavailable
from agent_triage_client.models import (
    Agents,
    Changepoints,
    Diagnosis,
    Graph,
    Label,
    Observations,
    Outcome,
    SessionStep,
    SessionView,
    TraceDetail,
    TracePage,
    fallback_recommendation,
)

M = TypeVar("M", bound=BaseModel)

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: statuses the service sends before doing any work: safe to retry a non-idempotent call
REFUSED_STATUSES = frozenset({429, 503})
DEFAULT_BASE_URL = "http://127.0.0.1:8000"


@dataclass(frozen=True)
class _Call:
    method: str
    path: str
    model: type[BaseModel] | None
    json: Any = None
    params: Mapping[str, Any] | None = None
    idempotent: bool = True
    fallback: Callable[[str], BaseModel] | None = None  # set on the fail-open (hot-path) calls


@dataclass(frozen=True)
class _Request:
    """The retry plan asks: send the call once, waiting at most ``timeout_s``."""

    timeout_s: float


@dataclass(frozen=True)
class _Sleep:
    """The retry plan asks: wait before the next attempt."""

    seconds: float


#: The retry loop as a generator (see :meth:`_Base._plan`); the sync and async clients drive it.
_Plan = Generator[_Request | _Sleep, httpx.Response | httpx.HTTPError | None, Any]


class _Retry:
    """Marks an answer worth retrying."""


_RETRY = _Retry()


def retry_after_s(value: str | None, *, now: float | None = None) -> float | None:
    """``Retry-After`` (delta seconds or an HTTP date) → seconds to wait, or ``None``.

    >>> retry_after_s("2"), retry_after_s(None), retry_after_s("soon")
    (2.0, None, None)
    """
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = now if now is not None else time.time()
    return max(0.0, when.timestamp() - current)


def _options(options: Mapping[str, Any] | BaseModel | None) -> dict[str, Any]:
    if options is None:
        return {}
    if isinstance(options, BaseModel):
        return options.model_dump(mode="json", exclude_defaults=True)
    return dict(options)


def _seg(value: str) -> str:
    return quote(value, safe="")


def _label_body(kind: str | None, failed: bool | None, step: int | None, source_index: int | None,
                author: str, author_type: str) -> dict[str, Any]:
    return _drop_none({"failed": failed, "kind": kind, "step": step, "source_index": source_index,
                       "author": author, "author_type": author_type})


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


class _Base:
    """Request building and the retry plan (:meth:`_plan`, written once), shared by the sync and async
    clients: each only sends the requests and sleeps the waits the plan asks for."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        timeout_s: float,
        budget_s: float,
        retries: int,
        backoff_s: float,
        max_backoff_s: float,
        fail_open: bool,
    ) -> None:
        if timeout_s <= 0 or budget_s <= 0:
            raise ValueError(f"timeout_s and budget_s must be positive, got {timeout_s!r} and {budget_s!r}")
        if retries < 0:
            raise ValueError(f"retries must be 0 or more, got {retries!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.budget_s = budget_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.fail_open = fail_open
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._rng = random.Random()

    # -- the retry plan --------------------------------------------------------------------------
    def _backoff(self, attempt: int) -> float:
        return self._rng.uniform(0, min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))

    def _outcome(self, call: _Call, resp: httpx.Response) -> tuple[Any, float | None, bool]:
        """``(result, retry_after, retryable)``: a parsed result, or ``_RETRY`` with the wait the
        service asked for and whether this call may be sent again. A 4xx raises."""
        if resp.status_code < 400:
            if call.model is None:
                return None, None, False
            return call.model.model_validate_json(resp.content), None, False
        if resp.status_code < 500 and resp.status_code not in RETRY_STATUSES:  # the caller's mistake
            try:
                body = resp.json()
                detail = body.get("detail", body) if isinstance(body, dict) else body
            except ValueError:
                detail = resp.text
            raise TriageAPIError(resp.status_code, detail, call.method, f"{self.base_url}{call.path}")
        retryable = resp.status_code in (RETRY_STATUSES if call.idempotent else REFUSED_STATUSES)
        return _RETRY, retry_after_s(resp.headers.get("retry-after")), retryable

    def _transport_retryable(self, call: _Call, exc: httpx.HTTPError) -> bool:
        if call.idempotent:
            return isinstance(exc, httpx.TransportError)
        return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)

    def _plan(self, call: _Call) -> _Plan:
        """The retry loop, without I/O: yields a :class:`_Request` (and is sent the response, or
        the transport error) or a :class:`_Sleep`; returns the parsed result or the fallback."""
        deadline = time.monotonic() + self.budget_s
        attempts, status, reason = 0, None, "no attempt fitted in the budget"
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self._give_up(call, reason, attempts, status)
            attempts += 1
            wait: float | None = None
            answer = yield _Request(min(self.timeout_s, remaining))
            if isinstance(answer, httpx.HTTPError):
                reason = f"{type(answer).__name__}: {answer}" if str(answer) else type(answer).__name__
                if not self._transport_retryable(call, answer):
                    return self._give_up(call, reason, attempts, status)
            else:
                assert answer is not None, "a _Request is answered with a response or an httpx error"
                result, wait, retryable = self._outcome(call, answer)
                if result is not _RETRY:
                    return result
                status, reason = answer.status_code, f"the service answered {answer.status_code}"
                if not retryable:  # the service may have taken a non-idempotent call
                    return self._give_up(call, reason, attempts, status)
            if attempts > self.retries:
                return self._give_up(call, reason, attempts, status)
            delay = wait if wait is not None else self._backoff(attempts)
            if time.monotonic() + delay >= deadline:
                return self._give_up(call, f"{reason}; the next try (in {delay:.2f} s) would overrun the budget",
                                     attempts, status)
            yield _Sleep(delay)

    def _give_up(self, call: _Call, reason: str, attempts: int, status: int | None) -> Any:
        exc = TriageUnavailable(
            f"{call.method} {self.base_url}{call.path}: {reason} ({attempts} attempt(s) in {self.budget_s:g} s)",
            attempts=attempts, last_status=status,
        )
        if self.fail_open and call.fallback is not None:
            return call.fallback(str(exc))
        raise exc

    # -- request bodies ----------------------------------------------------------------------------
    def _diagnose(self, trace: Any, format: str, options: Mapping[str, Any] | BaseModel | None,
                  session: str | None, agent: str | None = None) -> _Call:
        opts = _options(options)
        if session is not None:
            opts["session"] = session
        if agent is not None:
            opts["agent"] = agent
        body = {"trace": trace, "format": format, "options": opts}

        def fallback(reason: str) -> Diagnosis:
            return Diagnosis(served=False, client_error=reason, healthy=None,
                             recommendation=fallback_recommendation(reason))

        return _Call("POST", "/v1/diagnose", Diagnosis, json=body, fallback=fallback)

    def _append(self, session_id: str, messages: Sequence[Any] | None, steps: Sequence[Any] | None,
                options: Mapping[str, Any] | BaseModel | None, task_type: str | None, language: str | None,
                tools: Sequence[Mapping[str, Any]] | None, agent: str | None = None) -> _Call:
        if (messages is None) == (steps is None):
            raise ValueError("give exactly one of messages= or steps=")
        body = _drop_none({
            "messages": list(messages) if messages is not None else None,
            "steps": list(steps) if steps is not None else None,
            "options": _options(options),
            "task_type": task_type,
            "agent": agent,
            "language": language,
            "tools": [dict(t) for t in tools] if tools is not None else None,
        })

        def fallback(reason: str) -> SessionStep:
            return SessionStep(served=False, client_error=reason, healthy=None, session_id=session_id,
                               recommendation=fallback_recommendation(reason))

        return _Call("POST", f"/v1/sessions/{_seg(session_id)}/steps", SessionStep, json=body,
                     idempotent=False, fallback=fallback)

    def _outcome_call(self, recommendation_id: str, success: bool, duration_s: float | None,
                      cost: float | None, note: str, label: str | None) -> _Call:
        body = _drop_none({"recommendation_id": recommendation_id, "success": success, "note": note,
                           "duration_s": duration_s, "cost": cost, "label": label})

        def fallback(reason: str) -> Outcome:
            return Outcome(served=False, client_error=reason, recommendation_id=recommendation_id, recorded=False)

        return _Call("POST", "/v1/outcomes", Outcome, json=body, fallback=fallback)

    def _observe(self, stream: str, values: Sequence[float], task_type: str, params: Mapping[str, Any] | None,
                 rebaseline: bool, agent: str | None = None) -> _Call:
        body: dict[str, Any] = {"values": list(values), "task_type": task_type, "rebaseline": rebaseline}
        if agent is not None:
            body["agent"] = agent
        if params is not None:
            body["params"] = dict(params)

        def fallback(reason: str) -> Observations:
            key = task_type if agent is None else agent
            return Observations(served=False, client_error=reason, stream=stream, agent=key, task_type=key)

        return _Call("POST", f"/v1/streams/{_seg(stream)}/observations", Observations, json=body,
                     idempotent=False, fallback=fallback)

    @staticmethod
    def _trace_query(kind: str | None, since: datetime | None, session: str | None, limit: int,
                     cursor: str | None) -> dict[str, Any]:
        return _drop_none({"kind": kind, "since": since.isoformat() if since else None, "session": session,
                           "limit": limit, "cursor": cursor})


class TriageClient(_Base):
    """Synchronous client. Use as a context manager, or call :meth:`close`.

    Parameters
    ----------
    base_url:
        The service, e.g. ``http://127.0.0.1:8000``.
    api_key:
        A key from ``triage keys create`` (sent as ``Authorization: Bearer``).
    timeout_s:
        Longest wait for one attempt.
    budget_s:
        Longest time one call takes, retries and backoff included.
    retries:
        Retries after the first attempt (within the budget).
    fail_open:
        Hot-path calls return a ``served=False`` fallback recommending ``continue`` instead of
        raising :class:`TriageUnavailable`.
    transport:
        An httpx transport (tests, proxies).
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | None = None,
        timeout_s: float = 2.0,
        budget_s: float = 3.0,
        retries: int = 2,
        backoff_s: float = 0.1,
        max_backoff_s: float = 1.0,
        fail_open: bool = True,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, api_key=api_key, timeout_s=timeout_s, budget_s=budget_s, retries=retries,
                         backoff_s=backoff_s, max_backoff_s=max_backoff_s, fail_open=fail_open)
        self._http = httpx.Client(base_url=self.base_url, headers=self._headers, transport=transport)

    def __enter__(self) -> TriageClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: _Call) -> Any:
        plan = self._plan(call)
        answer: httpx.Response | httpx.HTTPError | None = None
        try:
            while True:
                step = plan.send(answer)
                answer = None
                if isinstance(step, _Sleep):
                    time.sleep(step.seconds)
                    continue
                try:
                    answer = self._http.request(call.method, call.path, json=call.json, params=call.params,
                                                timeout=step.timeout_s)
                except httpx.HTTPError as exc:
                    answer = exc
        except StopIteration as done:
            return done.value

    # -- the API -----------------------------------------------------------------------------------
    def health(self) -> bool:
        """Whether ``/readyz`` answers 200 (the store reachable, the model loaded)."""
        try:
            return self._http.get("/readyz", timeout=self.timeout_s).status_code == 200
        except httpx.HTTPError:
            return False

    def diagnose(self, trace: Any, *, format: str = "auto", options: Mapping[str, Any] | BaseModel | None = None,
                 session: str | None = None, agent: str | None = None) -> Diagnosis:
        """Diagnose a whole trace (native, OpenAI messages, OTLP/JSON or spans). Fail-open.
        ``agent``: the agent that ran it (``options.agent``; the key of its agent model)."""
        result: Diagnosis = self._send(self._diagnose(trace, format, options, session, agent))
        return result

    def append_steps(self, session_id: str, *, messages: Sequence[Any] | None = None,
                     steps: Sequence[Any] | None = None, options: Mapping[str, Any] | BaseModel | None = None,
                     task_type: str | None = None, language: Literal["en", "zh"] | None = None,
                     tools: Sequence[Mapping[str, Any]] | None = None, agent: str | None = None) -> SessionStep:
        """Append the steps the agent just took (OpenAI messages or native steps). Fail-open.
        ``agent``: the agent running the session (the key of its agent model; the session keeps it)."""
        result: SessionStep = self._send(self._append(session_id, messages, steps, options, task_type, language,
                                                      tools, agent))
        return result

    def report_outcome(self, recommendation_id: str, success: bool, *, duration_s: float | None = None,
                       cost: float | None = None, note: str = "", label: str | None = None) -> Outcome:
        """Say whether a recommendation worked; a failure climbs the ladder (``next``). Fail-open."""
        result: Outcome = self._send(self._outcome_call(recommendation_id, success, duration_s, cost, note, label))
        return result

    def observe(self, stream: str, values: Sequence[float], *, agent: str | None = None, task_type: str = "",
                params: Mapping[str, Any] | None = None, rebaseline: bool = False) -> Observations:
        """Feed the metric stream (CUSUM) of ``agent`` (default: ``task_type``; ``""``: every agent). Fail-open."""
        result: Observations = self._send(self._observe(stream, values, task_type, params, rebaseline, agent))
        return result

    def get_session(self, session_id: str) -> SessionView:
        result: SessionView = self._send(_Call("GET", f"/v1/sessions/{_seg(session_id)}", SessionView))
        return result

    def delete_session(self, session_id: str) -> None:
        self._send(_Call("DELETE", f"/v1/sessions/{_seg(session_id)}", None))

    def list_traces(self, *, kind: str | None = None, since: datetime | None = None, session: str | None = None,
                    limit: int = 50, cursor: str | None = None) -> TracePage:
        q = self._trace_query(kind, since, session, limit, cursor)
        result: TracePage = self._send(_Call("GET", "/v1/traces", TracePage, params=q))
        return result

    def get_trace(self, trace_id: str) -> TraceDetail:
        result: TraceDetail = self._send(_Call("GET", f"/v1/traces/{_seg(trace_id)}", TraceDetail))
        return result

    def list_agents(self) -> Agents:
        """The tenant's agents (``GET /v1/agents``): key, name, how found, runs, what they show."""
        result: Agents = self._send(_Call("GET", "/v1/agents", Agents))
        return result

    def delete_trace(self, trace_id: str) -> None:
        self._send(_Call("DELETE", f"/v1/traces/{_seg(trace_id)}", None))

    def get_graph(self, trace_id: str, *, format: Literal["json", "mermaid", "both"] = "both") -> Graph:
        result: Graph = self._send(_Call("GET", f"/v1/traces/{_seg(trace_id)}/graph", Graph,
                                         params={"format": format}))
        return result

    def add_label(self, trace_id: str, kind: str | None = None, *, failed: bool | None = None,
                  step: int | None = None, source_index: int | None = None, author: str = "",
                  author_type: Literal["human", "checker"] = "human") -> Label:
        """Label a run: ``failed`` (a checker's or a reviewer's verdict) and/or a failure ``kind``
        (``"healthy"``: not failed) at ``step`` or ``source_index``. Per author the newest label
        wins; a human's outranks a checker's. The answer's ``label`` is the effective one."""
        body = _label_body(kind, failed, step, source_index, author, author_type)
        result: Label = self._send(_Call("POST", f"/v1/traces/{_seg(trace_id)}/labels", Label, json=body))
        return result

    def changepoints(self, stream: str, *, agent: str | None = None, task_type: str = "",
                     method: Literal["binseg", "window", "pelt"] | None = None) -> Changepoints:
        q = _drop_none({"agent": agent, "task_type": task_type, "method": method})
        result: Changepoints = self._send(_Call("GET", f"/v1/streams/{_seg(stream)}/changepoints", Changepoints,
                                                params=q))
        return result


class AsyncTriageClient(_Base):
    """Asynchronous client, the same calls as :class:`TriageClient` (``async with … as c: await c.diagnose(…)``)."""

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | None = None,
        timeout_s: float = 2.0,
        budget_s: float = 3.0,
        retries: int = 2,
        backoff_s: float = 0.1,
        max_backoff_s: float = 1.0,
        fail_open: bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, api_key=api_key, timeout_s=timeout_s, budget_s=budget_s, retries=retries,
                         backoff_s=backoff_s, max_backoff_s=max_backoff_s, fail_open=fail_open)
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=self._headers, transport=transport)

    async def __aenter__(self) -> AsyncTriageClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: _Call) -> Any:
        plan = self._plan(call)
        answer: httpx.Response | httpx.HTTPError | None = None
        try:
            while True:
                step = plan.send(answer)
                answer = None
                if isinstance(step, _Sleep):
                    await asyncio.sleep(step.seconds)
                    continue
                try:
                    answer = await self._http.request(call.method, call.path, json=call.json, params=call.params,
                                                      timeout=step.timeout_s)
                except httpx.HTTPError as exc:
                    answer = exc
        except StopIteration as done:
            return done.value

    async def health(self) -> bool:
        try:
            return (await self._http.get("/readyz", timeout=self.timeout_s)).status_code == 200
        except httpx.HTTPError:
            return False

    async def diagnose(self, trace: Any, *, format: str = "auto",
                       options: Mapping[str, Any] | BaseModel | None = None, session: str | None = None,
                       agent: str | None = None) -> Diagnosis:
        result: Diagnosis = await self._send(self._diagnose(trace, format, options, session, agent))
        return result

    async def append_steps(self, session_id: str, *, messages: Sequence[Any] | None = None,
                           steps: Sequence[Any] | None = None, options: Mapping[str, Any] | BaseModel | None = None,
                           task_type: str | None = None, language: Literal["en", "zh"] | None = None,
                           tools: Sequence[Mapping[str, Any]] | None = None,
                           agent: str | None = None) -> SessionStep:
        result: SessionStep = await self._send(self._append(session_id, messages, steps, options, task_type,
                                                            language, tools, agent))
        return result

    async def report_outcome(self, recommendation_id: str, success: bool, *, duration_s: float | None = None,
                             cost: float | None = None, note: str = "", label: str | None = None) -> Outcome:
        result: Outcome = await self._send(self._outcome_call(recommendation_id, success, duration_s, cost, note,
                                                              label))
        return result

    async def observe(self, stream: str, values: Sequence[float], *, agent: str | None = None,
                      task_type: str = "", params: Mapping[str, Any] | None = None,
                      rebaseline: bool = False) -> Observations:
        result: Observations = await self._send(self._observe(stream, values, task_type, params, rebaseline, agent))
        return result

    async def get_session(self, session_id: str) -> SessionView:
        result: SessionView = await self._send(_Call("GET", f"/v1/sessions/{_seg(session_id)}", SessionView))
        return result

    async def delete_session(self, session_id: str) -> None:
        await self._send(_Call("DELETE", f"/v1/sessions/{_seg(session_id)}", None))

    async def list_traces(self, *, kind: str | None = None, since: datetime | None = None,
                          session: str | None = None, limit: int = 50, cursor: str | None = None) -> TracePage:
        q = self._trace_query(kind, since, session, limit, cursor)
        result: TracePage = await self._send(_Call("GET", "/v1/traces", TracePage, params=q))
        return result

    async def get_trace(self, trace_id: str) -> TraceDetail:
        result: TraceDetail = await self._send(_Call("GET", f"/v1/traces/{_seg(trace_id)}", TraceDetail))
        return result

    async def list_agents(self) -> Agents:
        """The tenant's agents (``GET /v1/agents``)."""
        result: Agents = await self._send(_Call("GET", "/v1/agents", Agents))
        return result

    async def delete_trace(self, trace_id: str) -> None:
        await self._send(_Call("DELETE", f"/v1/traces/{_seg(trace_id)}", None))

    async def get_graph(self, trace_id: str, *, format: Literal["json", "mermaid", "both"] = "both") -> Graph:
        result: Graph = await self._send(_Call("GET", f"/v1/traces/{_seg(trace_id)}/graph", Graph,
                                               params={"format": format}))
        return result

    async def add_label(self, trace_id: str, kind: str | None = None, *, failed: bool | None = None,
                        step: int | None = None, source_index: int | None = None, author: str = "",
                        author_type: Literal["human", "checker"] = "human") -> Label:
        """Label a run: ``failed`` (a checker's or a reviewer's verdict) and/or a failure ``kind``
        (``"healthy"``: not failed) at ``step`` or ``source_index``. Per author the newest label
        wins; a human's outranks a checker's. The answer's ``label`` is the effective one."""
        body = _label_body(kind, failed, step, source_index, author, author_type)
        result: Label = await self._send(_Call("POST", f"/v1/traces/{_seg(trace_id)}/labels", Label, json=body))
        return result

    async def changepoints(self, stream: str, *, agent: str | None = None, task_type: str = "",
                           method: Literal["binseg", "window", "pelt"] | None = None) -> Changepoints:
        q = _drop_none({"agent": agent, "task_type": task_type, "method": method})
        result: Changepoints = await self._send(_Call("GET", f"/v1/streams/{_seg(stream)}/changepoints",
                                                      Changepoints, params=q))
        return result


__all__ = ["DEFAULT_BASE_URL", "AsyncTriageClient", "TriageClient", "retry_after_s"]
