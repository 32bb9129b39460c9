"""Abuse benchmark: a real `triage serve` on 127.0.0.1 under hostile and heavy load, default limits.

Phases (each measures a small probe, ``POST /v1/diagnose`` of a 10-step trace by tenant
``victim``, paced at ``--probe-rps`` so that the probe itself stays under the per-key limit, and
``GET /healthz`` beside it):

- ``idle``: the probe alone;
- ``trace_5000``: while 5,000-step traces are diagnosed back to back (1.5 MB bodies);
- ``hostile``: while a 5 MB redaction-hostile body (``'a.' * n + '@'`` in one message: the e-mail
  pattern backtracked on it before redaction was made linear), sent again as soon as it is
  answered; run last (with a backtracking redaction it would keep the helper busy for hours);
- ``abuse``: while tenant ``abuser`` sends ``--abuse-rps`` requests a second (open loop, on 32
  connections) from one key; its 200s and 429s are counted;
- ``abuse_paired`` (issue 35's fair-share protocol): ``--pairs`` (5) pairs of ``--window`` (10) s
  windows, the flood off then on: one key sends ``--abuse-rps`` (500, 25× its limit) open loop on
  ``--abuse-conns`` (64) connections while the victim keeps its pace; per pair the victim's p99 on
  over off (within a pair the machine's own load drifts less than between phases), the load
  average, the flood's rate and 429 share, the victim's queue wait (the server's ``Server-Timing:
  queue``, :mod:`serve.fairshare`) and its slowest requests; then the median and the largest ratio;
- ``refusals``: one key over its limit, closed loop on 8 connections: the server's CPU per 429;
- ``refusal_app``: the app's own cost of a 429 in process (no uvicorn, no sockets), µs;
- ``appends``: ``POST /v1/sessions/{id}/steps`` of one step, at step 10 of fresh sessions and at
  step 4,000 of a long one (grown by 100-step appends), interleaved; p50 of each.

The load generator is this file with ``--load PHASE`` in its own process (raw asyncio sockets,
keep-alive HTTP/1.1); its CPU share and the server's are read from ``getrusage`` / ``/proc``.

``--abuse-request list`` makes the abuser send ``GET /v1/traces`` (its admitted share then costs
little: what the probe feels is the 429s). Done-when (issues 15, 22): probe p99 in ``hostile`` and ``trace_5000`` ≤ 5× idle; ``abuse`` gets 429s and
the probe's p99 ≤ 2× idle; append p50 at 4,000 ≤ 2× at 10.

Run (about 5 minutes)::

    .venv/bin/python bench/abuse.py
    .venv/bin/python bench/abuse.py --phases abuse_paired refusals   # fair share only (2 minutes)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from refusal_cost import refusal_app  # noqa: E402
from service import Server, bench_trace, child_pids, session_step  # noqa: E402

HOSTILE_BYTES = 5 * 1024 * 1024 - 4096


# -- the HTTP client (raw sockets: the generator's own cost stays small) --------------------------
class Conn:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.queue_ms: float | None = None  # the last answer's ``Server-Timing: queue;dur=…`` (ms)
        self.read_ms: float | None = None  # … and ``read;dur=…``: receipt to the body read

    async def open(self) -> Conn:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=1 << 24)
        return self

    async def send(self, method: str, path: str, key: str | None, body: bytes = b"") -> None:
        assert self.writer is not None
        auth = f"Authorization: Bearer {key}\r\n" if key else ""
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n{auth}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        self.writer.write(head + body)
        await self.writer.drain()

    async def receive(self) -> tuple[int, bytes]:
        assert self.reader is not None
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("connection closed")
        length = 0
        self.queue_ms = self.read_ms = None
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            name = name.lower()
            if name == "content-length":
                length = int(value.strip())
            elif name == "server-timing":
                self.queue_ms, self.read_ms = _timing(value, "queue"), _timing(value, "read")
        payload = await self.reader.readexactly(length)
        return int(status_line.split(b" ", 2)[1]), payload

    async def request(self, method: str, path: str, key: str | None, body: bytes = b"") -> tuple[int, float, bytes]:
        t0 = time.perf_counter()
        await self.send(method, path, key, body)
        status, payload = await self.receive()
        return status, time.perf_counter() - t0, payload

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _timing(header: str, metric: str) -> float | None:
    """``dur`` of ``metric`` in a ``Server-Timing`` header value (``queue;dur=0.42, app;dur=9``)."""
    for part in header.split(","):
        name, *params = (x.strip() for x in part.split(";"))
        if name == metric:
            for param in params:
                key, _, value = param.partition("=")
                if key == "dur":
                    return float(value)
    return None


def _small_body(i: int) -> bytes:
    base = bench_trace(10, seed=3)
    base["id"] = f"probe-{os.getpid()}-{i}"
    return json.dumps({"trace": base}).encode()


def _q(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))] * 1000 if s else float("nan")


async def _probe(host: str, port: int, key: str, duration: float, rps: float, *, raw: bool = False) -> dict[str, Any]:
    """The victim's paced small diagnoses and /healthz, for ``duration`` seconds."""
    diag, health = await Conn(host, port).open(), await Conn(host, port).open()
    lat: list[float] = []
    at: list[float] = []  # when each diagnosis was sent, s into the window
    hz: list[float] = []
    queue: list[float] = []  # the server's queue wait of each diagnosis (s), when it says
    read: list[float] = []  # … of which from receipt to the body read
    errors: list[str] = []
    bodies = [_small_body(i) for i in range(50)]
    for i in range(0 if raw else 5):  # warm-up (first requests: arenas, caches), not timed
        await diag.request("POST", "/v1/diagnose", key, bodies[-1 - i])
        await asyncio.sleep(1.0 / rps)
    start = time.perf_counter()
    i = 0
    while (now := time.perf_counter()) < start + duration:
        due = start + i / rps
        if due > now:
            await asyncio.sleep(due - now)
        status, t, payload = await diag.request("POST", "/v1/diagnose", key, bodies[i % len(bodies)])
        lat.append(t)
        at.append(time.perf_counter() - t - start)
        if diag.queue_ms is not None:
            queue.append(diag.queue_ms / 1000)
        if diag.read_ms is not None:
            read.append(diag.read_ms / 1000)
        if status != 200:
            errors.append(f"{status} {payload[:120]!r}")
        status, t, _ = await health.request("GET", "/healthz", None)
        hz.append(t)
        i += 1
    diag.close()
    health.close()
    if raw:
        return {"lat": lat, "at": at, "hz": hz, "queue": queue, "read": read, "errors": errors}
    return {
        "n": len(lat),
        "p50_ms": _q(lat, 0.5),
        "p99_ms": _q(lat, 0.99),
        "max_ms": max(lat) * 1000 if lat else float("nan"),
        "healthz_p99_ms": _q(hz, 0.99),
        "healthz_max_ms": max(hz) * 1000 if hz else float("nan"),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


async def _hostile(host: str, port: int, key: str, stop: asyncio.Event) -> dict[str, Any]:
    """The 5 MB redaction-hostile body, sent again as soon as it is answered, until ``stop``."""
    n = (HOSTILE_BYTES - 200) // 2
    content = "a." * n + "@"
    c = await Conn(host, port).open()
    times: list[float] = []
    statuses: dict[int, int] = {}
    size = 0
    i = 0
    try:
        while not stop.is_set():
            body = json.dumps(
                {"trace": {"id": f"hostile-{os.getpid()}-{i}", "steps": [{"kind": "user_input", "content": content}]}}
            ).encode()
            size = len(body)
            status, t, _ = await c.request("POST", "/v1/diagnose", key, body)
            statuses[status] = statuses.get(status, 0) + 1
            times.append(t)
            i += 1
    except (asyncio.CancelledError, ConnectionError):
        statuses[0] = statuses.get(0, 0) + 1  # still in flight when the phase ended
    c.close()
    return {"body_bytes": size, "answered": len(times), "mean_s": statistics.fmean(times) if times else None, "statuses": statuses}


async def _heavy_traces(host: str, port: int, key: str, stop: asyncio.Event) -> dict[str, Any]:
    base = bench_trace(5000, seed=5)
    c = await Conn(host, port).open()
    done: list[float] = []
    statuses: dict[int, int] = {}
    i = 0
    while not stop.is_set():
        base["id"] = f"big-{os.getpid()}-{i}"
        status, t, _ = await c.request("POST", "/v1/diagnose", key, json.dumps({"trace": base}).encode())
        statuses[status] = statuses.get(status, 0) + 1
        done.append(t)
        i += 1
    c.close()
    return {"requests": len(done), "mean_s": statistics.fmean(done) if done else None, "statuses": statuses}


async def _abuse(
    host: str, port: int, key: str, rps: float, stop: asyncio.Event, on: asyncio.Event | None = None,
    request: str = "diagnose", tally: dict[str, Any] | None = None, connections: int = 32,
) -> dict[str, Any]:
    """Open loop: a request every 1/rps s, spread over ``connections`` (each one in flight at most);
    with ``on``, only while it is set. ``tally`` (read by the caller between windows) receives the
    counts as they come: ``statuses``, ``missed`` slots and the admitted requests' ``queue`` waits."""
    conns = [await Conn(host, port).open() for _ in range(connections)]
    free: asyncio.Queue[Conn] = asyncio.Queue()
    for c in conns:
        free.put_nowait(c)
    tally = tally if tally is not None else {}
    statuses: dict[int, int] = tally.setdefault("statuses", {})
    queue: list[float] = tally.setdefault("queue", [])
    tally["missed"] = 0
    bodies = [_small_body(10_000 + i) for i in range(50)]
    tasks: set[asyncio.Task[None]] = set()

    async def one(c: Conn, body: bytes) -> None:
        try:
            if c.reader is None or c.reader.at_eof():  # closed by the server while idle (keep-alive timeout)
                c.close()
                await c.open()
            if request == "list":  # admitted requests cost a store read: what is measured is the 429s
                status, _, _ = await c.request("GET", "/v1/traces?limit=1", key)
            else:
                status, _, _ = await c.request("POST", "/v1/diagnose", key, body)
            statuses[status] = statuses.get(status, 0) + 1
            if status != 429 and c.queue_ms is not None:
                queue.append(c.queue_ms / 1000)
        except (ConnectionError, asyncio.IncompleteReadError):
            statuses[0] = statuses.get(0, 0) + 1  # closed under it: counted, reopened on the next use
            c.close()
            c.reader = None
        finally:
            free.put_nowait(c)

    start = time.perf_counter()
    i = 0
    while not stop.is_set():
        if on is not None and not on.is_set():
            await asyncio.sleep(0.01)
            start, i = time.perf_counter(), 0
            continue
        due = start + i / rps
        now = time.perf_counter()
        if due > now:
            await asyncio.sleep(due - now)
        i += 1
        if free.empty():
            tally["missed"] += 1  # every connection busy: the server is behind; the slot is skipped
            continue
        t = asyncio.create_task(one(free.get_nowait(), bodies[i % len(bodies)]))
        tasks.add(t)
        t.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks, timeout=30)
    for c in conns:
        c.close()
    sent = sum(statuses.values())
    return {
        "sent": sent,
        "statuses": statuses,
        "missed_slots": tally["missed"],
    }


async def _refusals(host: str, port: int, key: str, duration: float) -> dict[str, Any]:
    """Closed loop from one key on 8 connections for ``duration`` s at ``GET /v1/traces?limit=1``:
    past the key's burst nearly every answer is a 429 (20 a second are admitted, a store read
    each), so the server's CPU over the answers is about what a refusal costs."""
    conns = [await Conn(host, port).open() for _ in range(8)]
    statuses: dict[int, int] = {}
    deadline = time.perf_counter() + duration

    async def loop(c: Conn) -> None:
        while time.perf_counter() < deadline:
            status, _, _ = await c.request("GET", "/v1/traces?limit=1", key)
            statuses[status] = statuses.get(status, 0) + 1

    t0 = time.perf_counter()
    await asyncio.gather(*(loop(c) for c in conns))
    wall = time.perf_counter() - t0
    for c in conns:
        c.close()
    return {"statuses": statuses, "requests": sum(statuses.values()), "wall_s": wall}


async def _appends(host: str, port: int, key: str, rounds: int, rps: float) -> dict[str, Any]:
    """One-step appends at step 10 (fresh sessions) and at step 4,000 (one long session), paced."""
    c = await Conn(host, port).open()
    pid = os.getpid()
    long_id = f"/v1/sessions/long-{pid}/steps"

    def batch(start: int, n: int) -> bytes:
        msgs = [json.loads(session_step(i))["messages"][0] for i in range(start, start + n)]
        return json.dumps({"messages": msgs}).encode()

    async def paced(method: str, path: str, body: bytes) -> tuple[int, float, bytes]:
        r = await c.request(method, path, key, body)
        await asyncio.sleep(max(0.0, 1.0 / rps - r[1]))
        return r

    for start in range(0, 3999, 100):  # grow the long session to 3,999 steps
        status, _, payload = await paced("POST", long_id, batch(start, min(100, 3999 - start)))
        if status != 200:
            raise SystemExit(f"growing the long session: {status} {payload[:200]!r}")
    at10: list[float] = []
    at4000: list[float] = []
    n_long = 3999
    for r in range(rounds):
        sid = f"/v1/sessions/short-{pid}-{r}/steps"
        await paced("POST", sid, batch(0, 9))
        status, t, payload = await paced("POST", sid, batch(9, 1))
        assert status == 200, payload[:200]
        at10.append(t)
        status, t, payload = await paced("POST", long_id, batch(n_long, 1))
        assert status == 200, payload[:200]
        n_long += 1
        at4000.append(t)
    c.close()
    return {
        "rounds": rounds,
        "p50_at_10_ms": statistics.median(at10) * 1000,
        "p50_at_4000_ms": statistics.median(at4000) * 1000,
        "ratio": statistics.median(at4000) / statistics.median(at10),
        "steps_long": n_long,
    }


async def _abuse_paired(host: str, port: int, keys: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    """Issue 35's fair-share protocol: ``--pairs`` pairs of ``--window``-second windows, the flood
    off then on (a fixed ``--abuse-rps`` from one key, above its limit) while the victim sends at
    its usual pace; each pair's ratio is the victim's p99 with the flood over its p99 without (the
    machine's own load drifts less within a pair than between phases). Also per window: the load
    average, the flood's rate and 429 share, the server's queue wait of the victim's requests and
    of the flood's admitted ones (``Server-Timing: queue``)."""
    stop, on = asyncio.Event(), asyncio.Event()
    tally: dict[str, Any] = {}
    load = asyncio.create_task(
        _abuse(host, port, keys["abuser"], args.abuse_rps, stop, on, args.abuse_request, tally, args.abuse_conns)
    )
    await _probe(host, port, keys["victim"], 1.0, args.probe_rps)  # warm-up (its own 5 requests too)
    pairs: list[dict[str, Any]] = []
    for _ in range(args.pairs):
        pair: dict[str, Any] = {"loadavg": os.getloadavg()[0]}
        for abusing in (False, True):
            before = (dict(tally.get("statuses", {})), len(tally.get("queue", [])), tally.get("missed", 0))
            if abusing:
                on.set()
                await asyncio.sleep(0.3)  # the flood is on before the window's probe
            t0 = time.perf_counter()
            r = await _probe(host, port, keys["victim"], args.window, args.probe_rps, raw=True)
            wall = time.perf_counter() - t0
            if abusing:
                on.clear()
                await asyncio.sleep(0.5)  # the flood's requests in flight drain before the next window
            sent = {k: v - before[0].get(k, 0) for k, v in tally.get("statuses", {}).items()}
            n_sent = sum(sent.values())
            pair["on" if abusing else "off"] = {
                "n": len(r["lat"]), "p50_ms": _q(r["lat"], 0.5), "p99_ms": _q(r["lat"], 0.99),
                "max_ms": max(r["lat"]) * 1000, "healthz_p99_ms": _q(r["hz"], 0.99), "errors": len(r["errors"]),
                "queue_p50_ms": _q(r["queue"], 0.5), "queue_p99_ms": _q(r["queue"], 0.99),
                "queue_max_ms": max(r["queue"]) * 1000 if r["queue"] else float("nan"),
                "read_p50_ms": _q(r["read"], 0.5), "read_p99_ms": _q(r["read"], 0.99),
                "slowest": [(round(t * 1000, 1), round(a, 2)) for t, a in sorted(zip(r["lat"], r["at"], strict=True))[-3:]],
                "flood_rps": n_sent / (wall + 0.3) if abusing else 0.0,
                "flood_missed": tally.get("missed", 0) - before[2],
                "flood_statuses": sent,
                "flood_429_share": sent.get(429, 0) / n_sent if n_sent else float("nan"),
                "flood_queue_p99_ms": _q(tally.get("queue", [])[before[1]:], 0.99),
            }
        pair["ratio"] = pair["on"]["p99_ms"] / pair["off"]["p99_ms"]
        pairs.append(pair)
    stop.set()
    abuse = await load
    ratios = [p["ratio"] for p in pairs]
    return {"pairs": pairs, "median_ratio": statistics.median(ratios), "max_ratio": max(ratios), "load": abuse}


async def _phase(args: argparse.Namespace) -> dict[str, Any]:
    host, port = args.load.removeprefix("http://").split(":")
    p = int(port)
    keys = json.loads(args.keys)
    if args.phase == "appends":
        return {"appends": await _appends(host, p, keys["appender"], args.rounds, args.probe_rps)}
    if args.phase == "abuse_paired":
        return {"paired": await _abuse_paired(host, p, keys, args)}
    if args.phase == "refusals":
        return {"refusals": await _refusals(host, p, keys["abuser"], min(args.duration, 5.0))}
    stop = asyncio.Event()
    background: asyncio.Task[dict[str, Any]] | None = None
    if args.phase == "hostile":
        background = asyncio.create_task(_hostile(host, p, keys["heavy"], stop))
    elif args.phase == "trace_5000":
        background = asyncio.create_task(_heavy_traces(host, p, keys["heavy"], stop))
    elif args.phase == "abuse":
        background = asyncio.create_task(_abuse(host, p, keys["abuser"], args.abuse_rps, stop, request=args.abuse_request))
    if background is not None:
        await asyncio.sleep(1.0)  # the load is on before the probe starts
    probe = await _probe(host, p, keys["victim"], args.duration, args.probe_rps)
    stop.set()
    out: dict[str, Any] = {"probe": probe}
    if background is not None:
        try:
            out["load"] = await asyncio.wait_for(background, timeout=120)
        except (asyncio.CancelledError, TimeoutError):
            out["load"] = {"status": "not answered during the phase"}
    return out


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / ticks  # + children


def _server_cpu(pid: int) -> float:
    total = _cpu_s(pid)
    for child in child_pids(pid):
        try:
            total += _cpu_s(child)
            for grandchild in child_pids(child):
                total += _cpu_s(grandchild)
        except OSError:
            pass
    return total


def run_phase(url: str, keys: dict[str, str], phase: str, args: argparse.Namespace, server_pid: int) -> dict[str, Any]:
    cmd = [
        sys.executable, __file__, "--load", url, "--keys", json.dumps(keys), "--phase", phase,
        "--duration", str(args.duration), "--probe-rps", str(args.probe_rps),
        "--abuse-rps", str(args.abuse_rps), "--abuse-request", args.abuse_request, "--rounds", str(args.rounds),
        "--window", str(args.window), "--pairs", str(args.pairs), "--abuse-conns", str(args.abuse_conns),
    ]
    cpu0, t0 = _server_cpu(server_pid), time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"load generator failed in {phase}:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result["server_cpu_s"] = _server_cpu(server_pid) - cpu0
    result["server_cpu_share"] = result["server_cpu_s"] / wall / (os.cpu_count() or 1)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=15.0, help="seconds of probe per phase")
    ap.add_argument("--probe-rps", type=float, default=12.0, help="the probe's pace (under the key limit)")
    ap.add_argument("--abuse-rps", type=float, default=500.0)
    ap.add_argument("--abuse-request", choices=["diagnose", "list"], default="diagnose",
                    help="what the abuser sends: small diagnoses, or GET /v1/traces (its admitted share costs little)")
    ap.add_argument("--rounds", type=int, default=40, help="append pairs measured")
    ap.add_argument("--workers", type=int, default=1)
    # hostile last: until redaction is linear its body keeps the worker's helper process busy
    ap.add_argument(
        "--phases", nargs="+",
        default=["refusal_app", "idle", "trace_5000", "abuse", "abuse_paired", "refusals", "appends", "hostile"],
    )
    ap.add_argument("--server-env", nargs="*", default=[], help="NAME=VALUE settings for the server")
    ap.add_argument("--window", type=float, default=10.0, help="seconds per window of abuse_paired")
    ap.add_argument("--abuse-conns", type=int, default=64,
                    help="the flood's connections (abuse_paired): enough that admitted requests in progress "
                    "do not hold its rate down")
    ap.add_argument("--pairs", type=int, default=5, help="pairs of windows (flood off, flood on) of abuse_paired")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--load", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--keys", default="{}", help=argparse.SUPPRESS)
    ap.add_argument("--phase", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.load:
        t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        out = asyncio.run(_phase(args))
        r1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - t0
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        out["generator_cpu_share"] = cpu / wall / (os.cpu_count() or 1)
        print(json.dumps(out))
        return

    results: dict[str, Any] = {}
    if "refusal_app" in args.phases:
        r = results["refusal_app"] = refusal_app()
        print(f"refusal_app: {r['calls']} calls of the app, {100 * r['share_429']:.1f} % 429 ({r['statuses']}): "
              f"a 429 costs wall p50 {r['wall_p50_us']:.1f} µs, mean {r['wall_mean_us']:.1f} µs; CPU mean "
              f"{r['cpu_mean_us']:.1f} µs", flush=True)
        args.phases = [p for p in args.phases if p != "refusal_app"]
        if not args.phases:
            return
    with tempfile.TemporaryDirectory(prefix="triage-abuse-") as tmp:
        server = Server(args.workers, Path(tmp), ort_threads=int(os.environ.get("TRIAGE_ORT_THREADS", "0")) or None,
                        tenants=("victim", "abuser", "heavy", "appender"), limits="default",
                        extra_env=args.server_env)
        try:
            print(f"# server ready: {server.ready}; {os.cpu_count()} cores; workers={args.workers}", flush=True)
            for phase in args.phases:
                r = run_phase(server.url, server.keys, phase, args, server.proc.pid)
                results[phase] = r
                share = f"generator CPU {100 * r['generator_cpu_share']:.0f} %, server CPU {100 * r['server_cpu_share']:.0f} % of {os.cpu_count()} cores"
                if phase == "abuse_paired":
                    a = r["paired"]
                    for k, pr in enumerate(a["pairs"], 1):
                        off, on = pr["off"], pr["on"]
                        print(
                            f"pair {k} (load {pr['loadavg']:.2f}): victim p99 off {off['p99_ms']:.2f} ms, "
                            f"on {on['p99_ms']:.2f} ms: x{pr['ratio']:.2f} (p50 {off['p50_ms']:.2f} / {on['p50_ms']:.2f}, "
                            f"n {off['n']}/{on['n']}, errors {off['errors'] + on['errors']}); queue wait p50/p99 "
                            f"off {off['queue_p50_ms']:.2f}/{off['queue_p99_ms']:.2f}, on {on['queue_p50_ms']:.2f}/"
                            f"{on['queue_p99_ms']:.2f} ms (to the body read p50/p99 off {off['read_p50_ms']:.2f}/"
                            f"{off['read_p99_ms']:.2f}, on {on['read_p50_ms']:.2f}/{on['read_p99_ms']:.2f} ms); "
                            f"flood {on['flood_rps']:.0f} req/s ({on['flood_missed']} slots missed), "
                            f"{100 * on['flood_429_share']:.1f} % 429 {on['flood_statuses']}, admitted queue p99 "
                            f"{on['flood_queue_p99_ms']:.2f} ms; slowest (ms, s into the window) off {off['slowest']} on {on['slowest']}",
                            flush=True,
                        )
                    print(f"abuse_paired: median x{a['median_ratio']:.2f}, max x{a['max_ratio']:.2f} over "
                          f"{len(a['pairs'])} pairs of {args.window:g} s windows; {share}", flush=True)
                    continue
                if phase == "refusals":
                    a = r["refusals"]
                    print(
                        f"refusals: {a['requests']} answers in {a['wall_s']:.1f} s ({a['requests'] / a['wall_s']:.0f}/s, "
                        f"statuses {a['statuses']}): server CPU {1e6 * r['server_cpu_s'] / a['requests']:.0f} µs an answer; {share}",
                        flush=True,
                    )
                    continue
                if phase == "appends":
                    a = r["appends"]
                    print(
                        f"appends: p50 at step 10 {a['p50_at_10_ms']:.2f} ms, at step 4,000 {a['p50_at_4000_ms']:.2f} ms "
                        f"(x{a['ratio']:.2f}, {a['rounds']} pairs); {share}",
                        flush=True,
                    )
                    continue
                p = r["probe"]
                line = (
                    f"{phase:10s} probe diagnose p50 {p['p50_ms']:7.2f} ms  p99 {p['p99_ms']:7.2f} ms  max {p['max_ms']:7.1f} ms  "
                    f"healthz p99 {p['healthz_p99_ms']:6.2f} ms  n={p['n']} errors={p['errors']}"
                )
                if "idle" in results and phase != "idle":
                    line += f"  (p99 x{p['p99_ms'] / results['idle']['probe']['p99_ms']:.2f} idle)"
                print(line + f"; {share}", flush=True)
                if "load" in r:
                    print(f"           load: {json.dumps(r['load'])}", flush=True)
                if p["first_error"]:
                    print(f"           first probe error: {p['first_error']}", flush=True)
        finally:
            server.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
