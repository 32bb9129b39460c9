"""Sessions with the classifier: only new steps are scored, and the result equals scoring the
whole trace. Runs with the shipped model (or TRIAGE_TEST_MODEL_PATH); skips while none exists."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from model.data.builder import make_trace
from model.detectors.catalog import TRACE_DETECTORS, make_detector
from model.detectors.classifier import DEFAULT_ARTIFACTS, ClassifierDetector
from model.diagnosis.diagnoser import Diagnoser
from serve.schemas import AppendStepsRequest
from serve.settings import Settings
from serve.wiring import build_service

MODEL = Path(os.environ.get("TRIAGE_TEST_MODEL_PATH") or DEFAULT_ARTIFACTS)
pytestmark = pytest.mark.skipif(not (MODEL / "classifier.onnx").exists(), reason="no classifier artefact yet")


def test_session_scores_new_steps_only_and_matches_whole_trace(tmp_path: Path) -> None:
    clf = ClassifierDetector(path=MODEL, threads=1, signal_ratio=0.0)  # every (step, kind) reported
    clf.load()
    rules = [make_detector(n) for n in sorted(TRACE_DETECTORS) if n != "classifier"]
    service = build_service(Settings(data_dir=tmp_path), Diagnoser([*rules, clf]))
    calls: list[int] = []
    original = clf.inspect_step_scored  # what the session path calls (findings + the zero-shot evidence)

    def counting(trace, index):  # type: ignore[no-untyped-def]
        calls.append(index)
        return original(trace, index)

    clf.inspect_step_scored = counting  # type: ignore[method-assign]
    trace = make_trace("hallucination", seed=4, n_steps=9)
    for step in trace.steps:
        body = step.model_dump(mode="json", exclude_none=True)
        body["source_index"] = 0  # one input element per call
        resp = service.append_steps("acme", "s1", AppendStepsRequest(steps=[body]))
    assert calls == list(range(len(trace.steps)))  # each step scored once, when it arrived
    assert resp.detector_versions["classifier"] == clf.version
    stored = service.stores.sessions.get_session("acme", "s1")
    assert stored is not None
    incremental = {(f["step"], f["kind"]): f["confidence"] for f in stored.state["classifier"]["findings"]}
    session_trace = service.stored_trace("acme", stored.trace_id)
    whole = {
        (f.step, f.kind.value): f.confidence
        for f in ClassifierDetector(path=MODEL, signal_ratio=0.0).inspect(session_trace)
    }
    assert incremental.keys() == whole.keys()
    # a step's score does not depend on the batch it is scored in (int8 weights, fp32 activations):
    # the same confidences, to their 4 decimals
    assert max(abs(incremental[k] - whole[k]) for k in whole) <= 1e-4
