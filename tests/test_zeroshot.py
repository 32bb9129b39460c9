"""The zero-shot ``failure_probability`` (model/scoring/runscore/zeroshot.py) as the service computes it:
the shipped classifier's per-kind maxima, the diagnoser's inputs, a session's probability, the
README examples' order and the retrain's cache key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from model.core.coverage import Coverage
from model.core.findings import Finding
from model.core.kinds import FailureKind
from model.core.options import DiagnoseOptions
from model.core.schema import StepKind, Trace
from model.detectors.classifier import ClassifierDetector
from model.diagnosis.diagnoser import Diagnoser, fuse, zero_shot_inputs
from model.diagnosis.incremental import IncrementalDiagnoser
from model.importers import load_trace
from model.scoring.classifier.gate import REPORTED_KINDS
from model.scoring.runscore.zeroshot import RECIPE, classifier_maxima, evidence
from serve.intake import take
from tests.conftest import ROOT

EXAMPLES = ROOT / "docs" / "examples"


@pytest.fixture(scope="module")
def shipped() -> Diagnoser:
    return Diagnoser.with_shipped_models(threads=1)


def _request(name: str) -> tuple[Trace, DiagnoseOptions]:
    """A README example as the CLI and the service read it (a request body: the trace and its options)."""
    request, trace = take((EXAMPLES / name).read_bytes(), max_steps=5000)
    return trace, request.options


def _example(name: str) -> Trace:
    return _request(name)[0]


def test_classifier_maxima_read_the_agents_steps_only() -> None:
    t = load_trace({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]},
                   format="openai")
    labels = ["healthy", "hallucination", "tool_error"]  # tool_error: a kind the classifier does not report
    probs = np.array([[0.1, 0.9, 0.9], [0.5, 0.3, 0.8]], dtype=np.float32)
    assert [s.kind for s in t.steps] == [StepKind.USER_INPUT, StepKind.FINAL_OUTPUT]
    assert classifier_maxima(t, probs, labels) == {"hallucination": 0.3}  # the user's step is not the agent's
    assert classifier_maxima(t, probs[:1], labels) == {"hallucination": 0.0}


def test_the_shipped_classifier_reports_its_maxima_step_by_step_as_on_the_whole_trace() -> None:
    det = ClassifierDetector(threads=1, signal_ratio=0.0)
    t = _example("ignored_error.json")
    found, maxima = det.inspect_scored(t)
    assert set(maxima) == {k.value for k in REPORTED_KINDS} and all(0.0 <= v <= 1.0 for v in maxima.values())
    assert [f.model_dump() for f in found] == [f.model_dump() for f in det.inspect(t)]
    # the session path scores each step once: the running maximum is the whole trace's
    running: dict[str, float] = {}
    for i in range(len(t.steps)):
        _, m = det.inspect_step_scored(t.model_copy(update={"steps": t.steps[: i + 1]}), i)
        for k, v in m.items():
            running[k] = max(v, running.get(k, 0.0))
    # the same figures: int8 weights, fp32 activations, nothing depends on the batch a step is scored in
    # (on AVX2 CPUs, per-batch int8 activation scales moved hallucination's maximum by 0.018)
    assert running == pytest.approx(maxima, abs=1e-5)
    # and a step's score does not move when later steps (its batch companions) are added
    rt = det.load()
    whole = rt.score_trace(t)
    for i in range(1, len(t.steps)):
        np.testing.assert_allclose(rt.score_trace(t.model_copy(update={"steps": t.steps[:i]})), whole[:i], atol=1e-5)


def test_zero_shot_inputs_read_trace_detectors_and_raw_signals() -> None:
    def finding(detector: str, kind: FailureKind, conf: float, step: int) -> Finding:
        return Finding(detector=detector, kind=kind, confidence=conf, step=step, source_index=step)

    raw = [finding("tool_error", FailureKind.TOOL_ERROR, 0.3, 1), finding("loop", FailureKind.LOOP, 0.8, 2)]
    stream = finding("cusum", FailureKind.DEGRADATION, 0.95, 3)  # a stream's alarm: not this run's evidence
    failures, _, _ = fuse([*raw, stream])
    conf, ev = zero_shot_inputs(raw, failures, ["tool_error", "loop"], {"hallucination": 0.4})
    assert conf == 0.8 and ev == {"clf:hallucination": 0.4, "signal": pytest.approx(0.6)}
    conf, ev = zero_shot_inputs(raw[:1], [], ["tool_error"], None)
    assert conf is None and ev == {"signal": pytest.approx(0.6)}  # no classifier: no clf:* feature
    assert evidence([("classifier", 0.45), ("loop", 0.1)], None) == {"signal": pytest.approx(0.2)}
    # content not recorded: the classifier scored placeholders, so its maxima are left out
    blind = Coverage(steps=4, without_content=2)
    assert zero_shot_inputs(raw, failures, ["loop"], {"hallucination": 0.9}, blind)[1] == {"signal": pytest.approx(0.6)}


def test_the_readme_examples_healthy_scores_below_both_failing_ones(shipped: Diagnoser) -> None:
    p = {name: shipped.diagnose(*_request(f"{name}.json")).failure_probability
         for name in ("healthy", "loop", "ignored_error")}
    assert all(v is not None for v in p.values())
    assert p["healthy"] < p["loop"] and p["healthy"] < p["ignored_error"], p
    assert shipped.runscorer is not None and shipped.runscorer.recipe == RECIPE


def test_a_session_within_its_window_gets_the_whole_traces_probability(shipped: Diagnoser) -> None:
    whole = _example("ignored_error.json")
    inc = IncrementalDiagnoser(shipped, window=100)
    session = Trace(id=whole.id, session_id="s", tools=whole.tools)
    state: dict[str, Any] = {}
    resp = None
    for s in whole.steps:
        session.steps.append(s)
        resp = inc.diagnose(session, state)
    full = shipped.diagnose(whole)
    assert resp is not None and resp.failure_probability == pytest.approx(full.failure_probability, abs=1e-3)
    assert set(state["classifier"]["maxima"]) == {k.value for k in REPORTED_KINDS}


def test_the_retrains_zero_shot_cache_is_keyed_by_the_recipe(tmp_path: Path, shipped: Diagnoser) -> None:
    from serve.services.retrain import ZeroShotCache

    t = _example("loop.json")
    cache = ZeroShotCache(tmp_path)
    assert cache.path is not None and RECIPE in cache.path.name
    assert cache.probabilities([t]) == [pytest.approx(shipped.diagnose(t).failure_probability)]
    again = ZeroShotCache(tmp_path)
    assert again.probabilities([t]) == cache.probabilities([t]) and again.hits == 1 and again.misses == 0


def test_the_services_zero_shot_basis_names_the_recipe(tmp_path: Path, shipped: Diagnoser) -> None:
    from serve.settings import Settings
    from serve.wiring import build_service

    service = build_service(Settings(data_dir=tmp_path), shipped)
    trace, options = _request("healthy.json")
    resp = service.diagnose("acme", trace, options)
    basis = resp.failure_probability_basis
    assert basis is not None and (basis.model, basis.version) == ("zero-shot", RECIPE)
    assert basis.zero_shot_probability == resp.failure_probability  # no labelled runs: not re-centred
