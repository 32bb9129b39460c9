"""The baseline: TF-IDF + logistic regression, one-vs-rest over the labels (training only: sklearn).

Same step texts as the neural models (:func:`model.scoring.classifier.representation.step_text`), word
uni- and bigrams where every CJK character counts as a word (so Chinese is not one giant token),
sublinear TF, one balanced logistic regression per label, thresholds tuned on validation.

``python -m model.training.classifier.baseline`` is the DVC ``baseline`` stage; it writes
``build/classifier/baseline/{baseline.joblib,calibration.json}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from model.scoring.classifier.representation import DEFAULT_CONFIG, RepresentationConfig
from model.training.classifier.config import BaselineConfig
from model.training.classifier.data import LABELS, load_traces, sample_examples, targets_matrix
from model.training.classifier.metrics import macro_f1, prf, tune_thresholds

log = logging.getLogger("model.training.classifier.baseline")

TOKEN_PATTERN = r"(?u)[\u3400-\u9fff]|[^\W\d_]+|\d+"


class TfidfBaseline:
    """TF-IDF + one-vs-rest logistic regression with tuned per-label thresholds.

    Parameters
    ----------
    max_features, c, seed:
        Vocabulary size, inverse regularisation strength, random seed.

    >>> TfidfBaseline().predict_proba(["x"])
    Traceback (most recent call last):
    ...
    model.core.errors.NotFittedError: TfidfBaseline is not fitted; call fit(texts, targets) first
    """

    name = "tfidf-logreg"

    def __init__(self, *, max_features: int = 200000, c: float = 4.0, seed: int = 7) -> None:
        self.max_features = max_features
        self.c = c
        self.seed = seed
        self.labels: tuple[str, ...] = LABELS
        self.thresholds = np.full(len(LABELS), 0.5)
        self.representation: RepresentationConfig = DEFAULT_CONFIG

    def fit(self, texts: list[str], targets: np.ndarray) -> TfidfBaseline:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression

        self.vectorizer_ = TfidfVectorizer(token_pattern=TOKEN_PATTERN, ngram_range=(1, 2), sublinear_tf=True,
                                           min_df=2, max_features=self.max_features, lowercase=True)
        x = self.vectorizer_.fit_transform(texts)
        self.models_: list[Any] = []
        for j in range(targets.shape[1]):
            y = targets[:, j] > 0.5
            if y.all() or not y.any():
                self.models_.append(float(y.mean()))  # a constant: nothing to learn
                continue
            clf = LogisticRegression(C=self.c, class_weight="balanced", max_iter=2000, solver="liblinear",
                                     random_state=self.seed)
            self.models_.append(clf.fit(x, y))
        return self

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        from model.core.errors import NotFittedError

        if not hasattr(self, "models_"):
            raise NotFittedError("TfidfBaseline is not fitted; call fit(texts, targets) first")
        x = self.vectorizer_.transform(texts)
        out = np.zeros((len(texts), len(self.models_)))
        for j, m in enumerate(self.models_):
            out[:, j] = m if isinstance(m, float) else m.predict_proba(x)[:, 1]
        return out


def run(cfg: BaselineConfig, splits: Path, out_dir: Path) -> dict[str, Any]:
    import joblib

    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    train = sample_examples(load_traces(splits / "train.jsonl"), max_examples=cfg.train_examples,
                            seed=cfg.seed + 200, failure_fraction=cfg.failure_fraction,
                            post_failure=cfg.post_failure)  # type: ignore[arg-type]
    val = sample_examples(load_traces(splits / "val.jsonl"), max_examples=cfg.val_examples,
                          seed=cfg.seed + 201, failure_fraction=cfg.val_failure_fraction,
                          post_failure=cfg.post_failure)  # type: ignore[arg-type]
    t1 = time.perf_counter()
    model = TfidfBaseline(max_features=cfg.max_features, c=cfg.c, seed=cfg.seed)
    model.fit([e.text for e in train], targets_matrix(train))
    fit_s = time.perf_counter() - t1
    yv = targets_matrix(val)
    probs = model.predict_proba([e.text for e in val])
    model.thresholds = tune_thresholds(probs, yv)
    per = prf(yv > 0.5, probs >= model.thresholds, LABELS)
    step_thresholds = [float(t) for t in model.thresholds]
    extra: dict[str, Any] = {}
    if cfg.calib_traces > 0:
        import random

        from model.training.classifier.calibrate import trace_thresholds

        traces = load_traces(splits / "val.jsonl")
        traces = random.Random(cfg.seed).sample(traces, min(cfg.calib_traces, len(traces)))
        thresholds, extra = trace_thresholds(model.predict_proba, traces, step_thresholds)
        model.thresholds = np.asarray(thresholds)
        extra["step_thresholds"] = step_thresholds
        extra["threshold_mode"] = "trace"
    joblib.dump(model, out_dir / "baseline.joblib")
    info = {
        "labels": list(LABELS), "thresholds": [float(t) for t in model.thresholds], "temperature": 1.0,
        "val_step_macro_f1": macro_f1(per), "val_step_per_label": per, "train_examples": len(train),
        "val_examples": len(val), "fit_seconds": round(fit_s, 1),
        "sample_seconds": round(t1 - t0, 1), "representation": DEFAULT_CONFIG.to_dict(), **extra,
    }
    (out_dir / "calibration.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    log.info("baseline: %d train examples, fit %.1fs, val step macro-F1 %.4f", len(train), fit_s,
             info["val_step_macro_f1"])
    return info


def load(out_dir: Path) -> TfidfBaseline:
    import joblib

    model: TfidfBaseline = joblib.load(out_dir / "baseline.joblib")
    return model


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--params", type=Path, default=Path("params.yaml"))
    p.add_argument("--splits", type=Path, default=Path("datasets/splits"))
    p.add_argument("--out", type=Path, default=Path("build/classifier/baseline"))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    # run through the importable module so that the pickle names model.training.classifier.baseline, not __main__
    from model.training.classifier import baseline as module

    module.run(BaselineConfig.from_params(args.params), args.splits, args.out)


if __name__ == "__main__":
    main()
