"""Hot swap of per-tenant models (serve/models.py): a promoted or rolled-back run scorer serves
within the poll interval, without a restart; a broken one is refused and the old one stays; no
request fails during a swap; one tenant's promotion leaves another's answers unchanged; two
workers on PostgreSQL both follow. Real registry, real store (SQLite and PostgreSQL), real uvicorn
servers on 127.0.0.1; the models are RunScorers fitted on tiny generated data."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from model.diagnosis import Diagnoser
from model.importers import load_trace
from model.registry import SHIPPED_VERSION, Registry
from model.runscore import RunScorer
from serve.auth import create_key
from serve.models import REFUSED_LOAD, REFUSED_SMOKE, TenantModels, check_model, smoke_trace
from serve.store import Store
from tests.conftest import ROOT, LiveServer
from tests.storefix import BACKENDS, make_db_url
from tests.test_runscore import toy_examples

POLL_S = 0.5
HEAVY_BYTES = 16_384
#: the swap must show within this (the issue's bound; the poll interval above makes it ~1 s)
SWAP_DEADLINE_S = 60.0


def tiny_scorer(seed: int, l2_run: float = 1.0) -> RunScorer:
    """A run scorer fitted on 80 generated runs (seed and L2 make each one different)."""
    rng = np.random.default_rng(seed)
    return RunScorer(l2_run=l2_run).fit(toy_examples(rng, "a", 40) + toy_examples(rng, "b", 40))


def register(registry: Registry, tenant: str, scorer: RunScorer, parent: str | None = None) -> str:
    return registry.save(tenant, scorer, parent=parent, card="test model", report={"test": True},
                         data={"runs": 80}).version


def fixed_trace(trace_id: str = "fixed-1", result_pad: int = 0) -> dict[str, Any]:
    """The same run, with a fixed id, every time (native JSON); ``result_pad`` lengthens the tool's result."""
    t = load_trace({"messages": [
        {"role": "user", "content": "What is the price of item 7?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": '{"id": 70}'}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "item 7 costs 100 euros" + " (list price)" * result_pad},
        {"role": "assistant", "content": "It costs 1006 euros, 19 left."},
    ]}, format="openai")
    t.id = trace_id
    return t.model_dump(mode="json", exclude_none=True)


# -- the table of one worker (no server) ------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    for url in make_db_url(request.param, tmp_path):
        s = Store(url)
        s.upgrade()
        yield s
        s.dispose()


def test_smoke_check_passes_a_fitted_scorer_and_refuses_nan() -> None:
    check_model(Diagnoser(runscorer=tiny_scorer(1)))
    broken = tiny_scorer(1)
    broken.platt_ = (math.nan, 0.0)
    with pytest.raises(Exception, match="smoke trace scored"):
        check_model(Diagnoser(runscorer=broken))
    assert Diagnoser(runscorer=tiny_scorer(1)).diagnose(smoke_trace()).failure_probability is not None


def test_promote_rollback_and_refusals_in_one_worker(store: Store, tmp_path: Path) -> None:
    registry = Registry(tmp_path / "models")
    base = Diagnoser.with_shipped_models(classifier=False)
    models = TenantModels(base, shipped_version=SHIPPED_VERSION, active=store.active_model, load=registry.load,
                          poll_s=3600)  # no poller, no look on its own: self.poll() below is the tick
    assert models.get("acme").version == SHIPPED_VERSION and models.get("acme").diagnoser.runscorer is base.runscorer
    assert models.get("acme").model_version == f"rules-{_pkg()}+{SHIPPED_VERSION}"
    v1 = register(registry, "acme", tiny_scorer(1))
    store.activate_model("acme", v1, actor="test")
    assert models.get("acme").version == SHIPPED_VERSION  # not before the next look
    models.poll()
    first = models.get("acme")
    assert first.version == v1 and first.model_version.endswith(f"+{v1}")
    assert models.get("globex").version == SHIPPED_VERSION  # another tenant: the shipped model

    # a corrupt artefact: refused at load, v1 keeps serving, counted once however often it is polled
    v2 = register(registry, "acme", tiny_scorer(2), parent=v1)
    (registry.root / "acme" / v2 / "runscore.json").write_text("{not json", encoding="utf-8")
    store.activate_model("acme", v2, actor="test")
    models.poll()
    models.poll()
    assert models.get("acme") is first
    assert models.refused == {("acme", REFUSED_LOAD): 1}
    assert v2 in (models.refusal("acme") or "") and v1 in (models.refusal("acme") or "")
    # a worker that starts now (it served nothing for acme) serves what the others kept: v1
    fresh = TenantModels(base, shipped_version=SHIPPED_VERSION, active=store.active_model, load=registry.load,
                         history=lambda t: [h["version"] for h in store.model_history(t)], poll_s=3600)
    assert fresh.get("acme").version == v1 and fresh.refused == {("acme", REFUSED_LOAD): 1}

    # one that loads but scores NaN: refused by the smoke check
    nan = tiny_scorer(3)
    nan.platt_ = (math.nan, 0.0)
    v3 = register(registry, "acme", nan, parent=v1)
    store.activate_model("acme", v3, actor="test")
    models.poll()
    assert models.get("acme") is first
    assert models.refused == {("acme", REFUSED_LOAD): 1, ("acme", REFUSED_SMOKE): 1}

    # a good one, then the rollback to v1, then back to the shipped model
    v4 = register(registry, "acme", tiny_scorer(4), parent=v1)
    store.activate_model("acme", v4, actor="test")
    models.poll()
    assert models.get("acme").version == v4 and models.refusal("acme") is None
    store.activate_model("acme", v1, actor="test", action="rollback")
    models.poll()
    assert models.get("acme").version == v1
    store.activate_model("acme", SHIPPED_VERSION, actor="test", action="rollback")
    models.poll()
    assert models.get("acme").diagnoser.runscorer is base.runscorer


def test_without_a_poller_a_request_looks_after_the_interval(store: Store, tmp_path: Path) -> None:
    registry = Registry(tmp_path / "models")
    v1 = register(registry, "acme", tiny_scorer(1))
    models = TenantModels(Diagnoser(), shipped_version=SHIPPED_VERSION, active=store.active_model,
                          load=registry.load, poll_s=1.0)
    assert models.get("acme").version == SHIPPED_VERSION
    store.activate_model("acme", v1, actor="test")
    assert models.get("acme").version == SHIPPED_VERSION  # within the interval: no query
    time.sleep(1.05)
    assert models.get("acme").version == v1


def test_idle_tenants_are_forgotten_and_resolved_again(store: Store, tmp_path: Path) -> None:
    registry = Registry(tmp_path / "models")
    v1 = register(registry, "acme", tiny_scorer(1))
    store.activate_model("acme", v1, actor="test")
    models = TenantModels(Diagnoser(), shipped_version=SHIPPED_VERSION, active=store.active_model,
                          load=registry.load, poll_s=3600, idle_s=0.2)
    assert models.get("acme").version == v1 and models.get("globex").version == SHIPPED_VERSION
    time.sleep(0.25)
    models.get("globex")  # still served
    models.poll()
    assert set(models.served()) == {"globex"}  # acme's slot is gone: the poll reads only globex
    assert models.get("acme").version == v1  # its next request resolves it again


def _pkg() -> str:
    from model.diagnosis import package_version

    return package_version()


# -- the running service ------------------------------------------------------------------------------


class Service:
    """A real ``triage serve`` with its own store and registry, keys for three tenants."""

    def __init__(self, db_url: str, tmp: Path, workers: int = 1) -> None:
        self.db_url = db_url
        self.registry = Registry(tmp / "models")
        self.store = Store(db_url)
        self.store.upgrade()
        self.keys = {t: create_key(self.store, t)[0] for t in ("acme", "globex", "ops")}
        self.env = {
            "TRIAGE_DATABASE_URL": db_url,
            "TRIAGE_DATA_DIR": str(tmp),
            "TRIAGE_MODEL_REGISTRY": str(self.registry.root),
            "TRIAGE_MODEL_POLL_S": str(POLL_S),
            "TRIAGE_AUTH": "on",
            "TRIAGE_AUTH_CACHE_S": "0",
            "TRIAGE_OPERATOR_TENANTS": "ops",
            "TRIAGE_CLASSIFIER": "false",  # the swap is the run scorer's; start-up stays short
            "TRIAGE_HEAVY_BODY_BYTES": str(HEAVY_BYTES),  # bodies this large: the worker's helper process
        }
        self.server = LiveServer(env=self.env, args=["--workers", str(workers)]).wait_ready(timeout=120)
        self.url = self.server.url

    def triage(self, *args: str, check: bool = True) -> Any:
        """Run the ``triage`` CLI on this service's store and registry: its standard output (with
        ``check=False``, the finished process)."""
        done = subprocess.run([sys.executable, "-m", "serve.cli", *args], cwd=ROOT, env={**_env(), **self.env},
                              capture_output=True, text=True, timeout=120)
        if not check:
            return done
        assert done.returncode == 0, done.stderr
        return done.stdout

    def close(self) -> None:
        self.server.stop()
        self.store.dispose()

    def diagnose(self, tenant: str, trace: dict[str, Any], client: httpx.Client | None = None) -> dict[str, Any]:
        c = client or httpx
        r = c.post(f"{self.url}/v1/diagnose", json={"trace": trace}, timeout=60,  # type: ignore[union-attr]
                   headers={"Authorization": f"Bearer {self.keys[tenant]}"})
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def metrics(self, tenant: str) -> str:
        # a fresh connection each time: with several workers, any of them may answer
        r = httpx.get(f"{self.url}/metrics", headers={"Authorization": f"Bearer {self.keys[tenant]}"}, timeout=30)
        assert r.status_code == 200, r.text
        return r.text

    def wait_version(self, tenant: str, version: str, trace: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """Diagnose ``trace`` until the answer names ``version``: (that answer, seconds it took)."""
        start = time.monotonic()
        while True:
            body = self.diagnose(tenant, trace)
            if body["model_version"].endswith(f"+{version}"):
                return body, time.monotonic() - start
            assert time.monotonic() - start < SWAP_DEADLINE_S, f"{tenant} still on {body['model_version']}"
            time.sleep(0.1)


@pytest.fixture(params=BACKENDS)
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Service]:
    for url in make_db_url(request.param, tmp_path):
        svc = Service(url, tmp_path)
        yield svc
        svc.close()


VIEW = ("model_version", "failure_probability", "attribution", "failures")


def _view(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in VIEW}


def _info(text: str) -> set[tuple[str, str, str]]:
    """(tenant, version, worker) of every triage_model_info line."""
    return {(m.group(1), m.group(2), m.group(3)) for m in re.finditer(
        r'^triage_model_info\{tenant="([^"]*)",version="([^"]*)",worker="([^"]*)"\} 1\.0$', text, re.M)}


@pytest.mark.slow
def test_promotion_rollback_refusal_and_tenant_isolation(service: Service) -> None:
    trace = fixed_trace()
    before_a = service.diagnose("acme", trace)
    before_b = service.diagnose("globex", trace)
    assert before_a["model_version"].endswith(f"+{SHIPPED_VERSION}") and _view(before_a) == _view(before_b)

    # promote acme's v1: the running service answers with it within the deadline, without a restart
    v1 = register(service.registry, "acme", tiny_scorer(1))
    service.store.activate_model("acme", v1, actor="test")
    after_a, took = service.wait_version("acme", v1, trace)
    assert took < SWAP_DEADLINE_S
    assert after_a["failure_probability"] != before_a["failure_probability"]  # it is another model
    # a large body, served by the worker's helper process (its own models): the same version
    heavy = fixed_trace("heavy-1", result_pad=HEAVY_BYTES // 10)
    assert len(json.dumps({"trace": heavy})) > HEAVY_BYTES
    service.wait_version("acme", v1, heavy)
    # globex's answers to the same trace, same id: unchanged
    assert _view(service.diagnose("globex", trace)) == _view(before_b)
    # sessions name the tenant's version too
    r = httpx.post(f"{service.url}/v1/sessions/s-1/steps", timeout=60,
                   headers={"Authorization": f"Bearer {service.keys['acme']}"},
                   json={"messages": [{"role": "user", "content": "price of item 7?"},
                                      {"role": "assistant", "content": "It costs 1006 euros."}]})
    assert r.status_code == 200 and r.json()["model_version"].endswith(f"+{v1}"), r.text
    # /metrics: a tenant's key sees its own version only; an operator's sees both
    mine = _info(service.metrics("acme"))
    assert {(t, v) for t, v, _ in mine} == {("acme", v1)}
    assert {(t, v) for t, v, _ in _info(service.metrics("ops"))} >= {("acme", v1), ("globex", SHIPPED_VERSION)}

    # `triage model promote` a good v2, then `triage model rollback`: v1's answers again, exactly
    v2 = register(service.registry, "acme", tiny_scorer(2), parent=v1)
    assert "is active" in service.triage("model", "promote", v2, "--tenant", "acme")
    service.wait_version("acme", v2, trace)
    assert f"rolled back to {v1}" in service.triage("model", "rollback", "--tenant", "acme")
    back, _ = service.wait_version("acme", v1, trace)
    assert _view(back) == _view(after_a)
    assert _view(service.diagnose("globex", trace)) == _view(before_b)
    # the CLI answers as the service does for the tenant
    path = Path(service.registry.root).parent / "fixed.json"
    path.write_text(json.dumps(trace), encoding="utf-8")
    cli = service.triage("diagnose", "--json", "--no-classifier", "--tenant", "acme", str(path), check=False)
    assert cli.returncode == 0, cli.stderr
    assert _view(json.loads(cli.stdout)) == _view(back)

    # an artefact corrupted after its promotion: refused, counted, v1 keeps serving
    v3 = register(service.registry, "acme", tiny_scorer(3), parent=v1)
    (service.registry.root / "acme" / v3 / "runscore.json").write_text("{}", encoding="utf-8")
    service.store.activate_model("acme", v3, actor="test")
    deadline = time.monotonic() + SWAP_DEADLINE_S
    while 'triage_model_swaps_refused_total{reason="load",tenant="acme"} 1.0' not in service.metrics("acme"):
        assert time.monotonic() < deadline, service.metrics("acme")
        time.sleep(0.2)
    assert _view(service.diagnose("acme", trace)) == _view(after_a)
    assert "swaps_refused_total{" not in service.metrics("globex")
    # ... and the CLI says why instead of answering with another model
    cli = service.triage("diagnose", "--json", "--no-classifier", "--tenant", "acme", str(path), check=False)
    assert cli.returncode == 2 and v3 in cli.stderr and "refused" in cli.stderr, cli.stderr


@pytest.mark.slow
def test_no_request_fails_during_swaps(service: Service) -> None:
    """Four clients diagnose without a pause while acme's model is promoted and rolled back
    three times: every request answers 200, each on one whole model (its version and its
    probability agree), and a client never goes back to a version once the next one served it."""
    trace = fixed_trace("load-1")
    versions = [register(service.registry, "acme", tiny_scorer(10 + i)) for i in range(3)]
    expected = {SHIPPED_VERSION: service.diagnose("acme", trace)["failure_probability"]}
    stop = threading.Event()
    seen: list[list[tuple[str, float]]] = [[] for _ in range(4)]

    def client(i: int) -> None:
        with httpx.Client() as c:
            while not stop.is_set():
                body = service.diagnose("acme", trace, client=c)
                seen[i].append((body["model_version"].rsplit("+", 1)[1], body["failure_probability"]))

    def every_client_saw(version: str) -> None:
        deadline = time.monotonic() + SWAP_DEADLINE_S
        while not all(any(v == version for v, _ in answers) for answers in seen):
            assert time.monotonic() < deadline and not any(f.done() for f in futures)
            time.sleep(0.05)

    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(client, i) for i in range(4)]
        every_client_saw(SHIPPED_VERSION)
        for v in versions:
            service.store.activate_model("acme", v, actor="test")
            body, _ = service.wait_version("acme", v, trace)
            expected[v] = body["failure_probability"]
            every_client_saw(v)
        stop.set()
        for f in futures:
            f.result()  # a failed request fails here
    order = [SHIPPED_VERSION, *versions]
    assert {v for answers in seen for v, _ in answers} == set(order)
    for answers in seen:
        assert len({v for v, _ in answers}) == len(order)  # this client's requests ran across every swap
        for version, prob in answers:
            assert prob == expected[version]  # the version it names is the model that scored it
        idx = [order.index(v) for v, _ in answers]
        assert idx == sorted(idx)


@pytest.mark.slow
@pytest.mark.postgres
def test_two_workers_on_postgresql_both_serve_the_promoted_model(tmp_path: Path) -> None:
    for url in make_db_url("postgresql", tmp_path):
        svc = Service(url, tmp_path, workers=2)
        try:
            trace = fixed_trace("two-workers")
            old = svc.diagnose("acme", trace)
            # both workers serve acme before the promotion (fresh connections reach either)
            workers: set[str] = set()
            deadline = time.monotonic() + SWAP_DEADLINE_S
            while len(workers) < 2:
                assert time.monotonic() < deadline, f"only workers {workers} answered"
                svc.diagnose("acme", trace)
                workers |= {w for t, v, w in _info(svc.metrics("ops")) if t == "acme"}
            v1 = register(svc.registry, "acme", tiny_scorer(1))
            svc.store.activate_model("acme", v1, actor="test")
            start = time.monotonic()
            on_new: set[str] = set()
            while on_new != workers:
                assert time.monotonic() - start < SWAP_DEADLINE_S, f"workers on {v1}: {on_new} of {workers}"
                on_new |= {w for t, v, w in _info(svc.metrics("ops")) if t == "acme" and v == v1}
                time.sleep(0.1)
            answers = [svc.diagnose("acme", trace) for _ in range(20)]
            assert {a["model_version"] for a in answers} == {old["model_version"].rsplit("+", 1)[0] + f"+{v1}"}
        finally:
            svc.close()


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)
