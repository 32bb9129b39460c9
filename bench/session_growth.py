"""Session growth benchmark: does an append cost the same at step 4,000 as at step 10?

A real `triage serve` on 127.0.0.1 (rules + the shipped classifier when present, SQLite). One long
session is filled to ``--long`` steps in batches of 50 messages (untimed); then, alternately, one
message is appended to the long session and one to a short session (a new short session every 40
steps, so they stay around step 10–40) and one to a mid session (steps 200–229, the detectors'
window full), each timed, ``--samples`` times. Taking turns keeps the machine's noise out of the
ratios. Prints the median (and p90) of each and the ratios long/short (the issue's target) and
long/mid (what grows with the session beyond the window).

The messages are an agent's: a user turn, then assistant tool calls and their results, now and
then an assistant text, in rounds of ten (OpenAI chat messages, ``POST /v1/sessions/{id}/steps``).

Run (about two minutes)::

    .venv/bin/python bench/session_growth.py --long 4000 --samples 150
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import live  # noqa: E402

SHORT_LEN = 40
MID = 200  # past the detectors' window (64 steps): what grows with the session, not the window


def _message(i: int) -> dict[str, Any]:
    """The i-th message of a session: rounds of ten, a user turn, four call / result pairs, a text."""
    k = i % 10
    if k == 0:
        text = "Find three hotels in Lisbon under 150 EUR for May 3-5." if i == 0 else f"Now page {i}, please."
        return {"role": "user", "content": text}
    if k == 9:
        return {"role": "assistant", "content": f"Page {i} read; {i % 7} hotels so far."}
    if k % 2 == 1:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "search_hotels", "arguments": json.dumps({"city": "Lisbon", "page": i})}}]}
    return {"role": "tool", "tool_call_id": f"c{i - 1}", "content": json.dumps({"page": i, "hotels": ["A", "B"]})}


def _messages(lo: int, hi: int) -> list[dict[str, Any]]:
    return [_message(i) for i in range(lo, hi)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--long", type=int, default=4000, help="steps of the long session before timing")
    ap.add_argument("--samples", type=int, default=150, help="timed appends to each of the two")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as data:
        proc, url = live.start(Path(data), {"TRIAGE_AUTH": "off", **live.UNLIMITED}, ready="/readyz")
        try:
            with httpx.Client(base_url=url, timeout=60) as c:

                def append(session: str, msgs: list[dict[str, Any]]) -> float:
                    t0 = time.perf_counter()
                    r = c.post(f"/v1/sessions/{session}/steps", json={"messages": msgs})
                    took = (time.perf_counter() - t0) * 1000
                    assert r.status_code == 200, r.text
                    return took

                n = 0
                while n < args.long:
                    hi = min(args.long, n + 50)
                    append("long", _messages(n, hi))
                    n = hi
                for i in range(20):  # warm-up, untimed
                    append("warm", [_message(i)])
                short_lat: list[float] = []
                mid_lat: list[float] = []
                long_lat: list[float] = []
                for k in range(args.samples):
                    j = k % (SHORT_LEN - 10)
                    short, mid = f"short-{k // (SHORT_LEN - 10)}", f"mid-{k // (SHORT_LEN - 10)}"
                    if j == 0:
                        append(short, _messages(0, 10))
                        append(mid, _messages(0, 50))
                        append(mid, _messages(50, MID))
                    short_lat.append(append(short, [_message(10 + j)]))
                    mid_lat.append(append(mid, [_message(MID + j)]))
                    long_lat.append(append("long", [_message(n)]))
                    n += 1
                view = c.get("/v1/sessions/long").json()
            assert view["steps"] == n, (view["steps"], n)
            q = statistics.quantiles
            print(f"Session appends, one message each, in turn; {args.samples} each; model {view['model_version']}")
            print("session                       median ms   p90 ms")
            for name, lat in ((f"short (steps 10–{SHORT_LEN - 1})", short_lat),
                              (f"mid (steps {MID}–{MID + SHORT_LEN - 11})", mid_lat),
                              (f"long (steps {args.long}–{n - 1})", long_lat)):
                print(f"{name:28}  {statistics.median(lat):8.1f}   {q(lat, n=10)[8]:7.1f}")
            s_med, m_med, l_med = (statistics.median(x) for x in (short_lat, mid_lat, long_lat))
            print(f"ratio long/short (medians): {l_med / s_med:.2f}; long/mid: {l_med / m_med:.2f}")
        finally:
            live.stop(proc)


if __name__ == "__main__":
    main()
