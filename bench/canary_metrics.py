"""Scrape cost of ``GET /metrics`` (the canary's per-arm figures and the store's counts) at 200 runs and at
20,000: kept on write (serve/store/counters.py), a scrape should cost the same whatever the history's size.

One store (SQLite in a temporary folder, or ``--database-url`` of an empty database) holds two
tenants: ``small`` with ``--small`` runs and ``large`` with ``--large``, written through the store's
write path — the functions the service calls: :meth:`TraceStore.put_trace` (with ``now`` placing each run
in time, spread over ``--days`` days: several canary windows), :meth:`SessionStore.put_recommendation` for
each failing run, a later healthy diagnosis for a third of them (recovered, after 1 to 60 minutes),
:meth:`SessionStore.add_outcome` on half the recommendations and :meth:`LabelStore.add_label` (a checker's verdict,
a person's over it on half) on ``--labelled`` of the runs — in transactions of 500 runs (labels: one
each, as the service writes them). Runs are split between the arms as the hash splits them at
``--percent``. Then a real ``triage serve`` (one worker, ``TRIAGE_AUTH=on``) on 127.0.0.1 over that
store is scraped with each tenant's key (a tenant's scrape: its own history), ``--repeat`` times each,
interleaved, after warm-ups; the medians and their ratio are printed, and the figures of every scrape
are checked against what was written (the canary's counts over the window, the traces,
recommendations and outcomes). Target: a scrape at 20,000 runs ≤ 1.5 × one at 200.

Run (about 2 minutes on 2 cores)::

    nice .venv/bin/python bench/canary_metrics.py
    nice .venv/bin/python bench/canary_metrics.py --database-url postgresql://triage@127.0.0.1:5432/bench
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import live  # noqa: E402
from serve.auth import create_key  # noqa: E402
from serve.services.canary import ARMS, assign_arm  # noqa: E402
from serve.settings import Settings  # noqa: E402
from serve.store import Stores  # noqa: E402
from serve.store.counters import hour_of  # noqa: E402


def seed(store: Stores, tenant: str, runs: int, *, percent: float, days: float, window: timedelta, labelled: float,
         now: datetime, seed: int = 7) -> dict[str, Any]:
    """Write ``runs`` runs (module docstring); what the scrape must show."""
    rng = random.Random(seed)
    since = datetime.fromtimestamp(hour_of(now - window) * 3600, UTC)
    want: dict[str, Any] = {arm: {"runs": 0, "failed": 0, "recovered": 0, "labelled": 0, "succeeded": 0} for arm in ARMS}
    want.update(traces=runs, recommendations=0, outcomes=0)
    labels: list[tuple[str, bool, bool]] = []
    for start in range(0, runs, 500):
        with store.db.write() as db:
            for i in range(start, min(start + 500, runs)):
                tid = f"t{i}"
                at = now - timedelta(days=days * rng.random())
                if abs((at - since).total_seconds()) < 2 * 3600:  # not at the window's edge (the clock moves on)
                    at -= timedelta(hours=4)
                arm = assign_arm(tenant, f"trace:{tid}", percent)
                failed, recovered = rng.random() < 0.3, False
                failures = [{"kind": "tool_error", "severity": "high", "confidence": 0.9, "step": 1}] if failed else []
                store.traces.put_trace(db, tenant=tenant, trace_id=tid, trace={"id": tid, "steps": [{"kind": "user_input"}]},
                                response={"healthy": not failed, "failures": failures}, session_id=None,
                                task_type=None, arm=arm, now=at, agent="bench")
                if failed:
                    rec = {"id": f"rec-{i}", "strategy": "retry"}
                    store.sessions.put_recommendation(db, tenant=tenant, rec=rec, trace_id=tid, session_id=None,
                                             failure_key="tool_error@1", kind="tool_error", rung=0, attempt=1)
                    want["recommendations"] += 1
                    if rng.random() < 0.5:
                        row = store.sessions.get_recommendation(db, tenant, rec["id"])
                        assert row is not None
                        store.sessions.add_outcome(db, tenant=tenant, rec=row, success=rng.random() < 0.6, duration_s=None,
                                          cost=None, note="")
                        want["outcomes"] += 1
                    if rng.random() < 1 / 3:
                        recovered = True
                        store.traces.put_trace(db, tenant=tenant, trace_id=tid, trace={"id": tid, "steps": []},
                                        response={"healthy": True, "failures": []}, session_id=None, task_type=None, agent="bench",
                                        arm=arm, now=at + timedelta(minutes=rng.uniform(1, 60)))
                label, ok, person = rng.random() < labelled, rng.random() < 0.7, rng.random() < 0.5
                if label:
                    labels.append((tid, ok, person))
                if at >= since:
                    w = want[arm]
                    w["runs"] += 1
                    w["failed"] += failed
                    w["recovered"] += recovered
                    w["labelled"] += label
                    w["succeeded"] += label and ok != person  # a person disagrees with the checker: theirs counts
    for tid, ok, person in labels:
        store.labels.add_label(tenant, tid, failed=not ok, author="agent", author_type="checker")
        if person:
            store.labels.add_label(tenant, tid, failed=ok, author="ann", author_type="human")
    return want


def serve(url: str, data: Path, window: str) -> tuple[subprocess.Popen[bytes], str]:
    return live.start(data, {"TRIAGE_DATABASE_URL": url, "TRIAGE_AUTH": "on", "TRIAGE_CLASSIFIER": "false",
                             "TRIAGE_CANARY_WINDOW": window})


def scrape(client: httpx.Client) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    r = client.get("/metrics")
    assert r.status_code == 200, r.text
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def check(got: dict[str, Any], want: dict[str, Any]) -> None:
    for arm in ARMS:
        for k, name in (("runs", "runs"), ("failed", "failed_runs"), ("recovered", "recovered_runs"),
                        ("labelled", "labelled_runs"), ("succeeded", "succeeded_runs")):
            assert got[f"triage_canary_{name}"][(("arm", arm),)] == want[arm][k], (arm, k, got[f"triage_canary_{name}"], want[arm])
    assert got["triage_traces_diagnosed_total"][()] == want["traces"]
    assert got["triage_recommendations_total"][(("strategy", "retry"),)] == want["recommendations"]
    assert sum(got.get("triage_outcomes_total", {}).values()) == want["outcomes"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=200)
    ap.add_argument("--large", type=int, default=20_000)
    ap.add_argument("--percent", type=float, default=20.0)
    ap.add_argument("--labelled", type=float, default=0.2, help="share of runs with a run-level label")
    ap.add_argument("--days", type=float, default=35.0, help="the runs' creation times spread over this many days")
    ap.add_argument("--window", default="7d", help="TRIAGE_CANARY_WINDOW of the server")
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--database-url", default=None, help="an empty database (default: SQLite in a temporary folder)")
    a = ap.parse_args()
    sizes = {"small": a.small, "large": a.large}
    with tempfile.TemporaryDirectory() as tmp:
        url = a.database_url or f"sqlite:///{Path(tmp) / 'triage.db'}"
        store = Stores.at(url)
        store.db.upgrade()
        keys, want = {}, {}
        window = Settings(canary_window=a.window).canary_window
        for tenant, runs in sizes.items():
            keys[tenant] = create_key(store.keys, tenant)[0]
            t0 = time.perf_counter()
            want[tenant] = seed(store, tenant, runs, percent=a.percent, days=a.days, window=window,
                                labelled=a.labelled, now=datetime.now(UTC))
            w = want[tenant]
            print(f"  {tenant}: {runs} runs written in {time.perf_counter() - t0:.1f} s; in the window: "
                  f"{w['repair']['runs']} repair / {w['shadow']['runs']} shadow", flush=True)
        store.db.dispose()
        data = Path(tmp) / "data"
        data.mkdir()
        proc, base = serve(url, data, a.window)
        times: dict[str, list[float]] = {t: [] for t in sizes}
        try:
            clients = {t: httpx.Client(base_url=base, headers={"Authorization": f"Bearer {keys[t]}"}, timeout=30)
                       for t in sizes}
            for _ in range(3):
                for c in clients.values():
                    scrape(c)
            for i in range(a.repeat):  # interleaved, so that the shared machine's load hits both alike
                for t in (list(sizes) if i % 2 else list(sizes)[::-1]):
                    s = time.perf_counter()
                    got = scrape(clients[t])
                    times[t].append(time.perf_counter() - s)
                    check(got, want[t])
            for c in clients.values():
                c.close()
        finally:
            live.stop(proc)
    med = {t: statistics.median(v) for t, v in times.items()}
    print(f"canary metrics: GET /metrics (one tenant's, figures checked) at {a.small} runs {med['small'] * 1000:.1f} ms, "
          f"at {a.large} runs {med['large'] * 1000:.1f} ms (medians of {a.repeat}): ratio "
          f"{med['large'] / med['small']:.2f} (target ≤ 1.5)")


if __name__ == "__main__":
    main()
