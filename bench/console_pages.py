"""The console's pages beside bench/console.py, on a store that bench seeded (``--database-url`` of it):

* ``cpu URL`` — the server's own CPU (``time.process_time``, in process, median of 7) of the pages'
  functions: overview, runs, the queue (random and margin), patterns after a write (the answer cache
  cleared), the traces list. On a shared machine this is what a request costs apart from waiting for a core.
* ``pages ROOT URL N PAGE…`` — N timed GETs of each console page (after 2 warm-ups) against a ``triage
  serve`` of the code at ROOT (another checkout: compare two commits in the same minutes).
* ``cold URL N`` — ``GET /v1/patterns`` right after a diagnosis (a write changes the tenant's data
  version, so the answer cache misses), N times, and again without a write.
* ``sql URL`` — the store statements of the models page, the agents' list and the runs page (``kind``,
  page 1000, the agent filter), each timed, and the plans of the slow ones. Run it with another
  checkout's interpreter (``cd /work/main && .venv/bin/python …/bench/console_pages.py sql URL``: its
  editable install imports that checkout's ``serve``) to read a base commit's statements.

Run::

    nice .venv/bin/python bench/console_pages.py cpu sqlite:////tmp/cb/triage.db
    nice .venv/bin/python bench/console_pages.py pages /work/main sqlite:////tmp/cb/main.db 5 "/ui/queue?format=json"
    nice .venv/bin/python bench/console_pages.py cold sqlite:////tmp/cb/copy.db 20
    nice .venv/bin/python bench/console_pages.py sql postgresql://…/big
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TENANT = "bench"


def _pct(lat: list[float]) -> str:
    lat = sorted(lat)
    n = len(lat)
    return f"n {n} p50 {statistics.median(lat):.1f} ms p95 {lat[min(n - 1, round(0.95 * n) - 1)]:.1f} ms"


def _console(url: str, tmp: str) -> tuple[Any, Any, Any]:
    """One worker's service over the store at ``url`` (no classifier), its console service and run scorer."""
    from model.diagnosis.diagnoser import Diagnoser
    from serve.services.console import ConsoleService
    from serve.settings import Settings
    from serve.wiring import build_service, load_runscorer

    settings = Settings(database_url=url, data_dir=Path(tmp), classifier=False)
    scorer = load_runscorer(settings)
    svc = build_service(settings, Diagnoser(runscorer=scorer))
    return svc, ConsoleService(svc, Path(tmp) / "registry"), scorer


def cpu(url: str) -> None:
    from serve.services import patterns as P
    from serve.services.console import RunFilter
    from serve.services.label_queue import queue_page

    with tempfile.TemporaryDirectory() as tmp:
        svc, c, scorer = _console(url, tmp)
        since, until = P.window(since=None, until=None, days=None)

        def after_write() -> Any:
            P.clear_cache()
            return P.tenant_patterns(svc.stores.reports, TENANT, since=since, until=until)

        cases: dict[str, Callable[[], Any]] = {
            "overview": lambda: c.overview(TENANT, days=7, agent=None),
            "runs, page 1": lambda: c.runs(TENANT, RunFilter(), page=1, per_page=50),
            "runs, failed, page 20": lambda: c.runs(TENANT, RunFilter(verdict="failed"), page=20, per_page=50),
            "queue (random)": lambda: queue_page(c, TENANT, key_id="bench-cpu", at=0, scorer=scorer),
            "queue (margin)": lambda: queue_page(c, TENANT, key_id="bench-cpu", at=0, scorer=scorer, order="margin"),
            "patterns after a write": after_write,
            "traces list": lambda: svc.history.list_traces(TENANT, kind=None, since=None, session=None, limit=50,
                                                           cursor=None),
        }
        for name, fn in cases.items():
            fn()
            took = []
            for _ in range(7):
                t = time.process_time()
                fn()
                took.append((time.process_time() - t) * 1000)
            print(f"{name}: CPU median {statistics.median(took):.1f} ms, max {max(took):.1f} ms", flush=True)
        svc.close()


def _serve(root: str, url: str, tmp: str) -> tuple[Any, str, str]:
    sys.path.insert(0, root)
    from bench import live
    from serve.auth import create_key
    from serve.store import Stores

    store = Stores.at(url)
    key, _ = create_key(store.keys, TENANT)
    store.db.dispose()
    proc, base = live.start(Path(tmp), {"TRIAGE_DATABASE_URL": url, "TRIAGE_AUTH": "on", "TRIAGE_CLASSIFIER": "false",
                                        **live.UNLIMITED})
    return proc, base, key


def pages(root: str, url: str, n: int, paths: list[str]) -> None:
    import httpx

    with tempfile.TemporaryDirectory() as tmp:
        proc, base, key = _serve(root, url, tmp)
        from bench import live
        try:
            with httpx.Client(base_url=base, timeout=120) as ui:
                r = ui.post("/ui/signin", data={"key": key, "next": "/ui/overview"}, headers={"Origin": base})
                assert r.status_code == 303, r.text[:200]
                for page in paths:
                    for _ in range(2):
                        ui.get(page)
                    lat = []
                    for _ in range(n):
                        t = time.perf_counter()
                        r = ui.get(page)
                        lat.append((time.perf_counter() - t) * 1000)
                        assert r.status_code == 200, r.text[:200]
                    print(f"{root} {page}: {_pct(lat)}", flush=True)
        finally:
            live.stop(proc)


def cold(url: str, n: int) -> None:
    import httpx

    from serve.examples import OPENAI_LOOP

    root = str(Path(__file__).resolve().parent.parent)
    with tempfile.TemporaryDirectory() as tmp:
        proc, base, key = _serve(root, url, tmp)
        from bench import live
        try:
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120) as c:
                c.get("/v1/patterns")
                after, again = [], []
                for _ in range(n):
                    assert c.post("/v1/diagnose", json={"trace": OPENAI_LOOP["trace"]}).status_code == 200
                    t = time.perf_counter()
                    assert c.get("/v1/patterns").status_code == 200
                    after.append((time.perf_counter() - t) * 1000)
                    t = time.perf_counter()
                    c.get("/v1/patterns")
                    again.append((time.perf_counter() - t) * 1000)
            print(f"GET /v1/patterns after a write: {_pct(after)}; again, no write: {_pct(again)}", flush=True)
        finally:
            live.stop(proc)


def sql(url: str) -> None:
    """Each store statement of the models page, the agents' list and the runs page (kind, page 1000, the
    agent filter's list), timed (its second call), and the plan of those over 20 ms (PostgreSQL:
    ``EXPLAIN (ANALYZE, BUFFERS)``; SQLite: ``EXPLAIN QUERY PLAN``)."""
    from sqlalchemy import event

    from serve.services.console import RunFilter

    with tempfile.TemporaryDirectory() as tmp:
        svc, c, _ = _console(url, tmp)
        engine = svc.stores.db.engine
        seen: list[tuple[float, str, Any]] = []

        def before(conn: Any, cur: Any, st: str, params: Any, ctx: Any, many: bool) -> None:
            conn.info["t0"] = time.perf_counter()

        def after(conn: Any, cur: Any, st: str, params: Any, ctx: Any, many: bool) -> None:
            seen.append(((time.perf_counter() - conn.info["t0"]) * 1000, st, params))

        cases: dict[str, Callable[[], Any]] = {
            "models page": lambda: c.models(TENANT, operator=True),
            "agents list": lambda: svc.agents.list(TENANT),
            "runs, kind=tool_error": lambda: c.runs(TENANT, RunFilter(kind="tool_error"), page=1, per_page=50),
            "runs, page 1000": lambda: c.runs(TENANT, RunFilter(), page=1000, per_page=50),
            "the agent filter's list": lambda: c.agents(TENANT),
        }
        slow = []
        event.listen(engine, "before_cursor_execute", before)
        event.listen(engine, "after_cursor_execute", after)
        for name, fn in cases.items():
            fn()
            seen.clear()
            t = time.perf_counter()
            fn()
            print(f"== {name}: {(time.perf_counter() - t) * 1000:.0f} ms, {len(seen)} statements", flush=True)
            for ms, st, params in seen:
                print(f"   {ms:8.1f} ms  {' '.join(st.split())[:160]}")
                slow += [(name, st, params)] if ms > 20 else []
        event.remove(engine, "before_cursor_execute", before)
        event.remove(engine, "after_cursor_execute", after)
        explain = "EXPLAIN (ANALYZE, BUFFERS) " if svc.stores.db.dialect == "postgresql" else "EXPLAIN QUERY PLAN "
        with engine.connect() as conn:
            for name, st, params in slow:
                print(f"\n== {name}: {' '.join(st.split())[:300]}")
                for r in conn.exec_driver_sql(explain + st, params).all():
                    print("   ", r[-1])
        svc.close()


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["cpu"] and len(args) == 2:
        cpu(args[1])
    elif args[:1] == ["pages"] and len(args) >= 5:
        pages(args[1], args[2], int(args[3]), args[4:])
    elif args[:1] == ["cold"] and len(args) == 3:
        cold(args[1], int(args[2]))
    elif args[:1] == ["sql"] and len(args) == 2:
        sql(args[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
