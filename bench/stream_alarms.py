"""Benchmark: are stream alarms about the fleet? Real agent runs through the service's streams.

Issue 11, item 6: after τ-bench airline runs had filled the default tenant's auto-fed streams,
57 of 58 later multi-agent runs came back unhealthy with only ``degradation``. This replays that
with the vendored sets (``model.data.realdata``): the 200 τ-bench airline runs, then the 126 Who&When
algorithm-generated runs, all through ``TriageService.diagnose`` with the diagnoser as shipped
(``serve.wiring.build_diagnoser``: rules, classifier and run scorer when their artefacts are here),
the default auto-feed, a fresh SQLite store, and no task type (as a user who sends none: every
run is ``default``). It counts what the later runs get from the streams — ``degradation`` as a
failure (their own metric beyond the alarm's bound) or as a signal — and how many are unhealthy
with nothing but ``degradation``. Then it posts 170 values to a stream nobody measures, without a
task type, and diagnoses runs of four task types.

Run:  .venv/bin/python bench/stream_alarms.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from model.core.options import DiagnoseOptions  # noqa: E402
from model.core.schema import Trace  # noqa: E402
from model.data.realdata import load_source  # noqa: E402
from serve.schemas import ObservationsRequest  # noqa: E402
from serve.settings import Settings  # noqa: E402
from serve.wiring import build_diagnoser, build_service  # noqa: E402


def unlabelled(source: str) -> list[Trace]:
    """The set's traces as a user would send them: no labels, no task type."""
    out = []
    for run in load_source(source):
        trace = run.trace.model_copy(deep=True)
        trace.labels = None
        trace.task_type = None
        out.append(trace)
    return out


def kinds(resp: Any) -> tuple[set[str], set[str]]:
    return {f.kind.value for f in resp.failures}, {f.kind.value for f in resp.signals}


def main(argv: list[str] | None = None) -> int:
    del argv
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp))
        diagnoser, ready = build_diagnoser(settings)
        svc = build_service(settings, diagnoser)
        print(f"diagnoser: {ready}; model {diagnoser.model_version}")
        print(f"auto-fed streams: {', '.join(svc.streams.autofeed)}; detector {svc.streams.detector}")

        def open_alarms() -> str:
            # runs naming no agent: each set's agent is inferred (issue 31), its streams its own
            found = svc.stores.streams.all_open_alarms("default")
            return ", ".join(f"{a['agent']}/{a['name']} {a['alarm']['direction']} at {a['alarm']['index']}" for a in found)

        tau = unlabelled("tau_airline")
        for trace in tau:
            svc.diagnose("default", trace, DiagnoseOptions())
        print(f"τ-bench airline: {len(tau)} runs fed; open alarms after them: {open_alarms() or 'none'}")
        later = unlabelled("whowhen")
        unhealthy = only_deg = deg_failure = deg_signal = 0
        for trace in later:
            resp = svc.diagnose("default", trace, DiagnoseOptions())
            failed, signalled = kinds(resp)
            unhealthy += not resp.healthy
            only_deg += failed == {"degradation"}
            deg_failure += "degradation" in failed
            deg_signal += "degradation" in signalled
        print(f"Who&When afterwards: {len(later)} runs; open alarms after them: {open_alarms() or 'none'}")
        print(
            f"  unhealthy {unhealthy}; unhealthy with only degradation {only_deg}; degradation a failure "
            f"(own value beyond the bound) {deg_failure}; a signal {deg_signal}"
        )
        values = [0.0] * 150 + [5.0] * 20
        r = svc.observe("default", "anything", ObservationsRequest(values=values))
        print(f"POST 170 values to 'anything' (no task type): alarms {[a.index for a in r.alarms]}, open {r.alarm_open}")
        for task in (None, "chat", "code", "multi_agent"):
            trace = later[0].model_copy(deep=True)
            trace.id, trace.task_type = f"after-post-{task}", task
            resp = svc.diagnose("default", trace, DiagnoseOptions())
            failed, signalled = kinds(resp)
            deg = "failure" if "degradation" in failed else "signal" if "degradation" in signalled else "none"
            print(f"  task type {task!s:12} degradation: {deg}; healthy={resp.healthy} failures={sorted(failed)}")
        svc.stores.db.dispose()
    print(f"({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
