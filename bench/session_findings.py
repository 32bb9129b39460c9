"""A long session of real runs, in process: the CPU of an append as the session and its findings grow.

``bench/session_growth.py`` times an agent's synthetic messages over HTTP, which find little; here
the steps are those of the vendored real runs (``datasets/real``, every 11th run from the first on,
one after another in one session), which find a lot: by step 1,600 about 300 signals in each answer,
a state of ~170 KB (the classifier's findings, the frozen rule findings, the repair state's failure
records). One step an append (``AppendStepsRequest`` with one native step, as
``POST /v1/sessions/{id}/steps`` takes it), to the services of one worker
(:func:`serve.wiring.build_service`, the shipped models; then :func:`serve.wiring.settle`) on a
temporary SQLite file; ``time.process_time`` around each append and its answer's JSON. Prints the
median CPU ms of the appends in each eighth of the session.

It imports the code of the checkout ``PYTHONPATH`` names first: run it with a base worktree's path to
measure the base the same way, alternating::

    .venv/bin/python bench/session_findings.py --steps 1600
    PYTHONPATH=/tmp/base:/tmp/base/client .venv/bin/python bench/session_findings.py --steps 1600
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _tree in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] or [str(ROOT)]):
    sys.path.insert(0, _tree)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1600, help="the session's length (one step an append)")
    a = ap.parse_args()

    from model.data.realdata import load_all
    from serve import wiring
    from serve.schemas import AppendStepsRequest
    from serve.settings import Settings
    from serve.wiring import build_diagnoser, build_service

    runs = [r for r in load_all() if len(r.trace.steps) >= 4]
    steps: list[Any] = []
    k = 0
    while len(steps) < a.steps:
        steps.extend(runs[k % len(runs)].trace.steps)
        k += 11
    bodies = []
    for st in steps[: a.steps]:
        body = st.model_dump(mode="json", exclude_none=True) | {"source_index": 0}
        bodies.append(json.dumps({"steps": [body]}))
    with tempfile.TemporaryDirectory(prefix="triage-findings-") as tmp:
        settings = Settings(data_dir=Path(tmp), database_url=f"sqlite:///{Path(tmp) / 'triage.db'}", auth="off",
                            max_steps=max(5000, a.steps))
        diagnoser, ready = build_diagnoser(settings)
        service = build_service(settings, diagnoser)
        settle = getattr(wiring, "settle", None)
        if settle is not None:
            settle()
        try:
            cpu = []
            out = ""
            for raw in bodies:
                t0 = time.process_time()
                out = service.append_steps("bench", "long", AppendStepsRequest.model_validate_json(raw)).model_dump_json()
                cpu.append(time.process_time() - t0)
            state = service.sessions.session_store.get_session("bench", "long").state
        finally:
            service.close()
            if settle is not None:
                wiring.unsettle()
    last = json.loads(out)
    print(f"{a.steps} appends, one real step each; classifier {bool(ready.get('classifier'))}; load average "
          f"{os.getloadavg()[0]:.2f}")
    print("steps          median CPU ms an append")
    seg = max(1, a.steps // 8)
    for lo in range(0, a.steps, seg):
        print(f"{lo:5d}–{min(lo + seg, a.steps) - 1:5d}  {statistics.median(cpu[lo:lo + seg]) * 1000:8.2f}")
    print(f"the last answer: {len(last['failures'])} failures, {len(last['signals'])} signals, {len(out)} bytes; the "
          f"state {len(json.dumps(state))} bytes ({len(state['classifier']['findings'])} classifier findings, "
          f"{len(state['rules']['frozen'])} frozen rule findings, {len(state.get('failures', {}))} failure records)")


if __name__ == "__main__":
    main()
