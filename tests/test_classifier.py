"""The classifier's pieces: representation, labels, metrics, runtime errors, detector wiring, Who&When.

The end-to-end training/export test and the torch-vs-ONNX parity test are in
tests/test_classifier_pipeline.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from model.core.errors import InputError, ModelLoadError
from model.core.kinds import CLASSIFIER_KINDS
from model.core.metrics import ece, sigmoid
from model.core.schema import FailureLabel, Step, ToolDefinition, Trace, TraceLabels
from model.data.builder import make_trace
from model.scoring.classifier.representation import (
    REPRESENTATION_VERSION,
    RepresentationConfig,
    checkable_values,
    clip,
    looks_empty,
    step_text,
    trace_texts,
)
from model.training.classifier.data import (
    HEALTHY_INDEX,
    LABELS,
    first_failing_step,
    step_targets,
    trace_kinds,
)
from model.training.classifier.metrics import fit_temperature, trace_verdict, tune_thresholds

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "model" / "artifacts"


# -- representation ---------------------------------------------------------------------------


def test_step_text_layout_is_exact() -> None:
    t = Trace(steps=[
        Step(kind="system", content="Be brief."),
        Step(kind="user_input", content="Weather in Oslo?", source_index=1),
        Step(kind="tool_call", tool_name="get_weather", tool_args={"city": "Oslo"}, source_index=2),
        Step(kind="tool_result", tool_name="get_weather", content="HTTP 500", status="error", source_index=3),
        Step(kind="final_output", content="It is sunny.", source_index=4),
    ])
    assert step_text(t, 4) == (
        "final_output : It is sunny.\n"
        "[grounding] after tool error · new figures none\n"
        "[prev] tool_result get_weather [error] : HTTP 500\n"
        "[goal] Weather in Oslo?\n"
        '[prev] tool_call get_weather : {"city":"Oslo"}\n'
        "[prev] user_input : Weather in Oslo?"
    )
    assert step_text(t, 0) == "system : Be brief."


def _trip(answer: str, payload: str, status: str = "ok") -> Trace:
    return Trace(steps=[
        Step(kind="user_input", content="Flights from Oslo to Rome on 12 March 2026?"),
        Step(kind="tool_call", tool_name="search_flights", tool_args={"from": "OSL", "to": "FCO", "day": 12},
             source_index=1),
        Step(kind="tool_result", tool_name="search_flights", content=payload, status=status, source_index=2),
        Step(kind="final_output", content=answer, source_index=3),
    ])


def test_grounding_line_says_where_each_value_comes_from() -> None:
    answer = "SK4711 leaves Oslo at 09:05 for $1,249.50 on 12 March."
    grounded = _trip(answer, '{"flights": [{"no": "SK4711", "dep": "9:05", "price": 1249.5}]}')
    assert step_text(grounded, 3).splitlines()[1] == (
        "[grounding] after tool ok · new figures none · from goal: Oslo 12 · from results: SK4711 9:05 1249.5")
    # the same answer after an empty result: its values come from nowhere
    empty = _trip(answer, '{"flights": []}')
    assert step_text(empty, 3).splitlines()[1] == (
        "[grounding] after tool ok empty · new figures two: 9:05 1249.5 · new names one: SK4711 · from goal: Oslo 12")
    # after an error
    failed = _trip(answer, "HTTP 503 Service Unavailable", status="error")
    assert step_text(failed, 3).splitlines()[1].startswith("[grounding] after tool error · new figures two:")
    # a call's values: short arguments only, looked up like an answer's
    assert step_text(grounded, 1).splitlines()[1] == (
        "[grounding] after no tool · args: no schema · new figures none · new names two: OSL FCO · from goal: 12")
    # with the tool declared, the call's arguments are checked against its schema
    schema = {"type": "object", "required": ["origin"], "properties": {"origin": {"type": "string"}}}
    declared = grounded.model_copy(update={"tools": [ToolDefinition(name="search_flights", parameters=schema)]})
    assert "· args: missing required property 'origin' ·" in step_text(declared, 1)
    raw = declared.model_copy(update={"steps": [*declared.steps[:1], Step(
        kind="tool_call", tool_name="search_flights", tool_args_raw="{'origin': 'OSL'", source_index=1)]})
    assert "· args: not JSON ·" in step_text(raw, 1)


def test_rep_v4_has_no_generator_phrase_tables() -> None:
    # the same goal with a limit, a constraint and a unit: rep-v4 says where the values come from and
    # nothing about the goal's phrasing (rep-v3 added goal terms, constraint keys and limit verdicts)
    goal = "Hotel in Oslo for 3 nights in Fahrenheit. Exclude hostels. No more than $150.00 a night."
    steps = [Step(kind="user_input", content=goal),
             Step(kind="tool_call", tool_name="search_hotels", tool_args={"city": "Oslo"}, source_index=1),
             Step(kind="tool_result", tool_name="search_hotels", source_index=2,
                  content='{"hotels": [{"hotel_id": "H999", "price_per_night": 260}]}'),
             Step(kind="final_output", content="Booked H999 at $260.00 per night, $780.00 in total.", source_index=3)]
    assert step_text(Trace(steps=steps), 3).splitlines()[1] == (
        "[grounding] after tool ok · new figures one: 780 · from results: H999 260")
    # a table with column names and no rows is not empty to rep-v4: no key-name table either
    assert not looks_empty('{"columns": ["sum"], "rows": []}')
    assert looks_empty('{"rows": [[null]], "row_count": 1}')


def test_whole_trace_texts_equal_step_by_step_texts() -> None:
    for kind in ("hallucination", "loop", "assumption_violated", "context_loss"):
        t = make_trace(kind, seed=3, n_steps=14)
        assert trace_texts(t) == [step_text(t, i) for i in range(len(t.steps))]


def test_checkable_values_and_where_a_sentence_starts() -> None:
    """A capitalised word is a name unless it starts the text or a sentence (after spaces of any kind,
    a sentence mark, or " -")."""
    assert checkable_values("Alice met Bob") == ["Bob"]
    assert checkable_values("ok. \u00a0Alice and Carol - Dave -Eve") == ["Carol"]
    assert checkable_values("the x-Eve and -Bob") == ["Eve"]
    assert checkable_values("x\t\n  Alice; Bob (Carol") == ["Alice"]
    assert checkable_values("mid iPhone A1 B_2 at 9:30 May") == ["iPhone", "A1", "B_2", "9:30"]


def test_step_text_reads_nothing_after_the_step() -> None:
    t = make_trace("hallucination", seed=4, n_steps=10)
    shorter = t.model_copy(update={"steps": t.steps[:5]})
    assert [step_text(t, i) for i in range(5)] == trace_texts(shorter)


def test_repeats_counted_for_identical_calls_and_results() -> None:
    t = make_trace("loop", seed=0, n_steps=12)
    loop_step = t.labels.failures[0].step
    assert "[repeat 2]" in step_text(t, loop_step).splitlines()[0]
    # the first call of the loop is no repeat
    assert "[repeat" not in step_text(t, loop_step - 4).splitlines()[0]


def test_clip_keeps_head_and_tail_within_limit() -> None:
    text = "error: " + "x" * 500 + " no results"
    out = clip(text, 60)
    assert len(out) == 60 and out.startswith("error: ") and out.endswith("results")
    assert clip("a   b\n c", 10) == "a b c"


def test_step_index_outside_trace_is_an_input_error() -> None:
    with pytest.raises(InputError, match="step index 3 is outside a trace of 1 steps"):
        step_text(Trace(steps=[Step(kind="user_input", content="hi")]), 3)


def test_unknown_representation_version_is_rejected() -> None:
    with pytest.raises(InputError, match="unknown input-representation version 'rep-v0'"):
        RepresentationConfig.from_dict({"version": "rep-v0"})
    for retired in ("rep-v1", "rep-v2", "rep-v3"):  # artefacts of the removed versions name theirs
        with pytest.raises(InputError, match=f"input-representation version '{retired}' is retired"):
            RepresentationConfig.from_dict({"version": retired})
    assert RepresentationConfig.from_dict(RepresentationConfig().to_dict()).version == REPRESENTATION_VERSION


# -- labels -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [k for k in CLASSIFIER_KINDS])
def test_step_targets_put_each_label_on_its_step(kind: object) -> None:
    t = make_trace(kind, seed=11, n_steps=9)
    targets = step_targets(t)
    assert t.labels is not None
    for f in t.labels.failures:
        if f.kind.value in LABELS:
            assert targets[f.step][LABELS.index(f.kind.value)] == 1
    labelled = {f.step for f in t.labels.failures if f.kind.value in LABELS}
    for i, target in enumerate(targets):
        assert target is not None
        assert target[HEALTHY_INDEX] == (0 if i in labelled else 1)
    assert first_failing_step(t) == min(labelled)


def test_post_failure_drop_and_stepless_label() -> None:
    steps = [Step(kind="user_input", content="q"), Step(kind="llm_output", content="a", source_index=1),
             Step(kind="llm_output", content="b", source_index=2), Step(kind="final_output", content="c",
                                                                         source_index=3)]
    t = Trace(steps=steps, labels=TraceLabels(failures=[
        FailureLabel(kind="off_topic", step=1), FailureLabel(kind="hallucination", step=None),
        FailureLabel(kind="degradation", step=2), FailureLabel(kind="incomplete", step=2)]))
    healthy = step_targets(t, "healthy")
    dropped = step_targets(t, "drop")
    assert [LABELS[j] for j, v in enumerate(healthy[3]) if v] == ["hallucination"]  # stepless → last step
    # degradation and incomplete are not classifier labels (docs/architecture.md, "Failure kinds": the rules / streams own them)
    assert healthy[2] is not None and healthy[2][HEALTHY_INDEX] == 1
    assert dropped[2] is None and dropped[0] == healthy[0] and dropped[3] == healthy[3]
    assert trace_kinds(t) == {"off_topic", "hallucination"}


# -- metrics -----------------------------------------------------------------------------------


def test_fit_temperature_recovers_a_known_temperature() -> None:
    rng = np.random.default_rng(0)
    z = rng.normal(0, 3, size=(4000, 3))
    y = (rng.random(z.shape) < sigmoid(z)).astype(float)
    assert fit_temperature(z * 2.5, y) == pytest.approx(2.5, rel=0.1)
    assert ece(y, sigmoid(z), bins=15) < 0.02
    assert ece(y, sigmoid(z * 2.5), bins=15) > 0.05


def test_tune_thresholds_and_trace_verdict() -> None:
    probs = np.array([[0.2, 0.9], [0.7, 0.1], [0.35, 0.2]])
    targets = np.array([[0, 1], [1, 0], [1, 0]])
    thr = tune_thresholds(probs, targets)
    assert 0.2 < thr[0] <= 0.35 and thr[1] > 0.2
    assert trace_verdict(np.array([[0.1, 0.0], [0.1, 0.95], [0.9, 0.0]]), np.array([0.5, 0.5]), kinds=1) == ({0}, 2)
    assert trace_verdict(np.zeros((0, 2)), np.array([0.5, 0.5]), kinds=1) == (set(), None)


# -- runtime errors, detector, serving imports ------------------------------------------------


def test_missing_artefact_is_a_model_load_error(tmp_path: Path) -> None:
    from model.scoring.classifier.runtime import ClassifierRuntime

    with pytest.raises(ModelLoadError, match="classifier artefact missing"):
        ClassifierRuntime.load(tmp_path)


def test_onnx_without_metadata_is_rejected(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    from model.scoring.classifier.runtime import ClassifierRuntime

    graph = helper.make_graph([helper.make_node("Identity", ["input_ids"], ["logits"])], "g",
                              [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [None, None])],
                              [helper.make_tensor_value_info("logits", TensorProto.INT64, [None, None])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "classifier.onnx")
    from model.training.classifier.vocab import train_wordpiece

    train_wordpiece(["a b c"] * 3, vocab_size=50).save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(ModelLoadError, match="ONNX metadata lacks"):
        ClassifierRuntime.load(tmp_path)
    # an artefact of a retired representation version is refused, naming the version
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    meta = {"labels": '["healthy"]', "thresholds": "[0.5]", "temperature": "1.0", "model_version": "m",
            "model_name": "m", "tokenizer": '{"max_length": 8}',
            "representation": json.dumps(RepresentationConfig().to_dict() | {"version": "rep-v3"})}
    helper.set_model_props(model, {"triage." + k: v for k, v in meta.items()})
    onnx.save(model, tmp_path / "classifier.onnx")
    with pytest.raises(ModelLoadError, match="'rep-v3' is retired"):
        ClassifierRuntime.load(tmp_path)


def test_detector_is_registered_and_lazy(tmp_path: Path) -> None:
    from model.detectors.catalog import make_detector
    from model.detectors.classifier import ClassifierDetector, relative_confidence

    det = make_detector("classifier", path=tmp_path)
    assert isinstance(det, ClassifierDetector)
    assert det.available() is False and det.model_version is None
    with pytest.raises(ModelLoadError):
        det.inspect(make_trace("off_topic", seed=1))
    assert relative_confidence(0.2, 0.4) == 0.25
    assert relative_confidence(1.0, 0.4) == 1.0


@pytest.mark.skipif(not (ARTIFACTS / "classifier.onnx").exists(), reason="no shipped model yet")
def test_shipped_model_loads_and_scores_without_torch() -> None:
    code = (
        "import sys\n"
        "from model.data.builder import make_trace\n"
        "from model.detectors.classifier import ClassifierDetector\n"
        "from model.training.classifier.data import LABELS\n"
        "det = ClassifierDetector()\n"
        "rt = det.load()\n"
        "assert rt.labels == LABELS, rt.labels\n"
        "t = make_trace('off_topic', seed=5, n_steps=8)\n"
        "p = rt.score_trace(t)\n"
        "assert p.shape == (len(t.steps), len(LABELS))\n"
        "assert abs(float(p[3, 0]) - float(rt.score_step(t, 3)[0])) < 1e-5\n"
        "fs = det.inspect(t)\n"
        "assert all(f.source_index == t.steps[f.step].source_index for f in fs)\n"
        "bad = [m for m in ('torch', 'transformers', 'sklearn') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
    total = sum(p.stat().st_size for p in ARTIFACTS.iterdir() if p.is_file())
    assert total < 30 * 1024 * 1024


@pytest.mark.skipif(not (ARTIFACTS / "classifier.onnx").exists(), reason="no shipped model yet")
def test_runtime_without_qdq_passes_gives_the_default_sessions_bits() -> None:
    """The runtime turns onnxruntime's QDQ passes off (they duplicated the dequantization of the
    gathered embeddings); the logits are bit for bit those of a session with onnxruntime's defaults."""
    import onnxruntime as ort

    from model.scoring.classifier.runtime import ClassifierRuntime

    rt = ClassifierRuntime.load(ARTIFACTS)
    assert rt.session.get_session_options().get_session_config_entry("session.disable_quant_qdq") == "1"
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    default = ort.InferenceSession(str(ARTIFACTS / "classifier.onnx"), sess_options=opts,
                                   providers=["CPUExecutionProvider"])
    for kind, seed in (("off_topic", 5), ("loop", 1), (None, 2)):
        texts = sorted(trace_texts(make_trace(kind, seed=seed, n_steps=12)), key=len)
        feeds = rt.encode(texts)
        assert np.array_equal(rt.forward(feeds), default.run(["logits"], feeds)[0])

def test_trace_thresholds_account_for_the_max_over_steps() -> None:
    from model.training.classifier.metrics import tune_trace_thresholds

    # kind 0: failing traces peak at 0.8; healthy traces have one noisy step at 0.6 among many
    failing = [np.array([[0.1], [0.8], [0.2]]) for _ in range(5)]
    healthy = [np.array([[0.1], [0.6], [0.05], [0.1]]) for _ in range(5)]
    truth = np.array([[1.0]] * 5 + [[0.0]] * 5)
    thr = tune_trace_thresholds(failing + healthy, truth)
    assert 0.6 < thr[0] <= 0.8  # a step-level threshold at 0.5 would flag every healthy trace
