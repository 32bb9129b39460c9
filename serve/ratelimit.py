"""Rate limits and the daily step quota: every caller gets its share, an abuser gets 429s.

Three limits, each answered ``429 Too Many Requests`` with ``Retry-After`` (whole seconds) and a
body naming the limit:

- **per key** (per client address when ``TRIAGE_AUTH=off``): a token bucket of
  ``TRIAGE_RATE_LIMIT_KEY_RPS`` requests a second with a burst of ``TRIAGE_RATE_LIMIT_KEY_BURST``;
- **per tenant** (all its keys together): ``TRIAGE_RATE_LIMIT_TENANT_RPS`` /
  ``TRIAGE_RATE_LIMIT_TENANT_BURST``;
- **steps per tenant per UTC day**: ``TRIAGE_QUOTA_DAILY_STEPS`` (steps imported by
  ``/v1/diagnose`` and session appends).

How the limits hold with several workers and servers:

- the request rates are **shared by the workers of one server**: ``triage serve --workers N``
  creates a table of token buckets in shared memory before uvicorn starts its workers
  (:mod:`serve.ratetable`, a file in ``/dev/shm`` named in ``TRIAGE_RATE_LIMIT_TABLE``) and every
  worker spends the same buckets, whichever worker a connection lands on: a key gets its rate,
  not 1/N of it, and never more. Taking a token locks only the bucket's set of slots (an ``fcntl``
  byte-range lock, microseconds), never the store: a request costs no query and no write for it.
  A hash collision only makes the colliding names limited more (they share a bucket), never less;
- with the store on **PostgreSQL** the buckets are rows there instead (:mod:`serve.store.limits`),
  spent by every replica and worker on that database: any number of servers behind any balancer
  hold a key's and a tenant's rate together, with no setting that counts them. An admitted request
  costs one round trip (both buckets in one statement, on a connection of the worker's own, in a
  worker thread; 0.27 ms of the server's CPU, docs/deployment.md); a refusal is remembered in the
  server's shared-memory table
  until the bucket can hold a token again (:meth:`~serve.ratetable.SharedTable.block`), so a flood
  of refused requests costs no query. When PostgreSQL does not answer, the server falls back to its
  own table for the while (each server then grants the whole rate; the requests admitted meet the
  same unavailable store);
- a process without the table (one worker, the tests' in-process apps) keeps a private one; workers
  started without ``triage serve`` (``TRIAGE_WORKERS`` > 1, no table) on SQLite each enforce
  1/workers, as before, and say so in the log;
- the daily quota is **shared through the store**: each request adds its steps to the tenant's
  row of ``usage`` in the same transaction that stores its trace, and is refused (rolled back)
  when the sum would pass the quota; a per-worker copy of the last total refuses a tenant already
  over it before any work is done.

A limit set to 0 is off. The limits are checked after the key is authenticated, before the body is
read; for a key the worker has authenticated within ``TRIAGE_AUTH_CACHE_S``, before routing
(:class:`RateLimitMiddleware`): a refused request costs a SHA-256 of the key, a dictionary lookup,
one bucket in the table and a 429 whose body is encoded once; it is not written to uvicorn's access
log (:class:`RefusalLogFilter`: one summary line a minute; ``triage_rate_limited_total`` counts
them). ``bench/abuse.py --phases refusals`` measures a refusal's CPU in the server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import Request
from starlette.concurrency import run_in_threadpool
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from model.core.errors import RateLimitedError, StoreError, StoreUnavailableError
from serve.auth import Principal, PrincipalDep, cached_principal
from serve.ratetable import SharedTable
from serve.store.limits import LimitStore

log = logging.getLogger("triage.serve")

class TokenBuckets:
    """Token buckets by name: ``rate`` tokens a second, at most ``burst``; thread-safe, and shared by
    every process that maps the same ``table`` (:mod:`serve.ratetable`; default: a private one).

    >>> b = TokenBuckets(rate=1.0, burst=2.0)
    >>> [b.take("k", now=0.0) for _ in range(3)]
    [0.0, 0.0, 1.0]
    >>> b.take("k", now=1.0)
    0.0
    """

    def __init__(self, *, rate: float, burst: float, table: SharedTable | None = None, region: int = 0) -> None:
        self.rate = rate
        self.burst = burst
        self.table = table if table is not None else SharedTable.private(regions=1)
        self.region = region

    def take(self, name: str, *, now: float | None = None) -> float:
        """Take one token for ``name``: 0.0 when granted, else the seconds until one is there."""
        return self.table.take(self.region, name, rate=self.rate, burst=self.burst, now=now)


class _Turns:
    """Whose turn it is among the tenants waiting: the one granted least recently (a tenant never
    granted, or not for a long time, first; ties in the order they started waiting). A tenant that
    has just been served therefore waits behind every other tenant that waits, even one that came
    after it: a flood of one tenant's admitted requests costs another tenant at most the request
    in progress, not that one and the flood's next."""

    def __init__(self) -> None:
        self._seq = 0
        self._last: dict[str, int] = {}  # tenant → sequence number of its latest grant

    def granted(self, tenant: str, waiting: Mapping[str, Any]) -> None:
        self._seq += 1
        if len(self._last) >= 10_000:  # forget tenants not waiting now (they count as long ago)
            self._last = {t: n for t, n in self._last.items() if t in waiting}
        self._last[tenant] = self._seq

    def next(self, waiting: Mapping[str, Any]) -> str:
        return min(waiting, key=lambda t: self._last.get(t, 0))


class FairLock:
    """A lock granted over tenants in turns (:class:`_Turns`): a tenant with many requests waiting
    goes after each other tenant that waits, not before all of them (the model's one inference at a
    time per worker is shared fairly; within a tenant, first come first served).

    >>> lock = FairLock()
    >>> with lock.hold("acme"):
    ...     pass
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._busy = False
        self._queues: dict[str, list[threading.Event]] = {}
        self._turns = _Turns()

    def acquire(self, tenant: str) -> None:
        with self._mutex:
            if not self._busy:
                self._busy = True
                self._turns.granted(tenant, self._queues)
                return
            ev = threading.Event()
            self._queues.setdefault(tenant, []).append(ev)
        ev.wait()  # set by release(), which hands the lock over without freeing it

    def release(self) -> None:
        with self._mutex:
            if not self._queues:
                self._busy = False
                return
            tenant = self._turns.next(self._queues)
            waiting = self._queues[tenant]
            ev = waiting.pop(0)
            if not waiting:
                del self._queues[tenant]
            self._turns.granted(tenant, self._queues)
        ev.set()

    @contextmanager
    def hold(self, tenant: str) -> Iterator[None]:
        self.acquire(tenant)
        try:
            yield
        finally:
            self.release()


class FairGate:
    """``slots`` requests of CPU work at a time in one worker, the next slot granted over the
    tenants waiting in turns (:class:`_Turns`; asyncio; a waiting request costs nothing). A
    tenant's burst of admitted requests then queues behind the other tenants' requests instead of
    sharing the worker's GIL and cores with them.
    """

    def __init__(self, slots: int) -> None:
        self.slots = max(1, slots)
        self._free = self.slots
        self._queues: dict[str, list[asyncio.Future[None]]] = {}
        self._turns = _Turns()

    async def acquire(self, tenant: str) -> None:
        if self._free > 0 and not self._queues:
            self._free -= 1
            self._turns.granted(tenant, self._queues)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(tenant, []).append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # granted as it was cancelled: pass the slot on
            else:
                waiting = self._queues.get(tenant)
                if waiting is not None and fut in waiting:
                    waiting.remove(fut)
                    if not waiting:
                        del self._queues[tenant]
            raise

    def release(self) -> None:
        while self._queues:
            tenant = self._turns.next(self._queues)
            waiting = self._queues[tenant]
            fut = waiting.pop(0)
            if not waiting:
                del self._queues[tenant]
            if not fut.done():
                self._turns.granted(tenant, self._queues)
                fut.set_result(None)  # the slot passes on without being freed
                return
        self._free += 1

    @asynccontextmanager
    async def slot(self, tenant: str) -> AsyncIterator[None]:
        await self.acquire(tenant)
        try:
            yield
        finally:
            self.release()


def seconds_to_midnight(now: datetime | None = None) -> float:
    """Seconds until the next UTC midnight (when the daily quota starts again)."""
    now = now or datetime.now(UTC)
    tomorrow = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return (tomorrow - now).total_seconds()


def utc_day(now: datetime | None = None) -> str:
    """``now``'s date (default: today, UTC); today's is formatted once a day (strftime: ~5 µs a request)."""
    global _TODAY
    if now is not None:
        return now.strftime("%Y-%m-%d")
    day = int(time.time() // 86400)  # the POSIX clock's days are UTC days
    today = _TODAY
    if today[0] != day:
        today = _TODAY = (day, datetime.fromtimestamp(day * 86400, UTC).strftime("%Y-%m-%d"))
    return today[1]


_TODAY: tuple[int, str] = (-1, "")


class RateLimiter:
    """The per-key and per-tenant buckets a worker spends, and its copy of the tenants' daily usage.

    Parameters
    ----------
    key_rps, key_burst, tenant_rps, tenant_burst:
        The limits for the whole service (0: off).
    daily_steps:
        Steps a tenant may import per UTC day (0: off).
    processes:
        How many private tables share the limits: each one enforces 1/N of the rates and bursts
        (workers started without ``triage serve`` and without a shared store); 1 otherwise.
    table:
        The buckets' table; default a private one (this process only). With ``shared`` it holds
        the refusals the database answered (:meth:`~serve.ratetable.SharedTable.block`).
    shared:
        The buckets in PostgreSQL (:class:`~serve.store.limits.LimitStore`), spent by every server
        on the database; ``None``: the table's.
    """

    def __init__(
        self,
        *,
        key_rps: float,
        key_burst: float,
        tenant_rps: float,
        tenant_burst: float,
        daily_steps: int,
        processes: int = 1,
        table: SharedTable | None = None,
        shared: LimitStore | None = None,
    ) -> None:
        self.shared = shared if shared is not None and shared.available else None
        self.processes = 1 if self.shared is not None else max(1, processes)
        self.daily_steps = daily_steps
        self.table = table if table is not None else SharedTable.private()
        self.key = self._buckets(key_rps, key_burst, 0)
        self.tenant = self._buckets(tenant_rps, tenant_burst, 1)
        self._usage: dict[str, tuple[str, int]] = {}  # tenant → (day, steps as last seen)
        self._usage_lock = threading.Lock()
        self.refused: dict[tuple[str, str], int] = {}  # (tenant, scope) → 429s given by this worker
        self._unavailable_until = 0.0  # the shared buckets failed: this server's table until then
        self._next_sweep = time.monotonic() + SWEEP_S * (0.5 + random.random())

    def _buckets(self, rps: float, burst: float, region: int) -> TokenBuckets | None:
        if rps <= 0:
            return None
        return TokenBuckets(
            rate=rps / self.processes, burst=max(1.0, burst / self.processes), table=self.table, region=region
        )

    @classmethod
    def from_settings(cls, settings: Any, shared: LimitStore | None = None) -> RateLimiter:
        """The limiter of a worker: on PostgreSQL the buckets of ``shared`` (every server's), on the
        server's shared-memory table when ``triage serve`` made one (``TRIAGE_RATE_LIMIT_TABLE``);
        else on a private table, each of the ``TRIAGE_WORKERS`` processes enforcing 1/workers."""
        table = None
        shared = shared if shared is not None and shared.available else None
        processes = 1 if shared is not None else settings.workers
        if settings.rate_limit_table:
            try:
                table = SharedTable.attach(settings.rate_limit_table)
                processes = 1
            except (OSError, ValueError) as exc:
                log.warning("rate-limit table %s not usable (%s): this worker keeps its own buckets, "
                            "1/%d of the rates", settings.rate_limit_table, exc, processes)
        elif settings.workers > 1 and shared is None:
            log.warning("TRIAGE_WORKERS=%d without a shared rate-limit table (start the server with `triage "
                        "serve`): each worker enforces 1/%d of the rates", settings.workers, processes)
        return cls(
            key_rps=settings.rate_limit_key_rps,
            key_burst=settings.rate_limit_key_burst,
            tenant_rps=settings.rate_limit_tenant_rps,
            tenant_burst=settings.rate_limit_tenant_burst,
            daily_steps=settings.quota_daily_steps,
            processes=processes,
            table=table,
            shared=shared,
        )

    def check_request(self, tenant: str, caller: str) -> None:
        """Spend one request of ``caller`` (a key id or client address) and of ``tenant``.

        Raises :class:`RateLimitedError` when either bucket is empty, or when the tenant is known
        to be over its daily quota already. With the buckets in PostgreSQL this waits for the round
        trip; :meth:`acheck_request` makes it in a worker thread instead.
        """
        wanted = self._shared_wanted(tenant, caller)
        done = False
        if wanted:
            done = self._shared_answer(tenant, wanted, self._shared_take(wanted))
        self._local_and_quota(tenant, caller, done or wanted == [])

    async def acheck_request(self, tenant: str, caller: str) -> None:
        """:meth:`check_request` for the event loop: the database's round trip (when the buckets are in
        PostgreSQL and not already known empty) runs in a worker thread, so that the loop goes on
        serving meanwhile; everything else (the table, the quota's copy) runs here."""
        wanted = self._shared_wanted(tenant, caller)
        done = False
        if wanted:
            done = self._shared_answer(tenant, wanted, await run_in_threadpool(self._shared_take, wanted))
        self._local_and_quota(tenant, caller, done or wanted == [])

    def _local_and_quota(self, tenant: str, caller: str, shared_done: bool) -> None:
        if not shared_done:  # the server's own table: no shared buckets, or they did not answer
            if self.key is not None:
                wait = self.key.take(f"{tenant}\x00{caller}")
                if wait:
                    self._refuse(tenant, "key", wait, self._message("key"))
            if self.tenant is not None:
                wait = self.tenant.take(tenant)
                if wait:
                    self._refuse(tenant, "tenant", wait, self._message("tenant"))
        if self.daily_steps > 0:
            with self._usage_lock:
                seen = self._usage.get(tenant)
            if seen is not None and seen[0] == utc_day() and seen[1] >= self.daily_steps:
                self.quota_refused(tenant)

    def _shared_wanted(self, tenant: str, caller: str) -> list[tuple[str, str, str, TokenBuckets]] | None:
        """The buckets to take in PostgreSQL, as (scope, name in the table, row name, limit); ``None``
        when they are not used now (no database, or it failed a moment ago); raises the 429 when the
        table remembers one of them empty (no query)."""
        if self.shared is None or time.monotonic() < self._unavailable_until:
            return None
        wanted: list[tuple[str, str, str, TokenBuckets]] = []
        if self.key is not None:
            wanted.append(("key", f"{tenant}\x00{caller}", f"k:{tenant}/{caller}", self.key))
        if self.tenant is not None:
            wanted.append(("tenant", tenant, f"t:{tenant}", self.tenant))
        for scope, local, _, b in wanted:
            wait = self.table.blocked(b.region + BLOCKS, local)
            if wait:
                self._refuse(tenant, scope, wait, self._message(scope))
        return wanted

    def _shared_take(self, wanted: list[tuple[str, str, str, TokenBuckets]]) -> tuple[int, float] | None:
        """One round trip to the buckets; ``None`` when the database did not answer."""
        assert self.shared is not None
        try:
            return self.shared.take([(row, b.rate, b.burst) for _, _, row, b in wanted])
        except StoreUnavailableError as exc:
            self._unavailable_until = time.monotonic() + UNAVAILABLE_S
            log.warning("the shared rate-limit buckets are unavailable (%s): this server counts with its own "
                        "table for %.0f s", exc, UNAVAILABLE_S)
            return None

    def _shared_answer(self, tenant: str, wanted: list[tuple[str, str, str, TokenBuckets]],
                       answer: tuple[int, float] | None) -> bool:
        """Act on the database's answer: remember and raise a refusal; False when there was none."""
        if answer is None:
            return False
        refused, wait = answer
        if refused >= 0:
            scope, local, _, b = wanted[refused]
            self.table.block(b.region + BLOCKS, local, time.monotonic() + wait)
            self._refuse(tenant, scope, wait, self._message(scope))
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + SWEEP_S
            threading.Thread(target=self._sweep, name="triage-rate-sweep", daemon=True).start()
        return True

    def _sweep(self) -> None:
        assert self.shared is not None
        try:
            self.shared.sweep(SWEEP_S)
        except StoreError as exc:
            log.warning("sweeping the shared rate-limit buckets failed: %s", exc)

    def _message(self, which: str) -> str:
        b = self.key if which == "key" else self.tenant
        assert b is not None
        rate = f"{b.rate * self.processes:g}"
        return f"more than {rate} requests a second " + ("from this key" if which == "key" else "for this tenant")

    def _refuse(self, tenant: str, scope: str, wait: float, msg: str) -> None:
        with self._usage_lock:
            self.refused[(tenant, scope)] = self.refused.get((tenant, scope), 0) + 1
        raise RateLimitedError(msg, scope=scope, retry_after=wait)

    def quota_refused(self, tenant: str) -> None:
        """Raise the daily-quota 429 (and count it)."""
        self._refuse(
            tenant,
            "quota",
            seconds_to_midnight(),
            f"the tenant's daily quota of {self.daily_steps} steps is spent (setting TRIAGE_QUOTA_DAILY_STEPS); "
            "it starts again at 00:00 UTC",
        )

    def note_usage(self, tenant: str, day: str, steps: int) -> None:
        """The tenant's usage as the store last reported it (a later request checks it first)."""
        with self._usage_lock:
            self._usage[tenant] = (day, steps)


#: How long a server counts with its own table after the shared buckets failed; how often stale rows go;
#: where the table keeps the refusals of a bucket region (serve/ratetable.py: regions 2 and 3).
UNAVAILABLE_S = 5.0
SWEEP_S = 3600.0
BLOCKS = 2


def _caller(principal: Principal, client: tuple[str, int] | Any) -> str:
    if principal.key_id:
        return principal.key_id
    host = client[0] if client else "?"
    return f"addr:{host}"


async def rate_limit(request: Request, principal: PrincipalDep) -> None:
    """Dependency of every ``/v1`` router and the OTLP receiver: spend one request of the caller's key and tenant
    (unless :class:`RateLimitMiddleware` already did, for a key this worker knows)."""
    limiter: RateLimiter | None = getattr(request.app.state, "rate_limiter", None)
    if limiter is None or request.scope.get(_CHECKED):
        return
    await limiter.acheck_request(principal.tenant, _caller(principal, request.client))


_CHECKED = "triage.rate_checked"


class RateLimitMiddleware:
    """The cheap path for refusals: a ``/v1`` request whose key this worker has authenticated
    recently is counted (and refused with 429) before routing, body parsing or dependencies, so
    that an abusive client costs a hash and a dictionary lookup per request. Requests from keys
    not in the worker's cache go on to the route, whose dependency authenticates and counts them.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        RefusalLogFilter.install()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(("/v1/", "/otlp/")):
            await self.app(scope, receive, send)
            return
        state = scope["app"].state if "app" in scope else None
        limiter: RateLimiter | None = getattr(state, "rate_limiter", None)
        principal = cached_principal(scope) if limiter is not None else None
        if limiter is None or principal is None:
            await self.app(scope, receive, send)
            return
        try:
            await limiter.acheck_request(principal.tenant, _caller(principal, scope.get("client")))
        except RateLimitedError as exc:
            _label_route(scope)
            await _send_429(send, exc)
            return
        scope[_CHECKED] = True
        await self.app(scope, receive, send)


@dataclass(frozen=True)
class _RouteLabel:
    path: str  # what the latency histogram reads from ``scope["route"]``


_MISSING: Any = object()


def compile_routes(app: Any) -> list[tuple[re.Pattern[str], str, frozenset[str]]]:
    """The app's route templates from its OpenAPI paths, compiled, kept on ``app.state``. A worker's
    lifespan calls it at start: building the schema took ~0.1 s, on the event loop of the first
    refused request when it was left to :func:`_label_route`."""
    paths = app.openapi().get("paths", {})
    templates = [(compile_path(path)[0], path, frozenset(m.upper() for m in ops)) for path, ops in paths.items()]
    app.state.route_templates = templates
    return templates


def _label_route(scope: Scope) -> None:
    """Put the route template a refused request was for into ``scope["route"]``, as routing would
    have, so that the latency histogram labels a 429 answered before routing by its route, not as
    "unmatched". The templates come from :func:`compile_routes`."""
    app = scope.get("app")
    state = getattr(app, "state", None)
    if app is None or state is None:
        return
    templates: list[tuple[re.Pattern[str], str, frozenset[str]]] | None = getattr(state, "route_templates", None)
    if templates is None:  # an app served without its lifespan
        templates = compile_routes(app)
    path, method = str(scope.get("path", "")), str(scope.get("method", ""))
    labels: dict[tuple[str, str], _RouteLabel | None] | None = getattr(state, "route_labels", None)
    if labels is None or len(labels) >= 4096:  # paths carry ids: a bounded memo, emptied when full
        labels = state.route_labels = {}
    label = labels.get((method, path), _MISSING)
    if label is _MISSING:
        label = next((_RouteLabel(t) for regex, t, methods in templates if method in methods and regex.match(path)), None)
        labels[(method, path)] = label
    if label is not None:
        scope["route"] = label


_BODIES: dict[tuple[str, str], tuple[bytes, bytes]] = {}  # (scope, message) → (body, its length)


async def _send_429(send: Send, exc: RateLimitedError) -> None:
    cached = _BODIES.get((exc.scope, exc.message))
    if cached is None:  # the messages are few (one per limit and setting): encoded once
        body = json.dumps({"detail": [{"loc": [], "msg": exc.message, "type": f"rate_limited.{exc.scope}"}]}).encode()
        cached = (body, str(len(body)).encode())
        if len(_BODIES) < 256:
            _BODIES[(exc.scope, exc.message)] = cached
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", cached[1]),
                (b"retry-after", exc.retry_after_header.encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": cached[0]})


class RefusalLogFilter(logging.Filter):
    """Keeps 429s out of uvicorn's access log (``uvicorn.access``), one line a minute instead: a
    flood of refusals would otherwise cost a formatted, written log line each (a third of a
    refusal's CPU) and fill the log. ``triage_rate_limited_total`` counts them by tenant."""

    def __init__(self, every_s: float = 60.0) -> None:
        super().__init__()
        self.every_s = every_s
        self.dropped = 0
        self._since = time.monotonic()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not (isinstance(args, tuple) and len(args) == 5 and args[4] == 429):
            return True
        self.dropped += 1
        now = time.monotonic()
        if now - self._since >= self.every_s:
            log.warning("%d requests answered 429 in the last %.0f s (not in the access log one by one; "
                        "triage_rate_limited_total counts them by tenant)", self.dropped, now - self._since)
            self.dropped, self._since = 0, now
        return False

    @classmethod
    def install(cls) -> None:
        access = logging.getLogger("uvicorn.access")
        if not any(isinstance(f, cls) for f in access.filters):
            access.addFilter(cls())


RATE_LIMITED_RESPONSES: dict[int | str, dict[str, Any]] = {
    429: {
        "description": "A rate limit or the daily step quota is spent; retry after `Retry-After` seconds",
        "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds to wait"}},
    }
}


__all__ = ["RATE_LIMITED_RESPONSES", "FairGate", "FairLock", "RateLimitMiddleware", "RefusalLogFilter", "rate_limit", "RateLimiter", "TokenBuckets", "seconds_to_midnight", "utc_day"]
