"""A tenant's failure patterns over a window: the store's query, then :func:`model.diagnosis.patterns.group_patterns`.

What ``GET /v1/patterns`` and ``triage patterns`` both call (:func:`tenant_patterns`). The window is
``[since, until)``: ``until`` defaults to now rounded up to the whole minute, ``since`` to
``until − days`` (``days`` default 7); the previous window, for the trend, is the same length just
before it. A window is at most :data:`MAX_WINDOW_DAYS` long.

**Cache.** Grouping a tenant's 20,000 failures reads them all (about 1–2 s on the shared 2-core
machine), so each worker keeps the last answers (:data:`CACHE_SIZE`) keyed by the store, the tenant,
the parameters and the tenant's **data version** — the count and newest id of its failure rows and
the newest outcome id, read with one indexed query per request. Any diagnosis, deletion or outcome
changes the version, so an answer is never stale; with the default window's end on the whole minute,
a page reloaded within the minute is answered from the cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import UTC, datetime, timedelta
from typing import Any

from model.core.agents import POOL_AGENT
from model.core.errors import InputError
from model.diagnosis.patterns import group_patterns
from serve.schemas import Level, PatternOut, PatternsOut
from serve.store.reports import ReportStore

MAX_WINDOW_DAYS = 366
DEFAULT_DAYS = 7.0
#: Answers kept per worker (module docstring).
CACHE_SIZE = 64
_cache: OrderedDict[tuple[Any, ...], PatternsOut] = OrderedDict()
_cache_lock = threading.Lock()



def window(
    *, since: datetime | None, until: datetime | None, days: float | None, now: datetime | None = None
) -> tuple[datetime, datetime]:
    """``(since, until)`` from the parameters (module docstring); :class:`InputError` naming the
    query parameter when they contradict each other or span too much."""
    if since is not None and days is not None:
        raise InputError("give `since` or `days`, not both", path="query.days")
    if days is not None and not 0 < days <= MAX_WINDOW_DAYS:
        raise InputError(f"days must be in (0, {MAX_WINDOW_DAYS}]; got {days}", path="query.days")
    until = _aware(until) if until is not None else _minute_up(now or datetime.now(UTC))
    since = _aware(since) if since is not None else until - timedelta(days=days or DEFAULT_DAYS)
    if until <= since:
        raise InputError(f"until ({until.isoformat()}) must be after since ({since.isoformat()})", path="query.until")
    if until - since > timedelta(days=MAX_WINDOW_DAYS):
        raise InputError(f"a window is at most {MAX_WINDOW_DAYS} days; got {(until - since).days}", path="query.since")
    try:
        since - (until - since)
    except OverflowError:
        raise InputError("the window's previous window starts before year 1", path="query.since") from None
    return since, until


def _minute_up(t: datetime) -> datetime:
    floor = t.replace(second=0, microsecond=0)
    return floor if floor == t else floor + timedelta(minutes=1)


def _aware(t: datetime) -> datetime:
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def tenant_patterns(
    store: ReportStore,
    tenant: str,
    *,
    since: datetime,
    until: datetime,
    level: Level = "all",
    limit: int = 50,
    examples: int = 3,
    agent: str | None = None,
) -> PatternsOut:
    """The tenant's patterns of ``[since, until)`` (its runs only), best first, ``limit`` of them
    (answered from the worker's cache when the tenant's data has not changed: module docstring).
    ``agent``: only that agent's runs (:data:`~model.core.agents.POOL_AGENT`: the pool's)."""
    key = (store.db.url, id(store), tenant, since, until, level, limit, examples, agent, store.pattern_version(tenant))
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    out = _tenant_patterns(store, tenant, since=since, until=until, level=level, limit=limit, examples=examples,
                           agent=agent)
    with _cache_lock:
        _cache[key] = out
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return out


def _tenant_patterns(
    store: ReportStore, tenant: str, *, since: datetime, until: datetime, level: Level, limit: int, examples: int,
    agent: str | None,
) -> PatternsOut:
    previous_since = since - (until - since)
    occ, repairs = store.pattern_inputs(tenant, since=since, until=until)
    prev, _ = store.pattern_inputs(tenant, since=previous_since, until=since, repairs=False)
    if agent is not None:
        want = None if agent == POOL_AGENT else agent  # an occurrence of the pool has agent None
        occ = [o for o in occ if o.agent == want]
        prev = [o for o in prev if o.agent == want]
    found = group_patterns(occ, repairs, since=since, until=until, previous=prev, examples=examples, level=level)
    return PatternsOut(
        tenant=tenant,
        since=since,
        until=until,
        previous_since=previous_since,
        runs=len({o.trace_id for o in occ}),
        total_patterns=len(found),
        patterns=[PatternOut.model_validate(p.as_dict()) for p in found[:limit]],
    )


class Patterns:
    """The tenant's failure patterns over the stores' aggregates (``GET /v1/patterns``, the console)."""

    def __init__(self, report_store: ReportStore) -> None:
        self.report_store = report_store

    def tenant_patterns(
        self, tenant: str, *, since: datetime, until: datetime, level: Level = "all", limit: int = 50,
        examples: int = 3, agent: str | None = None,
    ) -> PatternsOut:
        """:func:`tenant_patterns` on this service's store."""
        return tenant_patterns(self.report_store, tenant, since=since, until=until, level=level, limit=limit,
                               examples=examples, agent=agent)


__all__ = ["DEFAULT_DAYS", "MAX_WINDOW_DAYS", "Patterns", "tenant_patterns", "window"]
