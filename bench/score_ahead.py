"""The step classifier scored ahead in a helper thread (``TRIAGE_SCORE_AHEAD_THREADS``), on and off in one process.

One worker's services in process (as ``bench/request_path.py``'s in-process part: the shipped models, a
temporary SQLite store, :func:`serve.wiring.settle`), one thread of requests; ``--blocks`` pairs of blocks of
``--n`` 10-step diagnoses with the classifier (``bench/service.py``'s bodies, each sent once), the helper
switched off and on in turn (``Diagnoser.ahead_threads`` 0 and ``--threads``; the first of a pair
alternates). Per block: CPU ms a request (``time.process_time``: the helper's thread included) and the
wall-clock p50 of a request. Prints the medians over blocks, and how much CPU the host gave two busy
processes for a second each (a host with no core free cannot overlap anything)::

    .venv/bin/python bench/score_ahead.py --blocks 16 --n 50
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from service import _bodies  # noqa: E402


def _spin(_: int) -> float:
    t, c = time.perf_counter(), time.process_time()
    while time.perf_counter() - t < 1.0:
        pass
    return time.process_time() - c


def free_cores() -> float:
    """CPU seconds two busy processes got in one second, together (2.0: both cores free)."""
    with multiprocessing.get_context("fork").Pool(2) as pool:
        return float(sum(pool.map(_spin, range(2))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=16, help="pairs of blocks (off, on)")
    ap.add_argument("--n", type=int, default=50, help="diagnoses a block")
    ap.add_argument("--threads", type=int, default=4, help="helper threads when on")
    a = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from serve import wiring
    from serve.intake import take
    from serve.settings import Settings
    from serve.wiring import build_diagnoser, build_service

    cores = free_cores()
    with tempfile.TemporaryDirectory(prefix="triage-ahead-") as tmp:
        settings = Settings(data_dir=Path(tmp), database_url=f"sqlite:///{Path(tmp) / 'triage.db'}", auth="off")
        diagnoser, ready = build_diagnoser(settings)
        if not ready.get("classifier"):
            raise SystemExit("no classifier artefact: nothing to score ahead")
        service = build_service(settings, diagnoser)
        wiring.settle()
        bodies = _bodies("diag_clf_10", 50 + 2 * a.blocks * a.n)

        def go(raw: bytes) -> None:
            body, trace = take(raw, max_steps=settings.max_steps)
            service.diagnose("bench", trace, body.options).model_dump_json()

        try:
            for raw in bodies[:50]:
                go(raw)
            cpu: dict[bool, list[float]] = {False: [], True: []}
            p50: dict[bool, list[float]] = {False: [], True: []}
            at = 50
            load0 = os.getloadavg()[0]
            for k in range(a.blocks):
                for on in (False, True) if k % 2 == 0 else (True, False):
                    diagnoser.ahead_threads = a.threads if on else 0
                    lat = []
                    c0 = time.process_time()
                    for raw in bodies[at:at + a.n]:
                        t0 = time.perf_counter()
                        go(raw)
                        lat.append(time.perf_counter() - t0)
                    cpu[on].append((time.process_time() - c0) * 1000 / a.n)
                    p50[on].append(statistics.median(lat) * 1000)
                    at += a.n
        finally:
            service.close()
            wiring.unsettle()
    print(f"load average {load0:.2f} → {os.getloadavg()[0]:.2f}; two busy processes got {cores:.2f} CPU s in 1 s; "
          f"medians of {a.blocks} blocks of {a.n}")
    for on in (False, True):
        print(f"  score ahead {'on ' if on else 'off'}: CPU ms a diagnosis {statistics.median(cpu[on]):.3f}, "
              f"wall p50 ms {statistics.median(p50[on]):.3f}")


if __name__ == "__main__":
    main()
