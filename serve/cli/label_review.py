"""``triage label review --from-store``'s terminal loop: the label queue
(:mod:`serve.services.label_queue`) shown one run at a time, one key per answer.

:func:`run_review` walks a queue over a :class:`Keys` reader (:class:`TerminalKeys`: one key press
on a terminal, one line per answer from a pipe: scripted review, tests); every label it saves or
withdraws goes through the service's ``add_label`` / ``undo_label`` (the code of ``POST
/v1/traces/{id}/labels`` and ``POST /v1/labels/undo``). The keys and what they save:
:mod:`serve.services.label_queue`'s docstring.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol, TextIO

from model.core.errors import EndOfInput, InputError
from model.core.schema import Trace
from serve.schemas import LabelRequest, UndoLabelRequest
from serve.services.label_queue import KIND_KEYS, MAIN_KEYS, MAIN_PROMPT, Candidate, agree, compact, legend


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
                    got = agree(c.response)
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
                said = _said(req.failed, req.kind, req.step)
                out.write(f"  saved: {said} (effective label: {'failed' if eff.failed else 'ok'} "
                          f"by {eff.author})\n")
                break
        except EndOfInput:
            out.write(f"\nend of input; {saved} label(s) saved, rerun to carry on\n")
            return saved, skipped
    out.write(f"\nnothing left to review ({saved} saved, {skipped} skipped)\n")
    return saved, skipped


def _said(failed: bool | None, kind: object, step: int | None) -> str:
    """A label as the review prints it: ``failed, loop @ step 4``, ``ok``."""
    said = "failed" if failed else "ok"
    if kind is not None:
        said += f", {kind}"
    if step is not None:
        said += f" @ step {step}"
    return said


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
    said = _said(w.failed, w.kind, w.step)
    out.write(f"  undone: {said} on {resp.trace_id} (withdrawn, kept in the store)\n")
    if labelled and queue[labelled[-1]].trace_id == resp.trace_id:
        return labelled.pop()
    out.write("  (labelled in an earlier session: it is back in the queue next run)\n")
    return None


__all__ = ["Keys", "LabelSink", "TerminalKeys", "render", "run_review"]
