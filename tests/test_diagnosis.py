"""Fusion and diagnosis: thresholds, merging, root cause first, detector selection."""

from __future__ import annotations

import pytest

from model.core.errors import TooLargeError, UnknownDetectorError
from model.core.findings import Finding
from model.core.kinds import FailureKind, Severity, Strategy
from model.core.options import DiagnoseOptions
from model.core.schema import Step, StepKind, Trace
from model.diagnosis.diagnoser import Diagnoser, fuse


def F(kind: FailureKind, conf: float, step: int | None, src: int | None, det: str = "d", **details: object) -> Finding:
    return Finding(detector=det, kind=kind, confidence=conf, step=step, source_index=src, evidence=f"{det} saw {kind}", details=dict(details))


def test_threshold_splits_failures_and_signals() -> None:
    failures, signals, primary = fuse([F(FailureKind.REFUSAL, 0.49, 2, 2), F(FailureKind.TOOL_ERROR, 0.5, 3, 3)])
    assert [f.kind for f in failures] == [FailureKind.TOOL_ERROR]
    assert [f.kind for f in signals] == [FailureKind.REFUSAL]
    assert primary is not None and primary.kind == FailureKind.TOOL_ERROR


def test_same_kind_same_source_index_merge_keeping_max_and_all_evidence() -> None:
    failures, _, _ = fuse(
        [
            F(FailureKind.REFUSAL, 0.7, 5, 4, det="refusal", pattern="en"),
            F(FailureKind.REFUSAL, 0.9, 5, 4, det="classifier", prob=0.9),
            F(FailureKind.REFUSAL, 0.8, 9, 8, det="refusal"),
        ]
    )
    assert len(failures) == 2
    merged = failures[0]
    assert (merged.step, merged.source_index, merged.confidence) == (5, 4, 0.9)
    assert merged.detector == "classifier"
    assert merged.detectors == ["classifier", "refusal"]
    assert "refusal: refusal saw" in merged.evidence and "classifier: classifier saw" in merged.evidence
    assert merged.details == {"pattern": "en", "prob": 0.9}


def test_primary_is_earliest_of_highest_severity() -> None:
    # tool_error (high) at step 3, hallucination (critical) at 8 and 6, timeout (medium) at 1.
    failures, _, primary = fuse(
        [
            F(FailureKind.TIMEOUT, 0.9, 1, 1),
            F(FailureKind.TOOL_ERROR, 0.9, 3, 3),
            F(FailureKind.HALLUCINATION, 0.8, 8, 7),
            F(FailureKind.HALLUCINATION, 0.8, 6, 5),
        ]
    )
    assert [f.step for f in failures] == [1, 3, 6, 8]
    assert primary is not None
    assert (primary.kind, primary.step, primary.severity) == (FailureKind.HALLUCINATION, 6, Severity.CRITICAL)


def test_trace_level_findings_merge_by_kind() -> None:
    failures, _, _ = fuse([F(FailureKind.INCOMPLETE, 0.9, None, None, det="a"), F(FailureKind.INCOMPLETE, 0.6, None, None, det="b")])
    assert len(failures) == 1 and failures[0].detectors == ["a", "b"]


def test_custom_thresholds() -> None:
    failures, signals, _ = fuse([F(FailureKind.HALLUCINATION, 0.3, 2, 2)], {FailureKind.HALLUCINATION: 0.25})
    assert len(failures) == 1 and not signals


def _trace(n: int) -> Trace:
    steps = [Step(kind=StepKind.USER_INPUT, content="hi", source_index=0)]
    steps += [Step(kind=StepKind.LLM_OUTPUT, content=f"thinking {i}", source_index=i + 1) for i in range(n - 2)]
    steps.append(Step(kind=StepKind.FINAL_OUTPUT, content="done", source_index=n - 1))
    return Trace(id="t1", steps=steps)


class _Fixed:
    """A real (registered-shape) trace detector that reports fixed findings, for diagnosis tests."""

    name = "fixed"
    version = "1"
    kinds = (FailureKind.TOOL_ERROR,)

    def __init__(self, findings: list[Finding]) -> None:
        self._findings = findings

    def inspect(self, trace: Trace) -> list[Finding]:
        return list(self._findings)

    def get_params(self) -> dict[str, object]:
        return {}


def test_diagnose_healthy_continue_and_versions() -> None:
    resp = Diagnoser().diagnose(_trace(4))
    assert resp.healthy and resp.primary is None
    assert resp.recommendation.strategy == Strategy.CONTINUE
    assert resp.trace_id == "t1" and resp.steps == 4
    assert resp.model_version.startswith("rules-")


def test_diagnose_recommends_first_rung_and_shadow_continues() -> None:
    det = _Fixed([F(FailureKind.TOOL_ERROR, 0.95, 2, 2, http_status=503)])
    d = Diagnoser([det])
    resp = d.diagnose(_trace(4))
    assert not resp.healthy
    assert resp.detector_versions == {"fixed": "1"}
    assert resp.recommendation.strategy == Strategy.RETRY
    assert resp.recommendation.next == [Strategy.SWITCH_TOOL, Strategy.REPLAN_LOCAL, Strategy.HUMAN_HANDOFF]
    shadow = d.diagnose(_trace(4), DiagnoseOptions(shadow=True))
    assert shadow.recommendation.strategy == Strategy.CONTINUE and not shadow.healthy


def test_unknown_detector_lists_valid_names() -> None:
    with pytest.raises(UnknownDetectorError) as e:
        Diagnoser().diagnose(_trace(3), DiagnoseOptions(detectors=["nope"]))
    assert "nope" in str(e.value) and "valid names" in str(e.value)
    assert e.value.path == "options.detectors"


def test_step_limit() -> None:
    with pytest.raises(TooLargeError, match="limit is 10"):
        Diagnoser(max_steps=10).diagnose(_trace(11))


def test_symptom_kind_loses_a_tie_to_its_cause() -> None:
    _, _, primary = fuse([F(FailureKind.INCOMPLETE, 0.9, 6, 6), F(FailureKind.LOOP, 0.9, 6, 6)])
    assert primary is not None and primary.kind == FailureKind.LOOP
