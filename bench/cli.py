"""Wall time of ``triage diagnose --json`` on a 1,000-step trace (rules only), start-up included.

Run: ``.venv/bin/python bench/cli.py [--steps 1000] [--runs 7]``. Prints the median and range of
the whole command (what a user waits for) and, for comparison, the in-process diagnosis alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from model.data.tracebuilder import TraceBuilder
from model.diagnosis.diagnoser import Diagnoser

ROOT = Path(__file__).resolve().parent.parent


def build(steps: int) -> str:
    b = TraceBuilder(seed=1)
    b.user("Research the history of the printing press and summarise it.")
    for i in range(-(-(steps - 2) // 3)):  # at least `steps` steps
        cid = b.call("search", {"query": f"printing press fact {i}"})
        b.result(cid, json.dumps({"results": [{"title": f"Result {i}", "snippet": f"fact number {i}"}]}))
        b.say(f"Noted fact {i}.")
    b.final("Here is the summary.")
    return b.build().model_dump_json()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    text = build(args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "trace.json")
        path.write_text(text)
        n_steps = len(json.loads(text)["steps"])
        walls = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            r = subprocess.run(
                [sys.executable, "-m", "serve.cli.main", "diagnose", str(path), "--json"],
                cwd=ROOT, capture_output=True, check=False,
            )
            walls.append(time.perf_counter() - t0)
            if r.returncode != 0:
                sys.exit(f"triage diagnose failed: {r.stderr.decode()}")
        from model.importers import load_trace, parse_json_text

        trace = load_trace(parse_json_text(text))
        d = Diagnoser(max_steps=10_000)
        inproc = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            d.diagnose(trace)
            inproc.append(time.perf_counter() - t0)
    print(f"triage diagnose --json, {n_steps} steps, rules only, {args.runs} runs")
    print(f"  whole command (start-up included): median {statistics.median(walls) * 1000:.0f} ms "
          f"(min {min(walls) * 1000:.0f}, max {max(walls) * 1000:.0f})")
    print(f"  Diagnoser.diagnose in-process:      median {statistics.median(inproc) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
