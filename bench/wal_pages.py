"""The pages a diagnosis's commit writes on SQLite, by table and index.

Every page a write transaction changed is one WAL frame at its commit (a 24-byte header and the page:
two ``pwrite``s, ~4-5 µs of CPU a frame on this host, checkpoints aside), so each index a diagnosis
inserts into costs it a page or more. The services of one worker (:func:`serve.wiring.build_service`,
as ``bench/request_path.py`` builds them) on a temporary SQLite file take ``--warmup`` diagnoses of a
scenario of ``bench/service.py``; then, with automatic checkpoints off and the WAL emptied, ``--n``
more. Each frame of the WAL is filed under the b-tree its page belongs to (SQLite's ``dbstat``) and
kind (leaf, interior, overflow); the figures are frames a diagnosis.

Run::

    .venv/bin/python bench/wal_pages.py --scenario diag_rules_10
"""

from __future__ import annotations

import argparse
import collections
import os
import sqlite3
import struct
import sys
import tempfile
from pathlib import Path

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
    a = ap.parse_args()

    from sqlalchemy import event

    from serve import wiring
    from serve.intake import take
    from serve.settings import Settings
    from serve.wiring import build_diagnoser, build_service

    with tempfile.TemporaryDirectory(prefix="triage-walpages-") as tmp:
        settings = Settings(data_dir=Path(tmp), database_url=f"sqlite:///{tmp}/triage.db", auth="off")
        diagnoser, _ = build_diagnoser(settings)
        service = build_service(settings, diagnoser)
        wiring.settle()
        try:
            runs = [take(b, max_steps=settings.max_steps, format=None, options=None)
                    for b in _bodies(a.scenario, a.warmup + a.n)]
            for body, trace in runs[: a.warmup]:
                service.diagnose("bench", trace, body.options)
            engine = service.stores.db.engine
            service.stores.db.dispose()  # the next connections: no automatic checkpoint

            @event.listens_for(engine, "connect")
            def _no_checkpoint(dbapi_conn: object, _record: object) -> None:
                dbapi_conn.execute("PRAGMA wal_autocheckpoint=0")  # type: ignore[attr-defined]

            with engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            for body, trace in runs[a.warmup :]:
                service.diagnose("bench", trace, body.options)
            wal = Path(f"{tmp}/triage.db-wal").read_bytes()
            with sqlite3.connect(f"{tmp}/triage.db") as con:
                owner = {page: (name, kind) for name, page, kind in con.execute("SELECT name, pageno, pagetype FROM dbstat")}
        finally:
            service.close()
            wiring.unsettle()
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


if __name__ == "__main__":
    main()
