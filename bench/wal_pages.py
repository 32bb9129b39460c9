"""The pages a diagnosis's commit writes on SQLite, by table and index.

Every page a write transaction changed is one WAL frame at its commit (a 24-byte header and the page:
two ``pwrite``s, ~4-5 µs of CPU a frame on this host, checkpoints aside), so each index a diagnosis
inserts into costs it a page or more. The services of one worker (:func:`serve.wiring.build_service`,
as ``bench/request_path.py`` builds them) on a temporary SQLite file take ``--warmup`` diagnoses of a
scenario of ``bench/service.py``; then, with automatic checkpoints off and the WAL emptied, ``--n``
more. Each frame of the WAL is filed under the b-tree its page belongs to (SQLite's ``dbstat``) and
kind (leaf, interior, overflow); the figures are frames a diagnosis.

``--driver``: SQLite's own CPU in the write instead, by statement. Each call the write makes on the driver
(``sqlite3``: ``BEGIN``, each statement, its rows' fetch, ``COMMIT``) is timed (``time.process_time``)
inside the service, and recorded with its parameters; the same calls are then replayed, in the same
order, on a bare ``sqlite3`` connection to a copy of the database as it was before them (the same pages,
the same rows): the statements' cost without the rest of the request (the model's forward, Python)
between them. The write's whole CPU is timed too, so the rest of it (Python: the rows, the bindings, the
counters) is the difference.

``--page-cost``: what a page costs a commit on this host: transactions of one-row updates of *k* tables
(a page each) on a bare WAL database, the ``COMMIT``'s CPU for each *k*.

Run::

    .venv/bin/python bench/wal_pages.py --scenario diag_rules_10
    .venv/bin/python bench/wal_pages.py --scenario diag_clf_10 --driver
    .venv/bin/python bench/wal_pages.py --page-cost
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import sqlite3
import struct
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from service import _bodies  # noqa: E402

# bench/service.py put this checkout first on the path: the trees PYTHONPATH names go back before it (a base
# worktree's code is measured with PYTHONPATH=$TREE:$TREE/client, as in bench/request_path.py)
for _tree in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
    sys.path.insert(0, _tree)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="diag_rules_10")
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--driver", action="store_true", help="SQLite's CPU by statement, in the service and replayed bare")
    ap.add_argument("--page-cost", action="store_true", help="a bare commit's CPU against the pages it writes")
    a = ap.parse_args()
    if a.page_cost:
        page_cost()
        return
    if a.driver:
        driver(a)
        return

    from sqlalchemy import event

    with tempfile.TemporaryDirectory(prefix="triage-walpages-") as tmp, _warmed(a, tmp) as (service, measured):
        engine = service.stores.db.engine
        service.stores.db.dispose()  # the next connections: no automatic checkpoint

        @event.listens_for(engine, "connect")
        def _no_checkpoint(dbapi_conn: object, _record: object) -> None:
            dbapi_conn.execute("PRAGMA wal_autocheckpoint=0")  # type: ignore[attr-defined]

        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        for body, trace in measured:
            service.diagnose("bench", trace, body.options)
        wal = Path(f"{tmp}/triage.db-wal").read_bytes()
        with sqlite3.connect(f"{tmp}/triage.db") as con:
            owner = {page: (name, kind) for name, page, kind in con.execute("SELECT name, pageno, pagetype FROM dbstat")}
    size = struct.unpack(">I", wal[8:12])[0]
    frames: collections.Counter[tuple[str, str]] = collections.Counter()
    commits = 0
    at = 32
    while at + 24 + size <= len(wal):
        page, commit = struct.unpack(">II", wal[at : at + 8])
        frames[owner.get(page, ("(freed)", ""))] += 1
        commits += commit != 0
        at += 24 + size
    print(f"{a.scenario}: {a.n} diagnoses, {commits} commits, {sum(frames.values()) / a.n:.2f} frames a diagnosis")
    for (name, kind), n in sorted(frames.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n / a.n:6.2f}  {name} ({kind})")


@contextlib.contextmanager
def _warmed(a: argparse.Namespace, tmp: str) -> Iterator[tuple[Any, list[Any]]]:
    """The services of one worker (as ``bench/request_path.py`` builds them) on ``tmp/triage.db`` (SQLite), the
    first ``--warmup`` of ``--warmup`` + ``--n`` runs of ``--scenario`` diagnosed: (the service, the ``--n``
    runs left, each ``(body, trace)``); the service closed after."""
    from serve import wiring
    from serve.intake import take
    from serve.settings import Settings
    from serve.wiring import build_diagnoser, build_service

    settings = Settings(data_dir=Path(tmp), database_url=f"sqlite:///{tmp}/triage.db", auth="off")
    diagnoser, _ = build_diagnoser(settings)
    service = build_service(settings, diagnoser)
    wiring.settle()
    try:
        runs = [take(b, max_steps=settings.max_steps, format=None, options=None)
                for b in _bodies(a.scenario, a.warmup + a.n)]
        for body, trace in runs[: a.warmup]:
            service.diagnose("bench", trace, body.options)
        yield service, runs[a.warmup :]
    finally:
        service.close()
        wiring.unsettle()


def page_cost(tables: int = 40, commits: int = 300, repeats: int = 5) -> None:
    """``--page-cost``: a bare commit's CPU (median of ``repeats`` blocks of ``commits``) for 1–40 pages."""
    import statistics

    with tempfile.TemporaryDirectory(prefix="triage-pagecost-") as tmp:
        con = sqlite3.connect(f"{tmp}/bare.db", isolation_level=None)
        for pragma in ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA wal_autocheckpoint=0"):
            con.execute(pragma)
        for i in range(tables):
            con.execute(f"CREATE TABLE t{i} (id INTEGER PRIMARY KEY, v INTEGER)")
            con.execute(f"INSERT INTO t{i} VALUES (1, 0)")
        print(f"a bare commit's CPU against its pages (WAL, synchronous=NORMAL, no checkpoints); load {os.getloadavg()[0]:.2f}")
        for k in (1, 5, 10, 20, 30, 40):
            blocks = []
            for _ in range(repeats):
                cpu = 0.0
                for _ in range(commits):
                    con.execute("BEGIN IMMEDIATE")
                    for i in range(k):
                        con.execute(f"UPDATE t{i} SET v = v + 1 WHERE id = 1")
                    t0 = time.process_time()
                    con.execute("COMMIT")
                    cpu += time.process_time() - t0
                blocks.append(cpu / commits * 1e6)
                con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            print(f"  {k:3d} pages: COMMIT {statistics.median(blocks):7.1f} µs ({min(blocks):.1f}–{max(blocks):.1f})")
        con.close()


class _Calls:
    """What a write transaction asks of the driver: each call's kind, SQL and parameters, and its CPU."""

    def __init__(self) -> None:
        self.on = False  # the measured diagnoses
        self.inside = False  # a write transaction (its reads outside it are not counted)
        self.calls: list[tuple[str, str, Any]] = []
        self.cpu: collections.defaultdict[str, float] = collections.defaultdict(float)

    def timed(self, kind: str, sql: str, args: Any, fn: Any) -> Any:
        if not (self.on and self.inside):
            return fn()
        t0 = time.process_time()
        out = fn()
        self.cpu[_label(sql)] += time.process_time() - t0
        self.calls.append((kind, sql, args))
        return out


def _label(sql: str) -> str:
    return " ".join(sql.split()[:3])


class _Cursor:
    def __init__(self, cur: Any, calls: _Calls) -> None:
        self._cur, self._calls = cur, calls

    def execute(self, sql: str, args: Any = ()) -> Any:
        return self._calls.timed("x", sql, list(args), lambda: self._cur.execute(sql, args))

    def executemany(self, sql: str, args: Any) -> Any:
        rows = [list(r) for r in args]
        return self._calls.timed("m", sql, rows, lambda: self._cur.executemany(sql, rows))

    def fetchall(self) -> Any:
        return self._calls.timed("f", "(fetch rows)", None, self._cur.fetchall)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)


class _Connection:
    def __init__(self, conn: Any, calls: _Calls) -> None:
        self._conn, self._calls = conn, calls

    def cursor(self) -> _Cursor:
        return _Cursor(self._conn.cursor(), self._calls)

    def execute(self, sql: str, *args: Any) -> Any:
        return self._calls.timed("x", sql, list(args[0]) if args else [], lambda: self._conn.execute(sql, *args))

    def commit(self) -> Any:
        return self._calls.timed("c", "COMMIT", None, self._conn.commit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def driver(a: argparse.Namespace) -> None:
    """``--driver``: the driver's calls inside the write, timed in the service, then replayed bare."""
    import shutil

    from serve.store import base, prepared

    calls = _Calls()
    write = {"cpu": 0.0}
    unit_init, unit = prepared.Unit.__init__, base.Database.unit

    def init(self: Any, *args: Any, **kw: Any) -> None:
        unit_init(self, *args, **kw)
        self.dbapi = _Connection(self.dbapi, calls)

    @contextlib.contextmanager
    def timed_unit(self: Any) -> Any:
        t0, calls.inside = time.process_time(), True
        try:
            with unit(self) as u:
                yield u
        finally:
            calls.inside = False
            if calls.on:
                write["cpu"] += time.process_time() - t0

    prepared.Unit.__init__ = init  # type: ignore[method-assign]
    base.Database.unit = timed_unit  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(prefix="triage-driver-") as tmp:
        with _warmed(a, tmp) as (service, measured):
            service.stores.db.dispose()
            with sqlite3.connect(f"{tmp}/triage.db") as con:
                con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            shutil.copy(f"{tmp}/triage.db", f"{tmp}/bare.db")  # the database as the measured writes find it
            calls.on = True
            for body, trace in measured:
                service.diagnose("bench", trace, body.options)
            calls.on = False
        bare: collections.defaultdict[str, float] = collections.defaultdict(float)
        con = sqlite3.connect(f"{tmp}/bare.db", isolation_level=None)
        for pragma in ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA foreign_keys=ON"):
            con.execute(pragma)
        cur = con.cursor()
        for kind, sql, args in calls.calls:
            t0 = time.process_time()
            if kind == "x":
                cur.execute(sql, args)
            elif kind == "m":
                cur.executemany(sql, args)
            elif kind == "f":
                cur.fetchall()
            else:
                con.commit() if con.in_transaction else None
            bare[_label(sql)] += time.process_time() - t0
        con.close()
    n = a.n
    served, replayed = sum(calls.cpu.values()), sum(bare.values())
    print(f"{a.scenario}: {n} diagnoses; µs a diagnosis (process CPU); load {os.getloadavg()[0]:.2f}")
    print(f"  {'driver call':44s} {'in the service':>15s} {'replayed bare':>15s}")
    for label, cpu in sorted(calls.cpu.items(), key=lambda kv: -kv[1]):
        print(f"  {label[:44]:44s} {cpu * 1e6 / n:15.1f} {bare[label] * 1e6 / n:15.1f}")
    print(f"  {'the driver, in all':44s} {served * 1e6 / n:15.1f} {replayed * 1e6 / n:15.1f}")
    print(f"  the write transactions' CPU {write['cpu'] * 1e6 / n:.1f} µs a diagnosis, of which the driver's "
          f"{served * 1e6 / n:.1f} and the rest (Python, the detectors' updates, this timing's own calls) "
          f"{(write['cpu'] - served) * 1e6 / n:.1f}")


if __name__ == "__main__":
    main()
