"""Closed-loop fault-injection benchmark: task success with and without triage-guided repair.

A tool-using agent runs ``--tasks`` tasks (five tool families, a two-call plan each, a checkable
answer) with one fault injected per task by the tool and model wrappers of ``bench/faults.py``. Its
model is ``bench/standin_llm.py``'s **scripted stand-in — not an LLM**: a seeded script that reads
the messages and follows an injected instruction (or a prompt injection) with probability 0.8.
Four modes run the same tasks and seeds:

- ``no_repair``: the plain loop (a tool error becomes the tool message; a model error ends the run);
- ``blind_retry``: LangChain v1's ``ToolRetryMiddleware`` and ``ModelRetryMiddleware`` at their
  defaults (``max_retries=2``: 3 attempts; delay ``1.0 · 2^k`` s with ±25 % jitter; every exception
  retried; on exhaustion the error goes back to the model as a message);
- ``retry_fallback``: blind retry plus ``ModelFallbackMiddleware`` (the fallback model, with the
  same retries, after the primary's are spent);
- ``triage``: the reference repair executor (``client/agent_triage_client/executor.py``) against a
  real ``triage serve`` started by ``bench/service.py``'s ``Server``, each message streamed to
  ``/v1/sessions/{id}/steps`` and each recommendation carried out.

Time is simulated (:class:`bench.faults.VirtualClock`): a tool call costs 0.4 s, a model call
1.5 s, and every backoff sleep (the middleware's and the executor's) advances the clock instead of
waiting, so the bench runs in minutes; recovery times are in simulated seconds. The service's own
clock is real (its 300 s per-task recovery budget is never reached here).

Per mode and fault it prints task success, extra model+tool calls (over the fault-free plan's 3
model calls and 2 tool calls), median recovery time (first fault → answer, successful runs),
hand-offs (right: on an unrecoverable fault; wrong: on a recoverable one), runs that hit a budget
(the middleware's retries spent / the service's budgets), and unbounded loops (runs reaching the
50-step cap). The semantic faults (``forgotten_constraint``, ``poisoned_result``) are reported
apart and left out of the headline. The last line is::

    closed-loop: triage-guided X% | blind retry Y% | retry+fallback Z% | no repair W% | extra calls vs blind retry R× | unbounded loops L

Run (a few minutes)::

    .venv/bin/python bench/closed_loop.py --tasks 330 --seed 0 --plot docs/img/closed_loop.png
"""

from __future__ import annotations

import argparse
import inspect
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "client"))

from bench.faults import FAULTS, FaultyModel, FaultyTools, ProviderError, ToolHTTPError, VirtualClock  # noqa: E402  # noqa: E402
from bench.standin_llm import ScriptedModel, Task, make_task  # noqa: E402

STEP_CAP = 50
PLAN_CALLS = 5  # 3 model calls + 2 tool calls when nothing goes wrong
MODES = ("no_repair", "blind_retry", "retry_fallback", "triage")
PRIMARY, FALLBACK = "main-model", "backup-model"
SYSTEM = "You are a travel-and-support assistant. Use the tools; answer with the figures they return."
SEMANTIC = {n for n, f in FAULTS.items() if f.semantic}
RECOVERABLE = {n for n, f in FAULTS.items() if f.recoverable and not f.semantic and n != "none"}


@dataclass
class Run:
    task: str
    fault: str
    mode: str
    success: bool
    model_calls: int
    tool_calls: int
    steps: int
    unbounded: bool
    handoff: bool = False
    blocked: bool = False
    budget: bool = False
    leaked: bool = False
    recovery_s: float | None = None
    strategies: list[str] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)  # triage: the session's last failures and signals
    answer: str = ""

    @property
    def extra(self) -> int:
        return max(0, self.model_calls + self.tool_calls - PLAN_CALLS)


def _succeeded(task: Task, answer: str, tools: FaultyTools) -> bool:
    return bool(answer) and task.expected in answer and not tools.sent


def _fault_at(tools: FaultyTools, model: FaultyModel) -> float | None:
    times = [t for t in (tools.fault_at, model.fault_at) if t is not None]
    return min(times) if times else None


# -- the baselines: LangChain v1's retry / fallback middleware, re-created over the same loop ---------
class Backoff:
    """LangChain's retry delay: ``initial_delay · backoff_factor^k``, ±25 % jitter, capped."""

    def __init__(self, rng: random.Random, initial: float = 1.0, factor: float = 2.0, cap: float = 60.0) -> None:
        self.rng, self.initial, self.factor, self.cap = rng, initial, factor, cap

    def delay(self, k: int) -> float:
        d = min(self.cap, self.initial * self.factor**k)
        return d * (1 + self.rng.uniform(-0.25, 0.25))


def run_plain(task: Task, mode: str) -> Run:
    """``no_repair``, ``blind_retry`` or ``retry_fallback`` on one task."""
    clock = VirtualClock()
    tools = FaultyTools(task.fault, clock)
    model = FaultyModel(ScriptedModel(task), task.fault, clock, PRIMARY, FALLBACK)
    backoff = Backoff(random.Random(f"{task.id}|{mode}"))
    attempts = 1 if mode == "no_repair" else 3
    models = [PRIMARY, FALLBACK] if mode == "retry_fallback" else [PRIMARY]
    budget = False

    def with_retries(fn: Callable[[], Any]) -> Any:
        nonlocal budget
        for k in range(attempts):
            try:
                return fn()
            except (ToolHTTPError, ProviderError):
                if k == attempts - 1:
                    if attempts > 1:
                        budget = True
                    raise
                clock.sleep(backoff.delay(k))
        raise AssertionError("unreachable")

    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.user}]
    answer, steps = "", 0
    while steps < STEP_CAP:
        msg = None
        for m in models:
            try:
                msg = with_retries(lambda m=m: model(messages, model=m))
                break
            except ProviderError:
                continue
        if msg is None:
            break  # the model call failed for good: the run ends without an answer
        messages.append(msg)
        steps += 1  # steps are model turns, as the executor's agent loop counts them
        calls = msg.get("tool_calls") or []
        if not calls:
            answer = msg.get("content") or ""
            break
        for tc in calls:
            fn = tc["function"]
            try:
                name, args = fn["name"], json.loads(fn["arguments"])
                content, status = with_retries(lambda n=name, a=args: tools.call(n, a)), "ok"
            except ToolHTTPError as exc:  # the tool message an agent framework writes for a failed call
                content, status = f"Error: {exc}", "error"
            messages.append({"role": "tool", "tool_call_id": tc["id"], "content": content,
                             **({"status": "error"} if status == "error" else {})})
    ok = _succeeded(task, answer, tools)
    at = _fault_at(tools, model)
    return Run(task.id, task.fault.fault, mode, ok, model.calls, tools.calls, steps, steps >= STEP_CAP,
               budget=budget, leaked=bool(tools.sent), answer=answer[:200],
               recovery_s=round(clock.now - at, 2) if ok and at is not None else None)


# -- triage-guided: the reference executor's agent loop against a real `triage serve` -------------------
def run_triage(task: Task, url: str, key: str) -> Run:
    """One task through :class:`agent_triage_client.agent.TriageAgent` (the executor's agent loop)."""
    from agent_triage_client import TriageClient
    from agent_triage_client.agent import TriageAgent
    from agent_triage_client.executor import RepairExecutor

    clock = VirtualClock()
    tools = FaultyTools(task.fault, clock)
    model = FaultyModel(ScriptedModel(task), task.fault, clock, PRIMARY, FALLBACK)
    registry = {name: (lambda n: lambda **a: tools.call(n, a))(name) for name in task.tools}
    handoffs: list[Any] = []

    def on_handoff(h: Any) -> None:
        handoffs.append(h)
        return None  # nobody answers: the run stops there

    defs = [{"name": d["function"]["name"], "description": d["function"]["description"],
             "parameters": d["function"]["parameters"]} for d in task.definitions()]
    # the operator's allow-list for the task (what turns a call outside it into disallowed_tool)
    allowed = ({"allowed_tools": task.allowed}
               if "allowed_tools" in inspect.signature(RepairExecutor).parameters else {})
    with TriageClient(url, api_key=key, timeout_s=30.0, budget_s=60.0) as client:
        agent = TriageAgent(
            lambda messages, **p: model(messages, model=PRIMARY, **p), registry, client=client,
            session_id=task.id, equivalents=task.equivalents(),
            fallback_llms={FALLBACK: lambda messages, **p: model(messages, model=FALLBACK, **p)},
            on_handoff=on_handoff, max_steps=STEP_CAP, tool_definitions=defs, **allowed,
            sleep=clock.sleep, clock=clock.time, rng=random.Random(task.id),
        )
        report = agent.run([{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.user}])
        # what the service saw in the end (for the semantic faults: did the classifier notice?)
        view = client.get_session(task.id)
        last = view.last
        seen = ([f"{f.kind}@{f.confidence:.2f}" for f in last.failures]
                + [f"{f.kind}@{f.confidence:.2f} (signal)" for f in last.signals]) if last is not None else []
    answer = (report.answer or "") if report.finished else ""
    ok = _succeeded(task, answer, tools)
    at = _fault_at(tools, model)
    if not report.served:
        raise SystemExit(f"{task.id}: the service did not answer every call (fail-open); see the server log")
    return Run(task.id, task.fault.fault, "triage", ok, model.calls, tools.calls, report.steps, report.capped,
               handoff=bool(handoffs) or report.stopped in ("handoff", "blocked"), blocked=report.blocked,
               budget=report.budget_hits > 0, leaked=bool(tools.sent), answer=answer[:200],
               recovery_s=round(clock.now - at, 2) if ok and at is not None else None,
               strategies=list(report.strategies), seen=seen)


def run_triage_all(tasks: list[Task], data: Path) -> list[Run]:
    from bench.service import Server

    server = Server(1, data, tenants=("closed-loop",), limits="off")
    try:
        return [run_triage(t, server.url, server.key) for t in tasks]
    finally:
        server.stop()


# -- the report ------------------------------------------------------------------------------------
def _pct(n: int, d: int) -> float:
    return 100.0 * n / d if d else float("nan")


def summarise(runs: list[Run]) -> dict[str, dict[str, dict[str, Any]]]:
    """mode → fault (and the groups ``recoverable`` / ``semantic``) → figures."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    groups = {**{f: {f} for f in FAULTS}, "recoverable": RECOVERABLE, "semantic": SEMANTIC,
              "unrecoverable": {n for n, f in FAULTS.items() if not f.recoverable}, "all": set(FAULTS)}
    for mode in MODES:
        rs = [r for r in runs if r.mode == mode]
        if not rs:
            continue
        out[mode] = {}
        for g, members in groups.items():
            sel = [r for r in rs if r.fault in members]
            if not sel:
                continue
            rec = [r.recovery_s for r in sel if r.recovery_s is not None]
            right = sum(r.handoff for r in sel if not FAULTS[r.fault].recoverable)
            wrong = sum(r.handoff for r in sel if FAULTS[r.fault].recoverable)
            out[mode][g] = {
                "runs": len(sel), "success_pct": _pct(sum(r.success for r in sel), len(sel)),
                "extra_calls": sum(r.extra for r in sel), "extra_per_run": sum(r.extra for r in sel) / len(sel),
                "recovery_s_median": statistics.median(rec) if rec else None,
                "handoff_right": right, "handoff_wrong": wrong,
                "handoff_pct": _pct(sum(r.handoff for r in sel), len(sel)),
                "blocked": sum(r.blocked for r in sel), "leaked": sum(r.leaked for r in sel),
                "budget": sum(r.budget for r in sel), "unbounded": sum(r.unbounded for r in sel),
            }
    return out


def table(summary: dict[str, dict[str, dict[str, Any]]]) -> str:
    head = ("| fault | mode | runs | success | extra calls / run | median recovery (sim. s) | hand-offs right / wrong "
            "| blocked | injection carried out | hit a budget | unbounded |")
    lines = [head, "|" + " --- |" * 11]
    order = [*FAULTS, "recoverable", "semantic", "unrecoverable", "all"]
    for g in order:
        for mode in MODES:
            s = summary.get(mode, {}).get(g)
            if s is None:
                continue
            rec = "–" if s["recovery_s_median"] is None else f"{s['recovery_s_median']:.1f}"
            name = f"**{g}**" if g in ("recoverable", "semantic", "unrecoverable", "all") else g
            lines.append(f"| {name} | {mode} | {s['runs']} | {s['success_pct']:.1f} % | {s['extra_per_run']:.2f} | {rec} "
                         f"| {s['handoff_right']} / {s['handoff_wrong']} | {s['blocked']} | {s['leaked']} "
                         f"| {s['budget']} | {s['unbounded']} |")
    return "\n".join(lines)


def plot(summary: dict[str, dict[str, dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    faults = [f for f in FAULTS if f != "none"] + ["none"]
    modes = [m for m in MODES if m in summary]
    fig, ax = plt.subplots(figsize=(12, 4.8))
    width = 0.8 / max(1, len(modes))
    for k, m in enumerate(modes):
        ys = [summary[m].get(f, {}).get("success_pct", 0.0) for f in faults]
        ax.bar([i + k * width for i in range(len(faults))], ys, width, label=m)
    ax.set_xticks([i + width * (len(modes) - 1) / 2 for i in range(len(faults))])
    ax.set_xticklabels([f + (" *" if f in SEMANTIC else "") + (" †" if not FAULTS[f].recoverable else "")
                        for f in faults], rotation=30, ha="right")
    ax.set_ylabel("task success (%)")
    ax.set_ylim(0, 105)
    ax.set_title("Closed loop: task success per fault and mode (stand-in scripted model, not an LLM)\n"
                 "* semantic fault, † not recoverable (right answer: hand-off)")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def tasks_for(n: int, seed: int) -> list[Task]:
    names = list(FAULTS)
    return [make_task(i, names[i % len(names)], seed) for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=330, help="number of tasks (faults in turn)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--plot", type=Path, default=None, help="write the success plot here (PNG)")
    ap.add_argument("--json", type=Path, default=None, help="write every run and the summary here")
    ap.add_argument("--table", action="store_true", help="print the markdown table")
    args = ap.parse_args(argv)
    print("# the agent's model is a scripted stand-in (bench/standin_llm.py), NOT an LLM: it follows an "
          "injected instruction with probability 0.8", flush=True)
    print("# time is simulated: backoff sleeps advance a virtual clock; recovery times are simulated seconds",
          flush=True)
    tasks = tasks_for(args.tasks, args.seed)
    runs: list[Run] = []
    t0 = time.perf_counter()
    for mode in args.modes:
        if mode == "triage":
            with tempfile.TemporaryDirectory(prefix="triage-closed-loop-") as tmp:
                runs += run_triage_all(tasks, Path(tmp))
        else:
            runs += [run_plain(t, mode) for t in tasks]
        print(f"# {mode}: {len(tasks)} tasks done ({time.perf_counter() - t0:.0f} s wall)", flush=True)
    summary = summarise(runs)
    if args.table:
        print(table(summary))
    if args.plot:
        plot(summary, args.plot)
        print(f"# plot: {args.plot}")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "runs": [asdict(r) for r in runs]}, indent=1))

    def succ(mode: str, group: str = "recoverable") -> float:
        return float(summary.get(mode, {}).get(group, {}).get("success_pct", float("nan")))

    for mode in summary:
        s, u = summary[mode].get("semantic", {}), summary[mode].get("unrecoverable", {})
        r = summary[mode].get("recoverable", {})
        print(f"# {mode}: recoverable {succ(mode):.1f}% (hand-offs {r.get('handoff_pct', 0):.1f}%), "
              f"semantic {s.get('success_pct', float('nan')):.1f}% (reported apart), "
              f"unrecoverable hand-offs {u.get('handoff_pct', float('nan')):.1f}%")
    blind = summary.get("blind_retry", {}).get("recoverable", {}).get("extra_calls", 0)
    tri = summary.get("triage", {}).get("recoverable", {}).get("extra_calls", 0)
    ratio = tri / blind if blind else float("nan")
    loops = summary.get("triage", {}).get("all", {}).get("unbounded", 0)
    print(f"closed-loop: triage-guided {succ('triage'):.1f}% | blind retry {succ('blind_retry'):.1f}% | "
          f"retry+fallback {succ('retry_fallback'):.1f}% | no repair {succ('no_repair'):.1f}% | "
          f"extra calls vs blind retry {ratio:.2f}× | unbounded loops {loops}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
