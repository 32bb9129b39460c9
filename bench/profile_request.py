"""Where a request's CPU goes, by stage: a sampling profile of a real server under load.

A real ``triage serve`` (one worker, SQLite in a temporary folder, API keys on, rate limits off: the
server of ``bench/service.py``) takes one scenario of ``bench/service.py``'s load generator from
another process while ``py-spy record`` samples its stacks (native sampling from outside: no GIL
bias, and threads waiting are left out, so the shares are of CPU work). Each sample is filed under
the first stage (innermost frame outwards) whose pattern matches. The figure per request is
``samples ÷ rate ÷ requests``: CPU milliseconds a request costs in that stage. Keep this script for
regressions: a stage that grows shows here first.

Run (about 15 s per scenario)::

    .venv/bin/python bench/profile_request.py --scenario diag_clf_10 --duration 10
    .venv/bin/python bench/profile_request.py --scenario session_step_clf --top 15

``--top N`` also prints the N innermost functions of ours (model/, serve/) that took most samples,
and the N innermost frames of all.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

#: Our code's frames (py-spy names files relative to the working directory).
OURS = ("model/", "serve/", str(ROOT / "model"), str(ROOT / "serve"))
#: Innermost frames of a thread that waits (py-spy's idle detection misses uvloop's and a pool's waits).
IDLE = ("Runner.run (asyncio/runners.py", "Condition.wait (threading.py", "Event.wait (threading.py")
#: (stage, substrings of a frame's file path or ``file:function``), checked innermost frame first.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("onnxruntime", ("onnxruntime/",)),
    ("tokenizer", ("tokenizers/",)),
    ("store (SQL)", ("sqlalchemy/", "sqlite3/", "psycopg", "serve/store/")),
    ("redaction", ("serve/redaction/",)),
    ("classifier (python)", ("model/scoring/classifier/", "model/detectors/classifier")),
    ("run scorer", ("model/scoring/runscore/",)),
    ("rules", ("model/detectors/rules/", "model/detectors/base")),
    ("metric streams", ("model/streams/", "serve/services/streams")),
    ("metrics extraction", ("model/core/metrics",)),
    ("repair engine", ("model/diagnosis/repair_engine", "model/diagnosis/ladders")),
    ("diagnoser", ("model/diagnosis/",)),
    ("import / validation", ("model/importers/", "serve/validation", "serve/body", "serve/intake", "pydantic/")),
    ("json", ("json/", "orjson")),
    ("service glue", ("serve/",)),
    ("model (other)", ("model/",)),
    ("http (uvicorn / starlette / fastapi)", ("uvicorn/", "starlette/", "fastapi/", "anyio/", "httptools", "h11/")),
]


def classify(stack: list[str]) -> tuple[str, str | None]:
    """(stage, innermost function of ours) of one stack (frames ``function (file:line)``, outermost first)."""
    stage = None
    ours = None
    for frame in reversed(stack):
        where = frame.rsplit(" (", 1)[-1]
        if ours is None and where.startswith(OURS) and "site-packages" not in where:
            fn = frame.rsplit(" (", 1)[0]
            ours = f"{where.split(str(ROOT) + '/', 1)[-1].rsplit(':', 1)[0]}:{fn}"
        if stage is None:
            for name, pats in STAGES:
                if any(p in where for p in pats):
                    stage = name
                    break
        if stage is not None and ours is not None:
            break
    return stage or "other", ours


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="diag_clf_10", help="a bench/service.py scenario")
    ap.add_argument("--conns", type=int, default=8)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=400, help="samples a second")
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        raise SystemExit("py-spy is not installed (it is in the dev extra: make install)")

    from service import Server, run_load

    with tempfile.TemporaryDirectory(prefix="triage-profile-") as tmp:
        server = Server(1, Path(tmp))
        try:
            run_load(server.url, server.key, a.scenario, a.conns, 2.0)  # warm-up
            out = Path(tmp) / "stacks.txt"
            rec = subprocess.Popen(
                [spy, "record", "--pid", str(server.proc.pid), "--rate", str(a.rate), "--duration",
                 str(int(a.duration)), "--format", "raw", "--nonblocking", "--output", str(out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            )
            r = run_load(server.url, server.key, a.scenario, a.conns, int(a.duration))
            _, err = rec.communicate(timeout=60)
            if rec.returncode != 0 or not out.exists():
                raise SystemExit(f"py-spy failed: {err.strip()[-500:]}")
            lines = out.read_text().splitlines()
        finally:
            server.stop()

    stages: collections.Counter[str] = collections.Counter()
    funcs: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    for line in lines:
        stack_text, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        stack = stack_text.split(";")
        if stack[-1].split("site-packages/")[-1].startswith(IDLE):
            continue
        stage, ours = classify(stack)
        stages[stage] += int(count)
        leaves[stack[-1].split("site-packages/")[-1]] += int(count)
        if ours:
            funcs[ours] += int(count)
    total = sum(stages.values()) or 1
    to_ms = 1000 / a.rate / max(1, r["requests"])
    print(f"{a.scenario}, {a.conns} connection(s), {int(a.duration)} s: {r['requests']} requests, {r['rps']:.1f} req/s, "
          f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, errors {r['errors']}; "
          f"{total} CPU samples at {a.rate}/s = {total * to_ms:.2f} CPU ms a request")
    print(f"{'stage':40s} {'share':>7s} {'CPU ms/request':>15s}")
    for stage, n in stages.most_common():
        print(f"{stage:40s} {n / total:7.1%} {n * to_ms:15.3f}")
    if a.top:
        print(f"\ninnermost functions of ours (top {a.top}):")
        for fn, n in funcs.most_common(a.top):
            print(f"  {n / total:6.1%} {n * to_ms:7.3f} ms  {fn}")
        print(f"\ninnermost frames (top {a.top}):")
        for fn, n in leaves.most_common(a.top):
            print(f"  {n / total:6.1%} {n * to_ms:7.3f} ms  {fn}")


if __name__ == "__main__":
    main()
