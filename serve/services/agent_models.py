"""Agent models in the running service: which model answers a (tenant, agent), and the hot swap.

A run's ``failure_probability`` comes from its agent's own model (:mod:`model.scoring.agentmodel`) when the
store records an active version for the (tenant, agent) (``triage retrain`` / ``triage model
promote``; :meth:`serve.store.activations.ActivationStore.active_model`), else from the tenant's active **pooled** model
when that serves this agent (its ``members``: ``triage retrain`` measured its out-of-fold AUROC on the
agent's own labels at least the zero-shot score's), else zero-shot:
the shipped run scorer, re-centred on the agent's observed failure rate once it has labelled runs
(:class:`Recentring`). The rules, the classifier and the shipped run scorer are the same for every
tenant (one copy per worker); ``failure_probability_basis`` says which model spoke.

How a worker follows promotions, without a restart and without a database query per request:

- the first request of a (tenant, agent) resolves its active version (one query) and loads it;
- from then on the worker re-reads it at most every ``TRIAGE_MODEL_POLL_S`` seconds (default 10),
  in a background thread (:meth:`AgentModels.start`; without it, on the first request after that
  interval); pairs not served for :data:`IDLE_S` are forgotten and resolved again on their next request;
- a new version is loaded **beside** the one serving, passed through a smoke check
  (:func:`check_model`: it scores :func:`smoke_trace` to a finite probability in [0, 1], its prefix
  state gives the same, its early-warning threshold is finite in [0, 1]), and only then put in the
  slot by one assignment: a request reads the slot once, when it starts, and finishes on that model;
- a version that fails to load or to pass the smoke check is **refused**: logged, counted
  (``triage_model_swaps_refused_total{tenant, reason}``) and not tried again by this worker; the
  model that was serving stays (a worker that had not served the pair yet serves the newest earlier
  activation that loads, else zero-shot).

``model_version`` in every response is ``<classifier version>+<run-scorer version>``, then
``+<version>`` (the agent model's registry version) when one answered; the basis names the agent.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from model.core.errors import SmokeCheckError
from model.core.schema import Trace
from model.diagnosis.agent_answer import ServedAgent, recentre_offset
from model.importers import load_trace
from model.scoring.agent_registry import POOLED, ZERO_SHOT, Registry
from serve.settings import Settings
from serve.store.activations import ActivationStore

if TYPE_CHECKING:
    from model.scoring.agent_registry import Servable
    from model.scoring.agentmodel.where import WhereModel

log = logging.getLogger("triage.models")

#: A (tenant, agent) this worker has not served for this long is dropped from its table.
IDLE_S = 600.0

#: Why a swap was refused (the ``reason`` label of ``triage_model_swaps_refused_total``).
REFUSED_LOAD = "load"
REFUSED_SMOKE = "smoke"

ActiveVersion = Callable[[str, str], "str | None"]
LoadModel = Callable[[str, str, str], "Servable"]
#: ``(tenant, registry key, version) → the version's where-model or None`` (``Registry.load_where``).
LoadWhere = Callable[[str, str, str], "WhereModel | None"]
Members = Callable[[str, str], "tuple[str, ...]"]
History = Callable[[str, str], "list[str]"]


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


class AgentModels:
    """The table ``(tenant, agent) → ServedAgent | None`` of one worker, kept current with the store.

    Parameters
    ----------
    active:
        ``(tenant, registry key) → active version`` (``ActivationStore.active_model``); ``None``: no agent model
        serves anyone (no registry).
    load:
        ``(tenant, registry key, version) → AgentModel`` (``Registry.load``); raises when it can't.
    where:
        ``(tenant, registry key, version) → its where-model or None`` (``Registry.load_where``): loaded
        with the model, swapped with it.
    members:
        ``(tenant, version of the pooled model) → the agents it was trained on``.
    history:
        ``(tenant, registry key) → versions activated, newest first``: where a worker that had not
        served the pair falls back when its active version is refused.
    poll_s, idle_s:
        Seconds between two reads of a pair's active version; a pair not served for ``idle_s`` is forgotten.
    """

    def __init__(self, *, active: ActiveVersion | None = None, load: LoadModel | None = None,
                 where: LoadWhere | None = None, members: Members | None = None, history: History | None = None, poll_s: float = 10.0,
                 idle_s: float = IDLE_S) -> None:
        if (active is None) != (load is None):
            raise ValueError("give both `active` and `load`, or neither")
        self.poll_s = poll_s
        self.idle_s = idle_s
        self._active = active
        self._load = load
        self._load_where = where
        self._members = members
        self._history = history
        self._models: dict[tuple[str, str, str], Servable] = {}  # (tenant, key, version) → loaded
        self._wheres: dict[tuple[str, str, str], WhereModel | None] = {}  # the same → its where-model
        self._served: dict[tuple[str, str], ServedAgent | None] = {}
        self._checked: dict[tuple[str, str], float] = {}
        self._seen: dict[tuple[str, str], float] = {}
        self._refused: dict[tuple[str, str, str], str] = {}  # (tenant, key, version) → why
        #: refusals by (tenant, reason), for /metrics
        self.refused: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what requests call ----------------------------------------------------------------------
    def get(self, tenant: str, agent: str) -> ServedAgent | None:
        """The agent model answering (tenant, agent) now; ``None``: zero-shot."""
        if self._active is None:
            return None
        pair = (tenant, agent)
        now = time.monotonic()
        self._seen[pair] = now
        if pair not in self._served:
            with self._lock:
                if pair not in self._served:
                    return self._refresh(pair)
            return self._served.get(pair)
        served = self._served[pair]
        if self._thread is None and now - self._checked.get(pair, 0.0) >= self.poll_s \
                and self._lock.acquire(blocking=False):  # no poller: this request looks
            try:
                served = self._refresh(pair)
            finally:
                self._lock.release()
        return served

    def refusal(self, tenant: str, agent: str) -> str | None:
        """Why a version this worker wanted for (tenant, agent) was refused; ``None`` when none was."""
        return next((why for (t, _, _), why in self._refused.items() if t == tenant and agent in why), None)

    def served(self) -> dict[tuple[str, str], ServedAgent | None]:
        """Every (tenant, agent) this worker serves now (a copy)."""
        return dict(self._served)

    # -- the poller ------------------------------------------------------------------------------
    def start(self) -> None:
        """Poll the active versions of the pairs this worker serves, every ``poll_s``, in a daemon thread."""
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
        """One pass: re-read every served pair's active version; forget idle pairs."""
        now = time.monotonic()
        for pair in list(self._served):
            with self._lock:
                if now - self._seen.get(pair, now) > self.idle_s:
                    self._served.pop(pair, None)
                    self._checked.pop(pair, None)
                    self._seen.pop(pair, None)
                    continue
                self._refresh(pair)

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.poll()
            except Exception:  # the store is away, say: keep serving what is loaded, try again
                log.exception("reading the active agent models failed; serving the loaded ones")

    # -- resolution and swap (under self._lock) ----------------------------------------------------
    def _refresh(self, pair: tuple[str, str]) -> ServedAgent | None:
        assert self._active is not None
        tenant, agent = pair
        self._checked[pair] = time.monotonic()
        current = self._served.get(pair)
        served = self._resolve(tenant, agent, agent, current)
        if served is None:  # no model of its own: the tenant's pooled one, when it learned this agent
            pooled = self._resolve(tenant, agent, POOLED, current)
            if pooled is not None and (self._members is None or agent in self._members(tenant, pooled.version)):
                served = pooled
        if current is not None and (served is None or served.tag != current.tag):
            log.info("tenant %r agent %r: now served by %s (was %s)", tenant, agent,
                     served.tag if served else "zero-shot", current.tag)
        self._served[pair] = served  # one assignment: the swap
        return served

    def _resolve(self, tenant: str, agent: str, key: str, current: ServedAgent | None) -> ServedAgent | None:
        assert self._active is not None
        version = self._active(tenant, key)
        if version is None or version == ZERO_SHOT:
            return None
        if current is not None and current.key == key and current.version == version:
            return current
        if (tenant, key, version) in self._refused:
            return current if current is not None and current.key == key else self._fallback(tenant, agent, key)
        try:
            return self._serve(tenant, agent, key, version)
        except Exception as exc:  # whatever a broken artefact raises: refused, the old one stays
            self._refuse(tenant, key, version, exc)
            return current if current is not None and current.key == key else self._fallback(tenant, agent, key)

    def _serve(self, tenant: str, agent: str, key: str, version: str) -> ServedAgent:
        """The version as served: its model and, beside it, its where-model (``attribution``); the
        pooled model's where-model is never served (it is per agent)."""
        model = self._get_model(tenant, key, version)
        where: WhereModel | None = None
        if self._load_where is not None and key != POOLED:
            if (tenant, key, version) not in self._wheres:
                self._wheres[(tenant, key, version)] = self._load_where(tenant, key, version)
            where = self._wheres[(tenant, key, version)]
        return ServedAgent(tenant, agent, key, version, model, where)

    def _get_model(self, tenant: str, key: str, version: str) -> Servable:
        hit = self._models.get((tenant, key, version))
        if hit is None:
            assert self._load is not None
            hit = self._load(tenant, key, version)
            check_model(hit)
            self._models[(tenant, key, version)] = hit
        return hit

    def _refuse(self, tenant: str, key: str, version: str, exc: Exception) -> None:
        reason = REFUSED_SMOKE if isinstance(exc, SmokeCheckError) else REFUSED_LOAD
        why = f"agent {key!r} model {version} refused ({reason}: {exc})"
        self._refused[(tenant, key, version)] = why
        self.refused[(tenant, reason)] = self.refused.get((tenant, reason), 0) + 1
        log.error("tenant %r: %s", tenant, why)

    def _fallback(self, tenant: str, agent: str, key: str) -> ServedAgent | None:
        """The newest earlier activation of ``key`` that loads, else ``None`` (zero-shot)."""
        if self._history is None:
            return None
        for version in self._history(tenant, key):
            if version == ZERO_SHOT:
                return None
            if (tenant, key, version) in self._refused:
                continue
            try:
                return self._serve(tenant, agent, key, version)
            except Exception as exc:
                self._refuse(tenant, key, version, exc)
        return None


def check_model(model: Servable) -> None:
    """The smoke check: the model scores :func:`smoke_trace` to a finite probability in [0, 1], its
    prefix state step by step to the same, and its early-warning threshold is finite in [0, 1] (or
    absent); :class:`SmokeCheckError` otherwise."""
    trace = smoke_trace()
    try:
        whole = model.score(trace, prior=0.5)
        state: Any = model.start()  # the model's own kind of state
        for step in trace.steps:
            state.add(step)
        prefix = model.score_state(state, prior=0.5)
    except Exception as exc:
        raise SmokeCheckError(f"the smoke trace did not score: {type(exc).__name__}: {exc}") from exc
    thr = model.at_risk_threshold
    values = {"score": whole, "prefix score": prefix, **({"at_risk_threshold": thr} if thr is not None else {})}
    bad = {k: v for k, v in values.items()
           if not isinstance(v, int | float) or not math.isfinite(v) or not 0.0 <= v <= 1.0}
    if bad:
        raise SmokeCheckError(f"the smoke trace scored {bad}; expected finite values in [0, 1]")
    if abs(whole - prefix) > 1e-9:
        raise SmokeCheckError(f"its prefix state scores the smoke trace {prefix}, its whole-run score {whole}")


def build_models(settings: Settings, store: ActivationStore) -> AgentModels:
    """The worker's agent models: the store's activations over the registry at ``TRIAGE_MODEL_REGISTRY``."""
    registry = Registry(settings.resolved_model_registry)
    return AgentModels(
        active=store.active_model, load=registry.load, where=registry.load_where,
        members=lambda tenant, version: registry.get(tenant, POOLED, version).members,
        history=lambda tenant, key: [h["version"] for h in store.model_history(tenant, key)],
        poll_s=settings.model_poll_s,
    )


class ModelCollector(Collector):
    """``triage_model_info{tenant, agent, version, worker}`` (1 per pair this worker serves; ``version``
    ``zero-shot`` or ``<registry key>@<version>``) and ``triage_model_swaps_refused_total{tenant, reason}``.
    ``tenant`` set: that tenant only."""

    def __init__(self, models: AgentModels, tenant: str | None = None) -> None:
        self.models = models
        self.tenant = tenant

    def collect(self) -> Iterator[Any]:
        served = {k: v for k, v in self.models.served().items() if self.tenant is None or k[0] == self.tenant}
        info = GaugeMetricFamily(
            "triage_model_info",
            "The model this worker answers each (tenant, agent) with (worker = its process id)",
            labels=["tenant", "agent", "version", "worker"],
        )
        worker = str(os.getpid())
        for (tenant, agent), model in sorted(served.items()):
            info.add_metric([tenant, agent, model.tag if model is not None else ZERO_SHOT, worker], 1.0)
        yield info
        refused = CounterMetricFamily(
            "triage_model_swaps_refused",
            "New agent-model versions this worker refused to swap in (failed to load, or the smoke check)",
            labels=["tenant", "reason"],
        )
        for (tenant, reason), n in sorted(self.models.refused.items()):
            if self.tenant is None or tenant == self.tenant:
                refused.add_metric([tenant, reason], n)
        yield refused


# -- the zero-shot re-centring's input ------------------------------------------------------------
class Recentring:
    """Per worker: (tenant, agent) → (labelled runs, logit offset) of the zero-shot probability
    (:func:`model.diagnosis.agent_answer.recentre_offset`), read from the agent's labelled runs (their effective labels and the zero-shot probabilities stored with
    them) at most every ``ttl_s`` seconds."""

    def __init__(self, read: Callable[[str, str], list[tuple[dict[str, Any], list[dict[str, Any]]]]],
                 ttl_s: float = 60.0) -> None:
        self._read = read
        self.ttl_s = ttl_s
        self._cache: dict[tuple[str, str], tuple[float, int, float]] = {}

    def get(self, tenant: str, agent: str) -> tuple[int, float]:
        from serve.services.run_labels import effective_label

        now = time.monotonic()
        hit = self._cache.get((tenant, agent))
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1], hit[2]
        probs: list[float] = []
        failed: list[bool] = []
        for response, labels in self._read(tenant, agent):
            label = effective_label(labels)
            if label is None or label.failed is None:
                continue
            basis = response.get("failure_probability_basis") or {}
            p = basis.get("zero_shot_probability") if basis else response.get("failure_probability")
            if isinstance(p, int | float) and math.isfinite(p):
                probs.append(float(p))
                failed.append(bool(label.failed))
        out = (len(probs), recentre_offset(probs, failed))
        self._cache[(tenant, agent)] = (now, *out)
        return out


__all__ = [
    "IDLE_S",
    "REFUSED_LOAD",
    "REFUSED_SMOKE",
    "AgentModels",
    "ModelCollector",
    "Recentring",
    "build_models",
    "check_model",
    "smoke_trace",
]
