"""Evaluation: the baseline and every exported candidate on the test split and the held-out families.

``python -m model.training.classifier.evaluate`` (the DVC ``evaluate`` stage, also ``triage evaluate``)
writes ``reports/metrics.json`` (nested: ``m["test"]["macro_f1"]``), ``reports/eval.md`` with
confusion-matrix PNGs, and the shipped model's card ``model/artifacts/MODEL_CARD.md``.

What is measured (per candidate, per split):

* **trace level** (the verdict is the maximum over steps, docs/architecture.md, "Fusion"): per-label
  precision / recall / F1 over the classifier kinds plus ``healthy`` (a trace is predicted healthy
  when no kind reaches its threshold); ``macro_f1`` is their mean over labels present in the split;
  the same per language;
* **step level**: the same over every step (unlabelled steps after a failure count as healthy);
* **step localisation** on failing traces: the first step reaching a threshold equals the labelled
  first failing step (``exact``) or is within 3 steps (``within_3``);
* **calibration**: expected calibration error of the step probabilities, before and after the
  temperature;
* **int8 vs fp32**: how often the int8 graph predicts the same label set as the fp32 one per step.

The top-level ``test``, ``heldout_families``, ``step_localisation`` and ``calibration`` entries are
the shipped model's; every candidate's figures are under ``candidates``.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from model.core.metrics import ece, sigmoid
from model.core.schema import Trace
from model.scoring.classifier.representation import DEFAULT_CONFIG, RepresentationConfig, trace_texts
from model.scoring.classifier.runtime import MODEL_FILE, ClassifierRuntime
from model.training.classifier.config import EvaluateConfig
from model.training.classifier.data import (
    HEALTHY_INDEX,
    KIND_LABELS,
    LABELS,
    first_failing_step,
    load_traces,
    step_targets,
    trace_kinds,
)
from model.training.classifier.metrics import confusion, macro_f1, prf, rounded, trace_verdict

log = logging.getLogger("model.training.classifier.evaluate")

SPLITS = ("test", "heldout_families")


class Scorer(Protocol):
    labels: tuple[str, ...]
    thresholds: np.ndarray

    def predict_proba(self, texts: list[str]) -> np.ndarray: ...


class OnnxScorer:
    """A :class:`ClassifierRuntime` seen as a scorer (keeps uncalibrated probabilities too)."""

    def __init__(self, rt: ClassifierRuntime) -> None:
        self.rt = rt
        self.labels = rt.labels
        self.thresholds = rt.thresholds
        self.representation = rt.meta.representation
        self.last_raw: np.ndarray | None = None

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        logits = self.rt.logits(texts)
        self.last_raw = sigmoid(logits)
        return sigmoid(logits / self.rt.meta.temperature)


@dataclass
class SplitScores:
    """Step probabilities of one scorer over the traces of one split."""

    traces: list[Trace]
    probs: list[np.ndarray]
    raw: list[np.ndarray] | None
    seconds: float


def split_texts(traces: Sequence[Trace], rep: RepresentationConfig) -> list[list[str]]:
    return [trace_texts(t, rep) for t in traces]


def score_split(scorer: Scorer, traces: Sequence[Trace], texts: list[list[str]]) -> SplitScores:
    flat = [x for per in texts for x in per]
    t0 = time.perf_counter()
    probs = scorer.predict_proba(flat) if flat else np.zeros((0, len(LABELS)))
    seconds = time.perf_counter() - t0
    raw_all = getattr(scorer, "last_raw", None)
    out, raw, at = [], [], 0
    for per in texts:
        out.append(probs[at : at + len(per)])
        if raw_all is not None:
            raw.append(raw_all[at : at + len(per)])
        at += len(per)
    return SplitScores(list(traces), out, raw if raw_all is not None else None, seconds)


def _primary_true(trace: Trace) -> str:
    first = first_failing_step(trace)
    if first is None:
        return LABELS[HEALTHY_INDEX]
    target = step_targets(trace)[first]
    assert target is not None
    return LABELS[next(j for j, v in enumerate(target) if v and j != HEALTHY_INDEX)]


def _primary_pred(probs: np.ndarray, thresholds: np.ndarray) -> tuple[str, int | None]:
    kinds = len(KIND_LABELS)
    _, first = trace_verdict(probs, thresholds, kinds=kinds)
    if first is None:
        return LABELS[HEALTHY_INDEX], None
    row = probs[first, :kinds]
    hits = np.flatnonzero(row >= thresholds[:kinds])
    # the most confident kind at that step, confidence measured against its own threshold
    j = int(hits[np.argmax(row[hits] - thresholds[:kinds][hits])])
    return LABELS[j], first


def split_metrics(scores: SplitScores, thresholds: np.ndarray) -> dict[str, Any]:
    """All the figures of one scorer on one split (see the module docstring)."""
    kinds = len(KIND_LABELS)
    n = len(scores.traces)
    y_true = np.zeros((n, len(LABELS)), dtype=bool)
    y_pred = np.zeros((n, len(LABELS)), dtype=bool)
    langs: list[str] = []
    loc_exact = loc_within = loc_total = 0
    true_primary, pred_primary = [], []
    step_t, step_p, step_prob, step_raw = [], [], [], []
    for r, (trace, probs) in enumerate(zip(scores.traces, scores.probs, strict=True)):
        truth = trace_kinds(trace)
        for j, name in enumerate(KIND_LABELS):
            y_true[r, j] = name in truth
        y_true[r, HEALTHY_INDEX] = not truth
        predicted, first = trace_verdict(probs, thresholds, kinds=kinds)
        for j in predicted:
            y_pred[r, j] = True
        y_pred[r, HEALTHY_INDEX] = not predicted
        langs.append(trace.language or "unknown")
        true_first = first_failing_step(trace)
        if true_first is not None:
            loc_total += 1
            if first is not None:
                loc_exact += int(first == true_first)
                loc_within += int(abs(first - true_first) <= 3)
        true_primary.append(_primary_true(trace))
        pred_primary.append(_primary_pred(probs, thresholds)[0])
        targets = [t for t in step_targets(trace)]
        for i, t in enumerate(targets):
            assert t is not None
            step_t.append(t)
            step_prob.append(probs[i])
            step_p.append(probs[i] >= thresholds)
            if scores.raw is not None:
                step_raw.append(scores.raw[r][i])
    per = prf(y_true, y_pred, LABELS)
    per_language: dict[str, Any] = {}
    for lang in sorted(set(langs)):
        m = np.asarray([x == lang for x in langs])
        pl = prf(y_true[m], y_pred[m], LABELS)
        per_language[lang] = {"traces": int(m.sum()), "macro_f1": macro_f1(pl), "per_kind": pl}
    st = np.asarray(step_t, dtype=np.float64).reshape(-1, len(LABELS))
    sp = np.asarray(step_p, dtype=bool).reshape(-1, len(LABELS))
    sprob = np.asarray(step_prob, dtype=np.float64).reshape(-1, len(LABELS))
    step_per = prf(st > 0.5, sp, LABELS)
    calib = {"ece": ece(st, sprob, bins=15)}
    if step_raw:
        calib["ece_before_temperature"] = ece(st, np.asarray(step_raw), bins=15)
    return {
        "traces": n,
        "steps": int(st.shape[0]),
        "macro_f1": macro_f1(per),
        "per_kind": per,
        "per_language": per_language,
        "step_macro_f1": macro_f1(step_per),
        "step_per_kind": step_per,
        "step_localisation": {
            "failing_traces": loc_total,
            "exact": loc_exact / loc_total if loc_total else 0.0,
            "within_3": loc_within / loc_total if loc_total else 0.0,
        },
        "calibration": calib,
        "scoring_seconds": scores.seconds,
        "_confusion": confusion(true_primary, pred_primary, LABELS).tolist(),
    }


def agreement(rt_int8: ClassifierRuntime, rt_fp32: ClassifierRuntime, texts: list[str]) -> dict[str, Any]:
    """How often int8 and fp32 give the same label set per step, and how far their probabilities move."""
    a = rt_int8.predict_proba(texts)
    b = rt_fp32.predict_proba(texts)
    same = np.all((a >= rt_int8.thresholds) == (b >= rt_fp32.thresholds), axis=1)
    return {"steps": len(texts), "label_set_agreement": float(same.mean()) if len(texts) else 1.0,
            "max_abs_prob_diff": float(np.max(np.abs(a - b))) if len(texts) else 0.0,
            "mean_abs_prob_diff": float(np.mean(np.abs(a - b))) if len(texts) else 0.0}


def plot_confusion(mat: list[list[int]], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arr = np.asarray(mat, dtype=np.float64)
    rows = arr.sum(axis=1, keepdims=True)
    norm = np.divide(arr, rows, out=np.zeros_like(arr), where=rows > 0)
    fig, ax = plt.subplots(figsize=(9, 8))
    ax.imshow(norm, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(len(LABELS)), LABELS, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(LABELS)), LABELS, fontsize=8)
    for i in range(len(LABELS)):
        for j in range(len(LABELS)):
            if arr[i, j]:
                ax.text(j, i, str(int(arr[i, j])), ha="center", va="center", fontsize=7,
                        color="white" if norm[i, j] > 0.6 else "black")
    ax.set_xlabel("predicted primary kind (trace)")
    ax.set_ylabel("labelled primary kind (trace)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def sample_traces(traces: list[Trace], k: int, seed: int) -> list[Trace]:
    """A seeded random sample in random order (so any prefix of it is a random sample too)."""
    idx = random.Random(seed).sample(range(len(traces)), k if 0 < k < len(traces) else len(traces))
    return [traces[i] for i in idx]


def load_candidates(build: Path, threads: int) -> tuple[dict[str, Scorer], dict[str, Any]]:
    """The baseline (if trained) and every exported ONNX candidate, with the export selection."""
    scorers: dict[str, Scorer] = {}
    base_dir = build / "baseline"
    if (base_dir / "baseline.joblib").exists():
        from model.training.classifier.baseline import load

        scorers["tfidf-baseline"] = load(base_dir)
    selection: dict[str, Any] = {}
    sel_path = build / "onnx" / "selection.json"
    if sel_path.exists():
        selection = json.loads(sel_path.read_text(encoding="utf-8"))
    onnx_root = build / "onnx"
    if onnx_root.is_dir():
        for d in sorted(p for p in onnx_root.iterdir() if (p / MODEL_FILE).exists()):
            scorers[d.name] = OnnxScorer(ClassifierRuntime.load(d, threads=threads))
    return scorers, selection


def _table(rows: list[list[str]], head: list[str]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _f(x: float) -> str:
    return f"{x:.3f}"


def write_eval_md(metrics: dict[str, Any], path: Path) -> None:
    cands = metrics["candidates"]
    shipped = metrics.get("shipped")
    out = ["# Classifier evaluation", "",
           f"Generated by `python -m model.training.classifier.evaluate` ({metrics['generated_at']}). "
           "Trace-level figures: a trace's verdict is the maximum over its steps; `macro_f1` is the mean "
           "F1 over the classifier kinds present in the split plus `healthy`. "
           f"Test: {metrics['test'].get('traces', 0)} traces sampled from `test.jsonl`; held-out families: "
           f"{metrics['heldout_families'].get('traces', 0)} from `heldout_families.jsonl`.", ""]
    sel = metrics.get("selection", {}).get("candidates", {})
    rows = []
    for name, m in cands.items():
        rows.append([name + (" **(shipped)**" if name == shipped else ""),
                     f"{m['test']['traces']} / {m['heldout_families']['traces']}",
                     _f(m["test"]["macro_f1"]), _f(m["heldout_families"]["macro_f1"]),
                     _f(m["test"]["step_macro_f1"]),
                     _f(m["test"]["step_localisation"]["exact"]), _f(m["test"]["step_localisation"]["within_3"]),
                     _f(m["test"]["calibration"]["ece"]),
                     f"{sel[name]['p50_ms']:.1f}" if name in sel else "–"])
    out += ["## Candidates side by side", "",
            _table(rows, ["candidate", "traces (test / held-out)", "test macro-F1", "held-out macro-F1",
                          "test step macro-F1",
                          "localisation exact", "within 3", "ECE", "one-step p50 ms (export)"]), ""]
    base = cands.get("tfidf-baseline")
    if base and shipped in cands:
        d = cands[shipped]["heldout_families"]["macro_f1"] - base["heldout_families"]["macro_f1"]
        verdict = f"beats the TF-IDF baseline by {d:.3f}" if d > 0 else (
            f"does NOT beat the TF-IDF baseline: it trails it by {-d:.3f}")
        out += [f"On held-out families the shipped model ({shipped}) {verdict} macro-F1.", ""]
    agree = {k: v["int8_fp32_agreement"] for k, v in cands.items() if "int8_fp32_agreement" in v}
    if agree:
        rows = [[k, str(v["steps"]), _f(v["label_set_agreement"]), f"{v['max_abs_prob_diff']:.4f}",
                 f"{v['mean_abs_prob_diff']:.5f}"] for k, v in agree.items()]
        out += ["## int8 vs fp32 (same test steps, fused fp32 graph vs its int8 quantisation)", "",
                _table(rows, ["candidate", "steps", "same label set", "max |Δp|", "mean |Δp|"]), ""]
    for name, m in cands.items():
        out += [f"## {name}", ""]
        for split in SPLITS:
            s = m[split]
            out += [f"### {split}: macro-F1 {_f(s['macro_f1'])} ({s['traces']} traces)", "",
                    f"![confusion {name} {split}](figures/confusion-{name}-{split}.png)", ""]
            rows = [[k, _f(v["precision"]), _f(v["recall"]), _f(v["f1"]), str(v["support"])]
                    for k, v in s["per_kind"].items() if v["support"] or v["precision"]]
            out += [_table(rows, ["kind", "precision", "recall", "F1", "traces"]), ""]
            lrows = []
            for lang, lm in s["per_language"].items():
                ps = [v for v in lm["per_kind"].values() if v["support"]]
                lrows.append([lang, str(lm["traces"]), _f(lm["macro_f1"]),
                              _f(float(np.mean([v["precision"] for v in ps])) if ps else 0.0),
                              _f(float(np.mean([v["recall"] for v in ps])) if ps else 0.0)])
            out += [_table(lrows, ["language", "traces", "macro-F1", "macro precision", "macro recall"]), ""]
            worst = {lang: sorted(((v["f1"], k) for k, v in lm["per_kind"].items() if v["support"]))[:3]
                     for lang, lm in s["per_language"].items()}
            out += ["Weakest kinds per language: " + "; ".join(
                f"{lang}: " + ", ".join(f"{k} {f:.2f}" for f, k in w) for lang, w in worst.items()), ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


def run(cfg: EvaluateConfig, splits: Path, build: Path, reports: Path,
        artifacts: Path | None = None) -> dict[str, Any]:
    scorers, selection = load_candidates(build, cfg.threads)
    if not scorers:
        raise FileNotFoundError(f"nothing to evaluate under {build}: run the baseline / train / export stages")
    shipped = selection.get("shipped")
    data = {
        "test": sample_traces(load_traces(splits / "test.jsonl"), cfg.test_traces, cfg.seed),
        "heldout_families": sample_traces(load_traces(splits / "heldout_families.jsonl"), cfg.heldout_traces,
                                          cfg.seed + 1),
    }
    texts_cache: dict[tuple[str, RepresentationConfig], list[list[str]]] = {}
    cand_metrics: dict[str, Any] = {}
    for name, scorer in scorers.items():
        rep = getattr(scorer, "representation", DEFAULT_CONFIG)
        cand_metrics[name] = {}
        cap = cfg.candidate_traces.get(name)
        for split, traces in data.items():
            key = (split, rep)
            if key not in texts_cache:
                texts_cache[key] = split_texts(traces, rep)
            k = len(traces) if cap is None else min(cap, len(traces))
            scores = score_split(scorer, traces[:k], texts_cache[key][:k])
            m = split_metrics(scores, np.asarray(scorer.thresholds))
            plot_confusion(m.pop("_confusion"), f"{name} on {split} ({m['traces']} traces)",
                           reports / "figures" / f"confusion-{name}-{split}.png")
            cand_metrics[name][split] = m
            log.info("%s on %s: macro-F1 %.4f, step macro-F1 %.4f, loc exact %.3f (%.1fs)", name, split,
                     m["macro_f1"], m["step_macro_f1"], m["step_localisation"]["exact"], scores.seconds)
    metrics: dict[str, Any] = {"generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "shipped": shipped, "selection": selection}
    agreements = {}
    for name, scorer in scorers.items():
        if not isinstance(scorer, OnnxScorer):
            continue
        fused = build / "onnx" / name / "classifier.fused.onnx"
        if not fused.exists():
            continue
        rt32 = ClassifierRuntime(fused, build / "onnx" / name / "tokenizer.json", threads=cfg.threads)
        flat = [x for per in texts_cache[("test", scorer.representation)] for x in per]
        flat = random.Random(cfg.seed).sample(flat, min(cfg.agreement_steps, len(flat)))
        agreements[name] = agreement(scorer.rt, rt32, flat)
        cand_metrics[name]["int8_fp32_agreement"] = agreements[name]
        log.info("%s int8 vs fp32: %s", name, agreements[name])
    top = shipped if shipped in cand_metrics else next(iter(cand_metrics))
    t = cand_metrics[top]
    metrics.update({
        "evaluated": top,
        "test": {k: t["test"][k] for k in ("traces", "macro_f1", "per_kind", "per_language", "step_macro_f1")},
        "heldout_families": {k: t["heldout_families"][k] for k in ("traces", "macro_f1", "per_kind",
                                                                    "per_language", "step_macro_f1")},
        "step_localisation": t["test"]["step_localisation"],
        "calibration": t["test"]["calibration"],
        "int8_fp32_agreement": agreements.get(top, {}),
        "candidates": cand_metrics,
    })
    if "tfidf-baseline" in cand_metrics:
        metrics["heldout_families"]["baseline_macro_f1"] = cand_metrics["tfidf-baseline"]["heldout_families"][
            "macro_f1"]
    metrics = rounded(metrics)
    reports.mkdir(parents=True, exist_ok=True)
    (reports / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    write_eval_md(metrics, reports / "eval.md")
    if artifacts is not None and shipped:
        from model.training.card import write_model_card

        write_model_card(metrics, build, artifacts / "MODEL_CARD.md")
    return metrics


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--params", type=Path, default=Path("params.yaml"))
    p.add_argument("--splits", type=Path, default=Path("datasets/splits"))
    p.add_argument("--build", type=Path, default=Path("build/classifier"))
    p.add_argument("--reports", type=Path, default=Path("reports"))
    p.add_argument("--artifacts", type=Path, default=Path("model/artifacts"))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    run(EvaluateConfig.from_params(args.params), args.splits, args.build, args.reports, args.artifacts)


if __name__ == "__main__":
    main()
