"""A tenant's failure patterns over a window: the store's query, then :func:`model.diagnosis.patterns.group_patterns`.

What ``GET /v1/patterns`` and ``triage patterns`` both call (:func:`tenant_patterns`). The window is
``[since, until)``: ``until`` defaults to now rounded up to the whole minute, ``since`` to
``until − days`` (``days`` default 7); the previous window, for the trend, is the same length just
before it. A window is at most :data:`MAX_WINDOW_DAYS` long.

**Cache.** Each worker keeps the last answers (:data:`CACHE_SIZE`) keyed by the store, the tenant,
the parameters and the tenant's **data version** — the count and newest id of its failure rows and
the newest outcome id, read with one indexed query per request. Any diagnosis, deletion or outcome
changes the version, so with ``max_stale_s`` 0 an answer is never stale; with the default window's end on
the whole minute, a page reloaded within the minute is answered from the cache.

**Bounded staleness** (``max_stale_s``, the service's ``TRIAGE_PATTERNS_MAX_STALE_S``, default 30 s; 0 for
:func:`tenant_patterns` called directly and for ``triage patterns``). While a tenant's runs are written, its
data version moves with nearly every request, and at 1,000,000 runs an answer made anew took 2–10 s
(docs/benchmarks.md, "Patterns while runs are written"). So an answer made for a window of the same length
and parameters at most ``max_stale_s`` seconds ago, whose window ends at most a minute and ``max_stale_s``
before the one asked for, is given again; once it is ``max_stale_s / 2`` old, a thread of the worker makes
the new one meanwhile (one at a time for each such key; the next request gets it). An answer's age counts
from when it was made, so the worker starts a new one at most ``max_stale_s / 2`` seconds after the last
ended, whatever the request rate, and an answer lags the data by at most ``max_stale_s`` seconds plus the
time its making took; its ``as_of`` says when that started. A window that ends earlier than the last
answer's (history), or a key without a recent answer, is made while the caller waits, as before; but when the
last answer is too old because its successor takes longer than ``max_stale_s / 2`` to make (a 30-day window at
1,000,000 runs), the caller waits for that one instead of making another (it counts what was committed when
its making started, before the request: within the same bound).

**Failures read incrementally.** An answer after a write (a cold one) would read every failure row of
both windows again (12,749 rows at 20,000 runs: most of its cost). So each worker also keeps, per
tenant, the occurrences of the rows created since a base time (:class:`_Rows`), and after a write reads
only the rows with a newer id: a diagnosis replaces all of its run's rows (new ids), so the copy drops
the runs those rows belong to and adds them. The copy is then checked against the store — the count of
rows since the base, read in the same statement as the newest id — and read whole again when they
differ (a deletion: a run re-diagnosed healthy, deleted, or out of retention; a row committed late under
an older id), when the tenant's agents change (a rename, merge or split re-keys rows in place), when a
window starts before the base, and at least every :data:`ROWS_TTL_S` seconds.

**Helper process.** The service (:class:`Patterns`: ``GET /v1/patterns``, the console) makes its answers in a
helper process of the worker (:class:`_Helper`: one per worker, started on the first answer, with its own
connections to the same database, its own copy of the failure rows, at a lower CPU priority); the worker's
thread waits for the answer without holding the GIL. Made in the worker, the 2–3 s of Python grouping at
1,000,000 runs held its GIL, and every other request of the worker waited meanwhile (p95 470 ms over a
two-minute soak at one diagnosis a second; docs/benchmarks.md, "Patterns while runs are written"). One answer
is made at a time per worker. A helper that dies or takes longer than :data:`HELPER_TIMEOUT_S` is stopped and
that answer made in the worker, as before; the next one starts a new helper, unless the last one failed too (a
helper that cannot start, or dies at each answer): after two failures in a row the worker makes its answers
itself for :data:`HELPER_BACKOFF_S` seconds, doubled at each further failure up to :data:`HELPER_BACKOFF_MAX_S`,
before it tries a new helper; an answer the helper gives ends the series. :func:`tenant_patterns` called
directly (``triage patterns``, the tests) and an in-memory SQLite store make the answer in the caller's thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import CancelledError
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from model.core import errors as model_errors
from model.core.agents import POOL_AGENT
from model.core.errors import InputError, StoreError, TriageError
from model.diagnosis.patterns import Occurrence, group_patterns
from serve.schemas import Level, PatternOut, PatternsOut
from serve.store.reports import ReportStore
from serve.supervise import HelperPool, watch_master

log = logging.getLogger("triage.patterns")

MAX_WINDOW_DAYS = 366
DEFAULT_DAYS = 7.0
#: Answers kept per worker (module docstring).
CACHE_SIZE = 64
_cache: OrderedDict[tuple[Any, ...], PatternsOut] = OrderedDict()
_cache_lock = threading.Lock()
#: Seconds a worker's copy of a tenant's failure rows lives before it is read whole again.
ROWS_TTL_S = 300.0
#: Tenants whose failure rows a worker keeps (the least recently used goes).
ROWS_TENANTS = 16
#: Seconds a worker waits for its helper's answer (queued behind another one included) before it stops the
#: helper and makes the answer itself (module docstring, "Helper process").
HELPER_TIMEOUT_S = 600.0
#: The helper runs at a lower CPU priority (``nice``) than its worker: when both want the cores, requests go first.
HELPER_NICE = 10
#: After two helper failures in a row, the seconds the worker makes its answers itself before it starts another
#: helper; doubled at each further failure, up to :data:`HELPER_BACKOFF_MAX_S`.
HELPER_BACKOFF_S = 30.0
HELPER_BACKOFF_MAX_S = 600.0


@dataclass
class _Rows:
    """A worker's copy of a tenant's failure rows created since ``base`` (module docstring)."""

    base: datetime
    top: int  # the newest row id read
    state: tuple[int, int, int, int]  # ReportStore.failure_state when it was brought up to date
    by_run: dict[str, list[tuple[int, Occurrence]]]
    loaded: float  # time.monotonic() of the whole read

    def count(self) -> int:
        return sum(len(v) for v in self.by_run.values())


_rows: OrderedDict[tuple[Any, ...], _Rows] = OrderedDict()


@dataclass(frozen=True)
class _Recent:
    """The last answer made for a window's length and parameters (module docstring, "Bounded staleness")."""

    until: datetime
    started: float  # time.monotonic() when its making started (its as_of)
    made: float  # … and ended: its age counts from here
    out: PatternsOut

    def serves(self, until: datetime, max_stale_s: float) -> bool:
        """Whether it may answer for a window ending at ``until``: its own ends at most a minute and
        ``max_stale_s`` before."""
        return timedelta(0) <= until - self.until <= timedelta(seconds=60 + max_stale_s)


_recent: OrderedDict[tuple[Any, ...], _Recent] = OrderedDict()
#: The keys of _recent whose new answer a thread is making: set when it is made (or failed).
_refreshing: dict[tuple[Any, ...], threading.Event] = {}


def clear_cache() -> None:
    """Forget every cached answer (the next one is read and grouped afresh: ``bench/console_pages.py``'s cold case)."""
    with _cache_lock:
        _cache.clear()
        _recent.clear()


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
    max_stale_s: float = 0.0,
    helper: _Helper | None = None,
) -> PatternsOut:
    """The tenant's patterns of ``[since, until)`` (its runs only), best first, ``limit`` of them
    (answered from the worker's cache when the tenant's data has not changed, or, within ``max_stale_s``,
    while it is written: module docstring). ``agent``: only that agent's runs
    (:data:`~model.core.agents.POOL_AGENT`: the pool's). ``helper``: where an answer is made (module
    docstring, "Helper process"; ``None``: in the caller's thread)."""
    params = (store.db.url, id(store), tenant, until - since, level, limit, examples, agent)
    key = (*params, since, until, store.pattern_version(tenant))
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
        recent = _recent.get(params) if max_stale_s > 0 else None
        age = time.monotonic() - recent.made if recent is not None else 0.0
        near = recent is not None and recent.serves(until, max_stale_s)
        if recent is not None and near and age <= max_stale_s:
            if age >= max_stale_s / 2 and params not in _refreshing:
                _refreshing[params] = threading.Event()
                threading.Thread(target=_refresh, args=(store, tenant, params, key, since, until, helper),
                                 name="triage-patterns", daemon=True).start()
            return recent.out
        making = _refreshing.get(params) if near else None
    if making is not None and making.wait(HELPER_TIMEOUT_S):  # too old, its successor under way: that one
        with _cache_lock:
            got = _recent.get(params)
        if got is not None and got is not recent and got.serves(until, max_stale_s):
            return got.out
    return _made(store, tenant, params, key, since, until, helper)


def _made(store: ReportStore, tenant: str, params: tuple[Any, ...], key: tuple[Any, ...], since: datetime,
          until: datetime, helper: _Helper | None) -> PatternsOut:
    """The answer of ``key`` made now (its data version read before: the helper reads the data after it),
    kept in both caches."""
    started = time.monotonic()
    level, limit, examples, agent = params[4:]
    out = helper.make(tenant, since=since, until=until, level=level, limit=limit, examples=examples,
                      agent=agent) if helper is not None else None
    if out is None:
        out = _tenant_patterns(store, tenant, since=since, until=until, level=level, limit=limit,
                               examples=examples, agent=agent)
    with _cache_lock:
        _cache[key] = out
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
        old = _recent.get(params)
        if old is None or old.started <= started:
            _recent[params] = _Recent(until, started, time.monotonic(), out)
            _recent.move_to_end(params)
            while len(_recent) > CACHE_SIZE:
                _recent.popitem(last=False)
    return out


def _refresh(store: ReportStore, tenant: str, params: tuple[Any, ...], key: tuple[Any, ...], since: datetime,
             until: datetime, helper: _Helper | None) -> None:
    try:
        _made(store, tenant, params, key, since, until, helper)
    except Exception:  # the next request makes it while it waits, and meets the error itself
        log.exception("patterns: making tenant %s's answer in the background failed", tenant)
    finally:
        with _cache_lock:
            done = _refreshing.pop(params, None)
        if done is not None:
            done.set()


def occurrences_since(store: ReportStore, tenant: str, since: datetime) -> list[Occurrence]:
    """The tenant's failures and signals created since ``since``, by time then row id: what
    :meth:`ReportStore.failure_rows` reads, from this worker's copy brought up to date (module docstring)."""
    key = (store.db.url, id(store), tenant)
    with _cache_lock:
        got = _rows.get(key)
    state = store.failure_state(tenant, since=got.base) if got is not None else None
    if got is not None and state is not None and got.base <= since and time.monotonic() - got.loaded < ROWS_TTL_S \
            and state[2:] == got.state[2:]:
        if state[1] > got.top:  # rows written since: each run's new rows replace all of its old ones
            fresh: dict[str, list[tuple[int, Occurrence]]] = {}
            for rid, o in store.failure_rows(tenant, since=got.base, after_id=got.top, upto_id=state[1]):
                fresh.setdefault(o.trace_id, []).append((rid, o))
            by_run = {**got.by_run, **fresh}
            got = _Rows(got.base, state[1], state, by_run, got.loaded)
        if got.count() == state[0]:
            with _cache_lock:
                _rows[key] = got
                _rows.move_to_end(key)
            return _since(got, since)
    base = since - timedelta(days=1)  # a sliding window stays inside it for a day
    state = store.failure_state(tenant, since=base)
    by: dict[str, list[tuple[int, Occurrence]]] = {}
    for rid, o in store.failure_rows(tenant, since=base, upto_id=state[1]):
        by.setdefault(o.trace_id, []).append((rid, o))
    got = _Rows(base, state[1], state, by, time.monotonic())
    if got.count() != state[0]:  # written between the two reads: not kept, right for this answer
        return _since(got, since)
    with _cache_lock:
        _rows[key] = got
        _rows.move_to_end(key)
        while len(_rows) > ROWS_TENANTS:
            _rows.popitem(last=False)
    return _since(got, since)


def _since(rows: _Rows, since: datetime) -> list[Occurrence]:
    got = [(o.created_at, rid, o) for occ in rows.by_run.values() for rid, o in occ if o.created_at >= since]
    got.sort(key=lambda r: (r[0], r[1]))
    return [o for _, _, o in got]


def _tenant_patterns(
    store: ReportStore, tenant: str, *, since: datetime, until: datetime, level: Level, limit: int, examples: int,
    agent: str | None,
) -> PatternsOut:
    as_of = datetime.now(UTC)  # what is committed by now is read below
    previous_since = since - (until - since)
    both = occurrences_since(store, tenant, previous_since)
    occ = [o for o in both if since <= o.created_at < until]
    prev = [o for o in both if o.created_at < since]
    repairs = store.repair_events(tenant, since=since)
    if agent is not None:
        want = None if agent == POOL_AGENT else agent  # an occurrence of the pool has agent None
        occ = [o for o in occ if o.agent == want]
        prev = [o for o in prev if o.agent == want]
    found = group_patterns(occ, repairs, since=since, until=until, previous=prev, examples=examples, level=level)
    return PatternsOut(
        as_of=as_of,
        tenant=tenant,
        since=since,
        until=until,
        previous_since=previous_since,
        runs=len({o.trace_id for o in occ}),
        total_patterns=len(found),
        patterns=[PatternOut.model_validate(p.as_dict()) for p in found[:limit]],
    )


_HELPER_STORE: ReportStore | None = None  # the helper process's store (_helper_init)


def _helper_init(url: str, busy_timeout_s: float) -> None:  # pragma: no cover - runs in the helper process
    global _HELPER_STORE
    from serve.store import Stores

    watch_master()  # it stops with its worker (a thread waits for the worker's exit)
    with contextlib.suppress(OSError, AttributeError):  # not on every platform
        os.nice(HELPER_NICE)
    _HELPER_STORE = Stores.at(url, busy_timeout_s=busy_timeout_s).reports


def _helper_make(tenant: str, since: datetime, until: datetime, level: Level, limit: int, examples: int,
                 agent: str | None) -> tuple[str, Any]:  # pragma: no cover - runs in the helper process
    """The answer (the helper process): ``("ok", PatternsOut)``, or an error to raise again in the worker."""
    assert _HELPER_STORE is not None
    try:
        return "ok", _tenant_patterns(_HELPER_STORE, tenant, since=since, until=until, level=level, limit=limit,
                                      examples=examples, agent=agent)
    except InputError as exc:
        return "input", (exc.message, exc.path)
    except TriageError as exc:
        return "triage", (type(exc).__name__, str(exc))


class _Helper(HelperPool):
    """A worker's helper process making its answers (module docstring, "Helper process"), started on the first."""

    def __init__(self, url: str, busy_timeout_s: float) -> None:
        super().__init__(_helper_init, (url, busy_timeout_s))
        self.failures = 0  # helpers that failed since the last answer one gave
        self.retry_at = 0.0  # time.monotonic() before which no new helper is started (after failures in a row)

    def make(self, tenant: str, *, since: datetime, until: datetime, level: Level, limit: int, examples: int,
             agent: str | None) -> PatternsOut | None:
        """The answer made in the helper; ``None`` when the helper died or took over :data:`HELPER_TIMEOUT_S`
        (it is stopped: the caller makes the answer, the next one starts a new helper), and while no new helper
        is started after failures in a row (module docstring, "Helper process")."""
        if self._pool is None and time.monotonic() < self.retry_at:
            return None
        pool = self.executor()
        try:
            status, value = pool.submit(_helper_make, tenant, since, until, level, limit, examples,
                                        agent).result(timeout=HELPER_TIMEOUT_S)
        # CancelledError, RuntimeError: stopped or closed meanwhile (another thread's answer failed, the worker's end)
        except (BrokenProcessPool, TimeoutError, CancelledError, RuntimeError) as exc:
            if self.stop(pool):  # the helper's failure, counted once whatever number of answers it failed
                with self._lock:
                    self.failures += 1
                    wait = 0.0 if self.failures < 2 else min(HELPER_BACKOFF_MAX_S,
                                                             HELPER_BACKOFF_S * 2 ** (self.failures - 2))
                    self.retry_at = time.monotonic() + wait
                log.error("patterns: the helper process failed (%s); the answer is made in the worker%s",
                          type(exc).__name__ if str(exc) == "" else exc,
                          f" for the next {wait:.0f} s too ({self.failures} failures in a row)" if wait else "")
            return None
        self.failures = 0
        if status == "ok":
            return value  # type: ignore[no-any-return]
        if status == "input":
            raise InputError(value[0], path=value[1])
        name, message = value
        cls = getattr(model_errors, name, None)
        if isinstance(cls, type) and issubclass(cls, TriageError):
            with contextlib.suppress(TypeError):  # one whose constructor wants more: a StoreError below
                raise cls(message)
        raise StoreError(message)


def _separate(report_store: ReportStore) -> bool:
    """Whether another process can open the store (not an in-memory SQLite database)."""
    db = report_store.db
    database = db.engine.url.database
    return db.dialect != "sqlite" or (bool(database) and database != ":memory:" and "mode=memory" not in db.url)


class Patterns:
    """The tenant's failure patterns over the stores' aggregates (``GET /v1/patterns``, the console), made in
    a helper process (module docstring, "Helper process")."""

    def __init__(self, report_store: ReportStore, *, max_stale_s: float = 0.0) -> None:
        self.report_store = report_store
        self.max_stale_s = max_stale_s
        self.helper = _Helper(report_store.db.url, report_store.db.busy_timeout_s) if _separate(report_store) \
            else None

    def close(self) -> None:
        """Stop the helper process (the worker's end)."""
        if self.helper is not None:
            self.helper.close()

    def tenant_patterns(
        self, tenant: str, *, since: datetime, until: datetime, level: Level = "all", limit: int = 50,
        examples: int = 3, agent: str | None = None,
    ) -> PatternsOut:
        """:func:`tenant_patterns` on this service's store, within its ``max_stale_s``."""
        return tenant_patterns(self.report_store, tenant, since=since, until=until, level=level, limit=limit,
                               examples=examples, agent=agent, max_stale_s=self.max_stale_s, helper=self.helper)


__all__ = ["DEFAULT_DAYS", "MAX_WINDOW_DAYS", "ROWS_TENANTS", "ROWS_TTL_S", "Patterns", "clear_cache", "occurrences_since",
           "tenant_patterns", "window"]
