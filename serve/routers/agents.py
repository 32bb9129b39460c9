"""``GET /v1/agents``: the caller's agents; ``POST /v1/agents/rename``, ``…/merge``, ``…/split``
(operator keys): correct them (serve/services/agents.py; docs/agents.md states what happens to the past)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from serve.auth import OperatorDep, PrincipalDep
from serve.body import body_openapi, parse_body
from serve.deps import AgentsDep
from serve.routers._common import ERRORS, NOT_FOUND, call
from serve.schemas import AgentOut, AgentsOut, MergeRequest, RenameRequest, SplitRequest

router = APIRouter(prefix="/v1/agents", tags=["agents"])


def _out(tenant: str, items: list[dict[str, Any]]) -> AgentsOut:
    return AgentsOut(tenant=tenant, agents=[AgentOut.model_validate(a) for a in items])


@router.get("", response_model=AgentsOut, summary="The caller's agents", responses=ERRORS)
async def list_agents(principal: PrincipalDep, agents: AgentsDep) -> AgentsOut:
    """Each agent of the tenant: its key, name, how it was found, its runs and labelled runs, first and
    last seen, old keys, and what its runs show."""
    return _out(principal.tenant, await call(agents.list, principal.tenant))


def _actor(principal: Any) -> str:
    return f"key:{principal.key_id}" if principal.key_id else "api"


@router.post("/rename", response_model=AgentsOut, summary="Name an agent (operators)", responses={**ERRORS, **NOT_FOUND},
             openapi_extra=body_openapi(RenameRequest, {"rename": {"summary": "Name an inferred agent",
                                                                   "value": {"agent": "agent-1a2b3c4d", "name": "billing-bot"}}}))
async def rename(request: Request, principal: OperatorDep, agents: AgentsDep) -> AgentsOut:
    """The agent's history moves to the key `name` (its streams keep their baselines); later runs
    matched to it, or naming its old key, get `name`. 404 for an unknown `agent`; 422 naming `name`
    when an agent of that name exists (merge instead)."""
    body = await parse_body(request, RenameRequest)
    one = await call(agents.rename, principal.tenant, body.agent, body.name, actor=_actor(principal))
    return _out(principal.tenant, [one])


@router.post("/merge", response_model=AgentsOut, summary="Merge one agent into another (operators)",
             responses={**ERRORS, **NOT_FOUND},
             openapi_extra=body_openapi(MergeRequest, {"merge": {"summary": "Two inferred agents are one",
                                                                 "value": {"agent": "agent-1a2b3c4d", "into": "billing-bot"}}}))
async def merge(request: Request, principal: OperatorDep, agents: AgentsDep) -> AgentsOut:
    """`agent`'s runs, labels, failures, streams and models join `into`'s; `into`'s streams start their
    warm-up again. 404 for an unknown `agent` or `into`; 422 naming `into` when it is `agent`."""
    body = await parse_body(request, MergeRequest)
    one = await call(agents.merge, principal.tenant, body.agent, body.into, actor=_actor(principal))
    return _out(principal.tenant, [one])


@router.post("/split", response_model=AgentsOut, summary="Split runs off an agent (operators)",
             responses={**ERRORS, **NOT_FOUND},
             openapi_extra=body_openapi(SplitRequest, {"split": {"summary": "Some runs are another agent's",
                                                                 "value": {"agent": "billing-bot", "trace_ids": ["t-17", "t-18"],
                                                                           "name": "refund-bot"}}}))
async def split(request: Request, principal: OperatorDep, agents: AgentsDep) -> AgentsOut:
    """Runs `trace_ids` of `agent` become a new agent (`name`, else a key of its own); both agents'
    profiles are rebuilt from their runs and `agent`'s streams start their warm-up again. 422 naming
    `trace_ids` when it is empty, names runs that are not `agent`'s, or all of them (rename instead)."""
    body = await parse_body(request, SplitRequest)
    one = await call(agents.split, principal.tenant, body.agent, body.trace_ids, name=body.name,
                     actor=_actor(principal))
    return _out(principal.tenant, [one])
