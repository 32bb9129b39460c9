"""``GET /metrics`` (Prometheus text format).

Two sources: the store, read at scrape time (traces diagnosed, failures by kind, recommendations by
strategy, outcomes and repair success rate per strategy, mean time to recovery, open stream alarm
episodes; the canary share's figures per arm, :mod:`serve.services.canary`) — the same figures whichever worker answers — and this process's request latency
histogram and lost-observation counter (per worker: with several workers, each scrape sees the
worker that answered it).

Who sees what: a tenant's key sees its own history only; an operator (a key of a tenant named in
``TRIAGE_OPERATOR_TENANTS``, any caller under ``TRIAGE_AUTH=off`` or ``TRIAGE_METRICS_PUBLIC=true``)
sees every tenant's and the worker's figures.

Mean time to recovery: for each successful outcome of a failure's recommendation, the time from the
first recommendation for that failure in its run to the outcome; averaged over the whole history.

Every figure read from the store is a count kept on write (:mod:`serve.store.counters`): a scrape
reads a few rows per tenant (and per hour of the canary's window), whatever the history's size.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serve.ratelimit import RateLimiter
from serve.services.agent_models import AgentModels, ModelCollector
from serve.services.canary import DEFAULT_WINDOW, CanaryCollector
from serve.store.reports import ReportStore

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class StoreCollector(Collector):
    """Reads :meth:`ReportStore.metrics_snapshot` on every scrape."""

    def __init__(self, store: ReportStore, tenant: str | None = None) -> None:
        self.store = store
        self.tenant = tenant

    def collect(self) -> Iterator[Any]:
        snap = self.store.metrics_snapshot(self.tenant)
        traces = CounterMetricFamily(
            "triage_traces_diagnosed", "Traces diagnosed and stored (sessions count once)"
        )
        traces.add_metric([], snap["traces"])
        yield traces
        failures = CounterMetricFamily(
            "triage_failures", "Failures in stored diagnoses, by kind", labels=["kind"]
        )
        for kind, n in sorted(snap["failures"].items()):
            failures.add_metric([kind], n)
        yield failures
        recs = CounterMetricFamily(
            "triage_recommendations", "Recommendations given, by strategy", labels=["strategy"]
        )
        for strategy, n in sorted(snap["recommendations"].items()):
            recs.add_metric([strategy], n)
        yield recs
        outcomes = CounterMetricFamily(
            "triage_outcomes", "Outcomes reported, by strategy and result", labels=["strategy", "result"]
        )
        rate = GaugeMetricFamily(
            "triage_repair_success_ratio",
            "Share of reported outcomes that succeeded, by strategy",
            labels=["strategy"],
        )
        by_strategy: dict[str, list[int]] = {}
        for (strategy, ok), n in sorted(snap["outcomes"].items()):
            outcomes.add_metric([strategy, "success" if ok else "failure"], n)
            by_strategy.setdefault(strategy, [0, 0])[0 if ok else 1] += n
        for strategy, (ok, bad) in sorted(by_strategy.items()):
            rate.add_metric([strategy], ok / (ok + bad))
        yield outcomes
        yield rate
        mttr = GaugeMetricFamily(
            "triage_mean_time_to_recovery_seconds",
            "First recommendation for a failure in its run → successful outcome, mean over the history"
        )
        if snap["mttr_s"] is not None:
            mttr.add_metric([], snap["mttr_s"])
        yield mttr
        rec = CounterMetricFamily("triage_recoveries", "Failures whose repair was reported successful")
        rec.add_metric([], snap["recoveries"])
        yield rec
        alarms = GaugeMetricFamily(
            "triage_stream_alarm_open",
            'Stream alarm episodes open now (1 each): an alert on one agent\'s runs; agent "" = every agent',
            labels=["tenant", "stream", "agent", "direction"],
        )
        for a in snap.get("open_alarms", []):
            direction = str((a["alarm"] or {}).get("direction", ""))
            alarms.add_metric([a["tenant_id"], a["name"], a["agent"], direction], 1.0)
        yield alarms


class LimiterCollector(Collector):
    """The 429s this worker gave, by tenant and limit (``key``, ``tenant``, ``quota``)."""

    def __init__(self, limiter: RateLimiter, tenant: str | None = None) -> None:
        self.limiter = limiter
        self.tenant = tenant

    def collect(self) -> Iterator[Any]:
        fam = CounterMetricFamily(
            "triage_rate_limited",
            "Requests refused with 429 by this worker, by tenant and limit",
            labels=["tenant", "scope"],
        )
        for (tenant, scope), n in sorted(dict(self.limiter.refused).items()):
            if self.tenant is None or tenant == self.tenant:
                fam.add_metric([tenant, scope], n)
        yield fam


class Metrics:
    """The registry of one app: the store collector plus the request latency histogram."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.latency = Histogram(
            "triage_request_duration_seconds",
            "HTTP request latency (this worker)",
            labelnames=["method", "route", "status"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self._store: StoreCollector | None = None
        self._canary: CanaryCollector | None = None
        self._limiter: LimiterCollector | None = None
        self._models: ModelCollector | None = None

    def attach_store(
        self, store: ReportStore, *, canary_percent: float | None = None, canary_window: timedelta = DEFAULT_WINDOW
    ) -> None:
        if self._store is not None:
            self.registry.unregister(self._store)
        if self._canary is not None:
            self.registry.unregister(self._canary)
        self._store = StoreCollector(store)
        self._canary = CanaryCollector(store, percent=canary_percent, window=canary_window)
        self.registry.register(self._store)
        self.registry.register(self._canary)

    def attach_limiter(self, limiter: RateLimiter | None) -> None:
        if self._limiter is not None:
            self.registry.unregister(self._limiter)
            self._limiter = None
        if limiter is not None:
            self._limiter = LimiterCollector(limiter)
            self.registry.register(self._limiter)

    def attach_models(self, models: AgentModels) -> None:
        if self._models is not None:
            self.registry.unregister(self._models)
        self._models = ModelCollector(models)
        self.registry.register(self._models)

    def render(self, tenant: str | None = None) -> tuple[bytes, str]:
        """Every tenant's figures and this worker's (``tenant=None``: an operator), or one tenant's
        history only (its own traces, failures, recommendations and outcomes)."""
        if tenant is None:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        registry = CollectorRegistry(auto_describe=False)
        if self._store is not None:
            registry.register(StoreCollector(self._store.store, tenant))
        if self._canary is not None:
            registry.register(CanaryCollector(self._canary.store, tenant, self._canary.percent, self._canary.window))
        if self._limiter is not None:
            registry.register(LimiterCollector(self._limiter.limiter, tenant))
        if self._models is not None:
            registry.register(ModelCollector(self._models.models, tenant))
        return generate_latest(registry), CONTENT_TYPE_LATEST


class LatencyMiddleware:
    """Times every HTTP request into :attr:`Metrics.latency`, labelled by route template."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            self.metrics.latency.labels(scope.get("method", ""), path, str(status)).observe(
                time.perf_counter() - start
            )


__all__ = ["LatencyMiddleware", "LimiterCollector", "Metrics", "StoreCollector"]
