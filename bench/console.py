"""Console benchmark: 20,000 runs in the store, then p50/p95 over real HTTP of the console's JSON
endpoints (and of its ``/ui`` pages and their JSON twins, when the app has them), and the time to
group 20,000 failures into patterns.

1. **Seed** (``--runs``, default 20,000) through the store's write path — :meth:`TraceStore.put_trace`
   (the trace, its failures and signals with their tools), :meth:`SessionStore.put_recommendation`,
   :meth:`SessionStore.add_outcome` and labels — in transactions of 500. The runs are copies (new ids) of
   a pool of diagnosed runs: the first task groups of the real τ-bench airline and AgentProcessBench
   sets and generated runs of every kind (:func:`model.data.builder.make_trace`), diagnosed once with the
   rules and the shipped run scorer; each copy gets one of four agents (task type) and a creation
   time spread over the last ``--days`` days (default 6.5: every run is inside the default 7-day
   window, the patterns endpoint's worst case). Half the failing runs get an outcome, 10 % a label.
2. **Serve**: ``triage serve`` (uvicorn, one worker, ``TRIAGE_AUTH=on``) on 127.0.0.1 over that store.
3. **Time** each endpoint ``--requests`` times (default 60, after 3 warm-ups), one connection, one
   request at a time; p50 and p95 in ms. Target: p95 ≤ 300 ms.
4. **Group**: :func:`model.diagnosis.patterns.group_patterns` on the store's occurrences (``ReportStore.pattern_inputs``
   over the whole seeded range, 20,000+ failures and signals), median of 5; target ≤ 1 s. The
   query itself is timed too.

Run (SQLite: about 3 minutes on 2 cores; PostgreSQL: ``--database-url postgresql://…`` of an empty
database)::

    nice .venv/bin/python bench/console.py
    nice .venv/bin/python bench/console.py --database-url postgresql://triage@127.0.0.1:5432/bench
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import live  # noqa: E402

AGENTS = ("airline", "hotpotqa", "support", "coder")
TARGET_MS = 300.0
GROUP_TARGET_S = 1.0


def _pool(real_groups: int, generated: int, seed: int) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(agent, trace JSON, response JSON) of each diagnosed pool run."""
    from model.core.kinds import FailureKind
    from model.core.options import DiagnoseOptions
    from model.data.builder import RECIPE_KINDS, make_trace
    from model.data.realdata import first_groups, load_source
    from model.diagnosis.diagnoser import Diagnoser

    diagnoser = Diagnoser.with_shipped_models(classifier=False)
    pool: list[tuple[str, Any]] = []
    for source, agent in (("tau_airline", "airline"), ("agentprocessbench", "hotpotqa")):
        pool += [(agent, r.trace) for r in first_groups(load_source(source), real_groups)]
    kinds = [None, *RECIPE_KINDS]  # the kinds a run can be generated for (at_risk and degradation: none)
    for i in range(generated):
        kind = kinds[i % len(kinds)]
        if kind == FailureKind.DISALLOWED_TOOL:
            kind = None
        pool.append((AGENTS[2 + i % 2], make_trace(kind, seed=seed + i, n_steps=8 + i % 12)))
    out = []
    for agent, trace in pool:
        trace = trace.model_copy(deep=True)
        trace.labels = None
        resp = diagnoser.diagnose(trace, DiagnoseOptions())
        out.append((agent, trace.model_dump(mode="json", exclude_none=True), resp.model_dump(mode="json")))
    return out


def seed_store(url: str, tenant: str, runs: int, days: float, seed: int) -> dict[str, Any]:
    """Write ``runs`` runs into the store at ``url`` (module docstring, 1.); counts and seconds."""
    from sqlalchemy import update

    from serve.store import Stores
    from serve.store.tables import FailureRow, LabelRow, RecommendationRow, TraceRow

    t0 = time.perf_counter()
    pool = _pool(real_groups=12, generated=160, seed=seed)
    t_pool = time.perf_counter() - t0
    store = Stores.at(url)
    store.db.upgrade()
    store.keys.ensure_tenant(tenant)
    rng = random.Random(seed)
    now = datetime.now(UTC)
    counts: dict[str, Any] = {"runs": 0, "failing": 0, "failures_and_signals": 0, "recommendations": 0, "outcomes": 0, "labels": 0}
    t1 = time.perf_counter()
    batch = 500
    for start in range(0, runs, batch):
        with store.db.write() as db:
            for i in range(start, min(start + batch, runs)):
                agent, trace, resp = pool[i % len(pool)]
                tid = f"bench-{i:06d}"
                at = now - timedelta(days=days * rng.random())
                trace = {**trace, "id": tid, "task_type": agent}
                rec = dict(resp.get("recommendation") or {})
                rec["id"] = f"rec-{i:06d}"
                response = {**resp, "trace_id": tid, "recommendation": rec}
                store.traces.put_trace(db, tenant=tenant, trace_id=tid, trace=trace, response=response, session_id=None,
                                task_type=agent, agent=agent)  # the run's agent, as if named
                # the run's place in time (put_trace stamps "now")
                db.execute(update(TraceRow).where(TraceRow.tenant_id == tenant, TraceRow.id == tid)
                           .values(created_at=at, updated_at=at))
                db.execute(update(FailureRow).where(FailureRow.tenant_id == tenant, FailureRow.trace_id == tid)
                           .values(created_at=at))
                counts["runs"] += 1
                counts["failures_and_signals"] += len(resp.get("failures") or []) + len(resp.get("signals") or [])
                primary = resp.get("primary") or {}
                if not resp.get("failures"):
                    continue
                counts["failing"] += 1
                store.sessions.put_recommendation(db, tenant=tenant, rec=rec, trace_id=tid, session_id=None,
                                         failure_key=f"{primary.get('kind')}@{primary.get('source_index')}",
                                         kind=primary.get("kind"), rung=0, attempt=1)
                counts["recommendations"] += 1
                if rng.random() < 0.5:
                    row = db.get(RecommendationRow, (tenant, rec["id"]))
                    assert row is not None
                    store.sessions.add_outcome(db, tenant=tenant, rec=row, success=rng.random() < 0.55, duration_s=3.0,
                                      cost=None, note="")
                    counts["outcomes"] += 1
                db.execute(update(RecommendationRow).where(RecommendationRow.tenant_id == tenant,
                                                           RecommendationRow.id == rec["id"]).values(created_at=at))
                if rng.random() < 0.1:
                    db.add(LabelRow(tenant_id=tenant, trace_id=tid, failed=True, kind=primary.get("kind"),
                                    author="bench", author_type="human"))
                    counts["labels"] += 1
    counts["seconds_pool"] = round(t_pool, 1)
    counts["seconds_write"] = round(time.perf_counter() - t1, 1)
    counts["pool"] = len(pool)
    store.db.dispose()
    return counts


def time_grouping(url: str, tenant: str, days: float, failures: int) -> dict[str, Any]:
    """Module docstring, 4.; and on ``failures`` failures exactly: the store's failures repeated as
    other runs (trace id suffixed ``~k``) until there are that many, with their signals."""
    from dataclasses import replace

    from model.diagnosis.patterns import group_patterns
    from serve.store import Stores

    store = Stores.at(url)
    until = datetime.now(UTC) + timedelta(minutes=5)
    since = until - timedelta(days=days + 1)
    t0 = time.perf_counter()
    occ, repairs = store.reports.pattern_inputs(tenant, since=since, until=until)
    t_query = time.perf_counter() - t0
    store.db.dispose()
    times = []
    got: list[Any] = []
    for _ in range(5):
        t0 = time.perf_counter()
        got = group_patterns(occ, repairs, since=since, until=until)
        times.append(time.perf_counter() - t0)
    out: dict[str, Any] = {"occurrences": len(occ), "failures": sum(not o.is_signal for o in occ), "repairs": len(repairs),
           "patterns": len(got), "query_s": round(t_query, 3), "group_s_median": round(statistics.median(times), 3),
           "group_s_max": round(max(times), 3)}
    scaled: list[Any] = []
    k = 0
    while sum(not o.is_signal for o in scaled) < failures and out["failures"]:
        scaled += [replace(o, trace_id=f"{o.trace_id}~{k}") for o in occ]
        k += 1
    n_fail = 0
    cut = len(scaled)
    for i, o in enumerate(scaled):
        n_fail += not o.is_signal
        if n_fail == failures:
            cut = i + 1
            break
    scaled = scaled[:cut]
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        group_patterns(scaled, repairs, since=since, until=until)
        times.append(time.perf_counter() - t0)
    out["scaled"] = {"occurrences": len(scaled), "failures": sum(not o.is_signal for o in scaled),
                     "group_s_median": round(statistics.median(times), 3), "group_s_max": round(max(times), 3)}
    return out


def _serve(url: str, data: Path) -> tuple[subprocess.Popen[bytes], str]:
    return live.start(data, {"TRIAGE_DATABASE_URL": url, "TRIAGE_AUTH": "on", "TRIAGE_CLASSIFIER": "false",
                             **live.UNLIMITED})


def _time(client: Any, path: str, n: int) -> dict[str, Any]:
    """p50 / p95 of ``n`` GETs of ``path`` after warm-ups; an endpoint whose warm-up takes over 2 s
    is timed on 5 requests only (noted), one that times out is reported as such. Printed at once."""
    import httpx

    try:
        t0 = time.perf_counter()
        r = client.get(path)
        first = time.perf_counter() - t0
        if r.status_code != 200:
            res: dict[str, Any] = {"path": path, "status": r.status_code, "error": r.text[:200]}
            _print(res)
            return res
        n = 5 if first > 2.0 else n
        for _ in range(0 if first > 2.0 else 2):
            client.get(path)
        lat = []
        size = 0
        for _ in range(n):
            t0 = time.perf_counter()
            r = client.get(path)
            lat.append((time.perf_counter() - t0) * 1000)
            assert r.status_code == 200, (path, r.status_code, r.text[:200])
            size = len(r.content)
    except httpx.TimeoutException:
        res = {"path": path, "status": 0, "error": f"timed out after {client.timeout.read} s"}
        _print(res)
        return res
    lat.sort()
    p95 = lat[min(len(lat) - 1, int(round(0.95 * len(lat))) - 1)]
    res = {"path": path, "n": n, "p50_ms": round(statistics.median(lat), 1), "p95_ms": round(p95, 1), "bytes": size,
           "ok": p95 <= TARGET_MS}
    _print(res)
    return res


def _print(r: dict[str, Any]) -> None:
    if "p95_ms" in r:
        print(f"  {r['path']:<45} n {r['n']:>3}  p50 {r['p50_ms']:8.1f} ms  p95 {r['p95_ms']:8.1f} ms  "
              f"{r['bytes']:>9} B  {'ok' if r['ok'] else 'MISSED'}", flush=True)
    else:
        print(f"  {r['path']:<45} {r['status']}: {r['error']}", flush=True)


def time_http(url: str, tenant: str, data: Path, n: int, ui_pages: bool = True) -> list[dict[str, Any]]:
    """Module docstring, 2.–3."""
    import httpx

    from serve.auth import create_key
    from serve.store import Stores

    store = Stores.at(url)
    key, _ = create_key(store.keys, tenant)
    store.db.dispose()
    proc, base = _serve(url, data)
    out = []
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120) as api:
            one = api.get("/v1/traces", params={"limit": 1, "kind": "tool_error"}).json()["items"][0]["id"]
            top = api.get("/v1/patterns", params={"limit": 1}).json()["patterns"][0]["id"]
            for path in ("/v1/patterns", "/v1/patterns?level=failure&limit=20", f"/v1/patterns?agent={AGENTS[0]}",
                         "/v1/traces?limit=50", "/v1/traces?kind=tool_error&limit=50", f"/v1/traces/{one}",
                         f"/v1/traces/{one}/graph"):
                out.append(_time(api, path, n))
        if not ui_pages:
            return out
        with httpx.Client(base_url=base, timeout=60, follow_redirects=False) as ui:
            if ui.get("/ui/signin").status_code != 200:
                out.append({"path": "/ui", "status": 404, "error": "this app has no console pages (/ui)"})
                _print(out[-1])
                return out
            r = ui.post("/ui/signin", data={"key": key, "next": "/ui/overview"}, headers={"Origin": base})
            if r.status_code != 303:
                out.append({"path": "/ui/signin", "status": r.status_code, "error": r.text[:200]})
                _print(out[-1])
                return out
            pages = ["/ui/overview", "/ui/patterns", f"/ui/patterns/{top}", "/ui/runs", f"/ui/runs/{one}",
                     "/ui/queue", "/ui/models", "/ui/streams"]
            for page in pages:
                out.append(_time(ui, page, n))
                out.append(_time(ui, f"{page}?format=json", n))
    finally:
        live.stop(proc)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20_000)
    ap.add_argument("--days", type=float, default=6.5, help="spread the runs over this many days before now")
    ap.add_argument("--requests", type=int, default=60, help="timed requests per endpoint")
    ap.add_argument("--database-url", default=None, help="an empty PostgreSQL database (default: a temp SQLite file)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--group-failures", type=int, default=20_000, help="also group exactly this many failures")
    ap.add_argument("--skip-ui", action="store_true", help="time the /v1 endpoints only, not the /ui pages")
    ap.add_argument("--no-seed", action="store_true", help="time a store --database-url already seeded by this bench")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()
    tenant = "bench"
    with tempfile.TemporaryDirectory(prefix="bench-console-") as tmp:
        data = Path(tmp)
        url = args.database_url or f"sqlite:///{data / 'triage.db'}"
        backend = "postgresql" if url.startswith("postgresql") else "sqlite"
        seeded: dict[str, Any] = {"reused": url}
        if not args.no_seed:
            print(f"seeding {args.runs} runs into {backend} …", flush=True)
            seeded = seed_store(url, tenant, args.runs, args.days, args.seed)
        print(f"  {json.dumps(seeded)}", flush=True)
        grouping = time_grouping(url, tenant, args.days, args.group_failures)
        ok = "ok" if grouping["group_s_median"] <= GROUP_TARGET_S else "MISSED"
        print(f"grouping {grouping['occurrences']} failures and signals ({grouping['failures']} failures) into "
              f"{grouping['patterns']} patterns: median {grouping['group_s_median']} s, max {grouping['group_s_max']} s "
              f"(target ≤ {GROUP_TARGET_S} s: {ok}); the store's query {grouping['query_s']} s", flush=True)
        sc = grouping["scaled"]
        ok = "ok" if sc["group_s_median"] <= GROUP_TARGET_S else "MISSED"
        print(f"grouping exactly {sc['failures']} failures ({sc['occurrences']} with their signals): median "
              f"{sc['group_s_median']} s, max {sc['group_s_max']} s (target ≤ {GROUP_TARGET_S} s: {ok})", flush=True)
        print(f"HTTP, {args.requests} requests per endpoint, one at a time (target p95 ≤ {TARGET_MS:.0f} ms):", flush=True)
        rows = time_http(url, tenant, data, args.requests, ui_pages=not args.skip_ui)
    if args.json is not None:
        args.json.write_text(json.dumps({"backend": backend, "seeded": seeded, "grouping": grouping, "http": rows},
                                        indent=2) + "\n")


if __name__ == "__main__":
    main()
