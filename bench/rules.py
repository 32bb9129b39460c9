"""Time the rule detectors (and a rules-only diagnosis) on long built traces.

Run: ``.venv/bin/python bench/rules.py [N ...]`` (default 1000 5000). Prints, per trace length,
the median time of each rule, of all rules together, of building the execution graph, and of
``Diagnoser().diagnose`` (rules only; the classifier is opt-in).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from functools import partial

from model.core.graph import ExecutionGraph
from model.core.schema import Trace
from model.data.builder import TOOLS
from model.data.tracebuilder import TraceBuilder
from model.detectors.catalog import default_detector_names, make_detector
from model.diagnosis.diagnoser import Diagnoser

RULES = default_detector_names()


def long_trace(n_steps: int, seed: int = 0) -> Trace:
    """A busy agent run of about ``n_steps`` steps: searches, errors, empties, polling, chatter."""
    b = TraceBuilder(seed)
    b.tools(TOOLS)
    b.system("You are a research agent.")
    b.user("Collect everything about renewable energy, step by step.")
    i = 0
    while len(b.steps) < n_steps - 1:
        i += 1
        r = b.rng.random()
        with b.message():
            b.say(f"Step {i}: searching for item {i} with id ref-{i:05d}.")
            cid = b.call("search", {"query": f"renewable energy item {i}", "limit": 5})
        if r < 0.05:
            b.result(cid, "HTTP 503 Service Unavailable", status="error")
        elif r < 0.08:
            b.result(cid, {"results": []})
        elif r < 0.10:
            b.result(cid, "Traceback (most recent call last):\n  File x\nValueError: bad query")
        else:
            b.result(cid, {"results": [{"title": f"Item {i}", "snippet": f"value {b.rng.randint(1, 10**6)}"}]})
        if i % 100 == 0:
            b.user("Keep going.")
    b.final("Done: collected the items; a few searches failed and were retried.")
    return b.build()


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main(sizes: list[int]) -> None:
    detectors = {name: make_detector(name) for name in RULES}
    detectors["disallowed_tool"] = make_detector("disallowed_tool", allowed_tools=["search"])
    diagnoser = Diagnoser(max_steps=max(sizes) + 10)  # the default set: every rule, no classifier
    for n in sizes:
        trace = long_trace(n)
        repeat = 7 if n <= 2000 else 3
        print(f"\n{len(trace.steps)} steps (median of {repeat})")
        total = 0.0
        for name, det in detectors.items():
            ms = median_ms(partial(det.inspect, trace), repeat)
            total += ms
            print(f"  {name:<22} {ms:8.2f} ms")
        print(f"  {'all rules':<22} {total:8.2f} ms")
        g_ms = median_ms(partial(ExecutionGraph.from_trace, trace), repeat)
        print(f"  {'graph (with data flow)':<22} {g_ms:8.2f} ms")
        d_ms = median_ms(partial(diagnoser.diagnose, trace), repeat)
        print(f"  {'Diagnoser.diagnose':<22} {d_ms:8.2f} ms")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1000, 5000])
