"""Metric streams: ``POST /v1/streams/{name}/observations`` (CUSUM) and ``GET …/changepoints`` (ruptures)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request

from serve.auth import PrincipalDep
from serve.body import body_openapi, parse_body
from serve.deps import StreamsDep
from serve.examples_service import OBSERVATION_EXAMPLES
from serve.routers._common import ERRORS, NOT_FOUND, TOO_LARGE, call
from serve.schemas import ChangepointsResponse, ObservationsRequest, ObservationsResponse
from serve.validation import TEXT_PARAM_PATTERN

router = APIRouter(prefix="/v1/streams", tags=["streams"])

StreamName = Annotated[str, Path(min_length=1, max_length=200, pattern=TEXT_PARAM_PATTERN)]


@router.post(
    "/{name}/observations",
    response_model=ObservationsResponse,
    summary="Feed a stream",
    responses={**ERRORS, **TOO_LARGE},
    openapi_extra=body_openapi(ObservationsRequest, OBSERVATION_EXAMPLES),
)
async def observe(
    name: StreamName,
    request: Request,
    principal: PrincipalDep,
    streams: StreamsDep,
) -> ObservationsResponse:
    """Values go through the stream's CUSUM, keyed by (tenant, agent, stream), its state kept in
    the store. One alarm per change: it opens an episode that closes on `rebaseline: true` or when
    the stream is back in control. While open it is a `degradation` signal on that agent's runs (a
    failure of a run whose own value for the stream is beyond the alarm's `bound`; a stream of
    every agent, `agent: ""`, gives signals only) and a `triage_stream_alarm_open` gauge in
    `/metrics`."""
    body = await parse_body(request, ObservationsRequest)
    return await call(streams.observe, principal.tenant, name, body)


@router.get(
    "/{name}/changepoints",
    response_model=ChangepointsResponse,
    summary="Offline change points of a stream",
    responses={**ERRORS, **NOT_FOUND},
)
async def changepoints(
    name: StreamName,
    principal: PrincipalDep,
    streams: StreamsDep,
    agent: Annotated[str | None, Query(max_length=200, pattern=TEXT_PARAM_PATTERN)] = None,
    task_type: Annotated[str, Query(max_length=200, pattern=TEXT_PARAM_PATTERN)] = "",
    method: Annotated[Literal["binseg", "window", "pelt"] | None, Query()] = None,
) -> ChangepointsResponse:
    """ruptures (l2 cost, BIC-style penalty from the noise level) over the last 2,000 observations
    of the agent's stream (`agent`; else `task_type`, the agent of runs that name none; else `""`,
    the stream posted for every agent)."""
    return await call(streams.changepoints, principal.tenant, name, agent, method, task_type=task_type)
