"""Service benchmark: a real `triage serve` (uvicorn) on 127.0.0.1 and a load generator in another
process; requests/s and p50/p99 latency at 1 and 8 connections, for 1 and 2 workers.

Scenarios (each request distinct; every answer checked for status 200):

- ``diag_rules_10`` / ``diag_rules_30``: ``POST /v1/diagnose`` with the rule detectors only, on a
  10- and a 30-step trace (the trace is stored, its streams fed: the full request path);
- ``diag_clf_10`` / ``diag_clf_30``: the same with the classifier (when an artefact is shipped or
  passed with ``--model-path``);
- ``session_step_clf``: ``POST /v1/sessions/{id}/steps`` appending one step to a session (each
  connection starts a new session every 20 steps), classifier on.

Each worker runs onnxruntime with the server's default intra-op threads (``TRIAGE_ORT_THREADS``,
1; ``--ort-threads`` sets another). ``--sustained S`` adds an S-second run at 8 connections that must end
with no errors. RSS is read from /proc for every worker process once the model is loaded.

Run (about 4 minutes)::

    .venv/bin/python bench/service.py --duration 8 --sustained 60

Every run first measures the floor, ``GET /healthz`` at one connection (``healthz`` is also a
scenario), and prints each latency as a ratio to it; with several ``--workers`` it prints each
count's requests a second against linear (efficiency = N workers' ÷ (N × one worker's)).
``--database-url postgresql://…`` runs the server on PostgreSQL instead of a temporary SQLite file.
On a shared host run the code you compare in interleaved rounds (docs/benchmarks.md): the same code
can differ by 1.6× from one minute to the next.

The load generator is this file with ``--load``: a keep-alive HTTP/1.1 client on raw asyncio
sockets, so that the client's own cost stays far below the server's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import live  # noqa: E402

SESSION_LEN = 20


# -- request bodies ------------------------------------------------------------------------------
def bench_trace(n_steps: int, seed: int) -> dict[str, Any]:
    """A generated ``tool_error`` run of exactly ``n_steps`` steps (labels dropped), as the JSON a client
    posts; the same ``seed`` gives the same run. Exits when the builder has no run of that length."""
    from model.core.kinds import FailureKind
    from model.core.schema import Step
    from model.data.builder import make_trace

    for n in range(n_steps - 4, n_steps + 6):
        t = make_trace(FailureKind.TOOL_ERROR, seed=seed, n_steps=n)
        if len(t.steps) in (n_steps, n_steps - 1):
            if len(t.steps) == n_steps - 1:  # the builder makes odd lengths: add a system prompt
                for st in t.steps:
                    st.source_index += 1
                t.steps.insert(0, Step(kind="system", content="You are a booking assistant. Use the tools."))
            t.labels = None
            return dict(t.model_dump(mode="json", exclude_none=True))
    raise SystemExit(f"no {n_steps}-step trace from the builder")


def _rule_names() -> list[str]:
    from model.detectors.catalog import TRACE_DETECTORS

    return sorted(n for n in TRACE_DETECTORS if n != "classifier")


def _bodies(scenario: str, n: int) -> list[bytes]:
    """``n`` distinct request bodies: the i-th is the builder's run of seed i (one agent's runs: the same
    prompts and tools, other tasks, values and results), so that nothing cached by text (token pieces,
    redaction's memos) is flattered by a body sent again."""
    if scenario.startswith("diag_"):
        steps = int(scenario.rsplit("_", 1)[1])
        opts: dict[str, Any] = {"detectors": _rule_names()} if "_rules_" in scenario else {}
        out = []
        for i in range(n):
            trace = bench_trace(steps, seed=i)
            trace["id"] = f"bench-{scenario}-{os.getpid()}-{i}"
            out.append(json.dumps({"trace": trace, "options": opts}).encode())
        return out
    raise ValueError(scenario)


CITIES = ("Lisbon", "Porto", "Quito", "Osaka", "Tallinn", "Accra", "Hanoi", "Lima", "Bergen", "Cusco", "Malmo")


def session_step(i: int) -> bytes:
    """The i-th append of session ``i // SESSION_LEN``: a user turn first, then call/result pairs; each
    session its own city, budget, dates and hotels."""
    k, s = i % SESSION_LEN, i // SESSION_LEN
    city = CITIES[s % len(CITIES)]
    if k == 0:
        msg: dict[str, Any] = {
            "role": "user",
            "content": f"Find three hotels in {city} under {90 + (s * 37) % 200} EUR for May {1 + s % 20}-{3 + s % 20}.",
        }
    elif k % 2 == 1:
        msg = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"c{k}",
                    "type": "function",
                    "function": {
                        "name": "search_hotels",
                        "arguments": json.dumps({"city": city, "page": k}),
                    },
                }
            ],
        }
    else:
        msg = {
            "role": "tool",
            "tool_call_id": f"c{k - 1}",
            "content": json.dumps({"page": k, "hotels": [f"{city} Inn {s}-{k}", f"Casa {s * 7 + k}"]}),
        }
    return json.dumps({"messages": [msg]}).encode()


# -- the load generator (runs in its own process) ------------------------------------------------
async def _connection(
    host: str,
    port: int,
    key: str,
    scenario: str,
    conn_id: int,
    deadline: float,
    bodies: list[bytes],
    lat: list[float],
    errors: list[str],
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    i = 0
    session_n = 0
    try:
        while time.perf_counter() < deadline:
            method = "POST"
            if scenario == "healthz":  # the HTTP floor: every figure is also printed as a ratio to its p50
                method, path, body = "GET", "/healthz", b""
            elif scenario == "session_step_clf":
                if i % SESSION_LEN == 0:
                    session_n += 1
                path = f"/v1/sessions/bench-{os.getpid()}-{conn_id}-{session_n}/steps"
                body = session_step(i)
            else:
                path = "/v1/diagnose"
                body = bodies[(conn_id * 7919 + i) % len(bodies)]
            i += 1
            head = (
                f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            t0 = time.perf_counter()
            writer.write(head + body)
            status_line = await reader.readline()
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                name, _, value = line.decode("latin-1").partition(":")
                if name.lower() == "content-length":
                    length = int(value.strip())
            payload = await reader.readexactly(length)
            lat.append(time.perf_counter() - t0)
            status = status_line.split(b" ", 2)[1] if status_line else b"???"
            if status != b"200":
                errors.append(f"{status.decode()} {payload[:200]!r}")
    finally:
        writer.close()


async def _load(host: str, port: int, key: str, scenario: str, conns: int, duration: float) -> dict[str, Any]:
    bodies = [] if scenario in ("session_step_clf", "healthz") else _bodies(scenario, 1000)
    lat: list[float] = []
    errors: list[str] = []
    # warm-up: one second, not timed (counted: a caller reading the server's CPU over the run needs it)
    warm_deadline = time.perf_counter() + 1.0
    warm: list[float] = []
    await asyncio.gather(
        *(
            _connection(host, port, key, scenario, 1000 + c, warm_deadline, bodies, warm, [])
            for c in range(conns)
        )
    )
    start = time.perf_counter()
    deadline = start + duration
    await asyncio.gather(
        *(_connection(host, port, key, scenario, c, deadline, bodies, lat, errors) for c in range(conns))
    )
    elapsed = time.perf_counter() - start
    lat.sort()

    def q(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float("nan")

    return {
        "scenario": scenario,
        "conns": conns,
        "requests": len(lat),
        "warmup_requests": len(warm),
        "rps": len(lat) / elapsed,
        "p50_ms": q(0.50),
        "p99_ms": q(0.99),
        "mean_ms": statistics.fmean(lat) * 1000 if lat else float("nan"),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


def run_load(url: str, key: str, scenario: str, conns: int, duration: float) -> dict[str, Any]:
    """Run the load generator in a separate process; its JSON result."""
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--load",
            url,
            "--key",
            key,
            "--scenario",
            scenario,
            "--conns",
            str(conns),
            "--duration",
            str(duration),
        ],
        capture_output=True,
        text=True,
        timeout=duration + 120,
        cwd=ROOT,
    )
    if out.returncode != 0:
        raise SystemExit(f"load generator failed:\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# -- the server under test -----------------------------------------------------------------------
def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child_pids(pid: int) -> list[int]:
    """The process ids of ``pid``'s children (every thread's, from ``/proc``: Linux only)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out += [int(c) for c in text]
    return out


# Run by another checkout's Python (Server(tree=...)): its store at its own head revision, a key per tenant.
_MAKE_KEYS = (
    "import json, sys\n"
    "from serve.auth import create_key\n"
    "from serve.store import Stores\n"
    "store = Stores.at(sys.argv[1])\n"
    "store.db.upgrade()\n"
    "print(json.dumps({t: create_key(store.keys, t)[0] for t in sys.argv[2:]}))\n"
    "store.db.dispose()\n"
)



def proc_cpu_s(stat: str | Path) -> float:
    """CPU seconds (user + system) in a ``/proc`` stat file: ``/proc/PID/stat`` (the process, all its
    threads) or ``/proc/PID/task/TID/stat`` (one thread); utime and stime, fields 14 and 15 of stat(5)."""
    fields = Path(stat).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

class Server:
    """A real ``triage serve`` on 127.0.0.1 with API keys on, one key per tenant (``keys``; ``key`` is the
    first tenant's). ``limits="off"`` switches the request-rate limits off (throughput is measured);
    ``"default"`` serves the settings' defaults whatever the environment says (bench/abuse.py measures
    them); ``extra_env`` (``NAME=VALUE``) is applied last."""

    def __init__(
        self, workers: int, data: Path, model_path: str | None = None, ort_threads: int | None = None, *,
        tenants: tuple[str, ...] = ("bench",), limits: str = "off", extra_env: list[str] | None = None,
        database_url: str | None = None, tree: Path | None = None,
    ) -> None:
        import httpx

        url = database_url or f"sqlite:///{data / 'triage.db'}"
        if tree is None:
            from serve.auth import create_key
            from serve.store import Stores

            store = Stores.at(url)
            store.db.upgrade()
            self.keys = {t: create_key(store.keys, t)[0] for t in tenants}
            store.db.dispose()
        else:  # the other checkout's code makes its store: a newer revision would be unknown to its server
            made = subprocess.run(
                [sys.executable, "-c", _MAKE_KEYS, url, *tenants], cwd=tree, capture_output=True, text=True,
                env={**os.environ, "PYTHONPATH": f"{tree}:{tree / 'client'}"}, check=True)
            self.keys = json.loads(made.stdout.strip().splitlines()[-1])
        self.key = self.keys[tenants[0]]
        self.port = live.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "TRIAGE_DATA_DIR": str(data),
            "TRIAGE_AUTH": "on",
            "HF_HUB_OFFLINE": "1",
        }
        if ort_threads:
            env["TRIAGE_ORT_THREADS"] = str(ort_threads)
        else:  # the server's own default, not this shell's
            env.pop("TRIAGE_ORT_THREADS", None)
        if tree is not None:  # another checkout's server (bench/request_path.py: the base commit's)
            env["PYTHONPATH"] = f"{tree}:{tree / 'client'}"
        if database_url:
            env["TRIAGE_DATABASE_URL"] = database_url
        if limits == "off":
            # throughput is measured here: the per-key limits (bench/abuse.py measures them) are off
            env.update({"TRIAGE_RATE_LIMIT_KEY_RPS": "0", "TRIAGE_RATE_LIMIT_TENANT_RPS": "0"})
        else:
            for name in list(env):
                if name.startswith(("TRIAGE_RATE_LIMIT", "TRIAGE_QUOTA")):
                    del env[name]  # the defaults are what is measured
        if model_path:
            env["TRIAGE_MODEL_PATH"] = model_path
        for kv in extra_env or []:
            name, sep, value = kv.partition("=")
            if not sep or not name:
                raise SystemExit(f"server environment {kv!r}: expected NAME=VALUE")
            env[name] = value
        self.workers = workers
        self.log = open(data / f"server-{workers}.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "serve.cli.main", "serve", "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", str(workers)],
            cwd=tree or ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                r = httpx.get(f"{self.url}/readyz", timeout=2)
                if r.status_code in (200, 503):
                    self.ready = r.json()
                    if workers == 1 or len(child_pids(self.proc.pid)) >= workers:
                        return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited: see {self.log.name}")
            time.sleep(0.2)
        raise SystemExit("server did not become ready")

    def worker_rss_mb(self) -> list[float]:
        pids = [self.proc.pid] if self.workers == 1 else child_pids(self.proc.pid)
        out = []
        for p in pids:
            try:
                cmd = Path(f"/proc/{p}/cmdline").read_bytes()
            except OSError:
                continue
            if b"resource_tracker" not in cmd:  # multiprocessing's helper, not a worker
                out.append(_rss_mb(p))
        return out

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the server's worker processes have used so far (``/proc``)."""
        pids = [self.proc.pid] if self.workers == 1 else child_pids(self.proc.pid)
        total = 0.0
        for p in pids:
            with contextlib.suppress(OSError):  # a worker gone meanwhile
                total += proc_cpu_s(f"/proc/{p}/stat")
        return total

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def _empty(url: str) -> None:
    """Drop every table of the bench database (each worker count starts from an empty store)."""
    from sqlalchemy import MetaData, create_engine

    engine = create_engine(url)
    meta = MetaData()
    meta.reflect(engine)
    meta.drop_all(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
    engine.dispose()


def _efficiency(results: list[dict[str, Any]]) -> None:
    """Throughput of N workers against N × one worker's, per scenario and connection count."""
    one = {(r["scenario"], r["conns"]): r["rps"] for r in results if r["workers"] == 1 and not r.get("sustained")}
    rows = [r for r in results if r["workers"] > 1 and not r.get("sustained") and (r["scenario"], r["conns"]) in one]
    if rows:
        print("scaling against linear (N workers' req/s ÷ (N × one worker's)):")
    for r in rows:
        base = one[(r["scenario"], r["conns"])]
        print(f"  workers={r['workers']} {r['scenario']:18s} conns={r['conns']}: {r['rps'] / base:4.2f}x one worker, "
              f"efficiency {r['rps'] / (base * r['workers']):4.0%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=8.0, help="seconds per measured run")
    ap.add_argument("--sustained", type=float, default=0.0, help="also an S-second run at 8 connections")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--conns", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--scenarios", nargs="+", default=None)
    ap.add_argument(
        "--model-path", default=None, help="classifier artefact folder (default: the shipped one)"
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--database-url", default=None,
                    help="an empty PostgreSQL database (default: SQLite in a temporary folder); its tables are emptied "
                    "between worker counts")
    ap.add_argument("--ort-threads", type=int, default=None, help="TRIAGE_ORT_THREADS (default: the server's, 1)")
    # load-generator mode
    ap.add_argument("--load", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--key", default="", help=argparse.SUPPRESS)
    ap.add_argument("--scenario", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.load:
        host, port = args.load.removeprefix("http://").split(":")
        print(
            json.dumps(
                asyncio.run(_load(host, int(port), args.key, args.scenario, args.conns[0], args.duration))
            )
        )
        return

    results: list[dict[str, Any]] = []
    rss: dict[int, list[float]] = {}
    for workers in args.workers:
        with tempfile.TemporaryDirectory(prefix="triage-bench-") as tmp:
            if args.database_url:
                _empty(args.database_url)
            server = Server(workers, Path(tmp), args.model_path, args.ort_threads, database_url=args.database_url)
            try:
                clf = bool(server.ready.get("checks", {}).get("classifier"))
                scenarios = args.scenarios or [
                    "diag_rules_10",
                    "diag_rules_30",
                    "diag_clf_10",
                    "diag_clf_30",
                    "session_step_clf",
                ]
                if not clf:
                    dropped = [s for s in scenarios if "clf" in s]
                    if dropped:
                        print(
                            f"# {workers} worker(s): no classifier artefact loaded; skipping {', '.join(dropped)}"
                        )
                    scenarios = [s for s in scenarios if "clf" not in s]
                floor = run_load(server.url, server.key, "healthz", 1, min(args.duration, 4.0))
                floor.update(workers=workers, classifier=clf)
                results.append(floor)
                print(f"workers={workers} {'healthz (floor)':18s} conns=1  {floor['rps']:8.1f} req/s  "
                      f"p50 {floor['p50_ms']:7.2f} ms  p99 {floor['p99_ms']:7.2f} ms", flush=True)
                for scenario in scenarios:
                    for conns in args.conns:
                        r = run_load(server.url, server.key, scenario, conns, args.duration)
                        r["workers"] = workers
                        r["classifier"] = clf
                        r["floor_ratio"] = r["p50_ms"] / floor["p50_ms"]
                        results.append(r)
                        print(
                            f"workers={workers} {scenario:18s} conns={conns}  {r['rps']:8.1f} req/s  "
                            f"p50 {r['p50_ms']:7.2f} ms ({r['floor_ratio']:5.1f}x floor)  p99 {r['p99_ms']:7.2f} ms  "
                            f"errors {r['errors']}" + (f"  first: {r['first_error']}" if r["first_error"] else ""),
                            flush=True,
                        )
                rss[workers] = server.worker_rss_mb()
                print(f"workers={workers} RSS per worker: {', '.join(f'{m:.0f} MB' for m in rss[workers])}")
                if args.sustained and workers == args.workers[0]:
                    scenario = "session_step_clf" if clf else "diag_rules_10"
                    r = run_load(server.url, server.key, scenario, 8, args.sustained)
                    r.update(workers=workers, classifier=clf, sustained=True)
                    results.append(r)
                    print(
                        f"sustained {args.sustained:.0f} s, workers={workers} {scenario} conns=8: {r['requests']} requests, "
                        f"{r['rps']:.1f} req/s, p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, errors {r['errors']}",
                        flush=True,
                    )
                    rss[workers] = server.worker_rss_mb()
                    print(
                        f"workers={workers} RSS per worker after sustained load: {', '.join(f'{m:.0f} MB' for m in rss[workers])}"
                    )
            finally:
                server.stop()
    _efficiency(results)
    if args.json:
        args.json.write_text(json.dumps({"results": results, "rss_mb": rss}, indent=2) + "\n")


if __name__ == "__main__":
    main()
