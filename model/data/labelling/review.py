"""What `triage label review` needs besides the terminal: the queue, the key map, a compact view.

The terminal loop lives in ``serve/cli/datasets.py``; everything it decides is here so that it can
be tested without a terminal.
"""

from __future__ import annotations

from model.core.kinds import FailureKind
from model.core.schema import LabelSource, Trace

#: One key per failure kind (the legend the review shows).
KIND_KEYS: dict[str, FailureKind] = {
    "t": FailureKind.TOOL_ERROR, "o": FailureKind.TIMEOUT, "r": FailureKind.RATE_LIMITED,
    "p": FailureKind.PROVIDER_ERROR, "m": FailureKind.MALFORMED_CALL, "e": FailureKind.EMPTY_RESPONSE,
    "i": FailureKind.INCOMPLETE, "f": FailureKind.REFUSAL, "l": FailureKind.LOOP, "g": FailureKind.IGNORED_ERROR,
    "h": FailureKind.HALLUCINATION, "x": FailureKind.OFF_TOPIC, "c": FailureKind.CONTEXT_LOSS,
    "v": FailureKind.ASSUMPTION_VIOLATED, "d": FailureKind.DISALLOWED_TOOL, "u": FailureKind.UNSAFE_OUTPUT,
}


def legend() -> str:
    return "  ".join(f"{k}={v.value}" for k, v in KIND_KEYS.items())


def needs_review(t: Trace, *, everything: bool = False) -> bool:
    """A trace the reviewer should see: weak labels flagged uncertain (or any non-human trace with
    ``everything``)."""
    if t.labels is None:
        return everything
    if t.labels.source is LabelSource.HUMAN:
        return False
    if everything:
        return True
    return t.labels.source is LabelSource.RULE_VOTE and bool(t.labels.provenance.get("review"))


def review_queue(traces: list[Trace], done: set[str], *, everything: bool = False) -> list[Trace]:
    """The traces still to review, in file order (``done``: ids that already have a human label)."""
    return [t for t in traces if t.id not in done and needs_review(t, everything=everything)]


def compact(t: Trace, width: int = 110, marks: set[int] | None = None) -> str:
    """One line per step: index, kind, speaker/tool, status, the start of the content; ``*`` marks
    the steps in ``marks`` (default: the steps of the trace's labelled failures)."""
    if marks is None:
        marks = {f.step for f in t.labels.failures if f.step is not None} if t.labels else set()
    lines = []
    for i, s in enumerate(t.steps):
        who = s.tool_name or s.speaker or ""
        st = f" [{s.status.value}]" if s.status and s.status.value != "ok" else ""
        body = s.content
        if s.kind.value == "tool_call":
            body = s.tool_args_raw or ""
        body = " ".join(body.split())
        head = f"{'*' if i in marks else ' '}{i:3d} {s.kind.value:<12} {who[:18]:<18}{st} "
        room = max(10, width - len(head))
        lines.append(head + (body[:room] + "…" if len(body) > room else body))
    return "\n".join(lines)


__all__ = ["KIND_KEYS", "compact", "legend", "needs_review", "review_queue"]
