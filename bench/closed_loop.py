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
import functools
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
                msg = with_retries(functools.partial(model, messages, model=m))
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
                content, status = with_retries(functools.partial(tools.call, name, args)), "ok"
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

    clock = VirtualClock()
    tools = FaultyTools(task.fault, clock)
    model = FaultyModel(ScriptedModel(task), task.fault, clock, PRIMARY, FALLBACK)
    registry = {name: (lambda n: lambda **a: tools.call(n, a))(name) for name in task.tools}
    handoffs: list[Any] = []

    def on_handoff(h: Any) -> None:
        handoffs.append(h)
        return None  # nobody answers: the run stops there

    with TriageClient(url, api_key=key, timeout_s=30.0, budget_s=60.0) as client:
        agent = TriageAgent(
            lambda messages, **p: model(messages, model=PRIMARY, **p), registry, client=client,
            session_id=task.id, equivalents=task.equivalents(),
            fallback_llms={FALLBACK: lambda messages, **p: model(messages, model=FALLBACK, **p)},
            on_handoff=on_handoff, max_steps=STEP_CAP, tool_definitions=[d["function"] for d in task.definitions()],  # the sessions API's flat shape
            allowed_tools=task.allowed,  # the operator's allow-list: a call outside it is disallowed_tool
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
    """One row per fault (and group): success per mode, then what blind retry and triage-guided spent."""
    def cell(mode: str, g: str, key: str, fmt: str = "{:.1f} %") -> str:
        v = summary.get(mode, {}).get(g, {}).get(key)
        return "–" if v is None else fmt.format(v)

    lines = ["| fault | runs | no repair | blind retry | retry+fallback | triage-guided | extra calls / run "
             "(blind → triage) | median recovery, sim. s (blind → triage) | triage hand-offs right / wrong "
             "| injection carried out (blind / triage) | hit a budget (blind / triage) | unbounded (blind / triage) |",
             "|" + " --- |" * 12]
    for g in [*FAULTS, "recoverable", "semantic", "unrecoverable", "all"]:
        t = summary.get("triage", {}).get(g) or summary.get("blind_retry", {}).get(g)
        if t is None:
            continue
        name = f"**{g}**" if g not in FAULTS else g + (" *" if g in SEMANTIC else "") + (
            " †" if not FAULTS[g].recoverable else "")
        lines.append(
            f"| {name} | {t['runs']} | " + " | ".join(cell(m, g, "success_pct") for m in MODES)
            + f" | {cell('blind_retry', g, 'extra_per_run', '{:.2f}')} → {cell('triage', g, 'extra_per_run', '{:.2f}')}"
            + f" | {cell('blind_retry', g, 'recovery_s_median')} → {cell('triage', g, 'recovery_s_median')}".replace(" %", "")
            + f" | {cell('triage', g, 'handoff_right', '{}')} / {cell('triage', g, 'handoff_wrong', '{}')}"
            + f" | {cell('blind_retry', g, 'leaked', '{}')} / {cell('triage', g, 'leaked', '{}')}"
            + f" | {cell('blind_retry', g, 'budget', '{}')} / {cell('triage', g, 'budget', '{}')}"
            + f" | {cell('blind_retry', g, 'unbounded', '{}')} / {cell('triage', g, 'unbounded', '{}')} |")
    return "\n".join(lines)


def plot(summary: dict[str, dict[str, dict[str, Any]]], path: Path) -> None:
    """Left: task success per recoverable fault (and the control); right: what each mode did on the
    faults whose right answer is a hand-off."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in MODES if m in summary]
    rec = [f for f, spec in FAULTS.items() if spec.recoverable and f != "none"] + ["none"]
    unrec = [f for f, spec in FAULTS.items() if not spec.recoverable]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 5), gridspec_kw={"width_ratios": [3.2, 1.3]})
    width = 0.8 / max(1, len(modes))
    for k, m in enumerate(modes):
        ys = [summary[m].get(f, {}).get("success_pct", 0.0) for f in rec]
        ax.bar([i + k * width for i in range(len(rec))], ys, width, label=m)
    ax.set_xticks([i + width * (len(modes) - 1) / 2 for i in range(len(rec))])
    ax.set_xticklabels([f + (" *" if f in SEMANTIC else "") for f in rec], rotation=30, ha="right")
    ax.set_ylabel("task success (%)")
    ax.set_ylim(0, 105)
    ax.set_title("recoverable faults: task success (* semantic, reported apart)", fontsize=10)
    labels = [f"{f}\nhand-off" for f in unrec] + ["poisoned_result\ninjection carried out"]
    for k, m in enumerate(modes):
        ys = [summary[m].get(f, {}).get("handoff_pct", 0.0) for f in unrec]
        p = summary[m].get("poisoned_result", {})
        ys.append(100.0 * p.get("leaked", 0) / p["runs"] if p.get("runs") else 0.0)
        bx.bar([i + k * width for i in range(len(labels))], ys, width, label=m)
    bx.set_xticks([i + width * (len(modes) - 1) / 2 for i in range(len(labels))])
    bx.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    bx.set_ylabel("% of runs")
    bx.set_ylim(0, 105)
    bx.set_title("not recoverable: right answer is a hand-off", fontsize=10)
    handles, names = ax.get_legend_handles_labels()
    fig.legend(handles, names, loc="upper center", ncol=len(modes), fontsize=9, bbox_to_anchor=(0.5, 0.93))
    fig.suptitle("Closed loop, one fault per task (the agent's model is a scripted stand-in, not an LLM)",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.88))
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
    if "triage" in summary and "blind_retry" in summary:
        # the same ratio without the loop fault (blind retry's loops run to the cap: ~94 extra calls
        # each), and per successful task (the extra calls a recovery cost)
        def extra(mode: str, faults: set[str], ok_only: bool = False) -> tuple[int, int]:
            sel = [r for r in runs if r.mode == mode and r.fault in faults and (r.success or not ok_only)]
            return sum(r.extra for r in sel), len(sel)

        no_loop = RECOVERABLE - {"loop_search"}
        (tb, _), (bb, _) = extra("triage", no_loop), extra("blind_retry", no_loop)
        (te, ts), (be, bs) = extra("triage", RECOVERABLE, True), extra("blind_retry", RECOVERABLE, True)
        per = (te / ts) / (be / bs) if ts and bs and be else float("nan")
        print(f"# extra calls vs blind retry: {ratio:.2f}× on the recoverable faults; "
              f"{tb / bb if bb else float('nan'):.2f}× without loop_search; "
              f"{per:.2f}× per successful task ({te / ts if ts else float('nan'):.2f} vs "
              f"{be / bs if bs else float('nan'):.2f})")
    loops = summary.get("triage", {}).get("all", {}).get("unbounded", 0)
    print(f"closed-loop: triage-guided {succ('triage'):.1f}% | blind retry {succ('blind_retry'):.1f}% | "
          f"retry+fallback {succ('retry_fallback'):.1f}% | no repair {succ('no_repair'):.1f}% | "
          f"extra calls vs blind retry {ratio:.2f}× | unbounded loops {loops}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
