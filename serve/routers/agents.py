"""``GET /v1/agents``: the caller's agents; ``POST /v1/agents/rename``, ``…/merge``, ``…/split``
(operator keys): correct them (serve/services/agents.py; docs/agents.md states what happens to the past)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from model.core.agents import MAX_AGENT_LENGTH
from serve.auth import OperatorDep, PrincipalDep
from serve.body import body_openapi, parse_body
from serve.routers._common import ERRORS, NOT_FOUND, call
from serve.services.agents import MAX_SPLIT_RUNS, Agents

router = APIRouter(prefix="/v1/agents", tags=["agents"])

#: An agent's key or name: no control character, no outer blank.
AgentKey = Annotated[str, StringConstraints(min_length=1, max_length=MAX_AGENT_LENGTH,
                                            pattern=r"^[^\x00-\x20\x7f]([^\x00-\x1f\x7f]*[^\x00-\x20\x7f])?$")]
TraceId = Annotated[str, StringConstraints(min_length=1, max_length=128)]


class AgentProfileOut(BaseModel):
    tools: list[str] = Field(description="The tools its runs show, most frequent first.")
    models: list[str] = Field(description="The models its runs name.")
    service_names: list[str] = Field(description="The span resources' `service.name`.")
    template_excerpt: str = Field(description="The start of its instructions (system message, first user message).")
    n_runs: int = Field(description="Runs counted into the profile.")


class AgentOut(BaseModel):
    key: str = Field(description="What runs, streams, models and patterns are kept under (`agent` in every answer).")
    name: str | None = Field(description="The name a person gave it (rename); null: none given.")
    source: Literal["option", "span", "task_type", "inferred", "split"] = Field(
        description="How it was first found: named by the caller (`option`), by the root agent span (`span`), "
        "by the task type (`task_type`), inferred from its runs (`inferred`), or split off another (`split`).")
    runs: int
    labelled_runs: int = Field(description="Runs with a label (not withdrawn).")
    first_seen: datetime | None
    last_seen: datetime | None
    aliases: list[str] = Field(description="Old keys (renamed or merged into it): runs naming them come here.")
    profile: AgentProfileOut | None = Field(
        description="What its runs show, matched against runs that name no agent (null: a named agent never merged "
        "or split).")


class AgentsOut(BaseModel):
    tenant: str
    agents: list[AgentOut]


class RenameRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: AgentKey = Field(description="The agent's key (`GET /v1/agents`).")
    name: AgentKey = Field(description="Its new name: it becomes the key (the old key stays an alias).")


class MergeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: AgentKey = Field(description="The agent merged away (it stays an alias of `into`).")
    into: AgentKey = Field(description="The agent that keeps the merged history.")


class SplitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: AgentKey = Field(description="The agent some runs are split off.")
    trace_ids: list[TraceId] = Field(max_length=MAX_SPLIT_RUNS, description="Its runs that belong to another agent.")
    name: AgentKey | None = Field(default=None, description="The new agent's name (default: a key of its own).")


def _agents(request: Request) -> Agents:
    agents: Agents = request.app.state.service.agents
    return agents


def _out(tenant: str, items: list[dict[str, Any]]) -> AgentsOut:
    return AgentsOut(tenant=tenant, agents=[AgentOut.model_validate(a) for a in items])


@router.get("", response_model=AgentsOut, summary="The caller's agents", responses=ERRORS)
async def list_agents(request: Request, principal: PrincipalDep) -> AgentsOut:
    """Each agent of the tenant: its key, name, how it was found, its runs and labelled runs, first and
    last seen, old keys, and what its runs show."""
    return _out(principal.tenant, await call(_agents(request).list, principal.tenant))


def _actor(principal: Any) -> str:
    return f"key:{principal.key_id}" if principal.key_id else "api"


@router.post("/rename", response_model=AgentsOut, summary="Name an agent (operators)", responses={**ERRORS, **NOT_FOUND},
             openapi_extra=body_openapi(RenameRequest, {"rename": {"summary": "Name an inferred agent",
                                                                   "value": {"agent": "agent-1a2b3c4d", "name": "billing-bot"}}}))
async def rename(request: Request, principal: OperatorDep) -> AgentsOut:
    """The agent's history moves to the key `name` (its streams keep their baselines); later runs
    matched to it, or naming its old key, get `name`. 404 for an unknown `agent`; 422 naming `name`
    when an agent of that name exists (merge instead)."""
    body = await parse_body(request, RenameRequest)
    one = await call(_agents(request).rename, principal.tenant, body.agent, body.name, actor=_actor(principal))
    return _out(principal.tenant, [one])


@router.post("/merge", response_model=AgentsOut, summary="Merge one agent into another (operators)",
             responses={**ERRORS, **NOT_FOUND},
             openapi_extra=body_openapi(MergeRequest, {"merge": {"summary": "Two inferred agents are one",
                                                                 "value": {"agent": "agent-1a2b3c4d", "into": "billing-bot"}}}))
async def merge(request: Request, principal: OperatorDep) -> AgentsOut:
    """`agent`'s runs, labels, failures, streams and models join `into`'s; `into`'s streams start their
    warm-up again. 404 for an unknown `agent` or `into`; 422 naming `into` when it is `agent`."""
    body = await parse_body(request, MergeRequest)
    one = await call(_agents(request).merge, principal.tenant, body.agent, body.into, actor=_actor(principal))
    return _out(principal.tenant, [one])


@router.post("/split", response_model=AgentsOut, summary="Split runs off an agent (operators)",
             responses={**ERRORS, **NOT_FOUND},
             openapi_extra=body_openapi(SplitRequest, {"split": {"summary": "Some runs are another agent's",
                                                                 "value": {"agent": "billing-bot", "trace_ids": ["t-17", "t-18"],
                                                                           "name": "refund-bot"}}}))
async def split(request: Request, principal: OperatorDep) -> AgentsOut:
    """Runs `trace_ids` of `agent` become a new agent (`name`, else a key of its own); both agents'
    profiles are rebuilt from their runs and `agent`'s streams start their warm-up again. 422 naming
    `trace_ids` when it is empty, names runs that are not `agent`'s, or all of them (rename instead)."""
    body = await parse_body(request, SplitRequest)
    one = await call(_agents(request).split, principal.tenant, body.agent, body.trace_ids, name=body.name,
                     actor=_actor(principal))
    return _out(principal.tenant, [one])
