"""The first week's input: labelled runs read from JSON lines, stripped of what names their set or their
label, ordered as a week, and turned into GenAI spans with content capture off.

A line is ``{"trace", "format", "failed", "agent", "task", "spans"}`` (``python -m model.data.export_first_week``
writes the seven developer sets so); ``agent`` (the configuration) and ``task`` are the truth, used only to
score; ``spans`` (optional) what a GenAI exporter says of its LLM calls, read only to write the run as
content-off spans. :func:`strip` removes from ``trace`` everything that names the set or the label — the trace id,
``task_type``, ``labels``, ``metadata.task_id`` and each raw format's label and provenance fields (the sets'
READMEs) — and :func:`check_stripped` fails loudly when one survives. Who&When's per-message speaker
``name`` is content and stays.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.core.schema import Trace
from model.data.genai_spans import otlp_content_off
from model.importers import load_trace

#: Keys that name the run, its set or its task, at the top of a trace (every format).
ID_KEYS = ("id", "trace_id", "task_type", "labels", "session_id", "conversation_id")
#: Each raw format's label and provenance fields (the sets' READMEs): stripped at the top of a trace and
#: from its ``metadata``. τ-bench: task_id, trial, reward, info; τ²: reward_info, termination_reason,
#: evaluation_criteria; AgentProcessBench: final_label, step_labels, ground_truth, query_index,
#: sample_index; SWE: instance_id, resolved, info (exit status, patch, model stats); Who&When:
#: ground_truth, mistake_agent, mistake_step, mistake_reason, is_correct, question_ID, level; WebShop:
#: reward, goal; Reflexion: outcome, correct_answer; ours: set, task, failed, derived, file, line.
LABEL_KEYS = frozenset({
    "task_id", "trial", "reward", "info", "reward_info", "termination_reason", "evaluation_criteria",
    "final_label", "step_labels", "ground_truth", "query_index", "sample_index", "instance_id", "resolved",
    "mistake_agent", "mistake_step", "mistake_reason", "is_correct", "question_ID", "level", "goal",
    "outcome", "correct_answer", "set", "task", "failed", "derived", "file", "line", "labels", "task_type",
})


class LeakError(AssertionError):
    """A stripped trace still names its set or its label."""


@dataclass(frozen=True)
class Run:
    """One labelled run of a set: the line as read (``trace`` unstripped), its set and position."""

    set: str
    n: int
    trace: dict[str, Any] | list[Any]
    format: str
    failed: bool
    agent: str
    task: str
    #: what a GenAI exporter says of the run's LLM calls (``model``, ``provider``, ``operation``): read
    #: only to write it as content-off spans (:func:`content_off_spans`)
    spans: dict[str, Any] | None = None

    @property
    def key(self) -> str:
        return f"{self.set}:{self.n}"

    def original_id(self) -> str | None:
        t = self.trace
        return str(t["id"]) if isinstance(t, dict) and t.get("id") is not None else None


def read_sets(folder: Path, *, limit: int | None = None, sets: Sequence[str] | None = None) -> list[Run]:
    """Every ``*.jsonl`` under ``folder`` (its stem names the set), or the runs of the first ``limit`` tasks
    of each configuration (whole tasks, in the file's order, so that a split keeps trials together)."""
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"{folder}: no *.jsonl (python -m model.data.export_first_week {folder})")
    out: list[Run] = []
    for f in files:
        if sets and f.stem not in sets:
            continue
        tasks: dict[str, dict[str, None]] = defaultdict(dict)
        with f.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh):
                if not line.strip():
                    continue
                d = json.loads(line)
                missing = {"trace", "failed", "agent", "task"} - set(d)
                if missing:
                    raise ValueError(f"{f}:{n + 1}: missing {sorted(missing)}")
                task, seen = str(d["task"]), tasks[str(d["agent"])]
                if limit is not None and task not in seen and len(seen) >= limit:
                    continue
                seen[task] = None
                spans = d.get("spans")
                if spans is not None and not isinstance(spans, dict):
                    raise ValueError(f"{f}:{n + 1}: spans must be an object {{model, provider, operation}}")
                out.append(Run(f.stem, n, d["trace"], str(d.get("format") or "auto"), bool(d["failed"]),
                               str(d["agent"]), task, spans))
    return out


# ---- strip ----------------------------------------------------------------------------------------


def strip(run: Run) -> dict[str, Any] | list[Any]:
    """The trace as a stranger's agent would post it: no id, task type, labels, task id or label fields."""
    t = copy.deepcopy(run.trace)
    if isinstance(t, list):  # a bare list of messages or spans carries no run-level field
        return t
    for k in [*ID_KEYS, *LABEL_KEYS]:
        t.pop(k, None)
    meta = t.get("metadata")
    if isinstance(meta, dict):
        for k in [*ID_KEYS, *LABEL_KEYS]:
            meta.pop(k, None)
        if not meta:
            t.pop("metadata")
    return t


def check_stripped(run: Run, payload: dict[str, Any] | list[Any]) -> None:
    """Raise :class:`LeakError` when ``payload`` still names the set or the label: a stripped key at the
    top or in ``metadata``, the original (set-prefixed) id or the task key anywhere in its text, or a
    native step's label fields."""
    where = run.key
    if isinstance(payload, dict):
        for k in (*ID_KEYS, *LABEL_KEYS):
            if k in payload:
                raise LeakError(f"{where}: {k!r} survived at the top of the trace")
            meta = payload.get("metadata")
            if isinstance(meta, dict) and k in meta:
                raise LeakError(f"{where}: metadata.{k} survived")
        for i, s in enumerate(payload.get("steps") or []):
            if isinstance(s, dict) and isinstance(s.get("metadata"), dict):
                bad = set(s["metadata"]) & (LABEL_KEYS - {"info"})
                if bad:
                    raise LeakError(f"{where}: steps[{i}].metadata {sorted(bad)} survived")
    text = json.dumps(payload, ensure_ascii=False)
    oid = run.original_id()
    if oid and oid in text:
        raise LeakError(f"{where}: the run's original id {oid!r} survived in the trace's text")
    if f'"{run.task}"' in text:
        raise LeakError(f"{where}: the task key {run.task!r} survived in the trace's text")


def stripped(run: Run) -> dict[str, Any] | list[Any]:
    """:func:`strip`, then :func:`check_stripped` (never posts a leak)."""
    p = strip(run)
    check_stripped(run, p)
    return p


# ---- order ----------------------------------------------------------------------------------------


def interleaved(runs: Sequence[Run], seed: int = 0) -> list[Run]:
    """Runs shuffled within each set (``seed``), the sets interleaved round-robin (a set that runs out
    drops out): every agent's week in one stream."""
    by: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        by[r.set].append(r)
    queues = []
    for s in sorted(by):
        q = list(by[s])
        random.Random(f"{seed}:{s}").shuffle(q)
        queues.append(q)
    out: list[Run] = []
    i = 0
    while any(queues):
        for q in queues:
            if len(q) > i:
                out.append(q[i])
        i += 1
        if all(len(q) <= i for q in queues):
            break
    return out


def blocks(runs: Sequence[Run], size: int = 100, seed: int = 0) -> list[Run]:
    """Blocks of ``size`` runs of one configuration (truth ``agent``), configurations in turn, each in
    its shuffled order: one agent at a time, then the next (the streams' hardest case)."""
    by: dict[str, list[Run]] = defaultdict(list)
    for r in interleaved(runs, seed):
        by[r.agent].append(r)
    out: list[Run] = []
    pos = dict.fromkeys(by, 0)
    while any(pos[a] < len(by[a]) for a in by):
        for a in sorted(by):
            out.extend(by[a][pos[a]:pos[a] + size])
            pos[a] += size
    return out


def split_tasks(runs: Sequence[Run], seed: int) -> set[str]:
    """The training half: half of each configuration's tasks (rounded down, at least one when it has
    two), drawn with ``seed``. A task shared by two configurations (τ² airline's τ-airline scenarios) is
    drawn once, by the first configuration that has it, so it is never on both sides."""
    tasks: dict[str, list[str]] = defaultdict(list)
    for r in runs:
        if r.task not in tasks[r.agent]:
            tasks[r.agent].append(r.task)
    decided: dict[str, bool] = {}
    for a in sorted(tasks):
        free = sorted(t for t in tasks[a] if t not in decided)
        random.Random(f"{seed}:{a}").shuffle(free)
        have = sum(decided[t] for t in tasks[a] if t in decided)
        want = max(len(tasks[a]) // 2 - have, 0)
        for i, t in enumerate(free):
            decided[t] = i < want
    return {t for t, train in decided.items() if train}


# ---- hard cases ---------------------------------------------------------------------------------------

#: The second prompt of the "same tools and model" case: the τ-airline runs of half its tasks get this
#: system message instead of their own (the same tools and model, an agent with other instructions).
OTHER_PROMPT = (
    "You are SkyDesk, the airline's refunds and disruptions assistant. You only handle delayed and "
    "cancelled flights, compensation, travel certificates and baggage claims. Ask for the user id and "
    "the reservation number first. Never book new flights: hand the customer over to sales for that. "
    "Before any change to a reservation, restate what will change and ask the customer to confirm with "
    "an explicit yes. Compensation follows the schedule: $100 a passenger for a cancelled flight, $50 "
    "for a delay, certificates only for silver and gold members or insured reservations. Be brief."
)
#: The prompt change mid-week: a new version of the system message for the second half of the runs.
CHANGED_PROMPT = ("You are a helpful and harmless assistant. Think step by step, search before you answer, "
                  "and keep the final answer short.")


def _with_system(trace: dict[str, Any], text: str) -> dict[str, Any]:
    t = copy.deepcopy(trace)
    msgs = t["messages"]
    if msgs and msgs[0].get("role") == "system":
        msgs[0] = {**msgs[0], "content": text}
    else:
        msgs.insert(0, {"role": "system", "content": text})
    return t


def hard_cases(runs: Sequence[Run]) -> list[Run]:
    """The cases the real sets lack, made from them (empty when the sets they need are absent):

    * ``same_tools_a`` / ``same_tools_b``: τ-airline's runs, half its tasks as they are and half with
      :data:`OTHER_PROMPT` as the system message — two agents, the same tools and model;
    * ``prompt_change``: AgentProcessBench's runs, the second half (in posting order) with
      :data:`CHANGED_PROMPT` — one agent whose prompt changed mid-week (truth: one agent).
    """
    out: list[Run] = []
    tau = [r for r in runs if r.agent == "tau_airline" and isinstance(r.trace, dict) and "messages" in r.trace]
    tasks = sorted({r.task for r in tau})
    b_tasks = set(tasks[1::2])
    for r in tau:
        b = r.task in b_tasks
        tr = _with_system(r.trace, OTHER_PROMPT) if b else r.trace  # type: ignore[arg-type]
        out.append(Run("hard_same_tools", r.n, tr, r.format, r.failed, "same_tools_b" if b else "same_tools_a",
                       r.task))
    apb = interleaved([r for r in runs if r.agent == "agentprocessbench"
                       and isinstance(r.trace, dict) and "messages" in r.trace])
    for i, r in enumerate(apb):
        later = i >= len(apb) // 2
        tr = _with_system(r.trace, CHANGED_PROMPT) if later else r.trace  # type: ignore[arg-type]
        out.append(Run("hard_prompt_change", r.n, tr, r.format, r.failed, "prompt_change", r.task))
    return out


def content_off_spans(run: Run, trace: Trace) -> dict[str, Any]:
    """``trace`` (``run`` stripped and read) as an OpenTelemetry GenAI exporter sends it with content capture
    off, its default (:func:`model.data.genai_spans.otlp_content_off`): the model, provider and operation
    of ``run.spans``, tool names and errors, no messages, no agent name, no ``service.name``; the OTLP
    trace id a hash of the run's key."""
    sp = run.spans or {}
    return otlp_content_off(trace, model=sp.get("model"), provider=sp.get("provider"),
                            operation=str(sp.get("operation") or "chat"),
                            trace_id=hashlib.sha256(run.key.encode("utf-8")).hexdigest()[:32])


def local_trace(payload: dict[str, Any] | list[Any], fmt: str) -> Trace:
    """The stripped payload read here as the service reads it (for the spans and the cheap learners)."""
    return load_trace(payload, format=fmt if fmt != "auto" else "auto")


def truth(runs: Iterable[Run]) -> dict[str, str]:
    return {r.key: r.agent for r in runs}


__all__ = ["CHANGED_PROMPT", "ID_KEYS", "LABEL_KEYS", "LeakError", "OTHER_PROMPT", "Run", "blocks", "check_stripped",
           "content_off_spans", "hard_cases", "interleaved", "local_trace", "read_sets", "split_tasks", "strip",
           "stripped", "truth"]
