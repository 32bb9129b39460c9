"""A diagnosis as OpenTelemetry GenAI ``gen_ai.evaluation.result`` events, parented to the spans
they judge, so the user's own trace viewer (Langfuse, Phoenix, any OTLP backend) shows them.

One event per failure, on the span of the failing step (``gen_ai.evaluation.name`` =
``agent_triage.<kind>``, ``score.value`` = the fused confidence, ``score.label`` = ``failure``),
and one verdict event (``agent_triage.verdict``: label ``failed`` / ``healthy`` / ``unknown``,
score the primary failure's confidence or 0) on the primary failure's span, else the last step's.
Only steps imported from spans (with a span id and a hex trace id) can carry events; a trace
without them gives none.

>>> from model.core.schema import Step, Trace
>>> from model.diagnosis.diagnoser import Diagnoser
>>> t = Trace(id="ab" * 16, steps=[Step(kind="user_input", content="2+2?", span_id="01" * 8),
...                                Step(kind="final_output", content="4", source_index=1, span_id="02" * 8)])
>>> [(e.name, e.label, e.span_id) for e in evaluation_events(t, Diagnoser().diagnose(t))]
[('agent_triage.verdict', 'healthy', '0202020202020202')]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from model.core.findings import DiagnosisResponse
from model.core.schema import Trace

EVENT_NAME = "gen_ai.evaluation.result"
_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_SPAN_ID = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True)
class EvaluationEvent:
    """One ``gen_ai.evaluation.result`` event: what was judged (trace and span id) and the result."""

    trace_id: str
    span_id: str
    name: str
    score: float
    label: str
    explanation: str

    def attributes(self) -> dict[str, str | float]:
        return {
            "gen_ai.evaluation.name": self.name,
            "gen_ai.evaluation.score.value": self.score,
            "gen_ai.evaluation.score.label": self.label,
            "gen_ai.evaluation.explanation": self.explanation,
        }


def _trace_of(trace: Trace, span_id: str) -> str | None:
    """The span's trace id: a step's ``metadata["otel.trace_id"]`` (live sessions), the run's
    ``span_trace_ids`` (runs merged from several traces), else ``Trace.id``."""
    tid = next((s.metadata.get("otel.trace_id") for s in trace.steps
                if s.span_id == span_id and s.metadata.get("otel.trace_id")), None)
    if tid is None:
        by_span = trace.metadata.get("span_trace_ids")
        tid = by_span.get(span_id) if isinstance(by_span, dict) else None
    tid = str(tid or trace.id).lower()
    return tid if _TRACE_ID.fullmatch(tid) else None


def evaluation_events(trace: Trace, resp: DiagnosisResponse) -> list[EvaluationEvent]:
    """The events for ``resp``, a diagnosis of ``trace`` (see the module docstring)."""
    out: list[EvaluationEvent] = []

    def add(span_id: str | None, name: str, score: float, label: str, explanation: str) -> None:
        if span_id is None or not _SPAN_ID.fullmatch(span_id.lower()):
            return
        tid = _trace_of(trace, span_id)
        if tid is not None:
            out.append(EvaluationEvent(tid, span_id.lower(), name, round(score, 4), label, explanation))

    def span_of(step: int | None) -> str | None:
        if step is None or not 0 <= step < len(trace.steps):
            return None
        return trace.steps[step].span_id

    for f in resp.failures:
        add(f.span_id or span_of(f.step), f"agent_triage.{f.kind.value}", f.confidence, "failure",
            f"{f.kind.value} ({f.severity.value}) at step {f.step}: {f.evidence}")
    label = "unknown" if resp.healthy is None else "healthy" if resp.healthy else "failed"
    rec = resp.recommendation
    if resp.primary is not None:
        where = resp.primary.span_id or span_of(resp.primary.step)
        text = f"primary failure {resp.primary.kind.value} at step {resp.primary.step}; repair: {rec.strategy.value}"
        if rec.instruction:
            text += f": {rec.instruction}"
        add(where, "agent_triage.verdict", resp.primary.confidence, label, text)
    else:
        last = next((s.span_id for s in reversed(trace.steps) if s.span_id), None)
        text = "no failure found" + (f"; {resp.warnings[0]}" if resp.warnings else "")
        add(last, "agent_triage.verdict", 0.0, label, text)
    return out


__all__ = ["EVENT_NAME", "EvaluationEvent", "evaluation_events"]
