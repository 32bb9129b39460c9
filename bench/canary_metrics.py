"""Scrape cost of the canary share's per-arm figures (``serve.services.canary.snapshot``, read by ``/metrics``).

A store (SQLite in a temporary folder, or ``--database-url``) gets ``--runs`` runs split between
the two arms as the hash splits them at ``--percent``, a failure in ``--failed`` of them (a third
of those recovered), and a run-level label on ``--labelled`` of them (half from a checker, half
from a human over a checker); then the per-arm figures are read ``--repeat`` times and the median
time is printed, with the figures themselves checked against what was written.

Run (a few seconds)::

    .venv/bin/python bench/canary_metrics.py --runs 20000 --labelled 0.2
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import insert

from serve.services.canary import ARMS, assign_arm, snapshot
from serve.store import Store
from serve.store.tables import LabelRow, TraceRow


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20_000)
    ap.add_argument("--percent", type=float, default=20.0)
    ap.add_argument("--failed", type=float, default=0.3, help="share of runs with a failure")
    ap.add_argument("--labelled", type=float, default=0.2, help="share of runs with a run-level label")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--database-url", default=None, help="an empty database (default: SQLite in a temporary folder)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(a.database_url or f"sqlite:///{Path(tmp) / 'triage.db'}")
        store.upgrade()
        t0 = datetime(2026, 12, 1, tzinfo=UTC)
        want = {arm: {"runs": 0, "failed": 0, "recovered": 0, "labelled": 0, "succeeded": 0} for arm in ARMS}
        traces, labels = [], []
        every_failed = round(1 / a.failed) if a.failed > 0 else 0
        every_label = round(1 / a.labelled) if a.labelled > 0 else 0
        for i in range(a.runs):
            sid = f"s{i}"
            arm = assign_arm("bench", sid, a.percent)
            failed = bool(every_failed) and i % every_failed == 0
            recovered = failed and i % (3 * every_failed) == 0
            traces.append({"tenant_id": "bench", "id": f"t{i}", "session_id": sid, "created_at": t0,
                           "updated_at": t0, "healthy": not failed or recovered, "trace": {}, "response": {},
                           "arm": arm, "failed_at": t0 if failed else None})
            w = want[arm]
            w["runs"] += 1
            w["failed"] += failed
            w["recovered"] += recovered
            if every_label and i % every_label == 0:
                ok = i % 4 != 0
                labels.append({"tenant_id": "bench", "trace_id": f"t{i}", "failed": not ok, "author": "agent",
                               "author_type": "checker", "created_at": t0})
                if i % 2 == 0:  # a person disagrees with the checker: the person's verdict counts
                    ok = not ok
                    labels.append({"tenant_id": "bench", "trace_id": f"t{i}", "failed": not ok, "author": "ann",
                                   "author_type": "human", "created_at": t0 + timedelta(seconds=1)})
                w["labelled"] += 1
                w["succeeded"] += ok
        with store.write() as db:
            for k in range(0, len(traces), 5000):
                db.execute(insert(TraceRow), traces[k : k + 5000])
            for k in range(0, len(labels), 5000):
                db.execute(insert(LabelRow), labels[k : k + 5000])
        times = []
        for _ in range(a.repeat):
            s = time.perf_counter()
            got = snapshot(store, "bench")
            times.append(time.perf_counter() - s)
        assert got == want, (got, want)
        store.dispose()
    print(f"canary metrics: {a.runs} runs ({want['repair']['runs']} repair / {want['shadow']['runs']} shadow), "
          f"{len(labels)} label rows on {sum(w['labelled'] for w in want.values())} runs: "
          f"one read of the per-arm figures {statistics.median(times) * 1000:.1f} ms (median of {a.repeat})")


if __name__ == "__main__":
    main()
