"""A real agent's first week with nothing named (issue 31, item 7), against a real ``triage serve``.

``python -m bench.first_week --sets DIR [--limit N] [--splits 3] [--work DIR] [--out reports/first_week.md]``

``DIR`` holds JSON lines ``{trace, format, failed, agent, task}`` (``python -m model.data.export_first_week
DIR`` writes the seven developer sets; any labelled runs can be fed the same way). ``agent`` and ``task``
score the answers and never reach the service. Every run is stripped of what names its set or its label
(:mod:`bench.first_week_input`; a leak stops the bench) and posted over HTTP with one API key, no agent
name, no options, to a server with every default. Phases, each on a fresh server (its own data folder):

``week``   every run, shuffled within its set (seed 0), the sets interleaved; then every run again as GenAI
           spans with content capture off (``/v1/diagnose``, OTLP/JSON): agents, zero-shot, false alarms,
           and whether a run gets the same agent through JSON and spans;
``blocks`` the same runs in blocks of 100 runs of one agent: agents and false alarms in that order;
``hard``   two agents with the same tools and model and different prompts; one whose prompt changes
           mid-week;
``split<k>`` half of each agent's tasks posted and labelled (``POST /v1/traces/{id}/labels``, run-level
           ``failed`` only), ``triage retrain`` (exit code, traceback), the other half posted as new runs
           and scored; the cheap learners fitted on the same labelled runs.

Resumable: each phase appends its answers to ``<work>/<phase>/answers.jsonl`` as it goes, and a phase
started again reopens its server's data folder and posts only what is missing (the store holds the rest);
``--fresh`` starts over. The report is :mod:`bench.first_week_report`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from bench import live
from bench.first_week_input import (
    Run,
    blocks,
    content_off_spans,
    hard_cases,
    interleaved,
    local_trace,
    read_sets,
    split_tasks,
    stripped,
)

ROOT = live.ROOT
#: The refusal codes issue 31 gives a retrain (counted in its output when it prints them).
REFUSAL = re.compile(r"\b(too_few_runs|one_class|too_few_task_groups|corrupt_run)\b")
TENANT = "firstweek"
#: The service's model poll (``TRIAGE_MODEL_POLL_S``, default 10 s): a retrain's promotion is served after it.
MODEL_POLL_S = 10.0


def triage(data: Path, *args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    """``triage ARGS`` with the phase's data folder (the CLI the user runs), output captured."""
    env = {**os.environ, "TRIAGE_DATA_DIR": str(data), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "serve.cli.main", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


class Phase:
    """One phase's folder: the server's data, its API key, the answers so far."""

    def __init__(self, work: Path, name: str) -> None:
        self.dir = work / name
        self.data = self.dir / "data"
        self.answers_path = self.dir / "answers.jsonl"
        self.data.mkdir(parents=True, exist_ok=True)

    @property
    def done(self) -> bool:
        return (self.dir / "done").exists()

    def mark_done(self) -> None:
        (self.dir / "done").write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    def answers(self) -> list[dict[str, Any]]:
        if not self.answers_path.exists():
            return []
        out = []
        for line in self.answers_path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:  # the last line of an interrupted run: posted again
                    break
        return out

    def append(self, rec: dict[str, Any]) -> None:
        with self.answers_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")

    def key(self) -> str:
        path = self.dir / "api.key"
        if not path.exists():
            out = triage(self.data, "keys", "create", "--tenant", TENANT, "--label", "first week")
            if out.returncode != 0:
                raise RuntimeError(f"triage keys create: {out.stderr[-2000:]}")
            path.write_text(out.stdout.strip().splitlines()[-1])
        return path.read_text().strip()

    @contextmanager
    def server(self) -> Iterator[Client]:
        """The phase's server (every default); on a clean exit, its agents as ``GET /v1/agents`` lists
        them are kept in ``agents.json`` (the report follows their aliases: runs an agent took over by
        consolidation are now its runs)."""
        key = self.key()
        proc, base = live.start(self.data, {}, ready="/readyz")  # every default
        try:
            with httpx.Client(base_url=base, timeout=300, headers={"Authorization": f"Bearer {key}"}) as c:
                client = Client(c)
                yield client
                self.keep_agents(client)
        finally:
            live.stop(proc)

    def keep_agents(self, c: Client, part: str | None = None) -> None:
        """``GET /v1/agents`` now, in ``agents.json`` (or ``agents-<part>.json``: the agents as they were
        when that part's runs had all been posted)."""
        (self.dir / (f"agents-{part}.json" if part else "agents.json")).write_text(c.agents(), encoding="utf-8")


class Client:
    """The user's HTTP calls: a run posted whole, a run-level label. 429s wait as the answer says."""

    def __init__(self, c: httpx.Client) -> None:
        self.c = c

    def _send(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        for _ in range(100):
            r = self.c.request(method, path, json=body)
            if r.status_code != 429:
                return r
            time.sleep(float(r.headers.get("retry-after") or 1))
        return r

    def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return self._send("POST", path, body)

    def diagnose(self, trace: Any, fmt: str) -> httpx.Response:
        body: dict[str, Any] = {"trace": trace}
        if fmt != "auto":
            body["format"] = fmt
        return self._post("/v1/diagnose", body)

    def label(self, trace_id: str, failed: bool) -> httpx.Response:
        return self._post(f"/v1/traces/{trace_id}/labels", {"failed": failed})

    def agents(self) -> str:
        """``GET /v1/agents``: the tenant's agents and their aliases, as JSON text (429s wait)."""
        r = self._send("GET", "/v1/agents")
        r.raise_for_status()
        return r.text


def answer_record(run: Run, resp: httpx.Response, **extra: Any) -> dict[str, Any]:
    """What the report reads of one answer (``agent``/``agent_source`` when the service sends them)."""
    rec: dict[str, Any] = {"key": run.key, "set": run.set, "truth": run.agent, "task": run.task,
                           "failed": run.failed, "status": resp.status_code, **extra}
    if resp.status_code != 200:
        rec["error"] = resp.text[:500]
        return rec
    d = resp.json()
    basis = d.get("failure_probability_basis") or {}
    rec.update({
        "trace_id": d.get("trace_id"), "schema": d.get("schema_version"),
        "agent": d.get("agent"), "agent_source": d.get("agent_source"), "basis_agent": basis.get("agent"),
        "basis_model": basis.get("model"), "p": d.get("failure_probability"),
        "p_zero_shot": basis.get("zero_shot_probability"), "healthy": d.get("healthy"),
        "kinds": sorted({f.get("kind") for f in d.get("failures") or []}),
        # the run's recovered task, wherever the service puts it (issue 31 item 3; not in schema 1.3)
        "task_group": next((src[k] for src in (d, basis) for k in ("task_group", "task", "task_id")
                            if src.get(k) is not None), None),
    })
    return rec


def _bar() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), transient=False)


def post_all(phase: Phase, c: Client, runs: Sequence[Run], part: str, *, label: bool = False,
             spans: bool = False, bar: Progress | None = None) -> None:
    """Post ``runs`` in order (skipping those this phase already answered for ``part``), labelling each
    when ``label``; ``spans``: as content-off GenAI spans instead of the stripped JSON."""
    done = {(a["part"], a["key"]) for a in phase.answers() if a.get("status") == 200 and (not label or a.get("labelled"))}
    todo = [r for r in runs if (part, r.key) not in done]
    task = bar.add_task(f"{phase.dir.name}/{part}", total=len(runs), completed=len(runs) - len(todo)) if bar else None
    for r in todo:
        payload = stripped(r)  # raises before a leak is posted
        fmt = r.format
        if spans:
            payload, fmt = content_off_spans(r, local_trace(payload, r.format)), "otel"
        t0 = time.perf_counter()
        resp = c.diagnose(payload, fmt)
        rec = answer_record(r, resp, part=part, ms=round(1000 * (time.perf_counter() - t0), 1))
        if label and resp.status_code == 200:
            lr = c.label(rec["trace_id"], r.failed)
            rec["labelled"] = lr.status_code == 200
            if lr.status_code != 200:
                rec["label_error"] = lr.text[:300]
        phase.append(rec)
        if bar is not None and task is not None:
            bar.advance(task)


def run_retrain(phase: Phase) -> dict[str, Any]:
    """``triage retrain`` on the phase's store, once (its record cached): exit code, traceback, output."""
    path = phase.dir / "retrain.json"
    if path.exists():
        return dict(json.loads(path.read_text()))
    t0 = time.perf_counter()
    out = triage(phase.data, "retrain", "--tenant", TENANT)
    tb = "Traceback (most recent call last)" in out.stderr or "Traceback (most recent call last)" in out.stdout
    rec = {"rc": out.returncode, "traceback": tb, "seconds": round(time.perf_counter() - t0, 1),
           "stdout": out.stdout[-6000:], "stderr_tail": out.stderr[-3000:],
           "refusals": dict(Counter(REFUSAL.findall(out.stdout + out.stderr))),
           "last_error_line": next((ln for ln in reversed(out.stderr.splitlines()) if ln.strip()), "")}
    path.write_text(json.dumps(rec, indent=1))
    return rec


# ---- the phases -------------------------------------------------------------------------------------


def phase_week(work: Path, runs: Sequence[Run], bar: Progress | None, spans: bool = True) -> None:
    p = Phase(work, "week")
    if p.done:
        return
    order = interleaved(runs, 0)
    with p.server() as c:
        post_all(p, c, order, "json", bar=bar)
        p.keep_agents(c, "json")  # the JSON view is scored as it stood before the spans came
        if spans:
            post_all(p, c, order, "spans", spans=True, bar=bar)
    p.mark_done()


def phase_blocks(work: Path, runs: Sequence[Run], bar: Progress | None, size: int = 100) -> None:
    p = Phase(work, "blocks")
    if p.done:
        return
    with p.server() as c:
        post_all(p, c, blocks(runs, size, 0), "json", bar=bar)
    p.mark_done()


def phase_hard(work: Path, runs: Sequence[Run], bar: Progress | None) -> None:
    hard = hard_cases(runs)
    if not hard:
        return
    p = Phase(work, "hard")
    if p.done:
        return
    same = interleaved([r for r in hard if r.set == "hard_same_tools"], 0)
    change = [r for r in hard if r.set == "hard_prompt_change"]  # already in its week's order
    order: list[Run] = []
    for i in range(max(len(same), len(change))):
        order.extend(x[i] for x in (same, change) if i < len(x))
    with p.server() as c:
        post_all(p, c, order, "json", bar=bar)
    p.mark_done()


def phase_split(work: Path, runs: Sequence[Run], k: int, bar: Progress | None,
                wait: Callable[[float], None] = time.sleep) -> None:
    p = Phase(work, f"split{k}")
    if p.done:
        return
    train_tasks = split_tasks(runs, k)
    train = interleaved([r for r in runs if r.task in train_tasks], k)
    test = interleaved([r for r in runs if r.task not in train_tasks], k)
    with p.server() as c:
        post_all(p, c, train, "train", label=True, bar=bar)
        fresh = not (p.dir / "retrain.json").exists()
        run_retrain(p)
        if fresh:
            wait(2 * MODEL_POLL_S + 1)  # the service re-reads the activations every poll
        post_all(p, c, test, "test", bar=bar)
    p.mark_done()


def run_bench(sets: Path, work: Path, *, limit: int | None, splits: int, phases: Sequence[str],
              only_sets: Sequence[str] | None = None) -> dict[str, Any]:
    """Every phase asked for; returns the timings (s) per phase."""
    runs = read_sets(sets, limit=limit, sets=only_sets)
    for r in runs:  # the strip check over every run before anything is posted
        stripped(r)
    timings: dict[str, float] = {}
    with _bar() as bar:
        for name in phases:
            t0 = time.perf_counter()
            if name == "week":
                phase_week(work, runs, bar)
            elif name == "blocks":
                phase_blocks(work, runs, bar)
            elif name == "hard":
                phase_hard(work, runs, bar)
            elif name == "splits":
                for k in range(splits):
                    phase_split(work, runs, k, bar)
            timings[name] = round(time.perf_counter() - t0, 1)
    path = work / "timings.json"  # seconds per phase, summed over resumed invocations
    total: dict[str, float] = json.loads(path.read_text()) if path.exists() else {}
    for phase, secs in timings.items():
        total[phase] = round(total.get(phase, 0.0) + secs, 1)
    path.write_text(json.dumps(total))
    return {"runs": len(runs), "timings": total}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.first_week", description=__doc__.split("\n")[0])
    ap.add_argument("--sets", type=Path, required=True, help="folder of <set>.jsonl")
    ap.add_argument("--limit", type=int, default=None, help="the first N tasks of each set (whole tasks)")
    ap.add_argument("--only", default="", help="comma-separated sets (file stems); default all")
    ap.add_argument("--splits", type=int, default=3)
    ap.add_argument("--phases", default="week,blocks,hard,splits")
    ap.add_argument("--work", type=Path, default=ROOT / ".first_week", help="answers and servers' data (resumable)")
    ap.add_argument("--fresh", action="store_true", help="start over (delete --work)")
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "first_week.md")
    a = ap.parse_args(argv)
    if a.fresh and a.work.exists():
        shutil.rmtree(a.work)
    a.work.mkdir(parents=True, exist_ok=True)
    phases = [s for s in a.phases.split(",") if s]
    only = [s for s in a.only.split(",") if s] or None
    t0 = time.perf_counter()
    info = run_bench(a.sets, a.work, limit=a.limit, splits=a.splits, phases=phases, only_sets=only)
    from bench.first_week_report import write_report

    cmd = "python -m bench.first_week " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report(a.work, a.sets, a.out, limit=a.limit, splits=a.splits, only_sets=only, command=cmd,
                 timings=info["timings"], total_s=time.perf_counter() - t0)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
