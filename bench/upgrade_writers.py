"""What an upgrade of the schema costs the writers still running: a revision's time on a big PostgreSQL
store, and the latency of inserts into its table made meanwhile by another connection.

The database is taken to ``--from`` first (``serve.store.migrate.downgrade``, or an upgrade when it is
older), then upgraded to ``--to`` while a writer thread inserts one run into ``traces`` every
``--every`` seconds (a row as a diagnosis of a whole trace writes it, in its own transaction, under a
5 s ``lock_timeout``) and keeps each insert's latency. Printed: the upgrade's wall time; the writer's
inserts, p50, p99 and longest, and how many waited past 100 ms or failed. The inserted rows are deleted
after. It imports the code of the tree ``PYTHONPATH`` names first, so the same store can be upgraded
by the revisions of two commits in turn::

    nice .venv/bin/python bench/seed.py --database-url postgresql://…/big --runs 1000000 --in-window 210000 --agents 24
    .venv/bin/python bench/upgrade_writers.py --database-url postgresql://…/big --from 0020 --to 0021
    PYTHONPATH=/tmp/base .venv/bin/python bench/upgrade_writers.py --database-url postgresql://…/big --from 0020 --to 0021

PostgreSQL only (on SQLite an upgrade holds the one writer's lock, by design).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if not os.environ.get("PYTHONPATH") and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

_ROW = ("INSERT INTO traces (tenant_id, id, created_at, updated_at, n_steps, healthy, model_version, shadow, "
        "trace, response, steps_in_rows) VALUES ('upgrade-writers', :i, now(), now(), 3, true, '', false, "
        "'{}', '{}', false)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--database-url", required=True, help="postgresql://… (a store at or past --from)")
    ap.add_argument("--from", dest="start", required=True, help="the revision to upgrade from")
    ap.add_argument("--to", default="head", help="the revision to upgrade to")
    ap.add_argument("--every", type=float, default=0.01, help="seconds between the writer's inserts")
    a = ap.parse_args()
    from sqlalchemy import text

    import serve.store.migrate as migrate
    from serve.store.engine import make_engine

    engine = make_engine(a.database_url)
    if engine.dialect.name != "postgresql":
        raise SystemExit("--database-url: PostgreSQL only")
    now = migrate.current_revision(engine)
    t0 = time.perf_counter()
    if now is not None and now > a.start:
        migrate.downgrade(engine, a.start)
    elif now != a.start:
        migrate.upgrade(engine, a.start)
    with engine.connect() as conn:
        runs = conn.execute(text("SELECT count(*) FROM traces")).scalar()
    print(f"at {a.start} ({time.perf_counter() - t0:.1f} s from {now}); traces: {runs:,} rows; "
          f"revisions: {migrate.MIGRATIONS_DIR}", flush=True)

    waits: list[float] = []
    failed: list[str] = []
    stop = threading.Event()

    def write() -> None:
        n = 0
        with engine.connect() as conn:
            conn.execute(text("SET lock_timeout = '5s'"))
            conn.commit()
            while not stop.is_set():
                t = time.perf_counter()
                try:
                    conn.execute(text(_ROW), {"i": f"w-{os.getpid()}-{n}"})
                    conn.commit()
                    waits.append(time.perf_counter() - t)
                except Exception as exc:  # noqa: BLE001  (a lock timeout is the figure)
                    conn.rollback()
                    failed.append(type(exc).__name__)
                n += 1
                stop.wait(a.every)

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(1.0)  # the writer's own pace first
    t0 = time.perf_counter()
    migrate.upgrade(engine, a.to)
    took = time.perf_counter() - t0
    time.sleep(1.0)
    stop.set()
    writer.join()
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM traces WHERE tenant_id = 'upgrade-writers'"))
    engine.dispose()
    ms = sorted(w * 1000 for w in waits)
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))] if ms else float("nan")
    print(f"upgrade {a.start} → {a.to}: {took:.1f} s; the writer's inserts: {len(ms)} (p50 "
          f"{statistics.median(ms) if ms else float('nan'):.1f} ms, p99 {p99:.1f} ms, longest {max(ms, default=0):.0f} ms, "
          f"{sum(m > 100 for m in ms)} over 100 ms), {len(failed)} failed {sorted(set(failed))}")


if __name__ == "__main__":
    main()
