"""The evaluation metrics, in one module (NumPy and SciPy only: the serving install needs them too).

* the logistic link: :func:`sigmoid` over arrays (clipped, for logits), :func:`logistic` and
  :func:`logit` on one float;
* ranking: :func:`auroc` (Mann-Whitney with average ranks, NaN when a class is missing, where
  scikit-learn's ``roc_auc_score`` raises) and :func:`auprc` (scikit-learn's average precision);
* calibration: :func:`ece` and the :func:`reliability_bins` behind it (equal-width bins);
* intervals over task groups, one resampler: :func:`group_bootstrap` draws whole groups (tasks) with
  replacement; its :class:`GroupBootstrap` gives each replicate's row weights, row indices or
  means (the same replicates for every statistic make differences paired), summarised by
  :func:`percentile_interval`. For AUROC over many held-out folds at once, :class:`AurocUnit` is
  reweighted by :func:`group_bootstrap_weights` (one draw of the groups shared by every fold), which
  :func:`group_bootstrap_interval` wraps for one set of scores (or the paired difference of two).

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
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import rankdata

from model.core.errors import InputError

#: Bootstrap replicates of an interval unless the caller says otherwise.
N_BOOT = 1000

# ---- the logistic link ------------------------------------------------------------------------------


def sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(−x))`` elementwise, ``x`` clipped to ±40 (no overflow warnings)."""
    # np.maximum / np.minimum: np.clip's values without its wrapper's cost (a request calls this per forward)
    out: np.ndarray = 1.0 / (1.0 + np.exp(-np.minimum(np.maximum(x, -40.0), 40.0)))
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


@dataclass(frozen=True)
class GroupBootstrap:
    """``n_boot`` bootstrap replicates of a set's task groups, each drawn whole with replacement: the one
    resampler of every bootstrap interval over runs (made by :func:`group_bootstrap`).

    A statistic computed on the same replicates for two methods gives their difference a paired
    interval. A replicate is the number of times each group was drawn (``counts``, replicates ×
    ``groups``); the rows of a group count that many times.
    """

    groups: tuple[Hashable, ...]
    counts: np.ndarray

    def weights(self, groups: Sequence[Hashable]) -> np.ndarray:
        """Each replicate's weight of each row (replicates × rows): how often the row's group was drawn.

        Raises :class:`~model.core.errors.InputError` for a group the replicates were not drawn over."""
        pos = {g: j for j, g in enumerate(self.groups)}
        missing = next((g for g in groups if g not in pos), None)
        if missing is not None:
            raise InputError(f"group {missing!r} is not among the {len(pos)} groups resampled", path="groups")
        return np.asarray(self.counts[:, [pos[g] for g in groups]], dtype=float)

    def resamples(self, groups: Sequence[Hashable]) -> list[np.ndarray]:
        """Each replicate's row indices: every row of a drawn group, once for each time it was drawn."""
        rows = np.arange(len(groups))
        return [np.repeat(rows, w) for w in self.weights(groups).astype(np.int64)]

    def means(self, values: Sequence[float] | np.ndarray, groups: Sequence[Hashable]) -> np.ndarray:
        """Each replicate's mean of the rows' ``values`` (a row counted as often as its group was drawn)."""
        w = self.weights(groups)
        out: np.ndarray = w @ np.asarray(values, float) / w.sum(1)
        return out


def group_bootstrap(groups: Sequence[Hashable], rng: np.random.Generator | int, n_boot: int = N_BOOT) -> GroupBootstrap:
    """Draw ``n_boot`` replicates of the distinct ``groups``, each group drawn whole with replacement,
    from ``rng`` (a generator, or the seed of a new one).

    The groups are numbered in the order they first appear in ``groups``: pass the distinct groups
    sorted for replicates that do not depend on the rows' order. One call draws an ``n_boot`` ×
    groups array of group numbers (the same random stream as ``n_boot`` draws of one replicate each).

    Raises :class:`~model.core.errors.InputError` when there is no group.

    >>> b = group_bootstrap(["t2", "t1", "t2"], 0, n_boot=3)
    >>> b.groups, b.counts.sum(1).tolist()
    (('t2', 't1'), [2.0, 2.0, 2.0])
    """
    keys = tuple(dict.fromkeys(groups))
    if not keys:
        raise InputError("a bootstrap over groups needs at least one group; got none", path="groups")
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    k = len(keys)
    draws = gen.integers(0, k, size=(n_boot, k))
    counts = np.bincount((draws + k * np.arange(n_boot)[:, None]).ravel(), minlength=n_boot * k)
    return GroupBootstrap(keys, counts.reshape(n_boot, k).astype(float))


def draw_whole_groups(groups: Sequence[str], k: int, rng: np.random.Generator) -> list[int]:
    """``k`` row indices drawn by whole groups: the distinct groups (sorted) in ``rng``'s random order,
    each group's rows in their order, the last group cut to fit (every row when fewer than ``k``).

    >>> draw_whole_groups(["a", "b", "a", "c"], 3, np.random.default_rng(0))
    [3, 0, 2]
    """
    by: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        by.setdefault(g, []).append(i)
    keys = sorted(by)
    out: list[int] = []
    for j in rng.permutation(len(keys)):
        out.extend(by[keys[int(j)]])
        if len(out) >= k:
            break
    return out[:k]


def fold_by_group(groups: Sequence[str], n: int, seed: int) -> list[np.ndarray]:
    """``n`` folds of row indices, the distinct groups (sorted) dealt to folds by a random permutation
    of ``seed`` (group ``j`` of the permutation to fold ``j mod n``): every group in one fold.

    >>> [f.tolist() for f in fold_by_group(["a", "b", "a", "c"], 2, 0)]
    [[0, 1, 2], [3]]
    """
    keys = sorted(set(groups))
    rng = np.random.default_rng(seed)
    fold_of = {g: int(f) for g, f in zip(keys, rng.permutation(len(keys)) % n, strict=True)}
    return [np.array([i for i, g in enumerate(groups) if fold_of[g] == f]) for f in range(n)]


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
    """Group-level bootstrap weights, one :func:`group_bootstrap` of the set's groups shared by every
    unit (paired): each unit's replicates × its groups."""
    boot = group_bootstrap(sorted({g for u in units for g in u.groups}), seed, n_boot)
    return [boot.weights(u.groups) for u in units]


def group_bootstrap_interval(y: np.ndarray, s: np.ndarray, groups: Sequence[str], *, seed: int | np.random.Generator = 0,
                             n_boot: int = N_BOOT, level: float = 0.95,
                             baseline: np.ndarray | None = None) -> tuple[float, float]:
    """Percentile interval of the AUROC of scores ``s`` over task groups resampled with replacement
    (:func:`group_bootstrap`); with ``baseline``, of AUROC(``s``) − AUROC(``baseline``) on the same
    replicates (paired). Replicates that drew one class only are dropped (``(nan, nan)`` when all did).
    """
    scores = {"m": np.asarray(s, float)}
    if baseline is not None:
        scores["b"] = np.asarray(baseline, float)
    unit = AurocUnit.make(np.asarray(y, float), scores, list(groups))
    reps = unit.replicates(group_bootstrap(unit.groups, seed, n_boot).weights(unit.groups))
    return percentile_interval(reps["m"] - reps["b"] if baseline is not None else reps["m"], level)


__all__ = ["N_BOOT", "AurocUnit", "GroupBootstrap", "auprc", "auroc", "draw_whole_groups", "ece", "fold_by_group",
           "group_bootstrap", "group_bootstrap_interval",
           "group_bootstrap_weights", "logistic", "logit", "percentile_interval", "reliability_bins", "sigmoid"]
