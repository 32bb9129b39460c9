"""Hot-swap benchmark: how long a promoted model takes to serve, and what a swap costs requests.

A real ``triage serve`` (uvicorn, classifier on as shipped) on 127.0.0.1 with three tenants:
``acme`` (whose model is promoted), ``globex`` (never promoted) and ``ops`` (an operator key for
``/metrics``). Four client threads diagnose a 10-step trace without a pause, for acme and globex
in turn, naming the agent ``bench-agent``, while acme's agent model of it is promoted ``--swaps`` times
(a new registry version each time: an agent model fitted on another slice of τ-airline, so every
version answers differently), one every
``--every`` seconds, at the setting's default poll interval unless ``--poll`` says otherwise.
Before the clients start, every worker has served acme (requests on fresh connections until each
worker's ``triage_model_info`` lists it): a worker that never served a tenant has nothing to swap.

Printed, per worker count:

- **time to serve**: from ``ActivationStore.activate_model`` to the first answer naming the new version, and
  until every worker reports it in ``triage_model_info`` (median and max over the swaps);
- **requests**: total, errors (anything but 200), and p50 / p99 latency in steady state and in the
  two seconds after each swap became visible (the load beside the old model, smoke check, swap);
- **isolation**: globex's answers (``model_version``, ``failure_probability``) over the whole run:
  the number of distinct values (1 = unchanged).

Run (about 3 minutes)::

    .venv/bin/python bench/hot_swap.py --workers 1 2
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.service import Server, bench_trace  # noqa: E402

AGENT = "bench-agent"


def _versions(registry: Any, n: int) -> list[str]:
    """``n`` registry versions of acme's agent ``bench-agent``: agent models fitted on ``n`` different
    slices of τ-airline's runs (no own CV: fast to fit; the threshold then stays unset)."""
    from model.data.realdata import load_source
    from model.scoring.agentmodel.model import AgentModel, AgentModelConfig

    runs = load_source("tau_airline")
    out = []
    parent = None
    for k in range(n):
        part = runs[k * 10: k * 10 + 60]
        model = AgentModel.fit([r.trace.model_copy(update={"labels": None}) for r in part], [r.failed for r in part],
                               [r.group for r in part], config=AgentModelConfig(internal_folds=0))
        mv = registry.save("acme", AGENT, model, parent=parent, card="bench/hot_swap.py",
                           report={"bench": True}, data={"bench": k})
        parent = mv.version
        out.append(mv.version)
    return out


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def run(workers: int, swaps: int, every: float, poll: float | None) -> dict[str, Any]:
    import httpx

    from model.scoring.agent_registry import Registry
    from serve.store import Stores

    data = Path(tempfile.mkdtemp(prefix="bench-hot-swap-"))
    registry = Registry(data / "models")
    env = [f"TRIAGE_MODEL_REGISTRY={registry.root}", "TRIAGE_OPERATOR_TENANTS=ops"]
    if poll is not None:
        env.append(f"TRIAGE_MODEL_POLL_S={poll}")
    server = Server(workers, data, tenants=("acme", "globex", "ops"), extra_env=env)
    store = Stores.at(f"sqlite:///{data / 'triage.db'}")
    versions = _versions(registry, swaps)
    trace = bench_trace(10, seed=3)
    trace["id"] = "bench-hot-swap"
    log: list[tuple[float, float, int, str, str, float | None]] = []  # t, latency, status, tenant, version, p
    stop = threading.Event()

    def client(i: int) -> None:
        tenant = ("acme", "globex")[i % 2]
        body = json.dumps({"trace": trace, "options": {"agent": AGENT}}).encode()
        headers = {"Authorization": f"Bearer {server.keys[tenant]}", "Content-Type": "application/json"}
        with httpx.Client(timeout=60) as c:
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    r = c.post(f"{server.url}/v1/diagnose", content=body, headers=headers)
                    status = r.status_code
                    got = r.json() if status == 200 else {}
                except httpx.HTTPError:
                    status, got = 0, {}
                log.append((t0, time.monotonic() - t0, status, tenant, str(got.get("model_version", "")),
                            got.get("failure_probability")))

    def workers_on(version: str) -> set[str]:
        r = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {server.keys['ops']}"}, timeout=30)
        return set(re.findall(rf'triage_model_info\{{tenant="acme",agent="{AGENT}",version="{re.escape(version)}",'
                              rf'worker="(\d+)"\}}', r.text))

    # Every worker serves acme before the clients start (their keep-alive connections may all land
    # on one worker; a worker that never served acme has no model of it to swap): fresh connections.
    from model.scoring.agent_registry import ZERO_SHOT

    serving: set[str] = set()
    deadline = time.monotonic() + 120
    while len(serving) < workers:
        if time.monotonic() > deadline:
            raise SystemExit(f"only workers {serving} answered acme")
        httpx.post(f"{server.url}/v1/diagnose", json={"trace": trace, "options": {"agent": AGENT}}, timeout=60,
                   headers={"Authorization": f"Bearer {server.keys['acme']}"}).raise_for_status()
        serving |= workers_on(ZERO_SHOT)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    first_answer: list[float] = []
    all_workers: list[float] = []
    visible_at: list[float] = []
    try:
        time.sleep(every)  # steady state first
        steady_end = time.monotonic()
        for v in versions:
            t0 = time.monotonic()
            store.activations.activate_model("acme", v, actor="bench", agent=AGENT)
            seen_first = None
            on: set[str] = set()
            while time.monotonic() - t0 < 120:
                if seen_first is None and any(tenant == "acme" and mv.endswith(f"+{v}") and t >= t0
                                              for t, _, _, tenant, mv, _ in list(log)):
                    seen_first = time.monotonic() - t0
                    visible_at.append(time.monotonic())
                on |= workers_on(f"{AGENT}@{v}")
                if seen_first is not None and len(on) >= workers:
                    break
                time.sleep(0.1)
            if seen_first is None or len(on) < workers:
                raise SystemExit(f"{v}: first answer {seen_first} s, workers {on} of {workers} within 120 s")
            first_answer.append(seen_first)
            all_workers.append(time.monotonic() - t0)
            time.sleep(max(0.0, every - (time.monotonic() - t0)))
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
        server.stop()
        store.db.dispose()
    steady = [lat for t, lat, s, *_ in log if t < steady_end and s == 200]
    near = [lat for t, lat, s, *_ in log if s == 200 and any(0 <= t - v <= 2.0 for v in visible_at)]
    globex = {(mv, p) for _, _, s, tenant, mv, p in log if tenant == "globex" and s == 200}
    return {
        "workers": workers,
        "poll_s": poll if poll is not None else "default",
        "swaps": swaps,
        "first_answer_s": (statistics.median(first_answer), max(first_answer)),
        "every_worker_s": (statistics.median(all_workers), max(all_workers)),
        "requests": len(log),
        "errors": sum(1 for _, _, s, *_ in log if s != 200),
        "steady_ms": (1000 * _pct(steady, 0.5), 1000 * _pct(steady, 0.99), len(steady)),
        "after_swap_ms": (1000 * _pct(near, 0.5), 1000 * _pct(near, 0.99), len(near)),
        "globex_distinct_answers": len(globex),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--swaps", type=int, default=4)
    ap.add_argument("--every", type=float, default=15.0, help="Seconds between two promotions.")
    ap.add_argument("--poll", type=float, default=None, help="TRIAGE_MODEL_POLL_S (default: the setting's).")
    args = ap.parse_args()
    for w in args.workers:
        r = run(w, args.swaps, args.every, args.poll)
        fa, ew, st, af = r["first_answer_s"], r["every_worker_s"], r["steady_ms"], r["after_swap_ms"]
        print(f"workers={w} poll={r['poll_s']} swaps={r['swaps']}: first answer on the new model "
              f"median {fa[0]:.1f} s, max {fa[1]:.1f} s; every worker median {ew[0]:.1f} s, max {ew[1]:.1f} s")
        print(f"  requests {r['requests']}, errors {r['errors']}; latency steady p50 {st[0]:.0f} ms p99 {st[1]:.0f} ms "
              f"(n={st[2]}), ≤2 s after a swap p50 {af[0]:.0f} ms p99 {af[1]:.0f} ms (n={af[2]}); "
              f"globex distinct answers {r['globex_distinct_answers']}")


if __name__ == "__main__":
    main()
