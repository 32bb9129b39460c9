"""Console benchmark: a store seeded in bulk, then p50/p95 over real HTTP of every console page (the
``/ui`` pages and their JSON twins) and every ``/v1`` list or aggregate endpoint, and the time to
group the window's failures into patterns.

1. **Seed** (:mod:`bench.seed`, in bulk: PostgreSQL ``COPY``, SQLite multi-row inserts; every table the
   write path fills, its counters included) ``--runs`` runs (default 20,000) of one tenant: copies of a
   pool of diagnosed real and generated runs, ``--agents`` named agents (default 4), the first
   ``--in-window`` runs (default all) over the last ``--days`` days (default 6.5: inside the default
   7-day window), the rest between 7 and ``--history-days`` days ago. Half the failing runs get an
   outcome, 10 % a label.
2. **Serve**: ``triage serve`` (uvicorn, one worker, ``TRIAGE_AUTH=on``) on 127.0.0.1 over that store.
3. **Time** each endpoint ``--requests`` times (default 60, after 2 warm-ups; 5 when the first answer
   took over 2 s), one connection, one request at a time; p50 and p95 in ms. Target: p95 ≤ 300 ms.
   ``--soak-s S``: each ``/v1`` endpoint for S seconds instead, one request every ``--interval-s`` (0.5): p50,
   p95, max, the distinct answers (``as_of``) and the server's CPU meanwhile (the worker, its helper processes).
4. **Group**: :func:`model.diagnosis.patterns.group_patterns` on the store's occurrences (``ReportStore.pattern_inputs``
   over the window), median of 5; target ≤ 1 s. The query itself is timed too.

Run (SQLite: about 7 minutes on 2 busy cores, most of it the queue's requests on main; PostgreSQL: ``--database-url postgresql://…`` of an empty
database, or ``--no-seed`` on one this bench or ``bench/seed.py`` seeded)::

    nice .venv/bin/python bench/console.py
    nice .venv/bin/python bench/console.py --database-url postgresql://triage@127.0.0.1:5432/bench \
        --runs 1000000 --in-window 210000 --agents 24
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import live  # noqa: E402

TARGET_MS = 300.0
GROUP_TARGET_S = 1.0


def seed_store(url: str, tenant: str, args: argparse.Namespace) -> dict[str, Any]:
    """Module docstring, 1. (:func:`bench.seed.seed`)."""
    from bench.seed import seed

    return seed(url, tenant=tenant, runs=args.runs, in_window=args.in_window, agents=args.agents, days=args.days,
                history_days=args.history_days, seed_=args.seed)


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


def _p95(lat: list[float]) -> float:
    """The 95th percentile of ``lat``, sorted: its nearest-rank value."""
    return lat[min(len(lat) - 1, int(round(0.95 * len(lat))) - 1)]


def _cpu(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) so far of the process ``pid`` and of its live children (a helper process)."""
    import psutil

    proc = psutil.Process(pid)
    kids = 0.0
    for child in proc.children(recursive=True):
        try:
            t = child.cpu_times()
            kids += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    t = proc.cpu_times()
    return t.user + t.system, kids


def _soak(client: Any, path: str, soak_s: float, interval_s: float, pid: int | None) -> dict[str, Any]:
    """``--soak-s``: one GET of ``path`` every ``interval_s`` for ``soak_s`` seconds after 2 warm-ups; p50 / p95 /
    max, the distinct answers (``as_of``) and the server's CPU meanwhile (its worker, its helper processes)."""
    for _ in range(2):
        client.get(path)
    lat: list[float] = []
    answers: set[Any] = set()
    cpu0 = _cpu(pid) if pid is not None else None
    t_end = time.monotonic() + soak_s
    nxt = time.monotonic()
    while time.monotonic() < t_end:
        t0 = time.perf_counter()
        r = client.get(path)
        lat.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200, (path, r.status_code, r.text[:200])
        answers.add(r.json().get("as_of"))
        nxt += interval_s
        time.sleep(max(0.0, nxt - time.monotonic()))
    lat.sort()
    p95 = _p95(lat)
    res: dict[str, Any] = {"path": path, "n": len(lat), "soak_s": soak_s, "p50_ms": round(statistics.median(lat), 1),
                           "p95_ms": round(p95, 1), "max_ms": round(lat[-1], 1), "answers": len(answers),
                           "ok": p95 <= TARGET_MS}
    if cpu0 is not None and pid is not None:
        cpu1 = _cpu(pid)
        res["worker_cpu_s"] = round(cpu1[0] - cpu0[0], 1)
        res["helper_cpu_s"] = round(cpu1[1] - cpu0[1], 1)
    print(f"  {path:<45} soak {soak_s:.0f} s  n {res['n']:>4}  p50 {res['p50_ms']:8.1f} ms  p95 {res['p95_ms']:8.1f} ms  "
          f"max {res['max_ms']:8.1f} ms  {res['answers']} answers  CPU worker {res.get('worker_cpu_s')} s, helper "
          f"{res.get('helper_cpu_s')} s  {'ok' if res['ok'] else 'MISSED'}", flush=True)
    return res


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
    p95 = _p95(lat)
    res = {"path": path, "n": n, "first_ms": round(first * 1000, 1), "p50_ms": round(statistics.median(lat), 1),
           "p95_ms": round(p95, 1), "bytes": size, "ok": p95 <= TARGET_MS}
    _print(res)
    return res


def _print(r: dict[str, Any]) -> None:
    if "p95_ms" in r:
        print(f"  {r['path']:<45} n {r['n']:>3}  first {r['first_ms']:8.1f}  p50 {r['p50_ms']:8.1f} ms  "
              f"p95 {r['p95_ms']:8.1f} ms  "
              f"{r['bytes']:>9} B  {'ok' if r['ok'] else 'MISSED'}", flush=True)
    else:
        print(f"  {r['path']:<45} {r['status']}: {r['error']}", flush=True)


class _Writer:
    """``--writes-per-s``: a thread that diagnoses a new failing run (``docs/examples/ignored_error.json`` under a
    new trace id) every 1 / ``rate`` s over its own connection while the endpoints are timed, as a tenant's agents
    do: each write changes the tenant's failures, so an answer cached before it is not one after it."""

    def __init__(self, base: str, key: str, rate: float) -> None:
        import threading

        self.base, self.key, self.rate = base, key, rate
        self.body = json.loads((ROOT / "docs" / "examples" / "ignored_error.json").read_text(encoding="utf-8"))
        self.done = self.failed = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import httpx

        with httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {self.key}"}, timeout=60) as c:
            i = 0
            while not self.stop.wait(1.0 / self.rate):
                self.body["trace"]["id"] = f"console-write-{time.time_ns()}-{i}"
                r = c.post("/v1/diagnose", json=self.body)
                self.done += r.status_code == 200
                self.failed += r.status_code != 200
                i += 1

    def __enter__(self) -> _Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        print(f"  (writes during the timing: {self.done} diagnoses, {self.failed} failed)", flush=True)


def time_http(url: str, tenant: str, data: Path, n: int, ui_pages: bool = True, writes_per_s: float = 0.0,
              only: str | None = None, soak_s: float = 0.0, interval_s: float = 0.5) -> list[dict[str, Any]]:
    """Module docstring, 2.–3. ``writes_per_s``: diagnoses posted meanwhile (:class:`_Writer`); ``only``: time
    only the endpoints whose path starts with it; ``soak_s``: time each ``/v1`` endpoint for that long instead,
    one request every ``interval_s`` (:func:`_soak`)."""
    import contextlib

    import httpx

    from serve.auth import create_key
    from serve.store import Stores

    store = Stores.at(url)
    key, _ = create_key(store.keys, tenant)
    store.db.dispose()
    proc, base = _serve(url, data)
    out = []
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120) as api, \
                (_Writer(base, key, writes_per_s) if writes_per_s > 0 else contextlib.nullcontext()):
            first = api.get("/v1/traces", params={"limit": 50}).json()
            one = api.get("/v1/traces", params={"limit": 1, "kind": "tool_error"}).json()["items"][0]["id"]
            agent = first["items"][0]["agent"]
            since = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S")
            for path in ("/v1/patterns", "/v1/patterns?level=failure&limit=20", f"/v1/patterns?agent={agent}",
                         "/v1/patterns?days=30", "/v1/agents",
                         "/v1/traces?limit=50", f"/v1/traces?limit=50&cursor={quote(first['next_cursor'])}",
                         "/v1/traces?kind=tool_error&limit=50", f"/v1/traces?since={since}&limit=50",
                         f"/v1/traces/{one}", f"/v1/traces/{one}/graph", "/metrics"):
                if only is None or (path == only[:-1] if only.endswith("$") else path.startswith(only)):
                    out.append(_soak(api, path, soak_s, interval_s, proc.pid) if soak_s > 0 else _time(api, path, n))
        if not ui_pages:
            return out
        with httpx.Client(base_url=base, timeout=120, follow_redirects=False) as ui:
            if ui.get("/ui/signin").status_code != 200:
                out.append({"path": "/ui", "status": 404, "error": "this app has no console pages (/ui)"})
                _print(out[-1])
                return out
            r = ui.post("/ui/signin", data={"key": key, "next": "/ui/overview"}, headers={"Origin": base})
            if r.status_code != 303:
                out.append({"path": "/ui/signin", "status": r.status_code, "error": r.text[:200]})
                _print(out[-1])
                return out
            top = ui.get("/ui/patterns?format=json").json()["result"]["patterns"][0]["id"]
            pages = ["/ui/overview", f"/ui/overview?agent={agent}", "/ui/patterns", f"/ui/patterns/{top}",
                     "/ui/runs", "/ui/runs?verdict=failed", "/ui/runs?labelled=yes", "/ui/runs?kind=tool_error",
                     f"/ui/runs?agent={agent}", "/ui/runs?page=1000", f"/ui/runs/{one}", "/ui/queue", "/ui/models",
                     "/ui/streams"]
            for page in pages:
                out.append(_time(ui, page, n))
                out.append(_time(ui, page + ("&" if "?" in page else "?") + "format=json", n))
    finally:
        live.stop(proc)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20_000)
    ap.add_argument("--in-window", type=int, default=None, help="runs inside the last --days days (default all)")
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--days", type=float, default=6.5, help="spread the in-window runs over this many days before now")
    ap.add_argument("--history-days", type=float, default=60.0, help="the other runs go back this far")
    ap.add_argument("--requests", type=int, default=60, help="timed requests per endpoint")
    ap.add_argument("--database-url", default=None, help="an empty PostgreSQL database (default: a temp SQLite file)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--group-failures", type=int, default=20_000, help="also group exactly this many failures")
    ap.add_argument("--skip-ui", action="store_true", help="time the /v1 endpoints only, not the /ui pages")
    ap.add_argument("--no-seed", action="store_true", help="time a store --database-url already seeded by this bench")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--writes-per-s", type=float, default=0.0,
                    help="diagnose this many new failing runs a second while the /v1 endpoints are timed")
    ap.add_argument("--only", default=None, metavar="PREFIX",
                    help="time only the /v1 endpoints whose path starts so (a trailing $: only that path)")
    ap.add_argument("--skip-grouping", action="store_true", help="do not time the grouping in process")
    ap.add_argument("--soak-s", type=float, default=0.0,
                    help="time each /v1 endpoint for this many seconds instead of --requests times: p50/p95/max, the "
                         "distinct answers and the server's CPU (worker, helper processes) meanwhile")
    ap.add_argument("--interval-s", type=float, default=0.5, help="--soak-s: one request every this many seconds")
    args = ap.parse_args()
    tenant = "bench"
    with tempfile.TemporaryDirectory(prefix="bench-console-") as tmp:
        data = Path(tmp)
        url = args.database_url or f"sqlite:///{data / 'triage.db'}"
        backend = "postgresql" if url.startswith("postgresql") else "sqlite"
        seeded: dict[str, Any] = {"reused": url}
        if not args.no_seed:
            print(f"seeding {args.runs:,} runs into {backend} in bulk …", flush=True)
            seeded = seed_store(url, tenant, args)
        print(f"  {json.dumps(seeded)}", flush=True)
        grouping: dict[str, Any] = {}
        if not args.skip_grouping:
            grouping = time_grouping(url, tenant, args.days, args.group_failures)
            ok = "ok" if grouping["group_s_median"] <= GROUP_TARGET_S else "MISSED"
            print(f"grouping {grouping['occurrences']} failures and signals ({grouping['failures']} failures) into "
                  f"{grouping['patterns']} patterns: median {grouping['group_s_median']} s, max "
                  f"{grouping['group_s_max']} s (target ≤ {GROUP_TARGET_S} s: {ok}); the store's query "
                  f"{grouping['query_s']} s", flush=True)
            sc = grouping["scaled"]
            ok = "ok" if sc["group_s_median"] <= GROUP_TARGET_S else "MISSED"
            print(f"grouping exactly {sc['failures']} failures ({sc['occurrences']} with their signals): median "
                  f"{sc['group_s_median']} s, max {sc['group_s_max']} s (target ≤ {GROUP_TARGET_S} s: {ok})",
                  flush=True)
        writes = f", {args.writes_per_s:g} diagnoses a second meanwhile" if args.writes_per_s > 0 else ""
        print(f"HTTP, {args.requests} requests per endpoint, one at a time{writes} (target p95 ≤ {TARGET_MS:.0f} ms):",
              flush=True)
        rows = time_http(url, tenant, data, args.requests, ui_pages=not args.skip_ui, writes_per_s=args.writes_per_s,
                         only=args.only, soak_s=args.soak_s, interval_s=args.interval_s)
    if args.json is not None:
        args.json.write_text(json.dumps({"backend": backend, "seeded": seeded, "grouping": grouping, "http": rows},
                                        indent=2) + "\n")


if __name__ == "__main__":
    main()
