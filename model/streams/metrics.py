"""Metric extraction: named per-step and per-trace series from a :class:`~model.core.schema.Trace`.

Agents degrade slowly (latency creeps, answers lengthen or shrink, tool errors climb) before any
single answer looks broken; these series are what the stream detectors watch. A stream is keyed by
:class:`StreamKey` ``(tenant, name, agent)``, the run's agent as :mod:`model.core.agents` resolves it,
because two agents (a greeting bot and a code agent) have different baselines.

Per-step series (each point carries its ``step`` index into ``Trace.steps`` and ``source_index``):

=================  ===========================================================================
``llm_latency_ms``  latency of LLM steps (reasoning, output, final answer; an error step that
                    names no tool is a failed LLM call)
``tool_latency_ms`` latency of tool calls / results (and error steps that name a tool)
``output_chars``    characters of each assistant answer (``llm_output``, ``final_output``)
``tokens_in``       prompt tokens, where reported
``tokens_out``      completion tokens, where reported
``tool_error``      1 for a tool result with status error / timeout (or an error step naming a
                    tool), else 0 for every tool result
``refusal``         1 for an answer the ``refusal`` rule flags at or above ``refusal_threshold``,
                    else 0 for every answer (absent when that detector is not registered)
``meta.<key>``      numeric values of ``Step.metadata`` (nested keys joined with dots)
=================  ===========================================================================

Per-trace values: ``steps``, ``llm_latency_ms`` / ``tool_latency_ms`` / ``latency_ms`` (sums),
``tokens_in`` / ``tokens_out`` (sums), ``output_chars`` (the final answer's length),
``tool_calls``, ``tool_errors``, ``tool_error_rate``, ``refusal`` (0/1),
``failure_probability`` (the run's failure probability, the run scorer's when one is loaded:
``None`` until one is passed), and ``meta.<key>`` for the numeric values of ``Trace.metadata`` the caller sent
(e.g. ``{"confidence": 0.82}`` gives ``meta.confidence``). A value the trace does not carry is
``None``, never a made-up 0.

>>> from model.core.schema import Step, Trace
>>> t = Trace(task_type="qa", metadata={"confidence": 0.8}, steps=[
...     Step(kind="user_input", content="2+2?"),
...     Step(kind="final_output", content="4", latency_ms=420.0, tokens_out=1, source_index=1)])
>>> m = extract_metrics(t)
>>> m.per_trace["llm_latency_ms"], m.per_trace["output_chars"], m.per_trace["meta.confidence"]
(420.0, 1.0, 0.8)
>>> m.stream_values("acme", "qa-bot")[StreamKey("acme", "llm_latency_ms", "qa-bot")]
420.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from model.core.agents import resolve_agent
from model.core.errors import InputError
from model.core.kinds import FailureKind
from model.core.schema import Step, StepKind, StepStatus, Trace

PER_STEP_SERIES: tuple[str, ...] = (
    "llm_latency_ms",
    "tool_latency_ms",
    "output_chars",
    "tokens_in",
    "tokens_out",
    "tool_error",
    "refusal",
)
PER_TRACE_SERIES: tuple[str, ...] = (
    "steps",
    "llm_latency_ms",
    "tool_latency_ms",
    "latency_ms",
    "tokens_in",
    "tokens_out",
    "output_chars",
    "tool_calls",
    "tool_errors",
    "tool_error_rate",
    "refusal",
    "failure_probability",
)

_LLM_KINDS = frozenset({StepKind.LLM_OUTPUT, StepKind.LLM_REASONING, StepKind.FINAL_OUTPUT})
_TOOL_KINDS = frozenset({StepKind.TOOL_CALL, StepKind.TOOL_RESULT})
_ANSWER_KINDS = frozenset({StepKind.LLM_OUTPUT, StepKind.FINAL_OUTPUT})
_MAX_META_DEPTH = 3


@dataclass(frozen=True, order=True)
class StreamKey:
    """Identity of one metric stream: ``(tenant, name, agent)``.

    >>> str(StreamKey("acme", "llm_latency_ms", "coder"))
    'acme/llm_latency_ms/coder'
    """

    tenant: str
    name: str
    agent: str

    def __str__(self) -> str:
        return f"{self.tenant}/{self.name}/{self.agent}"


class MetricPoint(BaseModel):
    """One value of a per-step series, with where it comes from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step: int
    source_index: int
    value: float


class TraceMetrics(BaseModel):
    """The metrics of one trace (see the module docstring for the names)."""

    model_config = ConfigDict(extra="forbid")

    trace_id: str
    task_type: str | None = None
    agent: str | None = Field(
        default=None, description="The run's agent as the run names it (its root agent span); None: the service infers it.")
    per_step: dict[str, list[MetricPoint]] = Field(default_factory=dict)
    per_trace: dict[str, float | None] = Field(default_factory=dict)

    def series(self, name: str) -> list[float]:
        """Values of per-step series ``name`` in step order (empty when absent)."""
        return [p.value for p in self.per_step.get(name, [])]

    def stream_values(self, tenant: str, agent: str | None = None) -> dict[StreamKey, float]:
        """The per-trace values that are known, keyed for the streams of the run's agent.

        ``agent``: the run's agent (``options.agent``, or the one the service resolved); default:
        :attr:`agent` (the root agent span's name). :class:`InputError` when neither names one.
        """
        key = agent or self.agent
        if key is None:
            raise InputError("this run names no agent: pass the one it was resolved to", path="agent")
        return {
            StreamKey(tenant, name, key): value
            for name, value in self.per_trace.items()
            if value is not None
        }


def _numeric_items(data: Mapping[str, Any], path: str, prefix: str = "meta", depth: int = 0) -> list[
    tuple[str, float]
]:
    """Numeric leaves of a metadata mapping as ``("meta.a.b", value)``; bools are not numbers."""
    out: list[tuple[str, float]] = []
    for key, value in data.items():
        name = f"{prefix}.{key}"
        where = f"{path}.{key}"
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            number = float(value)
            if not math.isfinite(number):
                raise InputError(f"numeric metadata must be finite; got {value!r}", path=where)
            out.append((name, number))
        elif isinstance(value, Mapping) and depth + 1 < _MAX_META_DEPTH:
            out.extend(_numeric_items(value, where, name, depth + 1))
    return out


def _is_tool_step(step: Step) -> bool:
    return step.kind in _TOOL_KINDS or (step.kind is StepKind.ERROR and step.tool_name is not None)


def _is_llm_step(step: Step) -> bool:
    return step.kind in _LLM_KINDS or (step.kind is StepKind.ERROR and step.tool_name is None)


def _refusal_steps(trace: Trace, detector_name: str, threshold: float) -> set[int] | None:
    """Steps the refusal detector flags, or ``None`` when the catalog has no detector of that name."""
    # Imported when called: the catalog brings every trace detector (the classifier's runtime too),
    # which extracting metrics without refusals does not need.
    from model.detectors.catalog import TRACE_DETECTORS

    cls = TRACE_DETECTORS.get(detector_name)
    if cls is None:
        return None
    findings = cls().inspect(trace)
    return {
        f.step
        for f in findings
        if f.kind is FailureKind.REFUSAL and f.step is not None and f.confidence >= threshold
    }


def extract_metrics(
    trace: Trace,
    *,
    failure_prob: float | None = None,
    refusal_detector: str | None = "refusal",
    refusal_threshold: float = 0.5,
) -> TraceMetrics:
    """Per-step and per-trace metric series of ``trace``.

    Parameters
    ----------
    trace
        The trace.
    failure_prob
        The run's failure probability (the run scorer's), when there is one; fills the
        ``failure_probability`` slot.
    refusal_detector
        Registry name of the trace detector whose ``refusal`` findings make the refusal
        indicator (``None``: no refusal series).
    refusal_threshold
        Confidence at or above which a refusal finding counts (the rule gives 0.9 to a plain
        refusal and 0.4 to one followed by an answer).

    Raises
    ------
    InputError
        Non-finite numeric metadata (the path names the field) or a ``failure_prob`` outside
        [0, 1].
    """
    if failure_prob is not None and not (math.isfinite(failure_prob) and 0.0 <= failure_prob <= 1.0):
        raise InputError(f"failure_prob must be in [0, 1]; got {failure_prob!r}", path="failure_prob")
    per_step: dict[str, list[MetricPoint]] = {}

    def add(name: str, i: int, step: Step, value: float) -> None:
        # built unvalidated: i and the step's source_index are ints, every caller passes a float
        per_step.setdefault(name, []).append(
            MetricPoint.model_construct(step=i, source_index=step.source_index, value=value))

    refusals = (
        _refusal_steps(trace, refusal_detector, refusal_threshold) if refusal_detector is not None else None
    )
    tool_results = 0
    tool_errors = 0
    for i, step in enumerate(trace.steps):
        if step.latency_ms is not None:
            if _is_tool_step(step):
                add("tool_latency_ms", i, step, float(step.latency_ms))
            elif _is_llm_step(step):
                add("llm_latency_ms", i, step, float(step.latency_ms))
        if step.tokens_in is not None:
            add("tokens_in", i, step, float(step.tokens_in))
        if step.tokens_out is not None:
            add("tokens_out", i, step, float(step.tokens_out))
        if step.kind in _ANSWER_KINDS:
            add("output_chars", i, step, float(len(step.content)))
            if refusals is not None:
                add("refusal", i, step, 1.0 if i in refusals else 0.0)
        if step.kind is StepKind.TOOL_RESULT or (step.kind is StepKind.ERROR and step.tool_name is not None):
            tool_results += 1
            failed = step.kind is StepKind.ERROR or step.status in (StepStatus.ERROR, StepStatus.TIMEOUT)
            tool_errors += int(failed)
            add("tool_error", i, step, 1.0 if failed else 0.0)
        for name, value in _numeric_items(step.metadata, f"steps[{i}].metadata"):
            add(name, i, step, value)

    def total(name: str) -> float | None:
        points = per_step.get(name)
        return float(sum(p.value for p in points)) if points else None

    answer = _answer(trace)
    answer_chars = None if answer is None else float(len(answer.content))
    llm = total("llm_latency_ms")
    tool = total("tool_latency_ms")
    per_trace: dict[str, float | None] = {
        "steps": float(len(trace.steps)),
        "llm_latency_ms": llm,
        "tool_latency_ms": tool,
        "latency_ms": None if llm is None and tool is None else (llm or 0.0) + (tool or 0.0),
        "tokens_in": total("tokens_in"),
        "tokens_out": total("tokens_out"),
        "output_chars": answer_chars,
        "tool_calls": float(sum(1 for s in trace.steps if s.kind is StepKind.TOOL_CALL)),
        "tool_errors": float(tool_errors),
        "tool_error_rate": tool_errors / tool_results if tool_results else None,
        "refusal": None if refusals is None else float(bool(refusals)),
        "failure_probability": failure_prob,
    }
    for name, value in _numeric_items(trace.metadata, "metadata"):
        per_trace[name] = value
    return TraceMetrics(trace_id=trace.id, task_type=trace.task_type, agent=resolve_agent(trace),
                        per_step=per_step, per_trace=per_trace)


def _answer(trace: Trace) -> Step | None:
    """The final answer: the last ``final_output``, else the last non-blank ``llm_output``."""
    finals = [s for s in trace.steps if s.kind is StepKind.FINAL_OUTPUT]
    if finals:
        return finals[-1]
    outputs = [s for s in trace.steps if s.kind is StepKind.LLM_OUTPUT and s.content.strip()]
    return outputs[-1] if outputs else None


__all__ = [
    "PER_STEP_SERIES",
    "PER_TRACE_SERIES",
    "MetricPoint",
    "StreamKey",
    "TraceMetrics",
    "extract_metrics",
]
