"""The step classifier scored ahead in a helper thread (:mod:`model.diagnosis.ahead`): a whole-trace
diagnosis takes the helper's answer (scored once, in another thread, under the model lock), and
answers what it answers without the helper; a helper not started is cancelled and the decision
scores the trace itself; the helper's error is the request's. Runs with the shipped model."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from model.core.options import DiagnoseOptions
from model.data.builder import make_trace
from model.detectors.catalog import TRACE_DETECTORS, make_detector
from model.detectors.classifier import DEFAULT_ARTIFACTS, ClassifierDetector
from model.diagnosis.ahead import ScoredAhead
from model.diagnosis.diagnoser import Diagnoser
from serve.settings import Settings
from serve.wiring import build_service

pytestmark = pytest.mark.skipif(not (Path(DEFAULT_ARTIFACTS) / "classifier.onnx").exists(),
                                reason="no classifier artefact")


def _service(tmp_path: Path, name: str) -> tuple[Any, ClassifierDetector]:
    clf = ClassifierDetector(signal_ratio=0.0)  # every (step, kind) reported
    clf.load()
    rules = [make_detector(n) for n in sorted(TRACE_DETECTORS) if n != "classifier"]
    folder = tmp_path / name
    folder.mkdir()
    return build_service(Settings(data_dir=folder), Diagnoser([*rules, clf])), clf


def _answer(resp: Any) -> dict[str, Any]:
    out = resp.model_dump(mode="json")
    return {k: out[k] for k in ("failures", "signals", "failure_probability", "attribution", "primary", "healthy")}


def test_a_diagnosis_takes_the_helpers_scores_and_answers_the_same(tmp_path: Path) -> None:
    service, clf = _service(tmp_path, "ahead")
    plain, plain_clf = _service(tmp_path, "plain")
    plain.diagnoses.diagnoser.score_ahead = lambda *a, **k: None  # type: ignore[method-assign]
    lock = service.diagnoses._model_lock
    seen: list[tuple[int, bool]] = []
    original = clf.inspect_scored

    def recording(trace):  # type: ignore[no-untyped-def]
        seen.append((threading.get_ident(), lock._busy))
        return original(trace)

    clf.inspect_scored = recording  # type: ignore[method-assign]
    for seed in range(4):
        trace = make_trace("tool_error", seed=seed, n_steps=10)
        got = service.diagnose("acme", trace.model_copy(deep=True), DiagnoseOptions())
        want = plain.diagnose("acme", trace.model_copy(deep=True), DiagnoseOptions())
        assert _answer(got) == _answer(want)
        assert any(f.detector == "classifier" for f in got.failures + got.signals)
    caller = threading.get_ident()
    assert len(seen) == 4  # once a diagnosis: the decision took the helper's answer
    assert all(ident != caller and busy for ident, busy in seen)  # in the helper, holding the model lock
    # a request that leaves the classifier out starts no helper
    trace = make_trace("tool_error", seed=9, n_steps=10)
    service.diagnose("acme", trace, DiagnoseOptions(detectors=["loop"]))
    assert len(seen) == 4


def test_a_helper_not_started_is_cancelled_and_the_decision_scores_itself() -> None:
    clf = ClassifierDetector(signal_ratio=0.0)
    clf.load()
    d = Diagnoser([clf])
    trace = make_trace("tool_error", seed=1, n_steps=10)
    calls: list[int] = []
    original = clf.inspect_scored

    def counting(t):  # type: ignore[no-untyped-def]
        calls.append(threading.get_ident())
        return original(t)

    clf.inspect_scored = counting  # type: ignore[method-assign]
    never: Future[Any] = Future()  # a helper still queued
    ahead = ScoredAhead(trace, clf, never)
    ahead.wait()
    assert never.cancelled()
    with ahead.used():
        resp = d.decide(trace).response
    assert calls == [threading.get_ident()]
    assert resp.failures or resp.signals


def test_the_helpers_error_is_the_requests(tmp_path: Path) -> None:
    service, clf = _service(tmp_path, "err")

    def broken(trace):  # type: ignore[no-untyped-def]
        raise RuntimeError("the model broke")

    clf.inspect_scored = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="the model broke"):
        service.diagnose("acme", make_trace("tool_error", seed=2, n_steps=10), DiagnoseOptions())
    assert not service.diagnoses._model_lock._busy
