"""Training → export → evaluation end to end on tiny data, and the torch-vs-ONNX parity test.

Tiny random models (one layer, 32 wide) and a few dozen built traces: seconds, not minutes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from model.data.builder import RECIPE_KINDS, make_trace  # noqa: E402
from model.training.classifier.data import LABELS  # noqa: E402


def _write_splits(folder: Path, per_split: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    kinds = [None, *RECIPE_KINDS]
    for split, offset in (("train", 0), ("val", 1000), ("test", 2000), ("heldout_families", 3000)):
        with (folder / f"{split}.jsonl").open("w", encoding="utf-8") as fh:
            for i in range(per_split):
                t = make_trace(kinds[i % len(kinds)], seed=offset + i, n_steps=4 + i % 7,
                               language="zh" if i % 3 == 0 else "en")
                fh.write(t.model_dump_json() + "\n")
    return folder


def _tiny_bert(vocab: int = 120, max_pos: int = 64) -> object:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    conf = BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=max_pos, num_labels=len(LABELS),
                      problem_type="multi_label_classification")
    conf._attn_implementation = "eager"
    return BertForSequenceClassification(conf).eval()


def test_torch_and_onnx_fp32_logits_match(tmp_path: Path) -> None:
    """Parity: the old exporter (dynamo=False) gives the same logits, padded batches included."""
    import onnxruntime as ort

    from model.training.classifier.export import to_onnx

    model = _tiny_bert()
    path = tmp_path / "m.onnx"
    to_onnx(model, path)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["input_ids", "attention_mask", "token_type_ids"]
    rng = np.random.default_rng(1)
    for batch, width in ((1, 5), (3, 17), (4, 40)):  # other shapes than the export's (2, 8)
        ids = rng.integers(5, 120, size=(batch, width))
        mask = np.ones_like(ids)
        mask[0, width // 2 :] = 0  # a padded row
        ids[0, width // 2 :] = 0
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        with torch.no_grad():
            ref = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}).logits.numpy()
        got = sess.run(["logits"], feeds)[0]
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_tiny_pipeline_end_to_end(tmp_path: Path) -> None:
    """Baseline + student trained on tiny data, exported (fp32/fused/int8), shipped, evaluated."""
    from model.detectors.classifier import ClassifierDetector
    from model.scoring.classifier.runtime import ClassifierRuntime
    from model.training.classifier import baseline, distill, evaluate, export
    from model.training.classifier.config import BaselineConfig, DistillConfig, EvaluateConfig, ExportConfig

    splits = _write_splits(tmp_path / "splits", 40)
    build = tmp_path / "build"
    baseline.run(BaselineConfig.from_dict({"train_examples": 200, "val_examples": 60}), splits,
                 build / "baseline")
    cfg = DistillConfig.from_dict({
        "train_examples": 160, "val_examples": 60, "vocab_size": 400, "layers": 1, "hidden": 32, "heads": 2,
        "intermediate": 64, "max_length": 96, "batch_size": 16, "epochs": 2, "lr": 0.003, "eval_every": 5,
        "patience": 100,
    })
    info = distill.run(cfg, splits, None, build / "student")
    assert info["labels"] == list(LABELS) and len(info["thresholds"]) == len(LABELS)
    assert info["training"]["steps"] == 20  # 160 examples / 16 per batch × 2 epochs
    # a second run resumes from the finished checkpoint instead of training again
    again = distill.run(cfg, splits, None, build / "student")
    assert again["training"]["steps"] == 20 and again["training"]["history"] == info["training"]["history"]

    texts = [json.dumps(i) for i in range(20)]
    sel = export.run(ExportConfig.from_dict({"candidates": ["minilm", "student"]}), build,
                     tmp_path / "artifacts", texts)
    assert sel["shipped"] == "student" and set(sel["candidates"]) == {"student"}
    rt = ClassifierRuntime.load(tmp_path / "artifacts")
    assert rt.labels == LABELS and rt.meta.max_length == 96
    assert rt.meta.extra == {} and rt.meta.model_version == "student-1"
    fp32 = ClassifierRuntime(build / "onnx" / "student" / "classifier.fp32.onnx",
                             build / "onnx" / "student" / "tokenizer.json")
    t = make_trace("off_topic", seed=3, n_steps=8)
    p8, p32 = rt.score_trace(t), fp32.score_trace(t)
    assert p8.shape == (len(t.steps), len(LABELS))
    assert float(np.max(np.abs(p8 - p32))) < 0.05
    # the real-time path gives the same scores as the whole-trace path, in fp32 and with int8 weights
    # (the activations stay fp32: nothing depends on the batch a step is scored in)
    np.testing.assert_allclose(fp32.score_step(t, 5), p32[5], atol=1e-5)
    np.testing.assert_allclose(rt.score_step(t, 5), p8[5], atol=1e-5)

    from model.scoring.classifier.gate import REPORTED_KINDS

    det = ClassifierDetector(path=tmp_path / "artifacts", signal_ratio=0.0)
    found = det.inspect(t)
    # signal_ratio 0: every (step, kind) the classifier reports (the kinds it is a producer of)
    assert len(found) == len(t.steps) * len(REPORTED_KINDS)
    assert {f.kind for f in found} == set(REPORTED_KINDS)
    assert {(f.step, f.source_index) for f in found} == {(i, s.source_index) for i, s in enumerate(t.steps)}

    reports = tmp_path / "reports"
    m = evaluate.run(EvaluateConfig.from_dict({"test_traces": 20, "heldout_traces": 20, "agreement_steps": 50}),
                     splits, build, reports, tmp_path / "artifacts")
    for key in ("macro_f1", "per_kind", "per_language"):
        assert key in m["test"]
    assert set(m["test"]["per_language"]) == {"en", "zh"}
    assert m["test"]["traces"] == 20 and m["heldout_families"]["traces"] == 20
    for key in ("exact", "within_3"):
        assert 0.0 <= m["step_localisation"][key] <= 1.0
    assert "ece" in m["calibration"] and m["int8_fp32_agreement"]["steps"] == 50
    assert set(m["candidates"]) == {"tfidf-baseline", "student"}
    assert (reports / "figures" / "confusion-student-test.png").stat().st_size > 1000
    assert "## student" in (reports / "eval.md").read_text()
    card = (tmp_path / "artifacts" / "MODEL_CARD.md").read_text()
    assert "## Intended use" in card and "## Limits" in card and "## Training data" in card


def _tiny_ngram(vocab: int = 120) -> object:
    from model.training.classifier.ngram import NgramConfig, NgramForSequenceClassification

    torch.manual_seed(0)
    conf = NgramConfig(vocab_size=vocab, dim=8, buckets=97, hidden=16, marker_ids=[5, 6, 7], pad_token_id=0,
                       num_labels=len(LABELS), problem_type="multi_label_classification")
    return NgramForSequenceClassification(conf).eval()


def test_ngram_student_torch_onnx_parity_and_int8(tmp_path: Path) -> None:
    """The n-gram student exports like the BERT candidates (same inputs and output) and its fp32 graph
    gives torch's logits, padded rows and marker segments included; int8 stays close."""
    import onnx
    import onnxruntime as ort

    from model.training.classifier import export
    from model.training.classifier.export import quantize, to_onnx

    model = _tiny_ngram()
    path = tmp_path / "m.onnx"
    to_onnx(model, path)
    quantize(path, tmp_path / "m8.onnx")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    sess8 = ort.InferenceSession(str(tmp_path / "m8.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    assert names[:2] == ["input_ids", "attention_mask"]
    rng = np.random.default_rng(2)
    for batch, width in ((1, 3), (3, 17), (4, 40)):
        ids = rng.integers(8, 120, size=(batch, width))
        ids[:, width // 3] = 5  # a [grounding] marker: later tokens are another segment
        mask = np.ones_like(ids)
        mask[0, width // 2 :] = 0
        ids[0, width // 2 :] = 0
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        feeds = {k: v for k, v in feeds.items() if k in names}
        with torch.no_grad():
            ref = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}).logits.numpy()
        np.testing.assert_allclose(sess.run(["logits"], feeds)[0], ref, rtol=1e-4, atol=1e-5)
        int8 = sess8.run(["logits"], feeds)[0]
        assert float(np.max(np.abs(int8 - ref))) < 0.1
        # each row as it is alone: int8 weights, fp32 activations (no per-batch activation scale)
        for r in range(batch):
            alone = {k: v[r : r + 1] for k, v in feeds.items()}
            np.testing.assert_allclose(sess8.run(["logits"], alone)[0][0], int8[r], atol=1e-5)
    graph = onnx.load(str(tmp_path / "m8.onnx")).graph
    ops = {n.op_type for n in graph.node}
    made = {o: n for n in graph.node for o in n.output}
    assert "DynamicQuantizeLinear" not in ops and "MatMul" in ops  # activations stay fp32
    # the integer MatMuls left are onnx_rewrites.pooling_kernels' sums of the gathered 8-bit rows
    integer = [n for n in graph.node if n.op_type == "MatMulInteger"]
    assert integer and all(made[n.input[1]].op_type == "Gather" for n in integer)
    # the command that rewrote the shipped file: nothing left to rewrite here, the metadata says so
    export.main(["--rewrite", str(tmp_path / "m8.onnx")])
    meta = {e.key: e.value for e in onnx.load(str(tmp_path / "m8.onnx")).metadata_props}
    assert meta["triage.quantisation"] == export.QUANTISATION
    with pytest.raises(SystemExit):
        export.main(["--rewrite", str(tmp_path / "missing.onnx")])


def test_pooled_embeddings_give_the_quantised_graphs_logits(tmp_path: Path) -> None:
    """An ensemble's embedding tables pooled on their 8-bit values (onnx_rewrites.pooled_embeddings): one gather
    per group of tables that read the same ids, no dequantised [batch, tokens, width] tensor, and the
    logits of the graph as quantize_dynamic left it, padded rows, short rows and segments included."""
    import onnx
    import onnxruntime as ort

    from model.training.classifier import export, onnx_rewrites
    from model.training.classifier.ngram import ensemble_of

    nets = []
    for seed in (1, 2):
        nets.append(_tiny_ngram())
        torch.manual_seed(seed)  # two nets apart, their rows far apart: a padded token's row would win a max
        for table in (nets[-1].unigrams, nets[-1].bigrams):
            torch.nn.init.normal_(table.weight, std=2.0)
    path = tmp_path / "ens.onnx"
    export.to_onnx(ensemble_of(nets), path)
    export.quantize(path, tmp_path / "plain.onnx", pool=False)
    export.quantize(path, tmp_path / "pooled.onnx")
    plain = onnx.load(str(tmp_path / "plain.onnx"))
    pooled = onnx.load(str(tmp_path / "pooled.onnx"))
    uint8 = {t.name for t in pooled.graph.initializer if t.data_type == onnx.TensorProto.UINT8}
    gathers = [n for n in pooled.graph.node if n.op_type == "Gather" and n.input[0] in uint8]
    assert len(gathers) == 2  # the unigram tables of both nets, their bigram tables
    assert not any(n.op_type == "DequantizeLinear" for n in pooled.graph.node)
    assert sum(n.op_type == "DequantizeLinear" for n in plain.graph.node) == 4
    a = ort.InferenceSession(str(tmp_path / "plain.onnx"), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(tmp_path / "pooled.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for batch, width in ((1, 2), (1, 3), (3, 17), (5, 60)):
        ids = rng.integers(8, 120, size=(batch, width))
        ids[:, width // 3] = 6  # a marker: later tokens are another segment
        mask = np.ones_like(ids)
        for r in range(batch):  # rows of 1 (no pair unmasked) to width tokens, the rest padding
            n = 1 if r == 0 and width == 3 else int(rng.integers(2, width + 1))
            mask[r, n:] = 0
            ids[r, n:] = rng.integers(0, 120, size=width - n)  # what padding gathers must not matter
        feeds = {"input_ids": ids, "attention_mask": mask}
        want = a.run(["logits"], feeds)[0]
        np.testing.assert_allclose(b.run(["logits"], feeds)[0], want, atol=2e-5, rtol=0)
    assert onnx_rewrites.pooled_embeddings(tmp_path / "pooled.onnx", tmp_path / "again.onnx") == 0
    # pooled on onnxruntime's fast kernels (onnx_rewrites.pooling_kernels, which quantize runs last): the same bits
    # as the float reductions it replaced, on every row above
    assert onnx_rewrites.pooled_embeddings(tmp_path / "plain.onnx", tmp_path / "reduced.onnx") == 4
    reduced = onnx.load(str(tmp_path / "reduced.onnx"))
    assert sum(n.op_type in ("ReduceMax", "ReduceSum") for n in reduced.graph.node) > \
        sum(n.op_type in ("ReduceMax", "ReduceSum") for n in pooled.graph.node)
    assert sum(n.op_type == "GlobalMaxPool" for n in pooled.graph.node) == 2
    assert sum(n.op_type == "MatMulInteger" for n in pooled.graph.node) == 2
    assert onnx_rewrites.pooling_kernels(tmp_path / "pooled.onnx", tmp_path / "again.onnx") == 0
    r = ort.InferenceSession(str(tmp_path / "reduced.onnx"), providers=["CPUExecutionProvider"])
    for batch, width in ((1, 2), (1, 9), (4, 33)):
        ids = rng.integers(0, 120, size=(batch, width))
        mask = np.ones_like(ids)
        mask[0, width // 2 + 1:] = 0
        feeds = {"input_ids": ids, "attention_mask": mask}
        np.testing.assert_array_equal(b.run(["logits"], feeds)[0], r.run(["logits"], feeds)[0])
    export.main(["--rewrite", str(tmp_path / "plain.onnx")])  # the shipped file's command: the same graph
    rewritten = ort.InferenceSession(str(tmp_path / "plain.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(rewritten.run(["logits"], feeds)[0], b.run(["logits"], feeds)[0])


def test_ngram_student_trains_saves_and_reloads(tmp_path: Path) -> None:
    """distill.run with arch ngram: trains on tiny data, and the saved folder reloads with the same
    line markers (they are config, not a buffer from_pretrained would leave uninitialised)."""
    from model.training.classifier import distill
    from model.training.classifier.checkpoint import load_classifier
    from model.training.classifier.config import DistillConfig
    from model.training.classifier.vocab import MARKERS

    splits = _write_splits(tmp_path / "splits", 30)
    cfg = DistillConfig.from_dict({
        "arch": "ngram", "train_examples": 120, "val_examples": 40, "vocab_size": 300, "dim": 8,
        "buckets": 101, "hidden": 16, "token_dropout": 0.3, "max_length": 96, "batch_size": 16, "epochs": 2,
        "lr": 0.01, "eval_every": 4, "patience": 100, "calib_traces": 20,
    })
    info = distill.run(cfg, splits, None, tmp_path / "ngram")
    assert info["labels"] == list(LABELS) and info["model_name"].startswith("student n-gram net")
    model = load_classifier(tmp_path / "ngram" / "best")
    tok = json.loads((tmp_path / "ngram" / "best" / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    assert model.config.marker_ids == [vocab[m] for m in MARKERS]
    ids = torch.tensor([[2, 9, vocab["[grounding]"], 11, vocab["[prev]"], 12, 3]])
    model.eval()
    with torch.no_grad():
        a = model(input_ids=ids).logits
        b = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    assert torch.allclose(a, b) and a.shape == (1, len(LABELS))


def test_ngram_ensemble_averages_members_and_exports(tmp_path: Path) -> None:
    """ensemble: 2 trains two nets apart on one vocabulary; the saved model's logits are the mean of
    the members' and its ONNX graph gives the same."""
    import onnxruntime as ort

    from model.training.classifier import distill
    from model.training.classifier.checkpoint import load_classifier
    from model.training.classifier.config import DistillConfig
    from model.training.classifier.export import to_onnx

    splits = _write_splits(tmp_path / "splits", 30)
    cfg = DistillConfig.from_dict({
        "arch": "ngram", "ensemble": 2, "train_examples": 100, "val_examples": 40, "vocab_size": 300, "dim": 8,
        "buckets": 101, "hidden": 16, "max_length": 96, "batch_size": 16, "epochs": 1, "lr": 0.01,
        "eval_every": 4, "patience": 100, "calib_traces": 10,
    })
    info = distill.run(cfg, splits, None, tmp_path / "ens")
    assert info["ensemble"] == 2 and info["train_examples"] == 200 and len(info["training"]["members"]) == 2
    model = load_classifier(tmp_path / "ens" / "best")
    members = [load_classifier(tmp_path / "ens" / f"member-{k}" / "best") for k in range(2)]
    ids = torch.tensor([[2, 9, 10, 11, 12, 3], [2, 14, 15, 3, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        got = model(input_ids=ids, attention_mask=mask).logits
        mean = torch.stack([m(input_ids=ids, attention_mask=mask).logits for m in members]).mean(dim=0)
    torch.testing.assert_close(got, mean)
    path = tmp_path / "ens.onnx"
    to_onnx(model, path)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    np.testing.assert_allclose(sess.run(["logits"], feeds)[0], got.numpy(), rtol=1e-4, atol=1e-5)


def test_ngram_ensemble_with_a_teacher_is_refused_before_any_work(tmp_path: Path) -> None:
    from model.core.errors import InputError
    from model.training.classifier import distill
    from model.training.classifier.config import DistillConfig

    cfg = DistillConfig.from_dict({"arch": "ngram", "ensemble": 3, "soft_weight": 0.2, "soft_examples": 100})
    # no splits exist: the refusal must come before anything is read or trained
    with pytest.raises(InputError, match="ensemble of n-gram students trains from scratch"):
        distill.run(cfg, tmp_path / "no-splits", tmp_path / "teacher", tmp_path / "out")


def test_teacher_scores_are_reused_only_for_the_same_teacher(tmp_path: Path) -> None:
    """distill caches the teacher's scores; another teacher scores again and the student trains again
    (its checkpoint fingerprint covers the soft labels). The first version reused any cached scores
    of the right shape: a student "distilled" from the previous teacher."""
    import shutil

    from model.training.classifier import distill
    from model.training.classifier.config import DistillConfig

    splits = _write_splits(tmp_path / "splits", 30)
    base = {"arch": "ngram", "train_examples": 80, "val_examples": 30, "vocab_size": 300, "dim": 8, "buckets": 101,
            "hidden": 16, "max_length": 96, "batch_size": 16, "epochs": 1, "lr": 0.01, "eval_every": 4,
            "patience": 100, "calib_traces": 10}
    distill.run(DistillConfig.from_dict(base), splits, None, tmp_path / "teacher")
    teacher = tmp_path / "teacher" / "best"
    cfg = DistillConfig.from_dict({**base, "soft_weight": 0.5, "soft_examples": 40, "teacher_batch": 8, "seed": 9})
    out = tmp_path / "student"
    one = distill.run(cfg, splits, teacher, out)
    scores, key = out / "teacher-probs.npy", out / "teacher-probs.key"
    first = (scores.stat().st_mtime_ns, key.read_text())
    two = distill.run(cfg, splits, teacher, out)  # same teacher: scores reused, the finished run resumed
    assert (scores.stat().st_mtime_ns, key.read_text()) == first
    assert two["training"]["history"] == one["training"]["history"]
    checkpoint = (out / "checkpoint.pt").read_bytes()
    other = tmp_path / "other"  # another teacher: same layout, other calibration
    shutil.copytree(teacher, other)
    info = json.loads((other / "calibration.json").read_text())
    (other / "calibration.json").write_text(json.dumps({**info, "temperature": info["temperature"] * 3}))
    distill.run(cfg, splits, other, out)
    assert key.read_text() != first[1] and scores.stat().st_mtime_ns != first[0]
    # trained again on the new soft labels (not resumed): a new checkpoint (a tiny net's validation
    # history may come out the same)
    assert (out / "checkpoint.pt").read_bytes() != checkpoint
