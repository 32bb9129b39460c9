"""The classifier's input: how one step and its context become one text (versioned).

This is the ONE function training and serving share (:func:`step_text`). Its settings travel in the
exported artefact's metadata (:meth:`RepresentationConfig.to_dict`), and serving refuses an
artefact whose representation version it does not know, so training and serving cannot drift apart.

Layout of a text (version ``rep-v1``)::

    <kind> [@speaker] [tool] [status] [repeat N] : <step content, head … tail>
    [prev] <the step before>
    [goal] <the first user input>
    [prev] <the one before that> …

The step comes first, then what most often decides it (the latest result, the goal), so that a
tokenizer truncating at ``max_length`` drops older context before any of those. Long tool payloads keep their head and tail (errors and "no results" live at both
ends). ``repeat N`` counts earlier identical calls (tool + normalised arguments) or identical
results, which a short window of context could not otherwise show (loops).

>>> from model.schema import Step, Trace
>>> t = Trace(steps=[Step(kind="user_input", content="Find flights to Oslo"),
...                  Step(kind="llm_output", content="Here are some hotels in Rome.", source_index=1)])
>>> print(step_text(t, 1))
llm_output : Here are some hotels in Rome.
[prev] user_input : Find flights to Oslo
[goal] Find flights to Oslo
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from model.errors import InputError
from model.schema import Step, StepKind, StepStatus, Trace

REPRESENTATION_VERSION = "rep-v1"
KNOWN_VERSIONS = (REPRESENTATION_VERSION,)


@dataclass(frozen=True)
class RepresentationConfig:
    """Character budgets of :func:`step_text` (stored in the artefact's metadata).

    Parameters
    ----------
    step_chars:
        Characters kept of the step itself (head and tail when longer).
    goal_chars:
        Characters kept of the first user input (the goal).
    context_steps:
        How many preceding steps are shown, most recent first.
    context_chars:
        Characters kept of each preceding step.
    """

    version: str = REPRESENTATION_VERSION
    step_chars: int = 300
    goal_chars: int = 160
    context_steps: int = 3
    context_chars: int = 140

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RepresentationConfig:
        """Rebuild from metadata; an unknown version or field is an :class:`InputError`."""
        version = data.get("version")
        if version not in KNOWN_VERSIONS:
            raise InputError(
                f"unknown input-representation version {version!r}; this code knows {list(KNOWN_VERSIONS)}",
                path="representation.version",
            )
        fields = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - fields)
        if unknown:
            raise InputError(f"unknown representation fields {unknown}", path="representation")
        return cls(**data)


DEFAULT_CONFIG = RepresentationConfig()


def clip(text: str, limit: int) -> str:
    """Keep ``text`` within ``limit`` characters: the head and the tail, joined by `` … ``.

    >>> clip("abcdefghij", 7)
    'abc … j'
    """
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    if limit <= 5:
        return text[:limit]
    keep = limit - 3
    head = (keep * 2 + 2) // 3
    tail = keep - head
    return f"{text[:head]} … {text[len(text) - tail:]}" if tail > 0 else text[:head]


def _call_key(step: Step) -> str | None:
    if step.kind is StepKind.TOOL_CALL:
        if step.tool_args is not None:
            args = json.dumps(step.tool_args, sort_keys=True, ensure_ascii=False, default=str)
        else:
            args = " ".join((step.tool_args_raw or step.content).split())
        return f"call:{step.tool_name}:{args}"
    if step.kind is StepKind.TOOL_RESULT:
        return f"result:{step.tool_name}:{' '.join(step.content.split())}"
    return None


def _body(step: Step) -> str:
    if step.kind is StepKind.TOOL_CALL:
        if step.tool_args is not None:
            args = json.dumps(step.tool_args, ensure_ascii=False, separators=(",", ":"), default=str)
        elif step.tool_args_raw is not None:
            args = "<raw> " + step.tool_args_raw
        else:
            args = ""
        return f"{args} {step.content}".strip()
    return step.content


def _head(step: Step, repeats: int) -> str:
    parts = [step.kind.value]
    if step.speaker:
        parts.append(f"@{step.speaker}")
    if step.tool_name:
        parts.append(step.tool_name)
    if step.status is not None and step.status is not StepStatus.OK:
        parts.append(f"[{step.status.value}]")
    if step.error_type:
        parts.append(f"[{step.error_type}]")
    if repeats:
        parts.append(f"[repeat {repeats}]")
    return " ".join(parts)


def _line(step: Step, limit: int, repeats: int = 0) -> str:
    body = clip(_body(step), limit)
    return f"{_head(step, repeats)} : {body}" if body else f"{_head(step, repeats)} :"


def _goal(trace: Trace, index: int) -> str:
    for step in trace.steps[: index + 1]:
        if step.kind is StepKind.USER_INPUT and step.content.strip():
            return step.content
    return ""


def step_text(trace: Trace, index: int, config: RepresentationConfig = DEFAULT_CONFIG) -> str:
    """The classifier's text for ``trace.steps[index]``, reading only that step and earlier ones.

    Reading nothing after ``index`` is what lets the real-time path score a new step alone, with
    the same text the whole-trace path gives it.

    Raises
    ------
    InputError
        ``index`` is outside the trace.
    """
    if not 0 <= index < len(trace.steps):
        raise InputError(f"step index {index} is outside a trace of {len(trace.steps)} steps", path="step")
    step = trace.steps[index]
    key = _call_key(step)
    repeats = 0
    if key is not None:
        repeats = sum(1 for s in trace.steps[:index] if s.kind is step.kind and _call_key(s) == key)
    first = max(0, index - config.context_steps)
    prevs = ["[prev] " + _line(p, config.context_chars) for p in reversed(trace.steps[first:index])]
    lines = [_line(step, config.step_chars, repeats), *prevs[:1]]
    goal = _goal(trace, index)
    if goal:
        lines.append("[goal] " + clip(goal, config.goal_chars))
    lines.extend(prevs[1:])
    return "\n".join(lines)


def trace_texts(trace: Trace, config: RepresentationConfig = DEFAULT_CONFIG) -> list[str]:
    """:func:`step_text` for every step of ``trace``, in order."""
    return [step_text(trace, i, config) for i in range(len(trace.steps))]


__all__ = [
    "DEFAULT_CONFIG",
    "KNOWN_VERSIONS",
    "REPRESENTATION_VERSION",
    "RepresentationConfig",
    "clip",
    "step_text",
    "trace_texts",
]
