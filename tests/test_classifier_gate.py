"""The classifier's gate: it reports only its own kinds, and only trusted kinds as failures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from model.core.kinds import FailureKind
from model.data.builder import TRAP_NAMES, make_trap
from model.detectors.catalog import OPT_IN_DETECTORS, TRACE_DETECTORS, make_detector
from model.detectors.classifier import DEFAULT_ARTIFACTS, ClassifierDetector
from model.diagnosis.diagnoser import Diagnoser
from model.scoring.classifier.gate import REPORTED_KINDS
from model.training.classifier.gate import decide, gate_from_metrics

SHIPPED = DEFAULT_ARTIFACTS
needs_model = pytest.mark.skipif(not (SHIPPED / "classifier.onnx").is_file(), reason="no shipped classifier")


def test_reported_kinds_are_the_classifier_producer_kinds() -> None:
    assert FailureKind.TOOL_ERROR not in REPORTED_KINDS and FailureKind.LOOP not in REPORTED_KINDS
    assert {FailureKind.HALLUCINATION, FailureKind.OFF_TOPIC, FailureKind.REFUSAL} <= set(REPORTED_KINDS)


def test_decide_needs_precision_and_support_on_both_splits() -> None:
    row = {"precision": 0.9, "support": 12}
    per_kind = {
        "test": {"refusal": row, "off_topic": row, "hallucination": {"precision": 0.95, "support": 4}},
        "heldout_families": {"refusal": row, "off_topic": {"precision": 0.5, "support": 30}, "hallucination": row},
    }
    real = {k: {"fired": 30, "failed": 29} for k in ("refusal", "off_topic", "hallucination")}
    alike = {"n": 60, "fired": {}}
    gate = decide(per_kind, min_precision=0.8, min_support=10, rules_first=False, real=real, lookalikes=alike)
    assert gate["failure_kinds"] == ["refusal"]
    assert gate["evidence"]["off_topic"]["heldout_families"]["precision"] == 0.5
    metrics = {"shipped": "x", "candidates": {"x": {s: {"per_kind": v} for s, v in per_kind.items()}}}
    report = {"classifier_gate": {"real": real, "lookalikes": alike}}
    assert gate_from_metrics(metrics, report, rules_first=False)["failure_kinds"] == ["refusal"]
    # by default a kind the rules also produce stays a signal, whatever its figures
    assert gate_from_metrics(metrics, report)["failure_kinds"] == []
    assert "rules_first" in gate_from_metrics(metrics, report)["evidence"]["refusal"]["signal_because"]
    # without real-run evidence no kind is trusted zero-shot
    assert gate_from_metrics(metrics, None, rules_first=False)["failure_kinds"] == []


@pytest.mark.parametrize(("fired", "failed", "alike_fired", "passes"), [
    (20, 18, 6, True),     # P = 0.90 on 20 fires, 10 % of the look-alikes: at the bar
    (19, 19, 0, False),    # too few fires
    (40, 35, 0, False),    # P(failed | fired) 0.875 < 0.9
    (40, 40, 7, False),    # 7/60 look-alikes flagged > 10 %
])
def test_zero_shot_bar_on_real_runs(fired: int, failed: int, alike_fired: int, passes: bool) -> None:
    row = {"precision": 0.95, "support": 50}
    per_kind = {"test": {"hallucination": row}, "heldout_families": {"hallucination": row}}
    gate = decide(per_kind, real={"hallucination": {"fired": fired, "failed": failed}},
                  lookalikes={"n": 60, "fired": {"hallucination": alike_fired}})
    assert (gate["failure_kinds"] == ["hallucination"]) is passes
    fig = gate["evidence"]["hallucination"]["real"]
    assert fig["fired"] == fired and fig["lookalikes_fired"] == alike_fired
    assert 0 < fig["wilson_lower"] < fig["p_failed"] <= 1.0
    assert ("signal_because" in fig) is not passes


def _copy_model(tmp_path: Path, gate: dict[str, object] | None) -> Path:
    folder = tmp_path / "artifacts"
    folder.mkdir(parents=True)
    for name in ("classifier.onnx", "tokenizer.json"):
        shutil.copy(SHIPPED / name, folder / name)
    if gate is not None:
        (folder / "gate.json").write_text(json.dumps(gate))
    return folder


@needs_model
def test_untrusted_kinds_become_signals(tmp_path: Path) -> None:
    trace = make_trap("retry_after_error", seed=0)
    open_det = ClassifierDetector(path=_copy_model(tmp_path / "a", None), signal_ratio=0.0)
    closed_det = ClassifierDetector(path=_copy_model(tmp_path / "b", {"failure_kinds": []}), signal_ratio=0.0)
    open_f, closed_f = open_det.inspect(trace), closed_det.inspect(trace)
    assert {f.kind for f in open_f} <= set(REPORTED_KINDS)
    assert [(f.kind, f.step) for f in open_f] == [(f.kind, f.step) for f in closed_f]
    assert all(f.confidence < 0.5 and "gated" in f.details for f in closed_f)
    assert closed_f, "the trap's final answer should give at least one (low) semantic score"


@needs_model
@pytest.mark.parametrize("trap", TRAP_NAMES)
def test_shipped_model_keeps_the_traps_healthy(trap: str) -> None:
    """With the shipped model and its gate, the healthy traps stay healthy (no false repair)."""
    clf = make_detector("classifier")
    dets = [make_detector(n) for n in sorted(TRACE_DETECTORS) if n not in OPT_IN_DETECTORS] + [clf]
    d = Diagnoser(dets)
    for seed in range(3):
        resp = d.diagnose(make_trap(trap, seed=seed))
        assert resp.healthy, [(f.kind, f.step, f.detector, f.confidence) for f in resp.failures]
