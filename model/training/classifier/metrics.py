"""Calibration, thresholds and the metrics of the classifier's evaluation (NumPy only; AUROC, ECE and
``sigmoid`` are in :mod:`model.core.metrics`).

Step probabilities are ``sigmoid(logits / T)`` with one temperature ``T`` fitted on validation
(:func:`fit_temperature`); a kind is predicted when its probability reaches its own threshold
(:func:`tune_thresholds`). A trace's verdict is the maximum over its steps (docs/architecture.md,
"Fusion"): kind ``k`` is predicted for the trace when some step reaches ``k``'s threshold, and the
first such step is the predicted failing step.

>>> import numpy as np
>>> p = np.array([[0.1, 0.9], [0.8, 0.2]])
>>> trace_verdict(p, np.array([0.5, 0.5]), kinds=1)
({0}, 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from model.core.metrics import sigmoid


def bce(probs: np.ndarray, targets: np.ndarray) -> float:
    p = np.clip(probs, 1e-7, 1 - 1e-7)
    return float(-np.mean(targets * np.log(p) + (1 - targets) * np.log(1 - p)))


def fit_temperature(logits: np.ndarray, targets: np.ndarray) -> float:
    """The temperature minimising binary cross-entropy of ``sigmoid(logits / T)`` (grid, 0.05–20)."""
    if logits.size == 0:
        return 1.0
    grid = np.exp(np.linspace(np.log(0.05), np.log(20.0), 241))
    losses = [bce(sigmoid(logits / t), targets) for t in grid]
    return float(grid[int(np.argmin(losses))])


def tune_thresholds(probs: np.ndarray, targets: np.ndarray, *, default: float = 0.5) -> np.ndarray:
    """Per-label threshold maximising F1 on validation (``default`` for labels with no positive)."""
    grid = np.round(np.arange(0.05, 0.96, 0.025), 3)
    out = np.full(probs.shape[1], default, dtype=np.float64)
    for j in range(probs.shape[1]):
        y = targets[:, j] > 0.5
        if not y.any():
            continue
        best, best_f1 = default, -1.0
        for t in grid:
            pred = probs[:, j] >= t
            tp = float(np.sum(pred & y))
            f1 = 2 * tp / max(1.0, float(pred.sum() + y.sum()))
            # ties go to the threshold nearest 0.5 (less overfit to the validation sample)
            if f1 > best_f1 + 1e-12 or (abs(f1 - best_f1) <= 1e-12 and abs(t - 0.5) < abs(best - 0.5)):
                best, best_f1 = float(t), f1
        out[j] = best
    return out


def prf(y_true: np.ndarray, y_pred: np.ndarray, names: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per-label precision, recall, F1 and support from boolean ``(n, L)`` arrays."""
    out: dict[str, dict[str, float]] = {}
    for j, name in enumerate(names):
        t, p = y_true[:, j], y_pred[:, j]
        tp = float(np.sum(t & p))
        prec = tp / float(p.sum()) if p.sum() else 0.0
        rec = tp / float(t.sum()) if t.sum() else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        out[name] = {"precision": prec, "recall": rec, "f1": f1, "support": int(t.sum())}
    return out


def macro_f1(per_label: dict[str, dict[str, float]]) -> float:
    """Mean F1 over labels with support (a label absent from the truth does not count)."""
    f1s = [v["f1"] for v in per_label.values() if v["support"] > 0]
    return float(np.mean(f1s)) if f1s else 0.0


def trace_verdict(step_probs: np.ndarray, thresholds: np.ndarray, *, kinds: int) -> tuple[set[int], int | None]:
    """Kinds predicted for a trace (indices < ``kinds``) and the first step reaching a threshold."""
    if step_probs.shape[0] == 0:
        return set(), None
    hits = step_probs[:, :kinds] >= thresholds[:kinds]
    predicted = {int(j) for j in np.flatnonzero(hits.any(axis=0))}
    rows = np.flatnonzero(hits.any(axis=1))
    return predicted, (int(rows[0]) if rows.size else None)


def confusion(true_primary: Sequence[str], pred_primary: Sequence[str], names: Sequence[str]) -> np.ndarray:
    """Counts ``[true, predicted]`` over single labels (row order = ``names``)."""
    index = {n: i for i, n in enumerate(names)}
    mat = np.zeros((len(names), len(names)), dtype=np.int64)
    for t, p in zip(true_primary, pred_primary, strict=True):
        mat[index[t], index[p]] += 1
    return mat


def rounded(obj: Any, digits: int = 4) -> Any:
    """Round every float in a nested structure (for readable JSON)."""
    if isinstance(obj, float):
        return round(obj, digits)
    if isinstance(obj, dict):
        return {k: rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [rounded(v, digits) for v in obj]
    return obj


__all__ = [
    "bce",
    "confusion",
    "fit_temperature",
    "macro_f1",
    "prf",
    "rounded",
    "trace_verdict",
    "tune_thresholds",
    "tune_trace_thresholds",
]


def tune_trace_thresholds(step_probs: list[np.ndarray], truth: np.ndarray, *, default: float = 0.5) -> np.ndarray:
    """Per-kind thresholds maximising *trace-level* F1 when a trace's verdict is its steps' maximum.

    ``step_probs[i]`` is trace ``i``'s ``(steps, K)`` probabilities, ``truth`` its ``(traces, K)``
    labels. A step threshold tuned on steps alone is too low once any of a trace's dozens of steps
    can trip it; this tunes on what the diagnosis uses.
    """
    k = truth.shape[1]
    maxes = np.stack([p[:, :k].max(axis=0) if len(p) else np.zeros(k) for p in step_probs])
    grid = np.round(np.arange(0.05, 0.99, 0.0125), 4)
    out = np.full(k, default, dtype=np.float64)
    for j in range(k):
        y = truth[:, j] > 0.5
        if not y.any():
            continue
        best, best_f1 = default, -1.0
        for t in grid:
            pred = maxes[:, j] >= t
            tp = float(np.sum(pred & y))
            f1 = 2 * tp / max(1.0, float(pred.sum() + y.sum()))
            if f1 > best_f1 + 1e-12 or (abs(f1 - best_f1) <= 1e-12 and abs(t - 0.5) < abs(best - 0.5)):
                best, best_f1 = float(t), f1
        out[j] = best
    # Per-kind F1 alone happily flags every trace for a kind the model can't separate (F1 > 0 beats
    # 0); that wrecks ``healthy``. So refine by coordinate ascent on the macro-F1 over the kinds
    # and ``healthy`` together, where "never" (above 1) is a choice too.
    y = truth > 0.5
    healthy = ~y.any(axis=1)
    present = [j for j in range(k) if y[:, j].any()]

    def objective(thr: np.ndarray) -> float:
        pred = maxes >= thr
        f1s = []
        for j in present:
            tp = float(np.sum(pred[:, j] & y[:, j]))
            f1s.append(2 * tp / max(1.0, float(pred[:, j].sum() + y[:, j].sum())))
        ph = ~pred.any(axis=1)
        tp = float(np.sum(ph & healthy))
        f1s.append(2 * tp / max(1.0, float(ph.sum() + healthy.sum())))
        return float(np.mean(f1s))

    options = np.append(grid, 1.01)
    score = objective(out)
    for _ in range(2):
        for j in range(k):
            keep = out[j]
            for t in options:
                out[j] = t
                val = objective(out)
                if val > score + 1e-12:
                    score, keep = val, float(t)
            out[j] = keep
    return out
