"""OTLP receiver benchmark: a real `triage serve` on 127.0.0.1 (rules + the shipped classifier when
present) receiving one span per export, as the SDK's SimpleSpanProcessor sends them, for one
live session; latency per export by how many spans the session already holds.

Each export is a protobuf ``ExportTraceServiceRequest`` with one GenAI span (chat spans repeat
the whole conversation in ``gen_ai.input.messages``, as instrumentations do); the receiver
continues the session's import from what it keeps of the earlier spans
(:mod:`model.importers.live`), so an export reads only its own span.

Then the ratio, with the machine's noise kept out of it: exports alternate between the long
session (``--spans`` spans and on) and short ones (10–30 spans held), ``--samples`` each; the
medians and their ratio are printed.

Run (under a minute)::

    .venv/bin/python bench/otlp.py --spans 300
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
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import live  # noqa: E402


def _export(i: int, history: list[dict[str, Any]], conv: str) -> bytes:
    req = ExportTraceServiceRequest()
    span = req.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id = bytes.fromhex("ab" * 16)
    span.span_id = i.to_bytes(8, "big")
    span.start_time_unix_nano = 1_700_000_000_000_000_000 + i * 1_000_000
    span.end_time_unix_nano = span.start_time_unix_nano + 500_000

    def attr(key: str, value: str) -> None:
        kv = span.attributes.add()
        kv.key, kv.value.string_value = key, value

    attr("gen_ai.conversation.id", conv)
    cid = f"c{i // 2}"
    if i % 2 == 0:  # a chat span calling a tool
        call = {"role": "assistant", "parts": [{"type": "tool_call", "id": cid, "name": "search",
                                                "arguments": {"q": f"query {i}"}}]}
        span.name = "chat"
        attr("gen_ai.operation.name", "chat")
        attr("gen_ai.input.messages", json.dumps(history))
        attr("gen_ai.output.messages", json.dumps([call]))
        history.append(call)
    else:  # the tool's execution
        span.name = "execute_tool search"
        attr("gen_ai.operation.name", "execute_tool")
        attr("gen_ai.tool.name", "search")
        attr("gen_ai.tool.call.id", cid)
        attr("gen_ai.tool.call.result", f"result {i}: 3 documents")
        history.append({"role": "tool", "parts": [{"type": "tool_call_response", "id": cid,
                                                   "response": f"result {i}: 3 documents"}]})
    return bytes(req.SerializeToString())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spans", type=int, default=300)
    ap.add_argument("--samples", type=int, default=60, help="alternating exports timed for the ratio")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as data:
        proc, url = live.start(Path(data), {"TRIAGE_AUTH": "off", **live.UNLIMITED}, ready="/readyz")
        try:
            def user() -> list[dict[str, Any]]:
                return [{"role": "user", "parts": [{"type": "text", "content": "Research."}]}]

            histories: dict[str, list[dict[str, Any]]] = {}
            counts: dict[str, int] = {}
            with httpx.Client(base_url=url, headers={"Content-Type": "application/x-protobuf"}) as c:

                def send(conv: str) -> float:
                    i = counts.get(conv, 0)
                    body = _export(i, histories.setdefault(conv, user()), conv)
                    t0 = time.perf_counter()
                    r = c.post("/otlp/v1/traces", content=body)
                    took = (time.perf_counter() - t0) * 1000
                    assert r.status_code == 200, r.text
                    counts[conv] = i + 1
                    return took

                for _ in range(20):  # warm-up, untimed
                    send("bench-warm")
                lat = [send("bench-conv") for _ in range(args.spans)]
                view = c.get("/v1/sessions/bench-conv").json()
                short_lat: list[float] = []
                long_lat: list[float] = []
                for k in range(args.samples):
                    short = f"bench-short-{k // 20}"
                    while counts.get(short, 0) < 10:  # short sessions: 10-29 spans held
                        send(short)
                    short_lat.append(send(short))
                    long_lat.append(send("bench-conv"))
            assert view["next_source_index"] == args.spans, view["next_source_index"]
            print(f"OTLP receiver, one span per export, one session of {args.spans} spans "
                  f"({view['steps']} steps); model {view['model_version']}")
            print("spans already held   median ms   p90 ms")
            for lo in (0, 50, 100, 200, 290):
                window = sorted(lat[lo: lo + 10])
                if len(window) < 10:
                    continue
                print(f"{lo:>5}–{lo + 9:<5}          {statistics.median(window):8.1f}   {window[8]:7.1f}")
            s_med, l_med = statistics.median(short_lat), statistics.median(long_lat)
            print(f"alternating, {args.samples} exports each: short sessions (10–29 spans held) {s_med:.1f} ms, "
                  f"the long one ({args.spans}–{args.spans + args.samples - 1}) {l_med:.1f} ms; "
                  f"ratio long/short (medians): {l_med / s_med:.2f}")
        finally:
            live.stop(proc)


if __name__ == "__main__":
    main()
