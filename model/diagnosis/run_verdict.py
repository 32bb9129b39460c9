"""The run scorer's verdict failure: where a run-level ``failure_probability`` at or above the operating
point puts the failure it raises (at the attributed message, of the most likely kind there), and how it
moves when an agent's where-model attributes the run elsewhere (:func:`relocated`)."""

from __future__ import annotations

from collections.abc import Sequence

from model.core.findings import Attribution, Failure
from model.core.kinds import CLASSIFIER_KINDS, KIND_INFO, FailureKind
from model.core.schema import StepKind, Trace

#: The name that switches the run scorer on or off in ``options.detectors``.
RUNSCORE = "runscore"


def attributed_kind(trace: Trace, attribution: Attribution, signals: Sequence[Failure]) -> tuple[FailureKind, str]:
    """The most likely failure kind at the attributed message, and where that came from.

    The most confident signal on that message of a kind the classifier produces (the classifier's
    most likely kind there); else by what the message is: a call → ``malformed_call``, an answer
    after no result at all → ``off_topic``, any other answer → ``hallucination``.
    """
    here = [f for f in signals if f.source_index == attribution.source_index and f.kind in CLASSIFIER_KINDS]
    if here:
        best = max(here, key=lambda f: f.confidence)
        return best.kind, f"signal:{best.detector}"
    step = trace.steps[attribution.step]
    if step.kind is StepKind.TOOL_CALL:
        return FailureKind.MALFORMED_CALL, "step_kind"
    grounded = any(s.kind is StepKind.TOOL_RESULT for s in trace.steps[: attribution.step])
    return (FailureKind.HALLUCINATION if grounded else FailureKind.OFF_TOPIC), "step_kind"


def run_failure(trace: Trace, attribution: Attribution, probability: float, threshold: float,
                signals: Sequence[Failure]) -> Failure:
    """The failure a run-level verdict raises: at the attributed message, confidence = the probability."""
    kind, kind_from = attributed_kind(trace, attribution, signals)
    info = KIND_INFO[kind]
    step = trace.steps[attribution.step]
    return Failure(
        kind=kind, category=info.category, severity=info.severity, confidence=probability,
        detector=RUNSCORE, detectors=[RUNSCORE], step=attribution.step, source_index=attribution.source_index,
        span_id=step.span_id,
        evidence=(f"{RUNSCORE}: failure_probability {probability:.2f} ≥ operating point {threshold:.2f}; "
                  f"most likely at message {attribution.source_index} (p={attribution.probability:.2f})"),
        details={"failure_probability": probability, "threshold": threshold,
                 "attribution_probability": attribution.probability, "kind_from": kind_from},
    )


def relocated(failure: Failure, trace: Trace, attribution: Attribution, signals: Sequence[Failure]) -> Failure:
    """``failure`` as it stands where ``attribution`` points: the run scorer's verdict failure sits at the
    attributed message, so it moves with it (same confidence and operating point); any other failure
    is the detectors' own and stays."""
    thr = (failure.details or {}).get("threshold")
    if failure.detector != RUNSCORE or not isinstance(thr, int | float) or failure.step == attribution.step:
        return failure
    return run_failure(trace, attribution, failure.confidence, float(thr), signals)


__all__ = ["RUNSCORE", "attributed_kind", "relocated", "run_failure"]
