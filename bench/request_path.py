"""The request path's cost: the store's CPU in process, the server's CPU a request, the latency against
the floor with a plain client, and throughput against a base commit.

**In process** (``--inprocess``, the default part): no HTTP; the services of one worker
(:func:`serve.wiring.build_service`, the shipped classifier when there is one; then
:func:`serve.wiring.settle`, as a worker's lifespan does) on a temporary SQLite file
and, with ``--database-url``, an empty PostgreSQL database; one thread. For each request it reads
``time.process_time`` around

- the whole request as a route runs it (``serve.intake.take`` on the raw body, the service call, the
  response's ``model_dump_json``): **CPU ms a request**;
- the store's write transaction (:meth:`serve.store.base.Database.unit`, or ``write``, its ORM session's
  view, from taking the connection and ``BEGIN`` to the commit and the connection's return): **write
  transaction CPU ms**; of it, **model work**: the calls of :data:`MODEL_WORK` made inside it (the
  streams' detector updates and the inferred agent's profile update, which run there because they
  read and write locked rows, but are no SQL, driver or ORM work); the difference is **store write
  CPU ms** (SQL, SQLAlchemy's and the driver's work, the rows' JSON, the commit: on the diagnosis
  path the store's cost). A session step decides inside its transaction, so there the write is the
  whole locked append;
- the reads the request makes outside it (:meth:`~serve.store.base.Database.read`, ``peek``): **store reads
  CPU ms**; and, of the write, SQLite's own ``COMMIT`` (its pages written to the WAL);
- the feeds (``serve/services/streams.py``, "The feed", and ``serve/store/counters.py``, "the count feed";
  a base commit without them fed its streams and changed its counts inside the write): the block's runs'
  values and count changes are gathered for the whole block and applied after it in one
  :meth:`~serve.services.streams.Streams.drain`, as a worker's feeder does every ``TRIAGE_STREAM_FEED_S``
  under load, timed apart: **feed CPU ms a run** (its SQL and its detectors' work alike, off the request).
  A batch's cost depends on its size: at one run a second each batch holds one run.

Each figure is the median of ``--repeats`` blocks of ``--n`` requests (after ``--warmup``), with the
blocks' range: the host is shared, so the spread says how much to trust the median.

``--touch-mb M`` reads an M MiB array after each decision, before the write (as the classifier's forward
reads its ~20 MiB of weights there): how much of a write's CPU is its caches' being cold, which a
rules-only diagnosis does not show (``--touch-mb 24 --scenarios diag_rules_10`` against ``--touch-mb 0``).

**Server** (``--server``): a real ``triage serve`` (one worker, SQLite, the server of
``bench/service.py``) of this checkout and of ``--base`` (a worktree of the base commit), in
``--rounds`` interleaved rounds (the base first in odd rounds; ``--base-env NAME=VALUE`` sets the base's
server's environment, as ``--base . --base-env TRIAGE_CPU_AFFINITY=off`` compares this checkout with its
workers left to the kernel). Per scenario and round:

- a plain keep-alive ``http.client`` client on one connection, ``--pairs`` pairs of ``GET /healthz``
  (the **floor**) and the request, interleaved: p50 of each and the ratio;
- ``bench/service.py``'s load generator at 8 connections for ``--duration`` s: requests a second, and
  the server's CPU a request (its processes' user + system time from ``/proc``, over the requests), and
  of it the event loop's thread (the worker's main thread: uvicorn, middlewares, routing, the body's
  parse, the answer's serialisation; the service call runs on the thread pool's threads).

**The HTTP layer in process** (``--asgi``): the app over ASGI on this thread's event loop (no uvicorn): the
event loop's thread's CPU a request and the Python function calls it makes (:func:`asgi`); run it with a
base worktree's ``PYTHONPATH`` and without, alternately, to compare.

Run::

    .venv/bin/python bench/request_path.py --n 200 --repeats 5 --database-url postgresql://…
    .venv/bin/python bench/request_path.py --n 300 --scenarios diag_rules_10 --sqlite-pragma wal_autocheckpoint=0
    .venv/bin/python bench/request_path.py --server --base /tmp/base --rounds 4
    .venv/bin/python bench/request_path.py --asgi --scenarios diag_clf_10 session_step_clf --n 200 --repeats 5

It imports the code of the checkout ``PYTHONPATH`` names for the in-process part: run that part with
a base worktree's path to measure the base the same way (``PYTHONPATH=$TREE:$TREE/client``; until
2026-12-07 ``bench/service.py``'s own path came first and such a run measured this checkout).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import http.client
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from service import Server, _bodies, _empty, proc_cpu_s, run_load, session_step  # noqa: E402

# bench/service.py put this checkout first on the path: the trees PYTHONPATH names go back before it, so that
# the in-process part imports their code (a base worktree's) as the module docstring says.
for _tree in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
    sys.path.insert(0, _tree)

#: The work a diagnosis's write transaction does that is not the store's (no SQL, no driver, no ORM): the
#: stream detectors' arithmetic and the inferred agent's profile update, which run there because they
#: read and write locked rows. (module, attribute path)
MODEL_WORK = (("serve.services.streams", "advance_stream"), ("model.core.identity", "AgentProfile.from_json"),
              ("model.core.identity", "AgentProfile.update"), ("model.core.identity", "AgentProfile.to_json"))


class StoreClock:
    """Accumulates the CPU time spent inside a database's write transactions (:meth:`unit`, and
    :meth:`write`, the ORM's view of one, which opens it) and :meth:`read` blocks, and of the write's
    time the part in :data:`MODEL_WORK`."""

    def __init__(self, db: Any) -> None:
        self.cpu = {"write": 0.0, "read": 0.0, "commit": 0.0, "model": 0.0}
        self.depth = 0
        self.in_model = False
        for name, key in (("unit", "write"), ("write", "write"), ("read", "read"), ("peek", "read")):
            if hasattr(db, name):  # a base commit's store has no unit
                setattr(db, name, self._timed(key, getattr(db, name)))
        for module, path in MODEL_WORK:
            owner: Any = importlib.import_module(module)
            *outer, name = path.split(".")
            for part in outer:
                owner = getattr(owner, part)
            raw = vars(owner).get(name)
            if raw is None:  # a base commit may not have it (its detectors' time then stays in the write's)
                continue
            if isinstance(raw, classmethod):
                setattr(owner, name, classmethod(self._model(raw.__func__)))
            else:
                setattr(owner, name, self._model(raw))

    def _model(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.depth or self.in_model:
                return fn(*args, **kwargs)
            self.in_model = True
            t0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.cpu["model"] += time.process_time() - t0
                self.in_model = False
        return timed

    def _timed(self, name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
        @contextlib.contextmanager
        def wrapper() -> Iterator[Any]:
            self.depth += 1
            t0 = time.process_time()
            try:
                with fn() as db:
                    yield db
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.cpu[name] += time.process_time() - t0
        return wrapper


def measure(service: Any, clock: StoreClock, requests: list[Callable[[], Any]], *, warmup: int, n: int,
            repeats: int) -> dict[str, Any]:
    drain = getattr(getattr(service, "streams", None), "drain", None)  # the streams' feed (a base may have none)
    for fn in requests[:warmup]:
        fn()
    if drain is not None:
        drain()
    totals: list[float] = []
    feeds: list[float] = []
    writes: list[float] = []
    reads: list[float] = []
    commits: list[float] = []
    models: list[float] = []
    i = warmup
    for _ in range(repeats):
        clock.cpu = {"write": 0.0, "read": 0.0, "commit": 0.0, "model": 0.0}
        t0 = time.process_time()
        for fn in requests[i : i + n]:
            fn()
        totals.append((time.process_time() - t0) * 1000 / n)
        writes.append(clock.cpu["write"] * 1000 / n)
        reads.append(clock.cpu["read"] * 1000 / n)
        commits.append(clock.cpu["commit"] * 1000 / n)
        models.append(clock.cpu["model"] * 1000 / n)
        if drain is not None:  # the block's runs' values, fed as the worker's feeder does (one batch), timed apart
            t0 = time.process_time()
            drain()
            feeds.append((time.process_time() - t0) * 1000 / n)
        i += n
    stores = [w - m for w, m in zip(writes, models, strict=True)]
    return {"cpu_ms": statistics.median(totals), "cpu_range": [min(totals), max(totals)],
            "write_ms": statistics.median(writes), "write_range": [min(writes), max(writes)],
            "read_ms": statistics.median(reads), "read_range": [min(reads), max(reads)],
            "commit_ms": statistics.median(commits), "commit_range": [min(commits), max(commits)],
            "model_ms": statistics.median(models), "model_range": [min(models), max(models)],
            "store_ms": statistics.median(stores), "store_range": [min(stores), max(stores)],
            "feed_ms": statistics.median(feeds) if feeds else 0.0,
            "feed_range": [min(feeds), max(feeds)] if feeds else [0.0, 0.0]}


def run(url: str, data: Path, a: argparse.Namespace) -> dict[str, Any]:
    from serve import wiring
    from serve.intake import take
    from serve.schemas import AppendStepsRequest
    from serve.settings import Settings
    from serve.wiring import build_diagnoser, build_service

    # the streams' feed gathered for the whole block (its batch fed and timed after it: measure); a base has none
    feed = {"stream_feed_s": 60.0} if "stream_feed_s" in Settings.model_fields else {}
    settings = Settings(data_dir=data, database_url=url, auth="off", **feed)
    diagnoser, ready = build_diagnoser(settings)
    service = build_service(settings, diagnoser)
    if a.sqlite_pragma and service.stores.db.dialect == "sqlite":
        _pragmas(service.stores.db, a.sqlite_pragma)
    settle = getattr(wiring, "settle", None)
    if settle is not None:  # as a worker's lifespan does (a base commit's may not)
        settle()
    clock = StoreClock(service.stores.db)
    dialect = service.stores.db.engine.dialect
    do_commit = dialect.do_commit

    def timed_commit(dbapi_connection: Any) -> None:
        t0 = time.process_time()
        do_commit(dbapi_connection)
        clock.cpu["commit"] += time.process_time() - t0

    dialect.do_commit = timed_commit  # type: ignore[method-assign]
    if a.touch_mb > 0:  # the caches made cold between the decision and the write (module docstring)
        import numpy as np

        touched = np.ones(int(a.touch_mb * 2**20) // 8)
        decide = service.diagnoses.decide

        def cold_decide(*args: Any, **kwargs: Any) -> Any:
            out = decide(*args, **kwargs)
            touched.sum()
            return out

        service.diagnoses.decide = cold_decide
    total = a.warmup + a.n * a.repeats
    out: dict[str, Any] = {"classifier": bool(ready.get("classifier"))}
    tenant = "bench"

    def diagnosis(raw: bytes) -> Callable[[], Any]:
        def go() -> Any:
            body, trace = take(raw, max_steps=settings.max_steps, format=None, options=None)
            return service.diagnose(tenant, trace, body.options).model_dump_json()
        return go

    def step(sid: str, i: int) -> Callable[[], Any]:
        def go() -> Any:
            req = AppendStepsRequest.model_validate_json(session_step(i))
            return service.append_steps(tenant, sid, req).model_dump_json()
        return go

    try:
        for scenario in a.scenarios:
            if scenario == "session_step_clf":
                reqs = [step(f"s-{os.getpid()}-{i // 20}", i) for i in range(total)]
            else:
                reqs = [diagnosis(b) for b in _bodies(scenario, total)]
            out[scenario] = measure(service, clock, reqs, warmup=a.warmup, n=a.n, repeats=a.repeats)
    finally:
        service.close()
        if settle is not None:
            wiring.unsettle()
    return out


def _pragmas(db: Any, pragmas: list[str]) -> None:
    """``PRAGMA name=value`` on each connection of the store's engine from now on (after its own), the pool's
    connections closed first."""
    from sqlalchemy import event

    for p in pragmas:
        name, _, value = p.partition("=")
        if not name.strip().replace("_", "").isalnum() or not value.strip().replace("-", "").isalnum():
            raise SystemExit(f"--sqlite-pragma {p!r}: give NAME=VALUE (letters, digits, _)")
    db.dispose()

    @event.listens_for(db.engine, "connect")
    def _more(dbapi_conn: Any, _record: Any) -> None:
        for p in pragmas:
            dbapi_conn.execute(f"PRAGMA {p}")


def inprocess(a: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"load": os.getloadavg()}
    engines = [("sqlite", None)] + ([("postgresql", a.database_url)] if a.database_url else [])
    for engine, url in engines:
        with tempfile.TemporaryDirectory(prefix="triage-storecpu-") as tmp:
            if url:
                _empty(url)
            results[engine] = run(url or f"sqlite:///{Path(tmp) / 'triage.db'}", Path(tmp), a)
    results["load_after"] = os.getloadavg()
    print(f"in process, load average {results['load'][0]:.2f} → {results['load_after'][0]:.2f}; "
          f"median of {a.repeats} blocks of {a.n} (range)"
          + (f"; {a.touch_mb:g} MiB read between each decision and its write" if a.touch_mb > 0 else ""))
    print(f"{'engine':11s} {'scenario':18s} {'CPU ms/request':>22s} {'write transaction CPU ms':>24s} "
          f"{'of which model work':>24s} {'store write CPU ms':>24s} {'of which COMMIT':>24s} "
          f"{'store reads CPU ms':>24s} {'feed CPU ms a run':>24s}")
    for engine, _ in engines:
        r = results[engine]
        for scenario in a.scenarios:
            m = r[scenario]
            print(f"{engine:11s} {scenario:18s} {m['cpu_ms']:8.3f} ({m['cpu_range'][0]:.2f}–{m['cpu_range'][1]:.2f})"
                  + "".join(f"   {m[k + '_ms']:8.3f} ({m[k + '_range'][0]:.3f}–{m[k + '_range'][1]:.3f})"
                            for k in ("write", "model", "store", "commit", "read", "feed")))
    return results


# -- the HTTP layer in process ---------------------------------------------------------------------

async def _asgi(app: Any, method: str, path: str, body: bytes, headers: dict[str, str]) -> int:
    """One request through the app's ASGI callable (its middlewares, routing, handler) on this thread's loop."""
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)  # a client that stays connected
        raise AssertionError

    status = 0

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
             "query_string": b"", "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000), "state": {}}
    await app(scope, receive, send)
    return status


def asgi(a: argparse.Namespace) -> dict[str, Any]:
    """The event loop's thread's CPU a request in process (``--asgi``): the app of ``serve.app.create_app``
    (keys on, rate limits off, its lifespan run) called over ASGI on this thread's event loop, the service
    work on the thread pool as in a server; ``time.thread_time`` of this thread over ``--repeats`` blocks of
    ``--n`` requests, and the Python function calls this thread makes a request (one more block under
    cProfile). No uvicorn, no socket."""
    import cProfile
    import pstats

    from serve.app import create_app
    from serve.auth import create_key
    from serve.settings import Settings

    async def go(tmp: Path) -> dict[str, Any]:
        settings = Settings(data_dir=tmp, auth="on", rate_limit_key_rps=0, rate_limit_tenant_rps=0)
        app = create_app(settings)
        out: dict[str, Any] = {}
        async with app.router.lifespan_context(app):
            key = create_key(app.state.key_store, "bench")[0]
            headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
            for scenario in a.scenarios:
                total = a.warmup + a.n * (a.repeats + 1)
                if scenario == "session_step_clf":
                    reqs = [(f"/v1/sessions/asgi-{i // 20}/steps", session_step(i)) for i in range(total)]
                else:
                    reqs = [("/v1/diagnose", b) for b in _bodies(scenario, total)]
                for path, body in reqs[:a.warmup]:
                    assert await _asgi(app, "POST", path, body, headers) == 200
                blocks: list[float] = []
                for r in range(a.repeats + 1):
                    chunk = reqs[a.warmup + r * a.n: a.warmup + (r + 1) * a.n]
                    prof = cProfile.Profile() if r == a.repeats else None
                    t0 = time.thread_time()
                    if prof is not None:
                        prof.enable()
                    for path, body in chunk:
                        await _asgi(app, "POST", path, body, headers)
                    if prof is not None:
                        prof.disable()
                        out[scenario] = {"loop_ms": statistics.median(blocks), "loop_range": [min(blocks), max(blocks)],
                                         "calls": pstats.Stats(prof).total_calls / a.n}  # type: ignore[attr-defined]
                    else:
                        blocks.append((time.thread_time() - t0) * 1000 / a.n)
        return out

    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="triage-asgi-") as tmp:
        out = asyncio.run(go(Path(tmp)))
    print(f"in process over ASGI ({sys.modules['serve.app'].__file__}), load average {load0[0]:.2f} → "
          f"{os.getloadavg()[0]:.2f}; median of {a.repeats} blocks of {a.n} (range)")
    for scenario, m in out.items():
        print(f"  {scenario:18s} event loop's thread CPU ms a request {m['loop_ms']:.3f} "
              f"({m['loop_range'][0]:.3f}–{m['loop_range'][1]:.3f})   Python calls a request {m['calls']:.0f}")
    return out


# -- the server ------------------------------------------------------------------------------------
def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


def plain_pairs(server: Server, scenario: str, pairs: int) -> dict[str, Any]:
    """``pairs`` of ``GET /healthz`` then the request, on one keep-alive ``http.client`` connection."""
    host, port = server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    headers = {"Authorization": f"Bearer {server.key}", "Content-Type": "application/json"}
    bodies = [] if scenario == "session_step_clf" else _bodies(scenario, pairs + 20)
    floor: list[float] = []
    lat: list[float] = []
    errors = 0
    try:
        for i in range(-20, pairs):  # 20 pairs of warm-up
            t0 = time.perf_counter()
            conn.request("GET", "/healthz")
            r = conn.getresponse()
            r.read()
            t1 = time.perf_counter()
            if scenario == "session_step_clf":
                k = i + 20
                path, body = f"/v1/sessions/plain-{os.getpid()}-{k // 20}/steps", session_step(k)
            else:
                path, body = "/v1/diagnose", bodies[i + 20]
            conn.request("POST", path, body=body, headers=headers)
            r = conn.getresponse()
            r.read()
            t2 = time.perf_counter()
            if i >= 0:
                floor.append(t1 - t0)
                lat.append(t2 - t1)
                errors += r.status != 200
    finally:
        conn.close()
    f50, l50 = _pct(floor, 0.5), _pct(lat, 0.5)
    return {"floor_p50_ms": f50, "p50_ms": l50, "p99_ms": _pct(lat, 0.99), "ratio": l50 / f50, "errors": errors}


def loop_cpu_s(server: Server) -> float:
    """CPU seconds (user + system) of the one worker's main thread, which runs the event loop: uvicorn,
    the middlewares, routing and dependencies, the body's parse and the answer's serialisation (the
    service call runs on the thread pool's threads, the rest of :meth:`Server.cpu_s`)."""
    return proc_cpu_s(f"/proc/{server.proc.pid}/task/{server.proc.pid}/stat")


def one_server(tree: Path, a: argparse.Namespace, env: list[str] | None = None) -> dict[str, Any]:
    """This checkout's or the base's server (``env``: ``NAME=VALUE`` for its environment): the plain
    client's figures, then the load at 8 connections."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="triage-path-") as tmp:
        server = Server(1, Path(tmp), tree=tree, extra_env=env)
        try:
            for scenario in a.scenarios:
                plain = plain_pairs(server, scenario, a.pairs)
                cpu0, loop0 = server.cpu_s(), loop_cpu_s(server)
                load = run_load(server.url, server.key, scenario, 8, a.duration)
                cpu1, loop1 = server.cpu_s(), loop_cpu_s(server)
                served = max(1, load["requests"] + load["warmup_requests"])  # the CPU read covers both
                out[scenario] = {**plain, "rps": load["rps"], "load_errors": load["errors"],
                                 "load_p50_ms": load["p50_ms"], "cpu_ms": (cpu1 - cpu0) * 1000 / served,
                                 "loop_cpu_ms": (loop1 - loop0) * 1000 / served, "load_requests": served}
        finally:
            server.stop()
    return out


def servers(a: argparse.Namespace) -> dict[str, Any]:
    trees = {"base": a.base.resolve(), "this": ROOT}
    rounds: list[dict[str, Any]] = []
    for i in range(a.rounds):
        order = ["base", "this"] if i % 2 == 0 else ["this", "base"]
        r: dict[str, Any] = {"load": os.getloadavg()}
        for name in order:
            r[name] = one_server(trees[name], a, a.base_env if name == "base" else None)
        r["load_after"] = os.getloadavg()
        rounds.append(r)
        print(f"round {i + 1}/{a.rounds} done (load {r['load'][0]:.2f} → {r['load_after'][0]:.2f})",
              file=sys.stderr, flush=True)
    loads = [x for r in rounds for x in (r["load"][0], r["load_after"][0])]
    print(f"\nserver, one worker, SQLite: {a.rounds} interleaved rounds; load average {min(loads):.2f}–{max(loads):.2f}")
    print("median over rounds (per round); ratio this ÷ base of the medians' rounds: each round's own ratio")
    for scenario in a.scenarios:
        print(f"{scenario}:")
        for fig, label in (("cpu_ms", "server CPU ms a request (8 conns)"),
                           ("loop_cpu_ms", "  of which the event loop's thread"), ("rps", "req/s at 8 conns"),
                           ("p50_ms", "plain client p50 ms"), ("floor_p50_ms", "floor (healthz) p50 ms"),
                           ("ratio", "p50 ÷ floor")):
            b = [r["base"][scenario][fig] for r in rounds]
            h = [r["this"][scenario][fig] for r in rounds]
            per = [x / y for x, y in zip(h, b, strict=True)]
            print(f"  {label:36s} base {statistics.median(b):8.2f}  this {statistics.median(h):8.2f}  "
                  f"this÷base {statistics.median(per):5.2f} (" + " ".join(f"{x:.2f}" for x in per) + ")")
        errs = sum(r[t][scenario]["errors"] + r[t][scenario]["load_errors"] for r in rounds for t in ("base", "this"))
        if errs:
            print(f"  ERRORS: {errs}")
    return {"rounds": rounds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", action="store_true", help="the server part (else: in process)")
    ap.add_argument("--asgi", action="store_true", help="in process: the app over ASGI, the event loop's thread")
    ap.add_argument("--n", type=int, default=200, help="in process: requests a block")
    ap.add_argument("--repeats", type=int, default=5, help="in process: blocks (the median and range are over them)")
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--scenarios", nargs="+", default=["diag_clf_10", "diag_rules_10", "session_step_clf"])
    ap.add_argument("--database-url", default=None, help="also an empty PostgreSQL database (its tables are dropped)")
    ap.add_argument("--sqlite-pragma", action="append", default=[], metavar="NAME=VALUE",
                    help="in process: run PRAGMA NAME=VALUE on each SQLite connection after the store's own "
                         "(e.g. wal_autocheckpoint=0); repeatable")
    ap.add_argument("--touch-mb", type=float, default=0.0, metavar="M",
                    help="in process: read an M MiB array between each decision and its write (cold caches)")
    ap.add_argument("--base", type=Path, default=None, help="server: a worktree of the base commit")
    ap.add_argument("--base-env", action="append", default=[], metavar="NAME=VALUE",
                    help="server: the base's server's environment (repeatable)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--pairs", type=int, default=300, help="server: floor/request pairs of the plain client")
    ap.add_argument("--duration", type=float, default=5.0, help="server: seconds of load at 8 connections")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if a.server:
        if a.base is None or not (a.base / "serve").is_dir():
            ap.error("--server needs --base, a checkout of the base commit")
        results = servers(a)
    elif a.asgi:
        results = asgi(a)
    else:
        results = inprocess(a)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
