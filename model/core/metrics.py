"""The evaluation metrics, in one module (NumPy and SciPy only: the serving install needs them too).

* the logistic link: :func:`sigmoid` over arrays (clipped, for logits), :func:`logistic` and
  :func:`logit` on one float;
* ranking: :func:`auroc` (Mann-Whitney with average ranks, NaN when a class is missing, where
  scikit-learn's ``roc_auc_score`` raises) and :func:`auprc` (scikit-learn's average precision);
* calibration: :func:`ece` and the :func:`reliability_bins` behind it (equal-width bins);
* intervals over task groups: :func:`group_resamples` (row indices, whole groups drawn with
  replacement; the same resamples for every statistic make differences paired) with
  :func:`percentile_interval`, and, for AUROC over many held-out folds at once,
  :class:`AurocUnit` reweighted by :func:`group_bootstrap_weights` (one draw of the groups shared
  by every fold), which :func:`group_bootstrap_interval` wraps for one set of scores.

The AUROC and average precision equal scikit-learn's (``tests/test_core_metrics.py``); scikit-learn
is not imported here because serving (the agent model's fit in ``triage retrain``) needs them and
calls them thousands of times in a bootstrap, where its input validation dominates.

>>> auroc(np.array([1, 0, 1, 0]), np.array([0.9, 0.1, 0.5, 0.5]))
0.875
>>> ece(np.array([0.0, 1.0]), np.array([0.25, 0.75]))
0.25
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import rankdata

#: Bootstrap replicates of an interval unless the caller says otherwise.
N_BOOT = 1000

# ---- the logistic link ------------------------------------------------------------------------------


def sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(−x))`` elementwise, ``x`` clipped to ±40 (no overflow warnings)."""
    out: np.ndarray = 1.0 / (1.0 + np.exp(-np.clip(x, -40.0, 40.0)))
    return out


def logistic(z: float) -> float:
    """The sigmoid of one float, exact in both tails (no clipping, no overflow)."""
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def logit(p: float) -> float:
    """``log(p / (1 − p))`` with ``p`` clipped to [1e-6, 1 − 1e-6]."""
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


# ---- ranking ---------------------------------------------------------------------------------------


def auroc(y: np.ndarray, s: np.ndarray) -> float:
    """Area under the ROC curve of scores ``s`` for labels ``y`` (``y > 0.5`` is positive).

    Ties count half (average ranks); NaN when either class is missing.

    >>> auroc(np.array([0, 0, 1]), np.array([0.1, 0.4, 0.4]))
    0.75
    """
    pos = np.asarray(y) > 0.5
    n_pos = int(pos.sum())
    n_neg = len(pos) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(np.asarray(s, dtype=np.float64))
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def auprc(y: np.ndarray, s: np.ndarray) -> float:
    """Average precision (scikit-learn's definition: Σ (R_n − R_{n−1}) P_n); NaN without a positive."""
    pos = np.asarray(y) > 0.5
    if not pos.any():
        return float("nan")
    order = np.argsort(-np.asarray(s, float), kind="mergesort")
    ys = pos[order]
    ss = np.asarray(s, float)[order]
    tp = np.cumsum(ys)
    # evaluate at the last index of each run of tied scores
    last = np.r_[np.flatnonzero(np.diff(ss) != 0), len(ss) - 1]
    prec = tp[last] / (last + 1)
    rec = tp[last] / ys.sum()
    return float(np.sum(np.diff(np.r_[0.0, rec]) * prec))


# ---- calibration -----------------------------------------------------------------------------------


def _bin_index(p: np.ndarray, bins: int) -> np.ndarray:
    """Equal-width bin of each probability; 1.0 falls in the last bin."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    idx: np.ndarray = np.clip(np.digitize(p, edges[1:-1]), 0, bins - 1)
    return idx


def ece(y: np.ndarray, p: np.ndarray, *, bins: int = 10) -> float:
    """Expected calibration error of probabilities ``p`` for outcomes ``y`` (any shape, flattened):
    the mean over equal-width bins of |mean ``p`` − mean ``y``|, weighted by the bins' counts."""
    pf, yf = np.asarray(p, float).ravel(), np.asarray(y, float).ravel()
    if pf.size == 0:
        return 0.0
    idx = _bin_index(pf, bins)
    total = 0.0
    for b in range(bins):
        m = idx == b
        if m.any():
            total += float(m.sum()) * abs(float(pf[m].mean()) - float(yf[m].mean()))
    return total / float(pf.size)


def reliability_bins(y: np.ndarray, p: np.ndarray, *, bins: int = 10) -> list[dict[str, Any]]:
    """The non-empty equal-width bins of a reliability diagram: ``{"bin": [lo, hi], "n", "mean_p",
    "failed_rate"}`` (rounded for a report)."""
    pf, yf = np.asarray(p, float).ravel(), np.asarray(y, float).ravel()
    edges = np.linspace(0.0, 1.0, bins + 1)
    idx = _bin_index(pf, bins)
    rows = []
    for b in range(bins):
        m = idx == b
        if m.any():
            rows.append({"bin": [round(edges[b], 2), round(edges[b + 1], 2)], "n": int(m.sum()),
                         "mean_p": round(float(pf[m].mean()), 4), "failed_rate": round(float(yf[m].mean()), 4)})
    return rows


# ---- intervals over task groups --------------------------------------------------------------------


def group_resamples(groups: Sequence[str], rng: np.random.Generator, n: int = N_BOOT) -> list[np.ndarray]:
    """``n`` bootstrap resamples of row indices, drawing whole groups (tasks) with replacement.

    Computing two statistics on the same resamples gives their difference a paired interval.
    """
    by: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        by[g].append(i)
    keys = list(by)
    out = []
    for _ in range(n):
        pick = rng.integers(0, len(keys), len(keys))
        out.append(np.array([i for k in pick for i in by[keys[k]]]))
    return out


def percentile_interval(values: Sequence[float] | np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The central ``level`` percentile interval of bootstrap replicates, NaNs dropped (a replicate
    that drew one class only); ``(nan, nan)`` when none is left."""
    v = np.asarray(values, float)
    v = v[~np.isnan(v)]
    if not len(v):
        return float("nan"), float("nan")
    a = (1 - level) / 2
    return float(np.quantile(v, a)), float(np.quantile(v, 1 - a))


def _pair_matrix(y: np.ndarray, s: np.ndarray) -> np.ndarray:
    """pos × neg: 1 where the positive row scores higher, ½ on ties."""
    p, n = s[y > 0.5], s[y <= 0.5]
    return np.asarray((p[:, None] > n[None, :]).astype(float) + 0.5 * (p[:, None] == n[None, :]), dtype=float)


@dataclass
class AurocUnit:
    """One held-out fold: labels, each method's pairwise comparisons, the rows' groups. Its AUROC
    under a bootstrap replicate reweights the rows by how often their group was drawn."""

    y: np.ndarray
    mats: dict[str, np.ndarray]
    gpos: np.ndarray  # group index of each positive row
    gneg: np.ndarray
    groups: list[str]

    @classmethod
    def make(cls, y: np.ndarray, scores: dict[str, np.ndarray], groups: list[str]) -> AurocUnit:
        uniq = sorted(set(groups))
        gi = np.array([uniq.index(g) for g in groups])
        return cls(y, {k: _pair_matrix(y, v) for k, v in scores.items()}, gi[y > 0.5], gi[y <= 0.5], uniq)

    def replicates(self, gw: np.ndarray) -> dict[str, np.ndarray]:
        """AUROC of each method under each replicate's group weights ``gw`` (R × groups)."""
        wp, wn = gw[:, self.gpos], gw[:, self.gneg]
        den = wp.sum(1) * wn.sum(1)
        out = {}
        for k, m in self.mats.items():
            num = np.einsum("rp,pn,rn->r", wp, m, wn)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[k] = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
        return out

    def point(self) -> dict[str, float]:
        """Each method's AUROC on the fold as it is."""
        return {k: float(m.mean()) for k, m in self.mats.items()}


def group_bootstrap_weights(units: Sequence[AurocUnit], seed: int, n_boot: int) -> list[np.ndarray]:
    """Group-level bootstrap weights, one resample of the set's groups shared by every unit (paired)."""
    allg = sorted({g for u in units for g in u.groups})
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(allg), size=(n_boot, len(allg)))
    counts = np.zeros((n_boot, len(allg)))
    np.add.at(counts, (np.repeat(np.arange(n_boot), len(allg)), draws.ravel()), 1.0)
    pos = {g: j for j, g in enumerate(allg)}
    return [counts[:, [pos[g] for g in u.groups]] for u in units]


def group_bootstrap_interval(y: np.ndarray, s: np.ndarray, groups: Sequence[str], *, seed: int = 0,
                             n_boot: int = N_BOOT, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the AUROC over task groups resampled with replacement."""
    unit = AurocUnit.make(np.asarray(y, float), {"m": np.asarray(s, float)}, list(groups))
    reps = unit.replicates(group_bootstrap_weights([unit], seed, n_boot)[0])["m"]
    return percentile_interval(reps, level)


__all__ = ["N_BOOT", "AurocUnit", "auprc", "auroc", "ece", "group_bootstrap_interval", "group_bootstrap_weights",
           "group_resamples", "logistic", "logit", "percentile_interval", "reliability_bins", "sigmoid"]
