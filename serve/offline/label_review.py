"""``triage label review --from-store``: the history's most uncertain traces, one at a time.

**Which traces first.** A stored diagnosis decides its verdict twice: the run scorer's
``failure_probability`` against the operating point (the tenant's relative one for the trace's task
type when the service has one, else the scorer's fixed one: the one it was judged at when the
run was flagged, since the ``runscore`` failure keeps it in ``details.threshold``; otherwise the
stored response does not keep it, and it is the operating point as of now), and each finding's
confidence against its kind's threshold (:data:`model.diagnosis.diagnoser.DEFAULT_THRESHOLDS`, 0.5). A
trace's **margin** is the smallest of those distances: ``|p − operating point|`` and
``|confidence − threshold|`` over its failures and signals. A trace with neither a probability nor a
finding has margin 1. Two orders (``--order``):

* ``margin`` — smallest margin first (newest first among equals);
* ``queue`` — :func:`model.training.agentmodel.queue.order_queue`: the uncertainty ``1 − 2·margin`` divided by
  one plus the runs of the trace's near-duplicate cluster (its ``metadata.task_id``, else its opening
  request: :func:`model.training.agentmodel.cv.group_runs`) already labelled or placed earlier, so that
  near-duplicate runs of one task count once.

:data:`DEFAULT_ORDER` is the one the measurement chose (docs/retraining.md, "Which runs to label").

**What it writes.** Every key that saves calls :meth:`serve.services.triage.TriageService.add_label`, the
method behind ``POST /v1/traces/{id}/labels``: the same rows, the same checks, the same effective
label (:mod:`serve.services.run_labels`). The author is ``cli:<user>`` unless given, ``author_type``
``human``.

``a`` (agree) takes the stored verdict: healthy → ok; failed → failed at the primary failure's step,
with its kind unless the run scorer raised it (its kind is named from the attributed step's shape).

``u`` (undo) withdraws the reviewer's newest label (:meth:`serve.services.triage.TriageService.undo_label`,
the method behind ``POST /v1/labels/undo``: the row is kept, marked withdrawn) and goes back to that
trace when it was labelled in this session; a label from an earlier session is withdrawn and its
trace comes back in the next run's queue.

**Resumable.** Traces that already carry a label by this author are left out of the queue, so
quitting (or the end of the input) and running it again carries on where it stopped; ``skip``
leaves a trace for next time.

The terminal loop is :func:`run_review` over a :class:`Keys` reader: one key press on a terminal,
one line per answer from a pipe (scripted review, tests).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TextIO

from model.core.errors import EndOfInput, InputError
from model.core.kinds import FailureKind
from model.core.schema import Trace
from model.data.labelling.review import KIND_KEYS, compact, legend
from model.diagnosis.diagnoser import DEFAULT_THRESHOLDS
from serve.schemas import LabelRequest, UndoLabelRequest
from serve.store.labels import LabelStore

#: Thresholds of the fused findings, by kind value.
_KIND_THRESHOLDS = {k.value: t for k, t in DEFAULT_THRESHOLDS.items()}

#: The review's default order: ``queue`` only where it beat random order at K = 50
#: (``python -m model.training.agentmodel.queue``; docs/retraining.md, "Which runs to label").
DEFAULT_ORDER = "margin"  # queue − random at K = 50: −0.031 [−0.050, −0.013] over five sets (reports/learning.md, 2026-12-05)
ORDERS = ("margin", "queue")

MAIN_KEYS = "foaksnuq"
MAIN_PROMPT = ("  [f] failed  [o] ok  [a] agree with the diagnosis  [k] kind  [s] step  [n] skip  [u] undo  "
               "[q] quit: ")


@dataclass(frozen=True)
class Measure:
    """What a trace's margin is measured on: ``on`` (``"failure probability"``, or the kind of the
    finding whose confidence it is), its ``value`` and the ``threshold`` it is set against (the
    operating point for the probability); ``on`` is ``None`` when there is nothing to measure."""

    on: str | None
    value: float | None = None
    threshold: float | None = None

    def text(self) -> str:
        """The CLI's header words for it."""
        if self.on is None or self.value is None or self.threshold is None:
            return "nothing to measure (no failure probability, no finding)"
        if self.on == PROBABILITY:
            return f"failure probability {self.value:.4f} vs operating point {self.threshold:.4f}"
        return f"{self.on} confidence {self.value:.4f} vs its threshold {self.threshold:.2f}"


PROBABILITY = "failure probability"


@dataclass(frozen=True)
class Candidate:
    """One stored trace in the review queue (the trace itself is read when it is shown)."""

    trace_id: str
    created_at: datetime
    margin: float
    basis: str  # what the margin is measured on, for the header line
    response: dict[str, Any]
    measure: Measure = Measure(None)  # the same, as figures (the console words them itself)


def margin(response: dict[str, Any], threshold: float | None) -> tuple[float, str]:
    """How close a stored diagnosis sits to deciding the other way, and on what (module docstring).

    >>> margin({"failure_probability": 0.40, "failures": [], "signals": []}, 0.45)[0]
    0.04999999999999999
    """
    best, measured = measure_margin(response, threshold)
    return best, measured.text()


def measure_margin(response: dict[str, Any], threshold: float | None) -> tuple[float, Measure]:
    """:func:`margin` with what it measured as figures (:class:`Measure`)."""
    best, measured = 1.0, Measure(None)
    found = list(response.get("failures") or []) + list(response.get("signals") or [])
    judged = next((f["details"]["threshold"] for f in found if f.get("detector") == "runscore"
                   and isinstance((f.get("details") or {}).get("threshold"), int | float)), None)
    p = response.get("failure_probability")
    if isinstance(p, int | float):
        thr = float(judged) if judged is not None else 0.5 if threshold is None else threshold
        best = abs(float(p) - thr)
        measured = Measure(PROBABILITY, float(p), thr)
    for f in found:
        if f.get("detector") == "runscore":
            continue  # its confidence is the failure probability, measured above
        conf = f.get("confidence")
        if not isinstance(conf, int | float):
            continue
        thr = _KIND_THRESHOLDS.get(str(f.get("kind")), 0.5)
        d = abs(float(conf) - thr)
        if d < best:
            best, measured = d, Measure(str(f.get("kind")), float(conf), thr)
    return best, measured


def review_queue(
    store: LabelStore, tenant: str, *, author: str, threshold_for: Callable[[str | None], float | None],
    order: str = DEFAULT_ORDER,
) -> tuple[list[Candidate], int]:
    """The tenant's traces still to review by ``author``, in ``order`` (module docstring), and how
    many that author has labelled already. ``threshold_for(agent)`` gives the operating point of the
    run's agent (``traces.agent``)."""
    if order not in ORDERS:
        raise InputError(f"order must be one of {', '.join(ORDERS)}; got {order!r}", path="order")
    queue: list[Candidate] = []
    done = 0
    cache: dict[str | None, float | None] = {}
    traces: list[dict[str, Any]] = []  # every stored trace (the clusters), queue ones first
    labelled: list[dict[str, Any]] = []
    for record in store.iter_history(tenant):
        if record["labels"]:
            labelled.append(record["trace"])
        if any((row.get("author") or "") == author for row in record["labels"]):
            done += 1
            continue
        response = record["response"] or {}
        agent = record.get("agent")
        if agent not in cache:
            cache[agent] = threshold_for(agent)
        m, measured = measure_margin(response, cache[agent])
        queue.append(Candidate(str(record["trace"]["id"]), record["created_at"], m, measured.text(), response,
                               measured))
        traces.append(record["trace"])
    order_by = sorted(range(len(queue)), key=lambda i: (queue[i].margin, -queue[i].created_at.timestamp(),
                                                        queue[i].trace_id))
    if order == "queue" and queue:
        from model.training.agentmodel.cv import group_runs
        from model.training.agentmodel.queue import order_queue

        every = [Trace.model_validate(t) for t in [traces[i] for i in order_by] + labelled]
        tasks = [t.metadata.get("task_id") for t in every]
        clusters = group_runs(every, [None if x is None else str(x) for x in tasks])
        n = len(order_by)
        counts: dict[str, int] = {}
        for c in clusters[n:]:
            counts[c] = counts.get(c, 0) + 1
        value = [max(0.0, 1.0 - 2.0 * queue[i].margin) for i in order_by]
        order_by = [order_by[j] for j in order_queue(None, clusters[:n], labelled=counts, value=value)]
    return [queue[i] for i in order_by], done


def _goal(trace: Trace, width: int) -> str:
    first = next((s.content for s in trace.steps if s.kind.value == "user_input" and s.content.strip()), "")
    text = " ".join(first.split())
    return text[:width] + "…" if len(text) > width else text or "(no user input)"


def _failure_text(f: dict[str, Any]) -> str:
    conf = f.get("confidence")
    where = f"@ step {f['step']}" if f.get("step") is not None else "(no step)"
    c = f" conf {conf:.2f}" if isinstance(conf, int | float) else ""
    return f"{f.get('kind')} {where}{c} [{f.get('detector', '?')}]"


def render(trace: Trace, c: Candidate, *, width: int = 110, max_steps: int = 24) -> str:
    """The compact view of one candidate: goal, diagnosis, attribution, and the steps (long traces
    keep the first ones and those around each failure and the attribution)."""
    r = c.response
    healthy = r.get("healthy")
    verdict = {True: "healthy", False: "FAILED", None: "unknown (content not recorded)"}[healthy]
    failures = list(r.get("failures") or [])
    lines = [f"goal: {_goal(trace, width - 6)}", f"diagnosis: {verdict}"]
    if r.get("failure_probability") is not None:
        lines[-1] += f"; failure probability {r['failure_probability']:.3f}"
    for f in failures:
        lines.append(f"  failure: {_failure_text(f)}")
    for f in list(r.get("signals") or [])[:3]:
        lines.append(f"  signal:  {_failure_text(f)}")
    att = r.get("attribution")
    marks = {int(f["step"]) for f in failures if isinstance(f.get("step"), int)}
    if isinstance(att, dict) and att.get("step") is not None:
        who = f", {att['speaker']}" if att.get("speaker") else ""
        lines.append(f"attribution: step {att['step']} (message {att.get('source_index')}{who}), "
                     f"p {float(att.get('probability') or 0):.2f}")
        marks.add(int(att["step"]))
    else:
        lines.append("attribution: none")
    lines.append(f"uncertainty: {c.basis} (margin {c.margin:.3f})")
    steps = compact(trace, width=width, marks=marks).splitlines()
    if len(steps) > max_steps:
        keep = set(range(3)) | {len(steps) - 1}
        for m in sorted(marks):
            keep |= set(range(max(0, m - 2), min(len(steps), m + 3)))
        shown: list[str] = []
        last = -1
        for i in sorted(keep):
            if i > last + 1:
                shown.append(f"     … {i - last - 1} step(s) …")
            shown.append(steps[i])
            last = i
        steps = shown
    return "\n".join(lines + ["steps (* = a failure or the attribution):"] + steps)


class Keys(Protocol):
    def key(self, prompt: str, allowed: str) -> str: ...
    def line(self, prompt: str) -> str: ...


class TerminalKeys:
    """One key press per answer on a terminal; one line per answer when stdin is not one.

    Enter comes back as ``"\\r"``. A key outside ``allowed`` (or, from a pipe, a line that is not
    one key) is refused with the list of keys, and asked again.
    """

    def __init__(self, out: TextIO | None = None, stdin: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.stdin = stdin or sys.stdin
        self.tty = self.stdin.isatty()

    def _raw(self) -> str:
        if self.tty:
            import click

            ch = click.getchar()
            self.out.write("\n")
            return "\r" if ch in ("\n", "\r") else ch
        got = self.stdin.readline()
        if not got:
            raise EndOfInput
        got = got.strip()
        self.out.write(got + "\n")  # echo, so that a scripted session reads like a typed one
        return got or "\r"

    def key(self, prompt: str, allowed: str) -> str:
        while True:
            self.out.write(prompt)
            self.out.flush()
            ch = self._raw()
            if len(ch) == 1 and ch in allowed:
                return ch
            names = " ".join("Enter" if c == "\r" else c for c in allowed)
            self.out.write(f"  not a key here: {ch!r}; press one of: {names}\n")

    def line(self, prompt: str) -> str:
        self.out.write(prompt)
        self.out.flush()
        if self.tty:
            got = self.stdin.readline()
            if not got:
                raise EndOfInput
            return got.strip()
        got = self.stdin.readline()
        if not got:
            raise EndOfInput
        self.out.write(got.strip() + "\n")
        return got.strip()


class LabelSink(Protocol):
    def add_label(self, tenant: str, trace_id: str, req: LabelRequest, *, key_id: str | None = None) -> Any: ...
    def undo_label(self, tenant: str, req: UndoLabelRequest, *, key_id: str | None = None) -> Any: ...
    def stored_trace(self, tenant: str, trace_id: str) -> Trace: ...


def _ask_step(keys: Keys, out: TextIO, n_steps: int) -> int | None:
    while True:
        got = keys.line(f"  step (0..{n_steps - 1}, Enter cancels): ")
        if not got:
            return None
        if got.isdigit() and int(got) < n_steps:
            return int(got)
        out.write(f"  not a step: {got!r}; a number in 0..{n_steps - 1}\n")


def _agree(response: dict[str, Any]) -> dict[str, Any] | str:
    healthy = response.get("healthy")
    if healthy is None:
        return "the diagnosis has no verdict (content not recorded): press f or o"
    if healthy:
        return {"failed": False}
    primary = response.get("primary") or {}
    kind = primary.get("kind")
    step = primary.get("step")
    if primary.get("detector") == "runscore":
        kind = None  # the run scorer names a kind from the attributed step's shape: a guess, not a finding
    return {"failed": True, "kind": kind if kind in {k.value for k in FailureKind} else None,
            "step": step if isinstance(step, int) else None}


def run_review(
    service: LabelSink,
    tenant: str,
    queue: list[Candidate],
    *,
    author: str,
    keys: Keys,
    out: TextIO,
    width: int = 110,
) -> tuple[int, int]:
    """Walk ``queue``: show each trace, read the reviewer's keys, save each verdict as it is given.
    Returns (labels saved, traces skipped). Stops at ``q`` or when the input ends."""
    saved = skipped = 0
    labelled: list[int] = []  # queue positions labelled in this session, in order (for undo)
    pos = 0
    while pos < len(queue):
        c = queue[pos]
        n = pos + 1
        pos += 1
        try:
            trace = service.stored_trace(tenant, c.trace_id)
        except LookupError:
            out.write(f"\n=== {n}/{len(queue)}  {c.trace_id}: deleted since the queue was read; next\n")
            continue
        out.write(f"\n=== {n}/{len(queue)}  {c.trace_id}  ({trace.task_type or 'no task type'}, "
                  f"{len(trace.steps)} steps, stored {c.created_at:%Y-%m-%d %H:%M})\n")
        out.write(render(trace, c, width=width) + "\n")
        kind: str | None = None
        step: int | None = None
        try:
            while True:
                if kind is not None or step is not None:
                    out.write(f"  pending: failed, kind {kind or '-'}, step {'-' if step is None else step} "
                              "([f] saves it)\n")
                ch = keys.key(MAIN_PROMPT, MAIN_KEYS)
                body: dict[str, Any] | None = None
                if ch == "q":
                    out.write(f"stopped; {saved} label(s) saved, rerun to carry on\n")
                    return saved, skipped
                if ch == "n":
                    skipped += 1
                    out.write("  skipped (shown again next time)\n")
                    break
                if ch == "u":
                    back = _undo(service, tenant, author, queue, labelled, out)
                    if back is None:
                        continue
                    saved -= 1
                    pos = back
                    break
                if ch == "k":
                    out.write(f"  kinds: {legend()}\n")
                    k = keys.key("  kind key, [Enter] cancels: ", "".join(KIND_KEYS) + "\r")
                    if k != "\r":
                        kind = KIND_KEYS[k].value
                    continue
                if ch == "s":
                    step = _ask_step(keys, out, len(trace.steps)) if trace.steps else None
                    continue
                if ch == "f":
                    body = {"failed": True, "kind": kind, "step": step}
                elif ch == "o":
                    if kind is not None or step is not None:
                        out.write("  ok: the pending kind / step are dropped\n")
                    body = {"failed": False}
                elif ch == "a":
                    got = _agree(c.response)
                    if isinstance(got, str):
                        out.write(f"  {got}\n")
                        continue
                    body = got
                assert body is not None
                # the request body the API would get, validated by the same model
                req = LabelRequest.model_validate({**body, "author": author, "author_type": "human"})
                try:
                    resp = service.add_label(tenant, c.trace_id, req)
                except InputError as exc:
                    out.write(f"  not saved: {exc}\n")
                    kind = step = None
                    continue
                except LookupError as exc:
                    out.write(f"  not saved: {exc}\n")
                    break
                saved += 1
                labelled.append(n - 1)
                eff = resp.label
                said = "failed" if req.failed else "ok"
                if req.kind is not None:
                    said += f", {req.kind}"
                if req.step is not None:
                    said += f" @ step {req.step}"
                out.write(f"  saved: {said} (effective label: {'failed' if eff.failed else 'ok'} "
                          f"by {eff.author})\n")
                break
        except EndOfInput:
            out.write(f"\nend of input; {saved} label(s) saved, rerun to carry on\n")
            return saved, skipped
    out.write(f"\nnothing left to review ({saved} saved, {skipped} skipped)\n")
    return saved, skipped


def _undo(service: LabelSink, tenant: str, author: str, queue: list[Candidate], labelled: list[int],
          out: TextIO) -> int | None:
    """Withdraw the author's newest label; the queue position to go back to (the trace it was on,
    when labelled in this session), else None (stay on the current trace)."""
    try:
        resp = service.undo_label(tenant, UndoLabelRequest(author=author))
    except LookupError as exc:
        out.write(f"  nothing to undo: {exc}\n")
        return None
    w = resp.withdrawn
    said = "failed" if w.failed else "ok"
    if w.kind is not None:
        said += f", {w.kind}"
    if w.step is not None:
        said += f" @ step {w.step}"
    out.write(f"  undone: {said} on {resp.trace_id} (withdrawn, kept in the store)\n")
    if labelled and queue[labelled[-1]].trace_id == resp.trace_id:
        return labelled.pop()
    out.write("  (labelled in an earlier session: it is back in the queue next run)\n")
    return None


__all__ = ["DEFAULT_ORDER", "ORDERS", "Candidate", "Keys", "Measure", "TerminalKeys", "margin", "measure_margin", "render", "review_queue", "run_review"]
