"""The numerics under the agent model, in numpy: a weighted L2 logistic regression (:func:`fit_logistic`,
minimised by :func:`lbfgs`), balanced class weights and grouped folds (:func:`group_folds`).

No scikit-learn: the agent model fits at serve time (``triage retrain``) on the serving install.
``tests/test_agentmodel.py`` checks :func:`fit_logistic` against scikit-learn's ``LogisticRegression``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse as sp


def balanced_weights(y: np.ndarray) -> np.ndarray:
    """sklearn's ``class_weight="balanced"``: ``n / (2 · n_class)`` per row."""
    n = len(y)
    pos = float(y.sum())
    neg = n - pos
    return np.where(y > 0.5, n / (2 * max(pos, 1.0)), n / (2 * max(neg, 1.0)))


def lbfgs(fun: Callable[[np.ndarray], tuple[float, np.ndarray]], x0: np.ndarray, *, memory: int = 10,
          max_iter: int = 500, gtol: float = 1e-5) -> np.ndarray:
    """Minimise a smooth convex function: L-BFGS (two-loop recursion) with a backtracking Armijo line
    search, in numpy. (scipy 1.17's L-BFGS-B spends ≈ 0.1–0.3 s an iteration in its own bookkeeping
    at 10^5 variables; this costs a few vector operations.)"""
    x = x0.astype(float).copy()
    f, g = fun(x)
    S: list[np.ndarray] = []
    Y: list[np.ndarray] = []
    scale = max(1.0, float(np.abs(g).max()))
    for _ in range(max_iter):
        if float(np.abs(g).max()) <= gtol * scale:
            break
        q = g.copy()
        alphas = []
        for s_, y_ in zip(reversed(S), reversed(Y), strict=True):
            rho = 1.0 / float(y_ @ s_)
            a_ = rho * float(s_ @ q)
            alphas.append((rho, a_))
            q -= a_ * y_
        gamma = float(S[-1] @ Y[-1]) / float(Y[-1] @ Y[-1]) if S else 1.0 / max(1.0, float(np.linalg.norm(g)))
        r = gamma * q
        for (s_, y_), (rho, a_) in zip(zip(S, Y, strict=True), reversed(alphas), strict=True):
            b_ = rho * float(y_ @ r)
            r += s_ * (a_ - b_)
        d = -r
        gd = float(g @ d)
        if gd >= 0:  # not a descent direction: restart from the gradient
            S.clear()
            Y.clear()
            d = -g
            gd = -float(g @ g)
        t = 1.0
        while True:
            xn = x + t * d
            fn, gn = fun(xn)
            if fn <= f + 1e-4 * t * gd or t < 1e-10:
                break
            t *= 0.5
        s_, y_ = xn - x, gn - g
        if float(s_ @ y_) > 1e-12:
            S.append(s_)
            Y.append(y_)
            if len(S) > memory:
                S.pop(0)
                Y.pop(0)
        if abs(f - fn) <= 1e-10 * max(1.0, abs(f)):
            x, f, g = xn, fn, gn
            break
        x, f, g = xn, fn, gn
    return x


def fit_logistic(X: sp.csr_matrix, y: np.ndarray, sw: np.ndarray, l2: float, lp: np.ndarray | None,
                 prior_l2: float, prior_centre: float) -> tuple[np.ndarray, float, float | None]:
    """Weighted L2 logistic regression: minimise ``Σ sw·logloss(z) + ½·l2·‖w‖² + ½·prior_l2·(γ − c)²``
    with ``z = X w + b + γ·lp`` (no γ when ``lp`` is None; the bias is not penalised).
    Returns ``(w, b, γ)``; deterministic."""
    n, d = X.shape
    has_p = lp is not None
    lpv = lp if lp is not None else np.zeros(n)
    XT = sp.csr_matrix(X.T)

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:d], theta[d]
        g = theta[d + 1] if has_p else 0.0
        z = X @ w + b + g * lpv
        val = float(np.sum(sw * (np.logaddexp(0.0, z) - y * z))) + 0.5 * l2 * float(w @ w)
        r = sw * (1.0 / (1.0 + np.exp(-z)) - y)
        grad = np.empty_like(theta)
        grad[:d] = XT @ r + l2 * w
        grad[d] = float(r.sum())
        if has_p:
            val += 0.5 * prior_l2 * (g - prior_centre) ** 2
            grad[d + 1] = float(lpv @ r) + prior_l2 * (g - prior_centre)
        return val, grad

    theta0 = np.zeros(d + 1 + int(has_p))
    if has_p:
        theta0[d + 1] = prior_centre
    x = lbfgs(loss, theta0)
    return x[:d], float(x[d]), (float(x[d + 1]) if has_p else None)


def group_folds(groups: Sequence[str], k: int, *, seed: int = 0) -> list[np.ndarray]:
    """``k`` folds of row indices, each group in one fold (groups shuffled by ``seed``, then dealt to
    the currently smallest fold, largest groups first: GroupKFold's balancing)."""
    rng = np.random.default_rng(seed)
    uniq = sorted(set(groups))
    rng.shuffle(uniq)
    size = {g: 0 for g in uniq}
    for g in groups:
        size[g] += 1
    order = sorted(uniq, key=lambda g: -size[g])  # stable: shuffled order breaks ties
    k = max(1, min(k, len(uniq)))
    load = [0] * k
    where: dict[str, int] = {}
    for g in order:
        j = int(np.argmin(load))
        where[g] = j
        load[j] += size[g]
    idx = np.array([where[g] for g in groups])
    return [np.flatnonzero(idx == j) for j in range(k)]


__all__ = ["balanced_weights", "fit_logistic", "group_folds", "lbfgs"]
