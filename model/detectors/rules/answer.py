"""The run's answer: missing (``incomplete``) or blank (``empty_response``)."""

from __future__ import annotations

import re
from typing import ClassVar

from model.core.findings import Finding
from model.core.kinds import FailureKind
from model.core.schema import StepKind, StepStatus, Trace
from model.detectors.rules.common import ANSWER_KINDS, Rule, final_answer_step, make_finding


class EmptyResponseRule(Rule):
    """An answer with no content: a blank final answer or a blank assistant message.

    A blank ``llm_output`` that shares its ``source_index`` with tool calls is an assistant
    message that only called tools, not an empty response. A step whose importer says the content
    was not recorded (OpenTelemetry records message content only when switched on:
    ``metadata["content_recorded"] is False``) is unknown, not empty.
    """

    name: ClassVar[str] = "empty_response"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.EMPTY_RESPONSE,)

    _NULLISH = frozenset({"null", "undefined", "none", "nan"})

    def inspect(self, trace: Trace) -> list[Finding]:
        out: list[Finding] = []
        with_calls = {s.source_index for s in trace.steps if s.kind is StepKind.TOOL_CALL}
        for i, s in enumerate(trace.steps):
            if s.kind not in ANSWER_KINDS:
                continue
            if s.metadata.get("content_recorded") is False:
                continue
            text = s.content.strip()
            final = s.kind is StepKind.FINAL_OUTPUT
            if not text:
                if not final and s.source_index in with_calls:
                    continue
                conf = 0.95 if final else 0.85
                evidence = "the final answer is empty" if final else "the assistant message is empty"
            elif text.lower() in self._NULLISH:
                conf, evidence = 0.8, f"the answer is only {text!r}"
            else:
                continue
            out.append(
                make_finding(self, trace, i, FailureKind.EMPTY_RESPONSE, conf, evidence, {"final": final})
            )
        return out


_HANDOFF_TOOL = re.compile(r"transfer|hand_?off|escalat|human|agent_?handover", re.IGNORECASE)


def ended_by_design(trace: Trace) -> bool:
    """Whether a run with no final-answer step still ended as a conversation may end.

    A chat may end on the user's turn after the agent answered (the user's closing "Thanks!",
    τ-bench's ``###STOP###``), or on the result of a hand-off tool (``transfer_to_human_agents``):
    the agent passed the run on. Real runs end both ways, successful ones included (τ-bench
    airline: 147 of 200 on the user's turn, 48 on a transfer).
    """
    steps = trace.steps
    last = len(steps) - 1
    if steps[last].kind is StepKind.USER_INPUT:
        j = last
        while j >= 0 and steps[j].kind is StepKind.USER_INPUT:
            j -= 1
        return j >= 0 and steps[j].kind in ANSWER_KINDS and bool(steps[j].content.strip())
    if steps[last].kind is StepKind.TOOL_RESULT and steps[last].status is not StepStatus.ERROR:
        name = steps[last].tool_name or next(
            (s.tool_name for s in reversed(steps) if s.kind is StepKind.TOOL_CALL and s.call_id == steps[last].call_id),
            None)
        return bool(name and _HANDOFF_TOOL.search(name))
    return False


class IncompleteRule(Rule):
    """The run ends without a final answer; the finding is on the last step.

    Confidence 0.9 when the trace stops at a tool call, tool result, error or reasoning step (cut
    off mid-work), 0.75 otherwise. An empty trace gives no finding: there is no step to point at,
    nor does a run that ended as conversations may (:func:`ended_by_design`).
    """

    name: ClassVar[str] = "incomplete"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.INCOMPLETE,)

    _CUT_OFF = frozenset({StepKind.TOOL_CALL, StepKind.TOOL_RESULT, StepKind.ERROR, StepKind.LLM_REASONING})

    def inspect(self, trace: Trace) -> list[Finding]:
        if not trace.steps or final_answer_step(trace) is not None or ended_by_design(trace):
            return []
        last = len(trace.steps) - 1
        kind = trace.steps[last].kind
        conf = 0.9 if kind in self._CUT_OFF else 0.75
        return [
            make_finding(
                self,
                trace,
                last,
                FailureKind.INCOMPLETE,
                conf,
                f"the run ends with a {kind.value} step and no final answer",
                {"last_kind": kind.value},
            )
        ]


__all__ = [
    "EmptyResponseRule",
    "IncompleteRule",
    "ended_by_design",
]
