"""Per-tenant models in the running service: which run scorer answers a tenant, and the hot swap.

Every tenant is answered by its **active** run-scorer version, the one ``triage model promote`` /
``rollback`` last recorded in the store (:meth:`serve.store.Store.active_model`), loaded from the
model registry (:class:`model.registry.Registry`); a tenant without one is answered by the shipped
run scorer (``model.registry.SHIPPED_VERSION``). The rules and the classifier are the same for
every tenant (one copy per worker).

How a worker follows promotions, without a restart and without a database query per request:

- the first request of a tenant resolves its active version (one query) and loads it;
- from then on the worker re-reads the tenant's active version at most every
  ``TRIAGE_MODEL_POLL_S`` seconds (default 10), in a background thread (:meth:`TenantModels.start`;
  without it, e.g. a ``TriageService`` built directly, on the first request after that interval);
  tenants not served for :data:`IDLE_S` are forgotten and resolved again on their next request;
- a new version is loaded **beside** the one serving, passed through a smoke check (the run scorer
  scores :func:`smoke_trace` through a :class:`~model.diagnosis.Diagnoser`: the failure probability,
  the attribution probability and the operating point must be finite, in [0, 1]), and only then
  put in the tenant's slot by one assignment: a request reads the slot once, when it starts, and
  finishes on that model, whatever is swapped in meanwhile;
- a version that fails to load or to pass the smoke check is **refused**: logged, counted
  (``triage_model_swaps_refused_total{tenant, reason}``) and not tried again by this worker
  (promote another version, or restart the worker, to try again); the model that was serving
  stays (a worker that had not served the tenant yet serves the newest earlier activation that
  loads, what the other workers kept, else the shipped model).

``model_version`` in every response is ``<classifier version>+<run-scorer version>``: the
classifier's ``model_version`` (``rules-<package version>`` when no classifier is loaded), then
the tenant's active registry version (``v<N>-<timestamp>``) or the shipped model's name
(``shipped-<hash>``). ``detector_versions.runscore`` still names the artefact by its content hash.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from model.diagnosis import RUNSCORE, Diagnoser, package_version
from model.errors import TriageError
from model.importers import load_trace
from model.incremental import IncrementalDiagnoser
from model.options import DiagnoseOptions
from model.registry import SHIPPED_VERSION, Registry
from model.runscore import RunScorer
from model.schema import Trace
from serve.settings import Settings
from serve.store import Store

log = logging.getLogger("triage.models")

#: A tenant this worker has not served for this long is dropped from its table (its next request
#: resolves its version again): the poll reads only the tenants a worker is serving.
IDLE_S = 600.0

#: Why a swap was refused (the ``reason`` label of ``triage_model_swaps_refused_total``).
REFUSED_LOAD = "load"
REFUSED_SMOKE = "smoke"

ActiveVersion = Callable[[str], "str | None"]
LoadScorer = Callable[[str, str], RunScorer]
History = Callable[[str], "list[str]"]


def smoke_trace() -> Trace:
    """The fixed small run every new model must score before it serves: a question, a tool call,
    its result and an answer built on it."""
    return load_trace(
        {
            "messages": [
                {"role": "system", "content": "You are a travel assistant. Use the tools; never guess."},
                {"role": "user", "content": "What is the weather in Paris tomorrow?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"city": "Paris", "day": "tomorrow"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": '{"forecast": "rain", "high_c": 14}'},
                {"role": "assistant", "content": "Tomorrow in Paris: rain, with a high of 14 °C."},
            ]
        },
        format="openai",
    )


class SmokeCheckError(TriageError):
    """A model that loaded but did not score the smoke trace sensibly (it is refused)."""


@dataclass(frozen=True)
class ServedModel:
    """One tenant's models as a request uses them, from its start to its end."""

    tenant: str
    #: the tenant's run-scorer version: a registry version, or the shipped model's name
    version: str
    diagnoser: Diagnoser
    incremental: IncrementalDiagnoser

    @property
    def model_version(self) -> str:
        return self.diagnoser.model_version


class TenantModels:
    """The table ``tenant → ServedModel`` of one worker, kept current with the store.

    Parameters
    ----------
    base:
        The diagnoser built at start-up (rules, classifier, shipped run scorer): its detectors and
        ladders are shared by every tenant's model.
    shipped_version:
        The name of the shipped run scorer (``model.registry.SHIPPED_VERSION``); a tenant whose
        active version is ``None`` or this name is answered by ``base``.
    active:
        ``tenant → active version`` (``Store.active_model``); ``None``: every tenant gets ``base``
        (the run scorer is off, or there is no registry).
    load:
        ``(tenant, version) → RunScorer`` (``Registry.load``); raises when it can't.
    history:
        ``tenant → versions activated, newest first`` (``Store.model_history``): where a worker
        that had not served the tenant falls back when its active version is refused; ``None``:
        the shipped model.
    poll_s:
        Seconds between two reads of a tenant's active version.
    session_window:
        The window of the :class:`~model.incremental.IncrementalDiagnoser` made for each model.
    idle_s:
        A tenant not served for this long is forgotten (:data:`IDLE_S`).
    """

    def __init__(
        self,
        base: Diagnoser,
        *,
        shipped_version: str,
        active: ActiveVersion | None = None,
        load: LoadScorer | None = None,
        history: History | None = None,
        poll_s: float = 10.0,
        session_window: int = 64,
        idle_s: float = IDLE_S,
    ) -> None:
        if (active is None) != (load is None):
            raise ValueError("give both `active` and `load`, or neither")
        self.base = base
        self.shipped_version = shipped_version
        self.poll_s = poll_s
        self.session_window = session_window
        self.idle_s = idle_s
        self._active = active
        self._load = load
        self._history = history
        prefix = getattr(base.detectors.get("classifier"), "model_version", None) or f"rules-{package_version()}"
        self._prefix = str(prefix)
        self._shipped = self._served_model("", shipped_version, base.runscorer)
        self._served: dict[str, ServedModel] = {}
        self._checked: dict[str, float] = {}
        self._seen: dict[str, float] = {}
        self._refused: dict[tuple[str, str], str] = {}  # (tenant, version) → why
        self._wanted: dict[str, str] = {}  # tenant → the active version last read
        #: refusals by (tenant, reason), for /metrics
        self.refused: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()  # one resolution / swap at a time in this worker
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what requests call ----------------------------------------------------------------------
    def get(self, tenant: str) -> ServedModel:
        """The tenant's model now (a request calls this once and keeps what it got)."""
        if self._active is None:
            return self._shipped
        now = time.monotonic()
        self._seen[tenant] = now
        served = self._served.get(tenant)
        if served is None:
            with self._lock:
                served = self._served.get(tenant)
                if served is None:
                    served = self._refresh(tenant)
            return served
        if self._thread is None and now - self._checked.get(tenant, 0.0) >= self.poll_s \
                and self._lock.acquire(blocking=False):  # no poller: this request looks
            try:
                served = self._refresh(tenant)
            finally:
                self._lock.release()
        return served

    def refusal(self, tenant: str) -> str | None:
        """Why the tenant's active version (as last read) was refused; ``None`` when it serves."""
        version = self._wanted.get(tenant)
        return None if version is None else self._refused.get((tenant, version))

    def served(self) -> dict[str, ServedModel]:
        """Every tenant this worker serves now (a copy)."""
        return dict(self._served)

    # -- the poller ------------------------------------------------------------------------------
    def start(self) -> None:
        """Poll the active versions of the tenants this worker serves, every ``poll_s``, in a
        daemon thread (the app's lifespan and the heavy lane's helper call this)."""
        if self._active is None or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll_loop, name="triage-model-poll", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join(timeout=5)

    def poll(self) -> None:
        """One pass: re-read every served tenant's active version; forget idle tenants."""
        now = time.monotonic()
        for tenant in list(self._served):
            if now - self._seen.get(tenant, now) > self.idle_s:
                with self._lock:
                    self._served.pop(tenant, None)
                    self._checked.pop(tenant, None)
                    self._seen.pop(tenant, None)
                    self._wanted.pop(tenant, None)
                continue
            with self._lock:
                self._refresh(tenant)

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.poll()
            except Exception:  # the store is away, say: keep serving what is loaded, try again
                log.exception("reading the tenants' active models failed; serving the loaded ones")

    # -- resolution and swap (under self._lock) ----------------------------------------------------
    def _refresh(self, tenant: str) -> ServedModel:
        assert self._active is not None
        version = self._active(tenant) or self.shipped_version
        self._checked[tenant] = time.monotonic()
        self._wanted[tenant] = version
        current = self._served.get(tenant)
        if current is not None and current.version == version:
            return current
        if (tenant, version) in self._refused:
            return current or self._assign(tenant, self._fallback(tenant))
        try:
            model = self._build(tenant, version)
        except Exception as exc:  # whatever a broken artefact raises: refused, the old one stays
            self._refuse(tenant, version, exc, current)
            return current or self._assign(tenant, self._fallback(tenant))
        if current is not None:
            log.info("tenant %r: now serving model %s (was %s)", tenant, version, current.version)
        return self._assign(tenant, model)

    def _refuse(self, tenant: str, version: str, exc: Exception, keep: ServedModel | None) -> None:
        reason = REFUSED_SMOKE if isinstance(exc, SmokeCheckError) else REFUSED_LOAD
        then = f"still serving {keep.version}" if keep is not None else "serving the newest earlier one that loads"
        why = f"model {version} refused ({reason}: {exc}); {then}"
        self._refused[(tenant, version)] = why
        self.refused[(tenant, reason)] = self.refused.get((tenant, reason), 0) + 1
        log.error("tenant %r: %s", tenant, why)

    def _fallback(self, tenant: str) -> ServedModel:
        """What a worker that served nothing for the tenant serves when its active version is
        refused: the newest earlier activation that loads (what the workers that were serving the
        tenant kept), else the shipped model."""
        if self._history is None:
            return self._shipped
        for version in self._history(tenant):
            if version == self.shipped_version:
                return self._shipped
            if (tenant, version) in self._refused:
                continue
            try:
                return self._build(tenant, version)
            except Exception as exc:
                self._refuse(tenant, version, exc, None)
        return self._shipped

    def _assign(self, tenant: str, model: ServedModel) -> ServedModel:
        self._served[tenant] = model  # one assignment: the swap
        return model

    def _build(self, tenant: str, version: str) -> ServedModel:
        if version == self.shipped_version:
            return self._shipped
        assert self._load is not None
        scorer = self._load(tenant, version)
        model = self._served_model(tenant, version, scorer)
        check_model(model.diagnoser)
        return model

    def _served_model(self, tenant: str, version: str, scorer: RunScorer | None) -> ServedModel:
        base = self.base
        diagnoser = base  # no run scorer at all: the base diagnoser, its model_version as it is
        if scorer is not None:
            diagnoser = Diagnoser(list(base.detectors.values()), ladders=base.ladders, max_steps=base.max_steps,
                                  model_version=f"{self._prefix}+{version}", runscorer=scorer)
        return ServedModel(tenant, version, diagnoser, IncrementalDiagnoser(diagnoser, window=self.session_window))


def check_model(diagnoser: Diagnoser) -> None:
    """The smoke check: the run scorer scores :func:`smoke_trace` to finite probabilities in
    [0, 1], and the diagnoser answers it (rules and run scorer, as a request would; the
    classifier, shared by every tenant's model and loaded at start-up, is left out);
    :class:`SmokeCheckError` otherwise."""
    scorer = diagnoser.runscorer
    if scorer is None:
        raise SmokeCheckError("the model has no run scorer")
    trace = smoke_trace()
    scored = scorer.score(trace)
    values = {
        "failure_probability": scored.failure_probability,
        "attribution.probability": (scored.attribution or {}).get("probability"),
        "threshold": scorer.threshold,
    }
    bad = {k: v for k, v in values.items()
           if not isinstance(v, int | float) or not math.isfinite(v) or not 0.0 <= v <= 1.0}
    if bad:
        raise SmokeCheckError(f"the smoke trace scored {bad}; expected finite values in [0, 1]")
    try:  # and the whole answer, as a request would get it (rule confidences, the response model)
        diagnoser.diagnose(trace, DiagnoseOptions(detectors=[*(n for n in diagnoser.detectors if n != "classifier"), RUNSCORE]))
    except Exception as exc:
        raise SmokeCheckError(f"the smoke trace did not diagnose: {type(exc).__name__}: {exc}") from exc


def build_models(settings: Settings, base: Diagnoser, store: Store) -> TenantModels:
    """The worker's per-tenant models: the store's activations over the registry at
    ``TRIAGE_MODEL_REGISTRY`` (every tenant on ``base`` when the run scorer is off)."""
    shipped = SHIPPED_VERSION
    if not settings.runscore:
        return TenantModels(base, shipped_version=shipped, session_window=settings.session_window_steps)
    registry = Registry(settings.resolved_model_registry)
    return TenantModels(base, shipped_version=shipped, active=store.active_model, load=registry.load,
                        history=lambda tenant: [h["version"] for h in store.model_history(tenant)],
                        poll_s=settings.model_poll_s, session_window=settings.session_window_steps)


class ModelCollector(Collector):
    """``triage_model_info{tenant, version, worker}`` (1 per tenant this worker serves) and
    ``triage_model_swaps_refused_total{tenant, reason}``. ``tenant`` set: that tenant only."""

    def __init__(self, models: TenantModels, tenant: str | None = None) -> None:
        self.models = models
        self.tenant = tenant

    def collect(self) -> Iterator[Any]:
        served = self.models.served()
        if self.tenant is not None:
            served = {self.tenant: self.models.get(self.tenant)}
        info = GaugeMetricFamily(
            "triage_model_info",
            "The run-scorer version this worker answers each tenant with (worker = its process id)",
            labels=["tenant", "version", "worker"],
        )
        worker = str(os.getpid())
        for tenant, model in sorted(served.items()):
            info.add_metric([tenant, model.version, worker], 1.0)
        yield info
        refused = CounterMetricFamily(
            "triage_model_swaps_refused",
            "New model versions this worker refused to swap in (failed to load, or the smoke check)",
            labels=["tenant", "reason"],
        )
        for (tenant, reason), n in sorted(self.models.refused.items()):
            if self.tenant is None or tenant == self.tenant:
                refused.add_metric([tenant, reason], n)
        yield refused


__all__ = [
    "IDLE_S",
    "REFUSED_LOAD",
    "REFUSED_SMOKE",
    "ModelCollector",
    "ServedModel",
    "SmokeCheckError",
    "TenantModels",
    "build_models",
    "check_model",
    "smoke_trace",
]
