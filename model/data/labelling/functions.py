"""Labelling functions: the rule detectors (and a few independent heuristics) as voters.

Each labelling function (LF) looks at a trace and votes ``(kind, step, confidence)``; it abstains on
everything it does not vote for. The rule detectors are the main LFs; the heuristics below vote
on the same kinds from other evidence (step status fields, error-type names, the text of an answer)
so that the label model has agreement to weigh, not one vote per kind.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from model.core.kinds import FailureKind
from model.core.schema import StepKind, StepStatus, Trace
from model.detectors.catalog import TRACE_DETECTORS, make_detector


@dataclass(frozen=True)
class Vote:
    """One LF's vote: a failure of ``kind`` at ``step`` with the LF's own confidence."""

    lf: str
    kind: FailureKind
    step: int
    source_index: int
    confidence: float


#: Rule detectors used as LFs (the classifier is not one: weak labels must not teach it itself).
RULE_LFS: tuple[str, ...] = (
    "empty_response", "incomplete", "provider_error", "refusal", "tool_error", "timeout", "rate_limited",
    "malformed_call", "disallowed_tool", "loop", "ignored_error", "assumption_violated",
)

_HTTP_ERR = re.compile(r"\b(?:HTTP\s*)?(?:4\d\d|5\d\d)\b.*?(?:error|unavailable|forbidden|not found|bad gateway)"
                       r"|Traceback \(most recent call last\)|\bexitcode: [1-9]|\bexception\b", re.I)
_TIMEOUT = re.compile(r"timed? ?out|timeout|deadline exceeded|超时", re.I)
_RATE = re.compile(r"\b429\b|too many requests|rate.?limit|限流|quota exceeded", re.I)
_REFUSE = re.compile(
    r"\b(?:I(?:'m| am)? (?:sorry,? (?:but )?)?(?:can(?:'|no)t|cannot|won'?t be able to|am unable to|'m unable to|"
    r"must decline|'m not able to)|unable to (?:help|assist|comply))|抱歉.{0,6}(?:无法|不能|没法)|我(?:无法|不能)(?:协助|帮|提供|执行)",
    re.I)


def _status_lf(trace: Trace) -> list[Vote]:
    """Failed / timed-out tool results by their status fields and error type names."""
    out = []
    for i, s in enumerate(trace.steps):
        if s.kind is not StepKind.TOOL_RESULT:
            continue
        et = (s.error_type or "").lower()
        if s.status is StepStatus.TIMEOUT or "timeout" in et:
            out.append(Vote("status_fields", FailureKind.TIMEOUT, i, s.source_index, 0.9))
        elif s.status is StepStatus.ERROR:
            kind = FailureKind.RATE_LIMITED if "rate" in et or _RATE.search(s.content[:300]) else FailureKind.TOOL_ERROR
            out.append(Vote("status_fields", kind, i, s.source_index, 0.85))
    return out


def _text_lf(trace: Trace) -> list[Vote]:
    """Error, timeout, rate-limit and refusal wording in the step text, whatever the status says."""
    out = []
    for i, s in enumerate(trace.steps):
        head = s.content[:400]
        if s.kind is StepKind.TOOL_RESULT:
            if _RATE.search(head):
                out.append(Vote("text_patterns", FailureKind.RATE_LIMITED, i, s.source_index, 0.7))
            elif _TIMEOUT.search(head):
                out.append(Vote("text_patterns", FailureKind.TIMEOUT, i, s.source_index, 0.6))
            elif _HTTP_ERR.search(head):
                out.append(Vote("text_patterns", FailureKind.TOOL_ERROR, i, s.source_index, 0.6))
        elif s.kind in (StepKind.FINAL_OUTPUT, StepKind.LLM_OUTPUT):
            if _REFUSE.search(head[:200]):
                out.append(Vote("text_patterns", FailureKind.REFUSAL, i, s.source_index, 0.6))
            if not s.content.strip() and not any(
                    x.kind is StepKind.TOOL_CALL and x.source_index == s.source_index for x in trace.steps):
                out.append(Vote("text_patterns", FailureKind.EMPTY_RESPONSE, i, s.source_index, 0.8))
    return out


HEURISTIC_LFS: dict[str, Callable[[Trace], list[Vote]]] = {
    "status_fields": _status_lf,
    "text_patterns": _text_lf,
}


#: LF settings that vote on step-level facts rather than the diagnosis's judgement of the run:
#: any identical repeat (the diagnosis counts only short cycles, model.detectors.rules.loop.LoopRule).
STEP_LEVEL_PARAMS: dict[str, dict[str, Any]] = {"loop": {"cycle": 1 << 30}}


def lf_names() -> list[str]:
    return [n for n in RULE_LFS if n in TRACE_DETECTORS] + list(HEURISTIC_LFS)


def apply_lfs(trace: Trace, *, allowed_tools: list[str] | None = None) -> list[Vote]:
    """Every LF's votes on ``trace`` (``allowed_tools`` enables the disallowed_tool rule)."""
    votes: list[Vote] = []
    for name in RULE_LFS:
        if name not in TRACE_DETECTORS:
            continue
        params: dict[str, Any] = {}
        if name == "disallowed_tool":
            if allowed_tools is None:
                continue
            params["allowed_tools"] = allowed_tools
        params |= STEP_LEVEL_PARAMS.get(name, {})
        det = make_detector(name, **params)
        # the step-level fact the generator plants (a malformed call, corrected later or not)
        inspect = getattr(det, "inspect_steps", det.inspect)
        for f in inspect(trace):
            if f.step is None:
                continue
            votes.append(Vote(name, f.kind, f.step, trace.steps[f.step].source_index, f.confidence))
    for fn in HEURISTIC_LFS.values():
        votes.extend(fn(trace))
    return votes


__all__ = ["HEURISTIC_LFS", "RULE_LFS", "Vote", "apply_lfs", "lf_names"]
