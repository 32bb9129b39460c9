"""Fit a cheap learner on an agent's labelled runs and export it as a numpy-servable
:class:`~model.scoring.agentmodel.cheap.CheapModel` (scikit-learn at fit time only).

The learner is :class:`model.training.agentmodel.cv.CheapLearners`, the one the gate measured; the export
carries the vectorizer's vocabulary and idf and the logistic regressions' coefficients, and
``tests/test_retrain_refusals.py`` checks that the served scores equal scikit-learn's. The early-warning
threshold is set as the agent model sets its own: out-of-fold scores (grouped folds) of the successful
runs at each of :data:`~model.scoring.agentmodel.model.WARNING_PREFIXES` of their steps, each run's highest,
and the point that new successful runs reach at most ``target_false_alarm`` of the time, 90 % sure
(:func:`~model.scoring.agentmodel.model.warning_point`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from model.core.errors import InputError
from model.core.schema import Trace
from model.scoring.agentmodel.cheap import LEARNERS, CheapModel, cheap_view
from model.scoring.agentmodel.features import prefix_lengths
from model.scoring.agentmodel.logistic import group_folds
from model.scoring.agentmodel.model import WARNING_PREFIXES, warning_point
from model.training.agentmodel.cv import CheapLearners


def export(learners: CheapLearners, learner: str, *, card: dict[str, Any] | None = None,
           at_risk_threshold: float | None = None) -> CheapModel:
    """The ``learner`` (``tfidf`` or ``length``) of fitted ``learners`` as a :class:`CheapModel`."""
    if learner == "length":
        lr = learners.length
        params: dict[str, Any] = {"coef": [float(c) for c in lr.coef_[0]], "intercept": float(lr.intercept_[0])}
    elif learner == "tfidf":
        if learners.vec is None:  # no vocabulary: a constant 0.5, as the gate scored it
            params = {"vocabulary": {}, "idf": [], "coef": [], "intercept": 0.0}
        else:
            params = {"vocabulary": {str(k): int(v) for k, v in learners.vec.vocabulary_.items()},
                      "idf": [float(x) for x in learners.vec.idf_],
                      "coef": [float(c) for c in learners.tfidf.coef_[0]],
                      "intercept": float(learners.tfidf.intercept_[0])}
    else:
        raise InputError(f"a cheap learner is one of {', '.join(LEARNERS)}; got {learner!r}", path="learner")
    return CheapModel(learner, params, at_risk_threshold=at_risk_threshold, card=card)


def _fit(views: Sequence[tuple[str, int, int]], y: np.ndarray) -> CheapLearners:
    lengths = np.array([[np.log1p(v[1]), np.log1p(v[2])] for v in views])
    return CheapLearners([v[0] for v in views], lengths, y)


def fit_cheap(learner: str, traces: Sequence[Trace], failed: Sequence[bool], groups: Sequence[str], *,
              card: dict[str, Any] | None = None, folds: int = 5, target_false_alarm: float = 0.05,
              seed: int = 0, flagged: Sequence[bool] | None = None) -> CheapModel:
    """Fit ``learner`` on every run and export it, with its early-warning threshold (see the module
    docstring; ``None`` when no grouped fold could be scored). ``flagged``: per run, whether the service
    answered it unhealthy for another cause (they spend the warning's budget:
    :func:`~model.scoring.agentmodel.model.warning_point`)."""
    y = np.array([bool(f) for f in failed], float)
    if len(y) != len(traces) or len(groups) != len(traces):
        raise InputError(f"one label and one group a trace; got {len(y)} labels, {len(groups)} groups for "
                         f"{len(traces)} traces", path="failed")
    if y.min() == y.max():
        raise InputError("a cheap learner needs failed and successful runs", path="failed")
    views = [cheap_view(t) for t in traces]
    prefixes = {i: [cheap_view(t, n) for n in prefix_lengths(len(t.steps), WARNING_PREFIXES)]
                for i, t in enumerate(traces) if y[i] < 0.5}  # only successful runs set the point
    scores: list[float] = []
    other: list[bool] = []
    for test in group_folds(list(groups), folds, seed=seed):
        train = np.setdiff1d(np.arange(len(y)), test)
        if len(test) == len(y) or y[train].min() == y[train].max():
            continue
        m = export(_fit([views[i] for i in train], y[train]), learner)
        scores += [max(m.score_view(v) for v in prefixes[i]) for i in test if y[i] < 0.5]
        other += [bool(flagged[i]) if flagged is not None else False for i in test if y[i] < 0.5]
    thr = warning_point(scores, target_false_alarm, other) if scores else None
    return export(_fit(views, y), learner, card=card, at_risk_threshold=thr)


__all__ = ["export", "fit_cheap"]
