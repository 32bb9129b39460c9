"""The request path's CPU in process: a diagnosis and a session step, and the store's share of them.

No HTTP: the services of one worker (:func:`serve.wiring.build_service`, the shipped classifier when
there is one) on a temporary SQLite file or an empty PostgreSQL database, one thread. For each
request it reads ``time.process_time`` around

- the whole request as a route runs it (``serve.intake.take`` on the raw body, the service call, the
  response's ``model_dump_json``): **CPU ms a request**;
- the store's write transaction (:meth:`serve.store.base.Database.write`, from ``BEGIN`` to the
  commit): **store write CPU ms** (SQL and SQLAlchemy's and the driver's work; on the diagnosis path
  the transaction holds only store calls, so this is the store's cost; a session step decides inside
  its transaction, so there it is the whole locked append);
- the reads the request makes outside it (:meth:`~serve.store.base.Database.read`): **store reads
  CPU ms**.

Each figure is the median of ``--repeats`` blocks of ``--n`` requests (after ``--warmup``), with the
blocks' range: the host is shared, so the spread says how much to trust the median.

Run (about a minute; ``--database-url`` adds PostgreSQL, its tables dropped first)::

    .venv/bin/python bench/store_cpu.py --n 200 --repeats 5
    .venv/bin/python bench/store_cpu.py --database-url postgresql://…

It imports the code of the checkout ``PYTHONPATH`` names: run it with a base worktree's path to
measure the base the same way.
"""

from __future__ import annotations

import argparse
import contextlib
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

from service import _bodies, _empty, session_step  # noqa: E402


class StoreClock:
    """Accumulates the CPU time spent inside a database's :meth:`write` and :meth:`read` blocks."""

    def __init__(self, db: Any) -> None:
        self.cpu = {"write": 0.0, "read": 0.0}
        self.depth = 0
        for name in ("write", "read"):
            setattr(db, name, self._timed(name, getattr(db, name)))

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
    for fn in requests[:warmup]:
        fn()
    totals: list[float] = []
    writes: list[float] = []
    reads: list[float] = []
    i = warmup
    for _ in range(repeats):
        clock.cpu = {"write": 0.0, "read": 0.0}
        t0 = time.process_time()
        for fn in requests[i : i + n]:
            fn()
        totals.append((time.process_time() - t0) * 1000 / n)
        writes.append(clock.cpu["write"] * 1000 / n)
        reads.append(clock.cpu["read"] * 1000 / n)
        i += n
    return {"cpu_ms": statistics.median(totals), "cpu_range": [min(totals), max(totals)],
            "write_ms": statistics.median(writes), "write_range": [min(writes), max(writes)],
            "read_ms": statistics.median(reads), "read_range": [min(reads), max(reads)]}


def run(url: str, data: Path, a: argparse.Namespace) -> dict[str, Any]:
    from serve.intake import take
    from serve.schemas import AppendStepsRequest
    from serve.settings import Settings
    from serve.wiring import build_diagnoser, build_service

    settings = Settings(data_dir=data, database_url=url, auth="off")
    diagnoser, ready = build_diagnoser(settings)
    service = build_service(settings, diagnoser)
    clock = StoreClock(service.stores.db)
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
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200, help="requests a block")
    ap.add_argument("--repeats", type=int, default=5, help="blocks (the median and range are over them)")
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--scenarios", nargs="+", default=["diag_clf_10", "diag_rules_10", "session_step_clf"])
    ap.add_argument("--database-url", default=None, help="also an empty PostgreSQL database (its tables are dropped)")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    results: dict[str, Any] = {"load": os.getloadavg()}
    engines = [("sqlite", None)] + ([("postgresql", a.database_url)] if a.database_url else [])
    for engine, url in engines:
        with tempfile.TemporaryDirectory(prefix="triage-storecpu-") as tmp:
            if url:
                _empty(url)
            results[engine] = run(url or f"sqlite:///{Path(tmp) / 'triage.db'}", Path(tmp), a)
    results["load_after"] = os.getloadavg()
    print(f"load average {results['load'][0]:.2f} → {results['load_after'][0]:.2f}; "
          f"median of {a.repeats} blocks of {a.n} (range)")
    print(f"{'engine':11s} {'scenario':18s} {'CPU ms/request':>22s} {'store write CPU ms':>24s} "
          f"{'store reads CPU ms':>24s}")
    for engine, _ in engines:
        r = results[engine]
        for scenario in a.scenarios:
            m = r[scenario]
            print(f"{engine:11s} {scenario:18s} {m['cpu_ms']:8.3f} ({m['cpu_range'][0]:.2f}–{m['cpu_range'][1]:.2f})"
                  f"   {m['write_ms']:8.3f} ({m['write_range'][0]:.3f}–{m['write_range'][1]:.3f})"
                  f"   {m['read_ms']:8.3f} ({m['read_range'][0]:.3f}–{m['read_range'][1]:.3f})")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
