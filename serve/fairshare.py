"""Fair share in one worker: one tenant's flood is refused cheaply and served apart, and the wait
before a request's handler starts is measured.

What a request meets, in order (all in the worker's event loop, before any thread):

1. :class:`FairShareMiddleware`, the outermost of the app's middleware, stamps its receipt and
   refuses it (429, ``Retry-After: 1``) when its tenant already has ``TRIAGE_TENANT_INFLIGHT``
   requests in progress in this worker: a tenant whose admitted requests pile up (a flood the worker
   cannot serve as fast as the rate limit admits it) holds a bounded share of the worker;
2. :class:`serve.ratelimit.RateLimitMiddleware` refuses an over-limit key whose principal the worker
   has cached with a pre-encoded 429: no routing, no body read, no parse, no thread
   (``bench/abuse.py --phases refusal_app`` measures a refusal's cost in the app, in µs);
3. a tenant answered 429 within ``TRIAGE_FLOOD_LANE_S`` has its admitted diagnoses served by
   :class:`FloodLane`: a helper process of the worker at ``nice`` 10 (its own GIL and threads),
   not in the worker beside the other tenants' requests; everyone else's CPU work waits for the
   worker's slot in :class:`serve.ratelimit.FairGate`, granted to the tenant served least recently.

**Queue wait** is the time from receipt to the moment the request's handler starts its work in the
thread pool (:func:`in_thread` marks it; every route's blocking work goes through
:func:`serve.routers._common.call`): routing, authentication, the body read, the fair gate and the
thread pool's hand-over together. Each answer that reached a handler carries it as
``Server-Timing: queue;dur=<ms>, read;dur=<ms>`` (``read``: receipt to the body read), and
``triage_queue_wait_seconds`` (this worker, by route) holds its histogram on ``/metrics`` for
operators. Answers given without a thread (``/healthz``, refusals, the flood lane's) carry none.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serve.auth import cached_principal
from serve.heavy import HeavyLane

T = TypeVar("T")

_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class _Stamps:
    """When the request reached the app, and when its handler first ran in a thread (None: not yet)."""

    __slots__ = ("read", "received", "started")

    def __init__(self, received: float) -> None:
        self.received = received
        self.read: float | None = None  # the body's last chunk handed to the app
        self.started: float | None = None


_STAMPS: ContextVar[_Stamps | None] = ContextVar("triage_queue_stamps", default=None)


def in_thread(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` marked as the request's handler work: the first call in a thread stamps the end of the
    request's queue wait. (The thread pool runs it in a copy of the request's context, so the stamps
    set by :class:`FairShareMiddleware` are visible there.)

    >>> in_thread(len)("abc")
    3
    """

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        stamps = _STAMPS.get()
        if stamps is not None and stamps.started is None:
            stamps.started = time.perf_counter()
        return fn(*args, **kwargs)

    return run


class FairShareMiddleware:
    """The outermost of the app's middleware (pure ASGI; nothing here reads the body or leaves the
    event loop).

    - stamps each HTTP request's receipt; when its handler ran in a thread (:func:`in_thread`), puts
      the wait before it into ``Server-Timing: queue;dur=<ms>`` (and ``read;dur=<ms>``: receipt to
      the body read) and into ``histogram`` (by route template);
    - refuses a ``/v1`` or ``/otlp`` request with 429 (``Retry-After: 1``, type
      ``rate_limited.inflight``) when its tenant already has ``inflight`` requests in progress in this
      worker (0: no cap). The tenant is the one the worker cached for the key (no query; a key not
      cached yet passes uncounted; with ``TRIAGE_AUTH=off`` there is no cap and no flood lane);
    - marks the tenant of every 429 answer as over its limits in ``flood`` (:class:`FloodLane`).
    """

    def __init__(
        self, app: ASGIApp, *, histogram: Histogram, flood: FloodLane | None = None, inflight: int = 0
    ) -> None:
        self.app = app
        self.histogram = histogram
        self.flood = flood
        self.inflight = inflight
        self.in_progress: dict[str, int] = {}  # tenant → its requests in progress in this worker
        body = json.dumps({"detail": [{"loc": [], "type": "rate_limited.inflight", "msg": (
            f"more than {inflight} requests of this tenant in progress at once on one worker "
            "(setting TRIAGE_TENANT_INFLIGHT); retry when one has been answered")}]}).encode()
        self._refusal = (body, str(len(body)).encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        stamps = _Stamps(time.perf_counter())
        tenant = None
        if self.inflight > 0 and str(scope.get("path", "")).startswith(("/v1/", "/otlp/")):
            tenant = _cached_tenant(scope)
            if tenant is not None:
                n = self.in_progress.get(tenant, 0)
                if n >= self.inflight:
                    await self._refuse(tenant, send)
                    return
                self.in_progress[tenant] = n + 1
        token = _STAMPS.set(stamps)

        async def timed_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                stamps.read = time.perf_counter()
            return message

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                if message["status"] == 429 and self.flood is not None:
                    refused = tenant or _cached_tenant(scope)
                    if refused is not None:
                        self.flood.refused(refused)
                if stamps.started is not None:
                    wait = stamps.started - stamps.received
                    route = getattr(scope.get("route"), "path", None) or "unmatched"
                    self.histogram.labels(route).observe(wait)
                    timing = f"queue;dur={wait * 1000:.3f}"
                    if stamps.read is not None and stamps.read <= stamps.started:
                        timing += f", read;dur={(stamps.read - stamps.received) * 1000:.3f}"
                    message = {**message, "headers": [*message.get("headers", ()), (b"server-timing", timing.encode())]}
            await send(message)

        try:
            await self.app(scope, timed_receive, timed_send)
        finally:
            _STAMPS.reset(token)
            if tenant is not None:
                n = self.in_progress[tenant] - 1
                if n:
                    self.in_progress[tenant] = n
                else:
                    del self.in_progress[tenant]

    async def _refuse(self, tenant: str, send: Send) -> None:
        if self.flood is not None:
            self.flood.refused(tenant)
        body, length = self._refusal
        await send({"type": "http.response.start", "status": 429, "headers": [
            (b"content-type", b"application/json"), (b"content-length", length), (b"retry-after", b"1")]})
        await send({"type": "http.response.body", "body": body})


class FloodLane:
    """Where a tenant that is over its limits has its admitted diagnoses served: a helper process of
    the worker (:class:`serve.heavy.HeavyLane`, its own GIL, at ``nice`` 10) instead of the worker.

    A tenant is *over its limits* for ``hold_s`` seconds after one of its requests was answered 429
    (:meth:`refused`, called by :class:`FairShareMiddleware`). Its requests within the limits are
    still served — the limits' semantics do not change — but their CPU work no longer takes the
    worker's GIL, threads and fair-gate turns from the other tenants, and the operating system gives
    the cores to the worker first. A tenant that keeps to its limits never meets this lane.

    >>> from serve.settings import Settings
    >>> lane = FloodLane(HeavyLane(Settings()), hold_s=2.0)  # its process starts on first use
    >>> lane.refused("acme", now=10.0)
    >>> lane.wants("acme", now=11.0), lane.wants("acme", now=12.5), lane.wants("globex", now=11.0)
    (True, False, False)
    """

    def __init__(self, lane: HeavyLane | None, *, hold_s: float) -> None:
        self.lane = lane
        self.hold_s = hold_s
        self._until: dict[str, float] = {}  # tenant → when it counts as within its limits again

    def refused(self, tenant: str, *, now: float | None = None) -> None:
        """``tenant`` was just answered 429."""
        if self.hold_s <= 0:
            return
        now = time.monotonic() if now is None else now
        if len(self._until) >= 10_000:  # forget the tenants back within their limits
            self._until = {t: u for t, u in self._until.items() if u > now}
        self._until[tenant] = now + self.hold_s

    def wants(self, tenant: str, *, now: float | None = None) -> bool:
        """Whether ``tenant``'s next diagnosis goes to the helper process."""
        if self.lane is None:
            return False
        until = self._until.get(tenant)
        return until is not None and until > (time.monotonic() if now is None else now)


def _cached_tenant(scope: Scope) -> str | None:
    """The request's tenant as the worker cached its key's principal (no query); None when not cached,
    and with ``TRIAGE_AUTH=off`` (every caller is one tenant there: nothing to share between tenants)."""
    if not getattr(getattr(scope.get("app"), "state", None), "auth_enabled", True):
        return None
    principal = cached_principal(scope)
    return principal.tenant if principal is not None else None


def queue_wait_histogram(registry: CollectorRegistry) -> Histogram:
    """``triage_queue_wait_seconds`` in ``registry`` (the app's :class:`serve.services.metrics.Metrics`)."""
    return Histogram(
        "triage_queue_wait_seconds",
        "Time from a request's receipt to its handler's start in the thread pool (this worker)",
        labelnames=["route"],
        buckets=_BUCKETS,
        registry=registry,
    )


__all__ = ["FairShareMiddleware", "FloodLane", "in_thread", "queue_wait_histogram"]
