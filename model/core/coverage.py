"""How much of a trace's content the detectors could read, and what to switch on when it is missing.

Instrumentation libraries record message content only when told to: OpenTelemetry's GenAI
instrumentations leave it out by default (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``),
OpenLLMetry drops it with ``TRACELOOP_TRACE_CONTENT=false``, and OpenInference can replace it with
``__REDACTED__`` (``OPENINFERENCE_HIDE_INPUTS`` / ``OPENINFERENCE_HIDE_OUTPUTS`` and friends). A
trace read that way has steps whose text is unknown, which the detectors would otherwise read as
empty or as the model's words. :func:`assess` counts them (:class:`Coverage`) and says what to
set (``warnings``); the diagnosis then answers ``healthy: null`` when it found no failure and an
agent step's text is unknown (:func:`verdict`).

A step counts as *without content* when its importer says its text was not recorded
(``metadata["content_recorded"] is False``), or when it is an answer step (``llm_output``,
``llm_reasoning``, ``final_output``) with no text and no tool call from the same input element
(that one the ``empty_response`` rule reports as a failure). A step counts as *redacted* when
its whole text is a redaction placeholder (:data:`PLACEHOLDERS`); text partly masked by our own
redaction (``[REDACTED:email]`` inside a sentence) is content.

>>> from model.core.schema import Step, Trace
>>> t = Trace(steps=[Step(kind="user_input", content="__REDACTED__"),
...                  Step(kind="llm_output", content="", metadata={"content_recorded": False})])
>>> cov, warnings = assess(t)
>>> (cov.steps, cov.without_content, cov.redacted)
(2, 1, 1)
>>> verdict(cov, failures=0) is None
True
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field

from model.core.schema import Step, StepKind, Trace

#: Whole-text placeholders that libraries write instead of hidden content (case-insensitive).
PLACEHOLDERS: re.Pattern[str] = re.compile(
    r"\s*(?:__REDACTED__|\[REDACTED\]|<REDACTED>|REDACTED|\[HIDDEN\]|<HIDDEN>|\*{3,})\s*", re.IGNORECASE
)

#: Steps the agent itself produced: when one of them is unreadable the verdict is unknown.
AGENT_KINDS: frozenset[StepKind] = frozenset(
    {StepKind.LLM_OUTPUT, StepKind.LLM_REASONING, StepKind.FINAL_OUTPUT, StepKind.TOOL_CALL, StepKind.TOOL_RESULT}
)
_ANSWER_KINDS = frozenset({StepKind.LLM_OUTPUT, StepKind.LLM_REASONING, StepKind.FINAL_OUTPUT})

OTEL_CONTENT = ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true (SPAN_ONLY with "
                "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental)")
TRACELOOP_CONTENT = "TRACELOOP_TRACE_CONTENT=true"
OPENINFERENCE_CONTENT = "OPENINFERENCE_HIDE_INPUTS=false and OPENINFERENCE_HIDE_OUTPUTS=false"


class Coverage(BaseModel):
    """What the detectors could read: every step, those without content, those redacted."""

    steps: int = Field(default=0, ge=0, description="Steps imported.")
    without_content: int = Field(default=0, ge=0, description="Steps whose text was not recorded.")
    redacted: int = Field(default=0, ge=0, description="Steps whose whole text is a redaction placeholder.")
    unreadable_agent_steps: list[int] = Field(
        default_factory=list, description="Agent steps (indices) without content or redacted."
    )


def is_placeholder(text: str) -> bool:
    """Whether ``text`` is nothing but a redaction placeholder.

    >>> is_placeholder(" __REDACTED__ "), is_placeholder("mail [REDACTED:email]")
    (True, False)
    """
    return bool(text) and PLACEHOLDERS.fullmatch(text) is not None


def _without_content(step: Step, with_calls: set[int]) -> bool:
    if step.metadata.get("content_recorded") is False:
        return True
    return step.kind in _ANSWER_KINDS and not step.content.strip() and step.source_index not in with_calls


def assess(trace: Trace) -> tuple[Coverage, list[str]]:
    """Count the steps without content or redacted, and say which setting would record them."""
    with_calls = {s.source_index for s in trace.steps if s.kind is StepKind.TOOL_CALL}
    missing, redacted = _tally(trace.steps, 0, with_calls)
    return _report(trace, missing, redacted, any(s.kind is StepKind.USER_INPUT for s in trace.steps))


def assess_more(trace: Trace, memo: dict[str, Any]) -> tuple[Coverage, list[str]]:
    """:func:`assess` of a trace that grew since the last call, reading only its new steps.

    ``memo`` (JSON, kept by the caller between calls; updated) holds what the steps read so far
    gave. A step's count depends on itself and on whether its input element made a tool call, so
    the new steps are read alone while their ``source_index`` lies past every earlier step's (a
    session's appends); otherwise, or when the trace is shorter than what was read, the whole
    trace is read again.

    >>> from model.core.schema import Step
    >>> t, memo = Trace(steps=[Step(kind="user_input", content="hi", source_index=0)]), {}
    >>> _ = assess_more(t, memo)
    >>> t.steps.append(Step(kind="llm_output", content="", source_index=1))
    >>> assess_more(t, memo) == assess(t)
    True
    """
    n = len(trace.steps)
    upto, hi = int(memo.get("upto", 0)), int(memo.get("hi", -1))
    new = trace.steps[upto:] if upto <= n else trace.steps
    if upto > n or any(s.source_index <= hi for s in new):
        upto, hi, new = 0, -1, trace.steps
        memo.clear()
    with_calls = {s.source_index for s in new if s.kind is StepKind.TOOL_CALL}
    missing, redacted = _tally(new, upto, with_calls)
    memo.update(
        upto=n,
        hi=max([hi, *(s.source_index for s in new)]),
        missing=[*memo.get("missing", []), *missing],
        redacted=[*memo.get("redacted", []), *redacted],
        user=bool(memo.get("user")) or any(s.kind is StepKind.USER_INPUT for s in new),
    )
    return _report(trace, memo["missing"], memo["redacted"], memo["user"])


def _tally(steps: list[Step], first: int, with_calls: set[int]) -> tuple[list[int], list[int]]:
    """The indices (``first`` is the first step's) of the steps without content, and redacted."""
    missing: list[int] = []
    redacted: list[int] = []
    for i, s in enumerate(steps, first):
        if _without_content(s, with_calls):
            missing.append(i)
        elif is_placeholder(s.content) or (s.tool_args_raw is not None and is_placeholder(s.tool_args_raw)):
            redacted.append(i)
    return missing, redacted


def _report(trace: Trace, missing: list[int], redacted: list[int], has_user: bool) -> tuple[Coverage, list[str]]:
    unreadable = sorted(i for i in {*missing, *redacted} if trace.steps[i].kind in AGENT_KINDS)
    cov = Coverage(
        steps=len(trace.steps), without_content=len(missing), redacted=len(redacted),
        unreadable_agent_steps=unreadable,
    )
    warnings: list[str] = []
    fmt = str(trace.metadata.get("source_format", ""))
    if missing:
        where = f"{len(missing)} of {len(trace.steps)} steps have no recorded content (steps {_list(missing)})"
        if fmt == "openinference":
            hint = f"the instrumentation hid it: set {OPENINFERENCE_CONTENT} in the agent's environment"
        elif fmt == "otel":
            hint = (f"OpenTelemetry records message content only when asked: set {OTEL_CONTENT} "
                    f"(OpenLLMetry: {TRACELOOP_CONTENT}) in the agent's environment")
        else:
            hint = "send the messages' text (content capture on in the instrumentation)"
        warnings.append(f"{where}; {hint}")
    if redacted:
        where = f"{len(redacted)} of {len(trace.steps)} steps hold only a redaction placeholder (steps {_list(redacted)})"
        hint = (f"set {OPENINFERENCE_CONTENT} (and OPENINFERENCE_HIDE_INPUT_MESSAGES / "
                "OPENINFERENCE_HIDE_OUTPUT_MESSAGES=false)" if fmt in ("openinference", "")
                else "turn off the instrumentation's masking of message content")
        warnings.append(f"{where}; the detectors read the placeholder, not the text: {hint}")
    if trace.steps and (missing or redacted) and not has_user:
        warnings.append("the trace holds no user input, so checks against the user's request cannot run")
    return cov, warnings


def verdict(coverage: Coverage, *, failures: int) -> bool | None:
    """``False`` with a failure; ``None`` (unknown) with none when an agent step is unreadable; else ``True``."""
    if failures:
        return False
    return None if coverage.unreadable_agent_steps else True


def _list(indices: list[int], limit: int = 8) -> str:
    text = ", ".join(map(str, indices[:limit]))
    return text + (", …" if len(indices) > limit else "")


__all__ = ["AGENT_KINDS", "PLACEHOLDERS", "Coverage", "assess", "assess_more", "is_placeholder", "verdict"]
