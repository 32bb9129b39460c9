"""A thin Python client of the service (httpx), sync and async: diagnose, append steps, report outcomes.

>>> client = TriageClient("http://127.0.0.1:8000", api_key="trg_…")   # doctest: +SKIP
>>> r = client.append_steps("conv-42", messages=[{"role": "user", "content": "hi"}])  # doctest: +SKIP
>>> r.recommendation.strategy                                           # doctest: +SKIP
<Strategy.CONTINUE: 'continue'>

Errors: a non-2xx answer raises :class:`TriageAPIError` with the status and the server's
``detail`` list; transport errors are httpx's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from model.errors import TriageError
from model.findings import DiagnosisResponse
from model.kinds import FailureKind
from model.options import DiagnoseOptions
from serve.api_models import (
    ObservationsResponse,
    OutcomeResponse,
    SessionStepResponse,
    SessionView,
    TraceDetail,
    TracePageOut,
)

M = TypeVar("M", bound=BaseModel)


class TriageAPIError(TriageError):
    """The service answered with an error status."""

    def __init__(self, status_code: int, detail: Any, method: str, url: str) -> None:
        self.status_code = status_code
        self.detail = detail
        super().__init__(f"{method} {url} → {status_code}: {detail}")


def _options(options: DiagnoseOptions | Mapping[str, Any] | None) -> dict[str, Any]:
    if options is None:
        return {}
    if isinstance(options, DiagnoseOptions):
        return options.model_dump(mode="json", exclude_defaults=True)
    return dict(options)


def _steps_body(
    messages: list[Any] | None,
    steps: list[Any] | None,
    options: DiagnoseOptions | Mapping[str, Any] | None,
    task_type: str | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"options": _options(options)}
    if messages is not None:
        body["messages"] = messages
    if steps is not None:
        body["steps"] = steps
    if task_type is not None:
        body["task_type"] = task_type
    return body


def _outcome_body(
    recommendation_id: str, success: bool, duration_s: float | None, cost: float | None, note: str
) -> dict[str, Any]:
    body: dict[str, Any] = {"recommendation_id": recommendation_id, "success": success, "note": note}
    if duration_s is not None:
        body["duration_s"] = duration_s
    if cost is not None:
        body["cost"] = cost
    return body


def _trace_query(
    kind: FailureKind | str | None,
    since: datetime | None,
    session: str | None,
    limit: int,
    cursor: str | None,
) -> dict[str, Any]:
    q: dict[str, Any] = {"limit": limit}
    if kind is not None:
        q["kind"] = str(kind)
    if since is not None:
        q["since"] = since.isoformat()
    if session is not None:
        q["session"] = session
    if cursor is not None:
        q["cursor"] = cursor
    return q


def _parse(resp: httpx.Response, model: type[M]) -> M:
    if resp.status_code >= 400:
        try:
            detail = resp.json().get("detail")
        except ValueError:
            detail = resp.text
        raise TriageAPIError(resp.status_code, detail, resp.request.method, str(resp.request.url))
    return model.model_validate_json(resp.content)


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class TriageClient:
    """Synchronous client. Use as a context manager, or call :meth:`close`."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 30.0) -> None:
        self._http = httpx.Client(base_url=base_url, headers=_headers(api_key), timeout=timeout)

    def __enter__(self) -> TriageClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def diagnose(
        self, trace: Any, *, format: str = "auto", options: DiagnoseOptions | Mapping[str, Any] | None = None
    ) -> DiagnosisResponse:
        body = {"trace": trace, "format": format, "options": _options(options)}
        return _parse(self._http.post("/v1/diagnose", json=body), DiagnosisResponse)

    def append_steps(
        self,
        session_id: str,
        *,
        messages: list[Any] | None = None,
        steps: list[Any] | None = None,
        options: DiagnoseOptions | Mapping[str, Any] | None = None,
        task_type: str | None = None,
    ) -> SessionStepResponse:
        body = _steps_body(messages, steps, options, task_type)
        return _parse(self._http.post(f"/v1/sessions/{session_id}/steps", json=body), SessionStepResponse)

    def report_outcome(
        self,
        recommendation_id: str,
        success: bool,
        *,
        duration_s: float | None = None,
        cost: float | None = None,
        note: str = "",
    ) -> OutcomeResponse:
        body = _outcome_body(recommendation_id, success, duration_s, cost, note)
        return _parse(self._http.post("/v1/outcomes", json=body), OutcomeResponse)

    def get_session(self, session_id: str) -> SessionView:
        return _parse(self._http.get(f"/v1/sessions/{session_id}"), SessionView)

    def get_trace(self, trace_id: str) -> TraceDetail:
        return _parse(self._http.get(f"/v1/traces/{trace_id}"), TraceDetail)

    def list_traces(
        self,
        *,
        kind: FailureKind | str | None = None,
        since: datetime | None = None,
        session: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> TracePageOut:
        q = _trace_query(kind, since, session, limit, cursor)
        return _parse(self._http.get("/v1/traces", params=q), TracePageOut)

    def observe(
        self, stream: str, values: list[float], *, task_type: str = "", params: dict[str, Any] | None = None
    ) -> ObservationsResponse:
        body: dict[str, Any] = {"values": values, "task_type": task_type}
        if params is not None:
            body["params"] = params
        return _parse(self._http.post(f"/v1/streams/{stream}/observations", json=body), ObservationsResponse)


class AsyncTriageClient:
    """Asynchronous client (``async with AsyncTriageClient(...) as c: await c.diagnose(...)``)."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 30.0) -> None:
        self._http = httpx.AsyncClient(base_url=base_url, headers=_headers(api_key), timeout=timeout)

    async def __aenter__(self) -> AsyncTriageClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def diagnose(
        self, trace: Any, *, format: str = "auto", options: DiagnoseOptions | Mapping[str, Any] | None = None
    ) -> DiagnosisResponse:
        body = {"trace": trace, "format": format, "options": _options(options)}
        return _parse(await self._http.post("/v1/diagnose", json=body), DiagnosisResponse)

    async def append_steps(
        self,
        session_id: str,
        *,
        messages: list[Any] | None = None,
        steps: list[Any] | None = None,
        options: DiagnoseOptions | Mapping[str, Any] | None = None,
        task_type: str | None = None,
    ) -> SessionStepResponse:
        body = _steps_body(messages, steps, options, task_type)
        return _parse(
            await self._http.post(f"/v1/sessions/{session_id}/steps", json=body), SessionStepResponse
        )

    async def report_outcome(
        self,
        recommendation_id: str,
        success: bool,
        *,
        duration_s: float | None = None,
        cost: float | None = None,
        note: str = "",
    ) -> OutcomeResponse:
        body = _outcome_body(recommendation_id, success, duration_s, cost, note)
        return _parse(await self._http.post("/v1/outcomes", json=body), OutcomeResponse)

    async def get_session(self, session_id: str) -> SessionView:
        return _parse(await self._http.get(f"/v1/sessions/{session_id}"), SessionView)

    async def get_trace(self, trace_id: str) -> TraceDetail:
        return _parse(await self._http.get(f"/v1/traces/{trace_id}"), TraceDetail)

    async def list_traces(
        self,
        *,
        kind: FailureKind | str | None = None,
        since: datetime | None = None,
        session: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> TracePageOut:
        q = _trace_query(kind, since, session, limit, cursor)
        return _parse(await self._http.get("/v1/traces", params=q), TracePageOut)


__all__ = ["AsyncTriageClient", "TriageAPIError", "TriageClient"]
