"""Per-request cost of agent inference (issue 31): rules-only diagnoses of real tau_airline runs (labels,
task type, metadata and ids stripped), named (``options.agent``) against unnamed (the agent inferred),
medians of runs 251-450 (past an inferred agent's first 200 runs, whose every one rewrites its profile)
and of runs 21-200, two rounds each, alternating. Run: ``python bench/agent_inference_cost.py``."""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from pathlib import Path

from model.core.options import DiagnoseOptions
from model.core.schema import Trace
from model.data.realdata import load_source
from model.data.stranger import stranger as as_stranger
from model.diagnosis.diagnoser import Diagnoser
from serve.settings import Settings
from serve.wiring import build_service


def stranger(trace: Trace) -> Trace:
    """The run as a stranger sends it (:func:`model.data.stranger.stranger`), under an id of its own."""
    return as_stranger(trace, uuid.uuid4().hex)


def main() -> None:
    runs = (load_source("tau_airline") * 3)[:450]
    out: dict[str, list[tuple[float, float]]] = {}
    for mode in ("named", "unnamed", "named", "unnamed"):
        svc = build_service(Settings(data_dir=Path(tempfile.mkdtemp())), Diagnoser())
        ms = []
        for r in runs:
            t = stranger(r.trace)
            t0 = time.perf_counter()
            svc.diagnose("t", t, DiagnoseOptions(agent="bot") if mode == "named" else DiagnoseOptions())
            ms.append((time.perf_counter() - t0) * 1000)
        svc.stores.db.dispose()
        out.setdefault(mode, []).append((statistics.median(ms[20:200]), statistics.median(ms[250:])))
    for mode, rounds in out.items():
        print(f"{mode:>8}: median ms, runs 21-200 / 251-450: " + "; ".join(f"{a:.1f} / {b:.1f}" for a, b in rounds))


if __name__ == "__main__":
    main()
