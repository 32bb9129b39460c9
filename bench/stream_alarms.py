"""Benchmark: are stream alarms about the fleet? Real agent runs through the service's streams.

Issue 11, item 6: after τ-bench airline runs had filled the default tenant's auto-fed streams,
57 of 58 later multi-agent runs came back unhealthy with only ``degradation``. This replays that:
the τ-bench runs (``tau_bench_airline``), then the Who&When algorithm-generated runs
(``who_and_when_algorithm_generated``), all through ``TriageService.diagnose`` (rules only, the
default auto-feed, a fresh SQLite store, task type ``default`` for all of them), and counts what
the later runs get from the streams: ``degradation`` as a failure (their own metric beyond the
alarm's bound) or as a signal. It also posts 170 values to a stream nobody measures, without a
task type, and diagnoses traces of four task types.

Run:  .venv/bin/python bench/stream_alarms.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from model.diagnosis import Diagnoser  # noqa: E402
from model.importers import load_trace  # noqa: E402
from model.options import DiagnoseOptions  # noqa: E402
from serve.api_models import ObservationsRequest  # noqa: E402
from serve.app import build_service  # noqa: E402
from serve.settings import Settings  # noqa: E402


def tau_runs(folder: Path) -> list[dict[str, Any]]:
    runs = json.loads((folder / "tau_bench_airline" / "gpt-4o-airline.json").read_text(encoding="utf-8"))
    return [{"id": f"tau-{r['task_id']}-{r['trial']}", "messages": r["traj"]} for r in runs]


def who_when_runs(folder: Path) -> list[dict[str, Any]]:
    out = []
    files = sorted((folder / "who_and_when_algorithm_generated").glob("*.json"), key=lambda p: int(p.stem))
    for path in files:
        run = json.loads(path.read_text(encoding="utf-8"))
        out.append({"id": f"ww-{path.stem}", "messages": run["history"]})
    return out


def kinds(resp: Any) -> tuple[set[str], set[str]]:
    return {f.kind.value for f in resp.failures}, {f.kind.value for f in resp.signals}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--data", type=Path, default=Path(__file__).resolve().parent.parent.parent / "shared" / "data"
    )
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp))
        svc = build_service(settings, Diagnoser())
        print(f"auto-fed streams: {', '.join(svc.stream_autofeed)}; detector {svc.stream_detector}")
        skipped = 0
        for run in tau_runs(args.data):
            try:
                trace = load_trace({"messages": run["messages"]})
            except Exception:  # noqa: BLE001  (a run the importer refuses: counted, not fed)
                skipped += 1
                continue
            trace.id = run["id"]
            svc.diagnose("default", trace, DiagnoseOptions())
        alarms = svc.store.open_alarms("default", "default")
        print(
            f"τ-bench: 200 runs fed ({skipped} refused by the importer); open alarms after them: "
            + (
                ", ".join(f"{a['name']} {a['alarm']['direction']} at {a['alarm']['index']}" for a in alarms)
                or "none"
            )
        )
        later = who_when_runs(args.data)
        unhealthy = only_deg = deg_failure = deg_signal = 0
        for run in later:
            trace = load_trace({"messages": run["messages"]})
            trace.id = run["id"]
            resp = svc.diagnose("default", trace, DiagnoseOptions())
            failed, signalled = kinds(resp)
            unhealthy += not resp.healthy
            only_deg += failed == {"degradation"}
            deg_failure += "degradation" in failed
            deg_signal += "degradation" in signalled
        n = len(later)
        alarms = svc.store.open_alarms("default", "default")
        print(
            "open alarms after them: "
            + (
                ", ".join(f"{a['name']} {a['alarm']['direction']} at {a['alarm']['index']}" for a in alarms)
                or "none"
            )
        )
        print(
            f"Who&When afterwards: {n} runs; unhealthy {unhealthy}; unhealthy with only degradation {only_deg}; "
            f"degradation a failure (own value beyond the bound) {deg_failure}; a signal {deg_signal}"
        )
        # 170 values to a stream nobody measures, posted without a task type.
        values = [0.0] * 150 + [5.0] * 20
        r = svc.observe("default", "anything", ObservationsRequest(values=values))
        print(
            f"POST 170 values to 'anything' (no task type): alarms {[a.index for a in r.alarms]}, open {r.alarm_open}"
        )
        for task in (None, "chat", "code", "multi_agent"):
            trace = load_trace(later[0]["messages"] and {"messages": later[0]["messages"]})
            trace.id, trace.task_type = f"after-post-{task}", task
            resp = svc.diagnose("default", trace, DiagnoseOptions())
            failed, signalled = kinds(resp)
            print(
                f"  task type {task!s:12} healthy={resp.healthy} failures={sorted(failed)} signals={sorted(signalled)}"
            )
        svc.store.dispose()
    print(f"({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
