"""Latency at the real sets' step lengths: one new session step and a 30-step ``/v1/diagnose``,
through a real ``triage serve`` (uvicorn) on 127.0.0.1 with the shipped classifier and run scorer,
beside the raw ONNX forward of the classifier on the same steps.

Traces: ``--per-set`` runs drawn (seeded) from each vendored real set (``model.data.realdata``: their
own texts — τ-bench chats, HotpotQA searches, SWE-bench shell sessions with their long outputs,
Who&When multi-agent logs), labels dropped, cut to their first 30 steps. A set whose runs are
mostly shorter (AgentProcessBench, Who&When) gives its longest runs, whole; their step counts are
printed.

* **session step**: each run is fed to ``POST /v1/sessions/{id}/steps`` one step per request
  (native steps), so every request is one new step of a session of 1–30 steps: the session row
  locked and read back, rules and run scorer over the session so far, the classifier on the new
  step only, the repair policy, the store write. p50 / p99 over every request, and at the 30th.
* **30-step diagnose**: ``POST /v1/diagnose`` with the whole (cut) run, every detector: the rules,
  the classifier on all its steps, the run scorer; the trace stored and its streams fed.
* **raw forward**: ``InferenceSession.run`` of the shipped classifier on the tokenized inputs of the
  same steps (the text ``step_text`` makes, tokenized as ``ClassifierRuntime.encode`` does: the
  timing covers the forward only), one step alone, and a trace's steps in the runtime's
  length-sorted batches of 16. Timed in this process while the server is not running.

With ``--agent-model`` (the default) every session and diagnosis names one agent, ``bench-agent``,
whose agent model (:mod:`model.scoring.agentmodel`, fitted here on 60 τ-airline runs with the zero-shot prior,
registered and activated for the bench tenant before the first request) answers it: the prefix state
per session, ``at_risk``, the basis. ``--no-agent-model``: zero-shot, as before issue 20.

With ``--encoder-model`` (the default, with an agent model) each session and diagnosis is also posted
under a second agent, ``bench-encoder``, whose model is the same configuration with the encoder block
on (``encoder_weight`` 1.0: the shipped static encoder; its step vectors stored with the run), the two
agents' requests interleaved (alternating which goes first): the encoder's **added cost** is the
median of the paired differences (same run, same step) with a 95 % bootstrap interval, beside the
two p50s; and, in process, the encoder's own work (one step; a 30-step run in one batch).

One connection, one worker, ``TRIAGE_ORT_THREADS`` as ``--ort-threads`` (default 1, the server's) for the server
and the raw forward alike; a keep-alive ``http.client`` connection. The machine's load average is
printed with the figures. ``--profile`` also runs the same requests in process under cProfile and
prints where the time goes.

Run (about a minute; `--profile` adds one more)::

    .venv/bin/python bench/real_latency.py --per-set 5 --repeats 5
"""

from __future__ import annotations

import argparse
import cProfile
import http.client
import json
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.service import Server, proc_cpu_s  # noqa: E402
from model.core.schema import Trace  # noqa: E402
from model.data.realdata import SOURCES, RealRun, load_source  # noqa: E402
from model.scoring.classifier.representation import step_text  # noqa: E402
from model.scoring.classifier.runtime import ClassifierRuntime  # noqa: E402

STEPS = 30


# -- the traces ----------------------------------------------------------------------------------
def sample_runs(per_set: int, seed: int) -> dict[str, list[Trace]]:
    """``per_set`` runs of each set, cut to :data:`STEPS` steps, labels dropped: drawn among the runs
    with at least that many steps, or the set's longest runs where fewer are that long."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[Trace]] = {}
    for s in SOURCES:
        runs: list[RealRun] = load_source(s)
        long = [r for r in runs if len(r.trace.steps) >= STEPS]
        if len(long) >= per_set:
            chosen = [long[int(i)] for i in sorted(rng.choice(len(long), per_set, replace=False))]
        else:
            chosen = sorted(runs, key=lambda r: -len(r.trace.steps))[:per_set]
        traces = []
        for r in chosen:
            t = r.trace.model_copy(deep=True)
            t.steps = t.steps[:STEPS]
            t.labels = None
            traces.append(t)
        out[s] = traces
    return out


def pct(xs: Sequence[float] | np.ndarray, q: float) -> float:
    return float(np.quantile(np.asarray(xs, dtype=float), q)) if len(xs) else float("nan")


# -- the raw forward -------------------------------------------------------------------------------
def raw_forward(rt: ClassifierRuntime, traces: dict[str, list[Trace]], repeats: int) -> dict[str, Any]:
    """Per-step forward times (ms) and per-trace batched forward times, plus the step lengths."""
    rep = rt.meta.representation
    step_ms: list[float] = []
    trace_ms: list[float] = []
    lengths: dict[str, dict[str, list[int]]] = {}
    for s, ts in traces.items():
        lengths[s] = {"tokens": [], "chars": [], "content": [], "steps": [len(t.steps) for t in ts]}
        for t in ts:
            texts = [step_text(t, i, rep) for i in range(len(t.steps))]
            singles = [rt.encode([x]) for x in texts]
            lengths[s]["tokens"] += [int(f["input_ids"].shape[1]) for f in singles]
            lengths[s]["chars"] += [len(x) for x in texts]
            lengths[s]["content"] += [len(st.content or "") + len(st.tool_args_raw or "") for st in t.steps]
            order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
            batches = [rt.encode([texts[i] for i in order[b : b + 16]]) for b in range(0, len(order), 16)]
            for f in singles[:3]:  # warm-up
                rt.session.run(["logits"], f)
            for _ in range(repeats):
                for f in singles:
                    t0 = time.perf_counter()
                    rt.session.run(["logits"], f)
                    step_ms.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                for f in batches:
                    rt.session.run(["logits"], f)
                trace_ms.append((time.perf_counter() - t0) * 1000)
    return {"step_ms": step_ms, "trace_ms": trace_ms, "lengths": lengths}


def cpu_ms(pid: int) -> float:
    """CPU time (user + system, all threads) the process has used so far, in ms."""
    return proc_cpu_s(f"/proc/{pid}/stat") * 1000.0


# -- the requests ----------------------------------------------------------------------------------
AGENT: str | None = None  # the agent every request names (set by --agent-model)
ENCODER_AGENT = "bench-encoder"  # the agent whose model reads the encoder block (--encoder-model)
AGENTS: list[str | None] = [None]  # the agents each run is posted under, interleaved


def step_bodies(trace: Trace, agent: str | None = None) -> list[bytes]:
    """One append body per step: the step as a native step, its index relative to the call (0)."""
    agent = agent or AGENT
    out = []
    for st in trace.steps:
        d = st.model_dump(mode="json", exclude_none=True)
        d["source_index"] = 0
        body: dict[str, Any] = {"steps": [d]}
        if agent:
            body["agent"] = agent
        if trace.task_type:
            body["task_type"] = trace.task_type
        out.append(json.dumps(body).encode())
    return out


def diagnose_body(trace: Trace, n: int, agent: str | None = None) -> bytes:
    agent = agent or AGENT
    d = trace.model_dump(mode="json", exclude_none=True)
    d["id"] = f"{trace.id}:bench:{os.getpid()}:{n}:{agent}"
    return json.dumps({"trace": d, **({"options": {"agent": agent}} if agent else {})}).encode()


class Client:
    """One keep-alive HTTP/1.1 connection; :meth:`post` returns (ms, parsed JSON)."""

    def __init__(self, port: int, key: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def post(self, path: str, body: bytes) -> tuple[float, dict[str, Any]]:
        t0 = time.perf_counter()
        self.conn.request("POST", path, body=body, headers=self.headers)
        r = self.conn.getresponse()
        payload = r.read()
        ms = (time.perf_counter() - t0) * 1000
        if r.status != 200:
            raise SystemExit(f"{path}: HTTP {r.status}: {payload[:300]!r}")
        out: dict[str, Any] = json.loads(payload)
        return ms, out


def _order(i: int) -> list[str | None]:
    """The agents in the order the ``i``-th run is posted under them (alternating who goes first)."""
    return AGENTS if i % 2 == 0 else AGENTS[::-1]


def run_sessions(client: Client, traces: dict[str, list[Trace]], tag: str,
                 pid: int | None = None, agent_of: dict[Any, float] | None = None
                 ) -> list[tuple[str, int, float, float]]:
    """(set, step position, ms, server CPU ms) for every append of the first agent (CPU from
    ``/proc/<pid>/stat``, in clock ticks of 10 ms: meaningful summed over many requests, not one by one; 0
    without ``pid``); every agent's appends (interleaved, step by step) go into ``agent_of`` as
    ``(set, run, step, agent) → ms`` (:func:`paired`)."""
    out = []
    i = 0
    for s, ts in traces.items():
        for n, t in enumerate(ts):
            bodies = {a: step_bodies(t, a) for a in AGENTS}
            for k in range(len(t.steps)):
                for a in _order(i):
                    sid = f"bench-{tag}-{os.getpid()}-{s}-{n}-{a}"
                    c0 = cpu_ms(pid) if pid else 0.0
                    ms, resp = client.post(f"/v1/sessions/{sid}/steps", bodies[a][k])
                    c1 = cpu_ms(pid) if pid else 0.0
                    if a and (resp.get("failure_probability_basis") or {}).get("model") != "agent":
                        raise SystemExit(f"session {sid}: not answered by the agent model: "
                                         f"{resp.get('failure_probability_basis')}")
                    if resp.get("session_steps") != k + 1:
                        raise SystemExit(f"session {sid}: {resp.get('session_steps')} steps after {k + 1} appends")
                    if a == AGENTS[0]:
                        out.append((s, k, ms, c1 - c0))
                    if agent_of is not None:
                        agent_of[(s, n, k, a)] = ms
                i += 1
    return out


def run_diagnose(client: Client, traces: dict[str, list[Trace]], repeats: int,
                 agent_of: dict[Any, float] | None = None) -> list[tuple[str, int, float, bool]]:
    """(set, steps, ms, whether failure_probability came back) per request of the first agent (every
    agent's into ``agent_of``, keyed ``(repeat, set, run, agent)``)."""
    out = []
    i = 0
    for r in range(repeats):
        for s, ts in traces.items():
            for n, t in enumerate(ts):
                for a in _order(i):
                    ms, resp = client.post("/v1/diagnose", diagnose_body(t, r * 1000 + n, a))
                    if a == AGENTS[0]:
                        out.append((s, len(t.steps), ms, resp.get("failure_probability") is not None))
                    if agent_of is not None:
                        agent_of[(r, s, n, len(t.steps), a)] = ms
                i += 1
    return out


def paired(times: dict[Any, float], base: str | None, other: str, keep: Any = None, seed: int = 0
           ) -> tuple[float, float, float, float, float, int]:
    """p50 of ``base``'s and ``other``'s requests, the median of their paired differences (same run and
    step) and its 95 % bootstrap interval, and the pairs: ``(p50 base, p50 other, median diff, lo, hi, n)``.
    ``keep(key)``: the requests counted."""
    keys = [k[:-1] for k in times if k[-1] == base and (keep is None or keep(k))]
    a = np.array([times[(*k, base)] for k in keys])
    b = np.array([times[(*k, other)] for k in keys])
    d = b - a
    rng = np.random.default_rng(seed)
    boots = [float(np.median(d[rng.integers(0, len(d), len(d))])) for _ in range(2000)] if len(d) else [np.nan]
    return (pct(a, .5), pct(b, .5), float(np.median(d)) if len(d) else float("nan"),
            float(np.quantile(boots, .025)), float(np.quantile(boots, .975)), len(d))


def encoder_work(traces: dict[str, list[Trace]], repeats: int) -> tuple[float, float]:
    """The static encoder's own work in process: p50 ms to encode one step (and pool it), and to encode a
    30-step run in one batch (what a session append and a diagnosis add to the agent model's read)."""
    from model.scoring.agentmodel.encoded import Pool, encode_missing
    from model.scoring.encoder import shared_encoder

    enc = shared_encoder()
    one: list[float] = []
    run: list[float] = []
    for _ in range(repeats):
        for ts in traces.values():
            for t in ts:
                pool = Pool.empty(enc.dim)
                for st in t.steps:
                    t0 = time.perf_counter()
                    v = encode_missing(enc, [st])[0]
                    if not np.isnan(v[0]):
                        pool.add(v, st.kind)
                    one.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                encode_missing(enc, t.steps)
                run.append((time.perf_counter() - t0) * 1000)
    return pct(one, .5), pct(run, .5)


# -- where the time goes -----------------------------------------------------------------------------
def profile(traces: dict[str, list[Trace]], ort_threads: int, top: int) -> None:
    """The same appends and diagnoses in process (no HTTP) under cProfile: the top functions."""
    from model.core.options import DiagnoseOptions
    from model.importers import load_trace
    from serve.schemas import AppendStepsRequest
    from serve.settings import Settings
    from serve.wiring import build_diagnoser, build_service

    with tempfile.TemporaryDirectory(prefix="triage-prof-") as tmp:
        settings = Settings(data_dir=Path(tmp), ort_threads=ort_threads)
        diagnoser, ready = build_diagnoser(settings)
        service = build_service(settings, diagnoser)
        print(f"# profile in process: readiness {ready}")
        reqs = {s: [[AppendStepsRequest.model_validate(json.loads(b)) for b in step_bodies(t)] for t in ts]
                for s, ts in traces.items()}
        docs = {s: [json.loads(diagnose_body(t, 0))["trace"] for t in ts] for s, ts in traces.items()}
        for what in ("session", "diagnose"):
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            calls = 0
            prof.enable()
            for s in traces:
                for n in range(len(traces[s])):
                    if what == "session":
                        for req in reqs[s][n]:
                            service.append_steps("default", f"prof-{s}-{n}", req)
                            calls += 1
                    else:
                        doc = dict(docs[s][n], id=f"prof-{s}-{n}")
                        service.diagnose("default", load_trace(doc), DiagnoseOptions())
                        calls += 1
            prof.disable()
            total = (time.perf_counter() - t0) * 1000
            print(f"\n# {what}: {calls} calls in process, {total / calls:.2f} ms each (profiler on); "
                  f"top {top} by cumulative time")
            pstats.Stats(prof).strip_dirs().sort_stats("cumulative").print_stats(top)
        service.stores.db.dispose()


# -- main -------------------------------------------------------------------------------------------
def install_agent_model(data: Path, tenant: str, agent: str, encoder_weight: float = 0.0) -> str:
    """Fit an agent model on 60 τ-airline runs (zero-shot prior; ``encoder_weight`` > 0: with the encoder
    block), register and activate it for (tenant, agent) in the server's data folder; returns a line
    saying what it is."""
    from model.scoring.agent_registry import Registry
    from model.scoring.agentmodel.model import AgentModel, AgentModelConfig
    from serve.services.retrain import ZeroShotCache
    from serve.store import Stores

    runs = load_source("tau_airline")[:60]
    traces = [r.trace.model_copy(update={"labels": None}) for r in runs]
    prior = ZeroShotCache(None).probabilities(traces)
    t0 = time.perf_counter()
    model = AgentModel.fit(traces, [r.failed for r in runs], [r.group for r in runs], prior=prior, agent=agent,
                           config=AgentModelConfig(internal_folds=3, encoder_weight=encoder_weight))
    fit_s = time.perf_counter() - t0
    mv = Registry(data / "models").save(tenant, agent, model, parent=None, card="bench", report={}, data={})
    store = Stores.at(f"sqlite:///{data / 'triage.db'}")
    store.activations.activate_model(tenant, mv.version, actor="bench/real_latency.py", agent=agent)
    store.db.dispose()
    size = (mv.path / "agentmodel.json").stat().st_size
    return (f"agent model {agent} {mv.version}: fitted on 60 runs in {fit_s:.1f} s, {size / 1e6:.2f} MB, "
            f"at_risk threshold {model.at_risk_threshold}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-set", type=int, default=5, help="runs drawn from each real set")
    ap.add_argument("--repeats", type=int, default=5, help="passes of /v1/diagnose over the runs (and raw forwards)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ort-threads", type=int, default=1)
    ap.add_argument("--profile", action="store_true", help="also profile the same requests in process")
    ap.add_argument("--top", type=int, default=25, help="functions the profile prints")
    ap.add_argument("--json", type=Path, default=None, help="also write the raw figures here")
    ap.add_argument("--agent-model", action=argparse.BooleanOptionalAction, default=True,
                    help="answer every request with an agent model (fitted on 60 τ-airline runs)")
    ap.add_argument("--encoder-model", action=argparse.BooleanOptionalAction, default=True,
                    help="also post every request under an agent whose model reads the encoder block (paired)")
    args = ap.parse_args()
    global AGENTS

    traces = sample_runs(args.per_set, args.seed)
    rt = ClassifierRuntime.load(ROOT / "model" / "artifacts", threads=args.ort_threads)
    print(f"classifier {rt.meta.model_name} {rt.meta.model_version} (max_length {rt.meta.max_length}); "
          f"ORT threads {args.ort_threads}; {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}")
    raw = raw_forward(rt, traces, args.repeats)
    del rt
    print("\nstep lengths: the step's own text (content), and the classifier's input (step_text, its tokens "
          "truncated at max_length):")
    print(f"{'set':<18} {'runs':>4} {'steps/run':>10} {'content p50':>11} {'p90':>6} {'max':>7} "
          f"{'input chars p50':>15} {'p90':>6} {'tokens p50':>10} {'p90':>5}")
    for s, ln in raw["lengths"].items():
        print(f"{s:<18} {len(ln['steps']):>4} {min(ln['steps']):>4}-{max(ln['steps']):<5} "
              f"{pct(ln['content'], .5):>11.0f} {pct(ln['content'], .9):>6.0f} {max(ln['content']):>7d} "
              f"{pct(ln['chars'], .5):>15.0f} {pct(ln['chars'], .9):>6.0f} "
              f"{pct(ln['tokens'], .5):>10.0f} {pct(ln['tokens'], .9):>5.0f}")
    raw_step50, raw_trace50 = pct(raw["step_ms"], .5), pct(raw["trace_ms"], .5)
    print(f"\nraw ONNX forward: one step p50 {raw_step50:.3f} ms p99 {pct(raw['step_ms'], .99):.3f} ms "
          f"({len(raw['step_ms'])} forwards); a run's steps (batches of 16) p50 {raw_trace50:.2f} ms "
          f"p99 {pct(raw['trace_ms'], .99):.2f} ms")

    with tempfile.TemporaryDirectory(prefix="triage-real-bench-") as tmp:
        server = Server(1, Path(tmp), None, args.ort_threads, extra_env=["TRIAGE_MODEL_POLL_S=1"])
        try:
            if args.agent_model:
                global AGENT
                AGENT = "bench-agent"
                AGENTS = [AGENT]
                print(install_agent_model(Path(tmp), "bench", AGENT))
                if args.encoder_model:
                    AGENTS = [AGENT, ENCODER_AGENT]
                    print(install_agent_model(Path(tmp), "bench", ENCODER_AGENT, encoder_weight=1.0))
            checks = server.ready.get("checks", {})
            if not (checks.get("classifier") and checks.get("runscore")):
                raise SystemExit(f"the server did not load the shipped models: {server.ready}")
            client = Client(server.port, server.key)
            run_sessions(client, {s: ts[:1] for s, ts in traces.items()}, "warm")  # warm-up, not timed
            run_diagnose(client, {s: ts[:1] for s, ts in traces.items()}, 1)
            load0 = os.getloadavg()[0]
            c0 = cpu_ms(server.proc.pid)
            sess_by: dict[Any, float] = {}
            diag_by: dict[Any, float] = {}
            sess = run_sessions(client, traces, "timed", server.proc.pid, sess_by)
            c1 = cpu_ms(server.proc.pid)
            diag = run_diagnose(client, traces, args.repeats, diag_by)
            time.sleep(1.0)  # the stream feed of the last answers runs after them
            c2 = cpu_ms(server.proc.pid)
            load1 = os.getloadavg()[0]
        finally:
            server.stop()

    all_ms = [ms for _, _, ms, _ in sess]
    last_ms = [ms for _, k, ms, _ in sess if k == STEPS - 1]
    print(f"\nload average during the requests: {load0:.2f} -> {load1:.2f}")
    print(f"\nsession step (POST /v1/sessions/{{id}}/steps, one new step; {len(all_ms)} requests): "
          f"p50 {pct(all_ms, .5):.2f} ms, p99 {pct(all_ms, .99):.2f} ms; at the 30th step "
          f"p50 {pct(last_ms, .5):.2f} ms (n={len(last_ms)}); ratio to the raw one-step forward "
          f"(p50 / p50) {pct(all_ms, .5) / raw_step50:.1f}x")
    print(f"  server CPU per session step {(c1 - c0) / max(1, len(sess_by)):.1f} ms (user + system, all threads: the work, "
          f"whatever the load)")
    for lo, hi in ((0, 9), (10, 19), (20, 29)):
        xs = [ms for _, k, ms, _ in sess if lo <= k <= hi]
        cpu = [c for _, k, _, c in sess if lo <= k <= hi]
        print(f"  steps {lo + 1:2d}-{hi + 1:2d} of the session: p50 {pct(xs, .5):7.2f} ms  p99 {pct(xs, .99):7.2f} ms  "
              f"server CPU {sum(cpu) / max(1, len(cpu)):5.1f} ms each  (n={len(xs)})")
    for s in traces:
        xs = [ms for ss, _, ms, _ in sess if ss == s]
        print(f"  {s:<18} p50 {pct(xs, .5):7.2f} ms  p99 {pct(xs, .99):7.2f} ms  max {max(xs):7.2f} ms  (n={len(xs)})")
    d30 = [ms for _, n, ms, _ in diag if n == STEPS]
    with_p = sum(ok for *_, ok in diag)
    print(f"\n/v1/diagnose of a 30-step run ({len(d30)} requests; failure_probability in {with_p}/{len(diag)} answers): "
          f"p50 {pct(d30, .5):.1f} ms, p99 {pct(d30, .99):.1f} ms, max {max(d30, default=float('nan')):.1f} ms; "
          f"ratio to the raw forward of a run's steps (p50 / p50) {pct(d30, .5) / raw_trace50:.1f}x")
    print(f"  server CPU per /v1/diagnose {(c2 - c1) / max(1, len(diag_by)):.1f} ms (all runs, stream feed included)")
    for s in traces:
        xs = [ms for ss, _, ms, _ in diag if ss == s]
        steps = sorted({n for ss, n, _, _ in diag if ss == s})
        print(f"  {s:<18} {min(steps)}-{max(steps)} steps  p50 {pct(xs, .5):7.1f} ms  p99 {pct(xs, .99):7.1f} ms  "
              f"(n={len(xs)})")
    print(f"\ntargets (issue 20, with an agent model): session step p50 <= 15 ms: "
          f"{'met' if pct(all_ms, .5) <= 15 else 'MISSED'}; p99 <= 30 ms: {'met' if pct(all_ms, .99) <= 30 else 'MISSED'}; "
          f"30-step diagnose <= 700 ms (p50): {'met' if pct(d30, .5) <= 700 else 'MISSED'}")
    if len(AGENTS) > 1:
        print(f"\nthe encoder block's added cost (agent {ENCODER_AGENT!r}: the same model with encoder_weight 1.0, "
              f"its step vectors stored; requests interleaved with {AGENT!r}'s; the CPU figures above count "
              f"{AGENT!r}'s requests only, the server's CPU between them both):")
        for what, times, keep in (("session step", sess_by, None),
                                  ("30-step /v1/diagnose", diag_by, lambda k: k[3] == STEPS)):
            b50, e50, med, lo_d, hi_d, n = paired(times, AGENT, ENCODER_AGENT, keep)
            print(f"  {what:<22} p50 without {b50:7.2f} ms, with {e50:7.2f} ms; paired difference median "
                  f"{med:+.2f} ms [{lo_d:+.2f}, {hi_d:+.2f}] (n={n})")
        one_ms, run_ms = encoder_work(traces, 1)
        print(f"  in process, the encoder itself: one step encoded and pooled p50 {one_ms:.3f} ms; a 30-step run "
              f"encoded in one batch p50 {run_ms:.2f} ms")
        print("  targets (issue 34): <= 1 ms added to a session step p50, <= 3 ms to a 30-step diagnosis")
    if args.json:
        args.json.write_text(json.dumps({"sessions": sess, "diagnose": diag, "raw": raw,
                                         "paired_sessions": [[*k, v] for k, v in sess_by.items()],
                                         "paired_diagnose": [[*k, v] for k, v in diag_by.items()]}) + "\n")
    if args.profile:
        profile(traces, args.ort_threads, args.top)


if __name__ == "__main__":
    main()
