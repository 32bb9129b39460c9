"""``GET /v1/patterns``: the caller's failure patterns over a window, ranked (serve/services/patterns.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BeforeValidator

from serve.auth import PrincipalDep
from serve.deps import PatternsDep
from serve.routers._common import ERRORS, call
from serve.schemas import Level, PatternsOut
from serve.services.patterns import MAX_WINDOW_DAYS, window
from serve.validation import TEXT_PARAM_PATTERN, iso_datetime_text

router = APIRouter(prefix="/v1/patterns", tags=["patterns"])

When = Annotated[datetime | None, BeforeValidator(iso_datetime_text)]


@router.get("", response_model=PatternsOut, summary="Failure patterns, ranked", responses=ERRORS)
async def list_patterns(
    principal: PrincipalDep,
    patterns: PatternsDep,
    since: Annotated[When, Query(description="Window start (ISO 8601); default `until` − `days`.")] = None,
    until: Annotated[When, Query(description="Window end, exclusive (ISO 8601); default now.")] = None,
    days: Annotated[
        float | None,
        Query(gt=0, le=MAX_WINDOW_DAYS, allow_inf_nan=False, description="Window length in days when `since` is "
              "not given (default 7)."),
    ] = None,
    level: Annotated[Level, Query(description="Failures, signals, or both.")] = "all",
    agent: Annotated[
        str | None, Query(min_length=1, max_length=200, pattern=TEXT_PARAM_PATTERN, description="Only this agent's runs.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    examples: Annotated[int, Query(ge=0, le=20, description="Example runs per pattern.")] = 3,
) -> PatternsOut:
    """The failures and signals of this tenant's runs created in the window, grouped by kind, tool,
    normalised evidence and agent (runs flagged only by their failure probability: by the kind and
    tool at their attribution's step), ranked by runs × severity × (1 − repair success), with the
    trend against the previous window, example runs and each repair's record."""
    start, end = window(since=since, until=until, days=days)
    return await call(patterns.tenant_patterns, principal.tenant, since=start, until=end, level=level,
                      limit=limit, examples=examples, agent=agent)
