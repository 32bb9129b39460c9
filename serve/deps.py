"""``Annotated`` dependency aliases: routes receive settings and the service they need through these
(each built once, in the app's lifespan). They are ``async``: FastAPI runs a plain ``def`` dependency
in the thread pool, a hop each request (and a wait for a thread and the GIL under load) for an
attribute read."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from serve.services.activations import ModelActivations
from serve.services.agents import Agents
from serve.services.history import History
from serve.services.outcomes import Outcomes
from serve.services.patterns import Patterns
from serve.services.sessions import Sessions
from serve.services.streams import Streams
from serve.services.triage import TriageService
from serve.settings import Settings


async def get_settings(request: Request) -> Settings:  # async: a plain def runs in the thread pool
    """The settings the app was built with (:func:`serve.app.create_app` keeps them in ``app.state``).

    Not ``app.dependency_overrides``: while that holds anything, FastAPI rebuilds every sub-dependency's
    graph on every request (``get_dependant``: signatures inspected, pydantic fields made), ~0.5 ms of CPU
    a request."""
    settings: Settings = request.app.state.settings
    return settings


async def get_service(request: Request) -> TriageService:
    """The worker's services (:class:`~serve.services.triage.TriageService`), built in the lifespan."""
    service: TriageService = request.app.state.service
    return service


async def get_sessions(service: Annotated[TriageService, Depends(get_service)]) -> Sessions:
    return service.sessions


async def get_outcomes(service: Annotated[TriageService, Depends(get_service)]) -> Outcomes:
    return service.outcomes


async def get_history(service: Annotated[TriageService, Depends(get_service)]) -> History:
    return service.history


async def get_streams(service: Annotated[TriageService, Depends(get_service)]) -> Streams:
    return service.streams


async def get_agents(service: Annotated[TriageService, Depends(get_service)]) -> Agents:
    return service.agents


async def get_activations(service: Annotated[TriageService, Depends(get_service)]) -> ModelActivations:
    return service.activations


async def get_patterns(service: Annotated[TriageService, Depends(get_service)]) -> Patterns:
    return service.patterns


SettingsDep = Annotated[Settings, Depends(get_settings)]
ServiceDep = Annotated[TriageService, Depends(get_service)]
SessionsDep = Annotated[Sessions, Depends(get_sessions)]
OutcomesDep = Annotated[Outcomes, Depends(get_outcomes)]
HistoryDep = Annotated[History, Depends(get_history)]
StreamsDep = Annotated[Streams, Depends(get_streams)]
AgentsDep = Annotated[Agents, Depends(get_agents)]
ActivationsDep = Annotated[ModelActivations, Depends(get_activations)]
PatternsDep = Annotated[Patterns, Depends(get_patterns)]
