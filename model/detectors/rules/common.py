"""What every rule shares: the :class:`Rule` base, how a finding is made, the final answer step.

Kept small on purpose; a helper that only one family uses lives in that family's module.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from model.core.findings import Finding
from model.core.graph import safe_dumps
from model.core.kinds import FailureKind
from model.core.schema import Step, StepKind, Trace

#: Confidence of a failure that a later step recovered from (a signal under any sane threshold).
RECOVERED_CONFIDENCE = 0.3

ANSWER_KINDS = frozenset({StepKind.LLM_OUTPUT, StepKind.FINAL_OUTPUT})
AGENT_ACTIONS = frozenset({StepKind.LLM_OUTPUT, StepKind.FINAL_OUTPUT, StepKind.TOOL_CALL})


def excerpt(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def make_finding(
    rule: Rule,
    trace: Trace,
    step: int,
    kind: FailureKind,
    confidence: float,
    evidence: str,
    details: dict[str, Any],
) -> Finding:
    s = trace.steps[step]
    return Finding(
        detector=rule.name,
        kind=kind,
        confidence=confidence,
        step=step,
        source_index=s.source_index,
        span_id=s.span_id,
        evidence=evidence,
        details=details,
    )


_CONTROL_WORD = re.compile(r"^\W*TERMINATE\W*$", re.IGNORECASE)


def final_answer_step(trace: Trace) -> int | None:
    """The step holding the run's final answer, or ``None``.

    The last ``final_output`` step (when it is only a control word such as ``TERMINATE``, the
    assistant message right before it); without one, a non-empty ``llm_output`` that ends the
    trace (importers of plain chat logs can't always tell the last assistant message is the answer).

    >>> from model.data.builder import make_trace
    >>> final_answer_step(make_trace(None, seed=0))
    6
    """
    steps = trace.steps
    for i in range(len(steps) - 1, -1, -1):
        if steps[i].kind is StepKind.FINAL_OUTPUT:
            if _CONTROL_WORD.match(steps[i].content):
                # "TERMINATE" (AG2 group chats) ends the run; the answer is the message before it
                for j in range(i - 1, -1, -1):
                    if steps[j].kind in ANSWER_KINDS and steps[j].content.strip():
                        return j
                    if steps[j].kind is not StepKind.LLM_REASONING:
                        break
            return i
    if steps and steps[-1].kind is StepKind.LLM_OUTPUT and steps[-1].content.strip():
        return len(steps) - 1
    return None


class Rule:
    """Shared plumbing: parameters are the constructor's keyword arguments, stored as given."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    kinds: ClassVar[tuple[FailureKind, ...]]
    _params: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:  # rules without parameters take none
        pass

    def get_params(self) -> dict[str, Any]:
        """The constructor's parameters as given (``type(d)(**d.get_params())`` rebuilds it)."""
        return {p: getattr(self, p) for p in self._params}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def inspect(self, trace: Trace) -> list[Finding]:  # pragma: no cover - overridden
        raise NotImplementedError


def step_text(s: Step) -> str:
    if s.kind is StepKind.TOOL_CALL:
        if s.tool_args is not None:
            return safe_dumps(s.tool_args)
        return s.tool_args_raw or ""
    return s.content


__all__ = [
    "AGENT_ACTIONS",
    "ANSWER_KINDS",
    "RECOVERED_CONFIDENCE",
    "Rule",
    "excerpt",
    "final_answer_step",
    "make_finding",
    "step_text",
]
