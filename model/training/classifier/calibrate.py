"""Trace-level thresholds: re-tune each kind's threshold on whole validation traces.

Step-level thresholds (``metrics.tune_thresholds`` on sampled steps) come out too low for the
service, where a trace's verdict is the maximum over all its steps: one step in forty tripping a
threshold flags the whole run. :func:`trace_thresholds` scores every step of ``calib_traces``
validation traces and picks, per kind, the threshold with the best trace-level F1
(``metrics.tune_trace_thresholds``); ``healthy`` keeps its step threshold.

``python -m model.training.classifier.calibrate --model DIR`` re-tunes a trained torch model in place
(``calibration.json``); the training stages call :func:`trace_thresholds` themselves.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from model.core.schema import Trace
from model.scoring.classifier.representation import DEFAULT_CONFIG, trace_texts
from model.training.classifier.data import KIND_LABELS, load_traces, trace_kinds
from model.training.classifier.metrics import macro_f1, prf, trace_verdict, tune_trace_thresholds

log = logging.getLogger("model.training.classifier.calibrate")


def trace_thresholds(predict_proba: Callable[[list[str]], np.ndarray], traces: Sequence[Trace],
                     step_thresholds: Sequence[float]) -> tuple[list[float], dict[str, Any]]:
    """New thresholds (kinds re-tuned on traces, ``healthy`` kept) and the validation figures."""
    texts = [trace_texts(t, DEFAULT_CONFIG) for t in traces]
    flat = [x for per in texts for x in per]
    probs = predict_proba(flat) if flat else np.zeros((0, len(step_thresholds)))
    per_trace, at = [], 0
    for per in texts:
        per_trace.append(probs[at : at + len(per)])
        at += len(per)
    k = len(KIND_LABELS)
    truth = np.asarray([[name in trace_kinds(t) for name in KIND_LABELS] for t in traces], dtype=float)
    tuned = tune_trace_thresholds(per_trace, truth)
    thresholds = [float(x) for x in tuned] + [float(x) for x in step_thresholds[k:]]
    pred = np.zeros_like(truth, dtype=bool)
    for r, p in enumerate(per_trace):
        for j in trace_verdict(p, np.asarray(thresholds), kinds=k)[0]:
            pred[r, j] = True
    scores = prf(truth > 0.5, pred, KIND_LABELS)
    return thresholds, {"calib_traces": len(traces), "val_trace_kind_macro_f1": macro_f1(scores)}


def recalibrate_torch(model_dir: Path, splits: Path, n_traces: int, seed: int = 7) -> dict[str, Any]:
    """Re-tune a trained torch classifier's thresholds on whole validation traces, in place."""
    import random

    from model.core.metrics import sigmoid
    from model.training.classifier.checkpoint import load_classifier, load_tokenizer, predict_logits

    path = model_dir / "calibration.json"
    info: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    tok = load_tokenizer(model_dir / "tokenizer.json", int(info["max_length"]))
    model = load_classifier(model_dir)
    traces = load_traces(splits / "val.jsonl")
    traces = random.Random(seed).sample(traces, min(n_traces, len(traces)))
    temperature = float(info["temperature"])

    def proba(texts: list[str]) -> np.ndarray:
        return sigmoid(predict_logits(model, tok, texts) / temperature)

    step_thr = info.get("step_thresholds", info["thresholds"])
    thresholds, figures = trace_thresholds(proba, traces, step_thr)
    info.update({"thresholds": thresholds, "step_thresholds": step_thr, "threshold_mode": "trace", **figures})
    path.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    log.info("%s: trace-level thresholds on %d val traces, kind macro-F1 %.4f", model_dir, len(traces),
             figures["val_trace_kind_macro_f1"])
    return info


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True, help="a trained model folder (…/best)")
    p.add_argument("--splits", type=Path, default=Path("datasets/splits"))
    p.add_argument("--traces", type=int, default=300)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    recalibrate_torch(args.model, args.splits, args.traces)


if __name__ == "__main__":
    main()
