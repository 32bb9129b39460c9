"""The agent model's fitted linear form and its fit (shared by the model and its own CV).

:class:`Fitted` is one logistic regression over the blocks of
:mod:`model.scoring.agentmodel.features` (shape, n-grams, optionally the encoder's pooled vectors)
plus the prior's coefficient; :func:`fit_blocks` fits it on cached prefix rows (``joint``: one
regression; ``stack`` / ``mean``: a regression per block, combined), :func:`score_rows` scores rows
with the same arithmetic the prefix state uses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from model.core.metrics import logit
from model.scoring.agentmodel.config import AgentModelConfig
from model.scoring.agentmodel.features import RunRows, shape_row
from model.scoring.agentmodel.logistic import balanced_weights, fit_logistic, group_folds


@dataclass
class Fitted:
    """A fitted agent model's parameters (what the artefact stores)."""

    mean: np.ndarray
    scale: np.ndarray
    w_shape: np.ndarray
    buckets: np.ndarray  # learned bucket ids, ascending
    idf: np.ndarray
    w_ngram: np.ndarray
    w_prior: float | None
    bias: float
    meta: dict[str, Any] = field(default_factory=dict)
    e_mean: np.ndarray | None = None  # the encoder block's centre (4·dim)
    w_emb: np.ndarray | None = None  # its weights on the centred row (scale and block weight folded in)




def _ngram_block(grams: sp.csr_matrix, bk: np.ndarray, idf: np.ndarray) -> sp.csr_matrix:
    """Rows of log1p counts → the model's n-gram block: learned buckets only, × idf, L2-normalised."""
    X = sp.csr_matrix(grams[:, bk] @ sp.diags(idf))
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    return sp.csr_matrix(sp.diags(1.0 / norms) @ X)


def fit_blocks(runs: list[RunRows], y: np.ndarray, groups: list[str], prior: np.ndarray | None,
               cfg: AgentModelConfig) -> Fitted:
    """The fit on ``runs``' cached rows (one row per prefix fraction of ``cfg``), ``y`` whether each failed."""
    if cfg.combine in ("stack", "mean"):
        c_a, c_b = _sides(cfg)
        if max(c_a.shape_weight, c_a.ngram_weight, c_a.encoder_weight) > 0 and \
                max(c_b.shape_weight, c_b.ngram_weight, c_b.encoder_weight) > 0:
            return _fit_stack(runs, y, groups, prior, cfg)
    return _fit_joint(runs, y, prior, cfg)


def _sides(cfg: AgentModelConfig) -> tuple[AgentModelConfig, AgentModelConfig]:
    """The two models a ``stack`` / ``mean`` fits apart (``split``): the shape against the text (n-grams
    and the encoder block), or the shape and n-grams against the encoder block."""
    from dataclasses import replace

    if cfg.split == "encoder":
        return replace(cfg, encoder_weight=0.0), replace(cfg, shape_weight=0.0, ngram_weight=0.0)
    return replace(cfg, ngram_weight=0.0, encoder_weight=0.0), replace(cfg, shape_weight=0.0)


def _logits(f: Fitted, runs: Sequence[RunRows]) -> np.ndarray:
    p = np.concatenate([score_rows(f, r, None) for r in runs])
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return np.asarray(np.log(p / (1 - p)))


def _fit_stack(runs: list[RunRows], y: np.ndarray, groups: list[str], prior: np.ndarray | None,
               cfg: AgentModelConfig) -> Fitted:
    """Two models fitted apart (:func:`_sides`), combined by weights fitted on their out-of-fold logits
    (``stack``) or by the mean of their logits (``mean``)."""
    c_a, c_b = _sides(cfg)
    a, c0, g = (np.array([0.5, 0.5]), 0.0, None) if cfg.combine == "mean" else \
        _stack_weights(runs, y, groups, prior, cfg, c_a, c_b)
    if prior is not None and g is None:
        g = cfg.prior_weight
    fa = _fit_joint(runs, y, None, c_a)
    fb = _fit_joint(runs, y, None, c_b)
    # z = c0 + a0·(b_a + x·w_a) + a1·(b_b + x·w_b) (+ γ·logit prior): one linear model again, each block
    # taken from the side that has it
    fs, ws = (fa, a[0]) if c_a.shape_weight > 0 else (fb, a[1])
    fg, wg = (fa, a[0]) if c_a.ngram_weight > 0 else (fb, a[1])
    fe, we = (fa, a[0]) if c_a.encoder_weight > 0 else (fb, a[1])
    return Fitted(mean=fs.mean, scale=fs.scale, w_shape=fs.w_shape * ws, buckets=fg.buckets, idf=fg.idf,
                  w_ngram=(fg.w_ngram * wg).astype("<f4").astype(float), w_prior=g,
                  bias=float(c0 + a[0] * fa.bias + a[1] * fb.bias),
                  meta={"stack_weights": [float(a[0]), float(a[1])], "stack_bias": float(c0)},
                  e_mean=fe.e_mean, w_emb=None if fe.w_emb is None else (fe.w_emb * we).astype("<f4").astype(float))


def _stack_weights(runs: list[RunRows], y: np.ndarray, groups: list[str], prior: np.ndarray | None,
                   cfg: AgentModelConfig, c_shape: AgentModelConfig,
                   c_gram: AgentModelConfig) -> tuple[np.ndarray, float, float | None]:
    """The stack's combination: a logistic regression on the two blocks' out-of-fold logits over
    ``stack_folds`` grouped folds of the training runs (equal weights when the folds cannot tell)."""
    F = len(cfg.prefix_fractions)
    oof = np.full((len(y) * F, 2), np.nan)
    for test in group_folds(groups, cfg.stack_folds, seed=cfg.seed + 1):
        train = np.setdiff1d(np.arange(len(y)), test)
        if len(test) == 0 or y[train].min() == y[train].max():
            continue
        rows = (test[:, None] * F + np.arange(F)[None, :]).ravel()
        tr_runs = [runs[i] for i in train]
        te_runs = [runs[i] for i in test]
        oof[rows, 0] = _logits(_fit_joint(tr_runs, y[train], None, c_shape), te_runs)
        oof[rows, 1] = _logits(_fit_joint(tr_runs, y[train], None, c_gram), te_runs)
    ok = ~np.isnan(oof[:, 0])
    yy = np.repeat(y, F)
    if ok.sum() < 4 or yy[ok].min() == yy[ok].max():
        return np.array([0.5, 0.5]), 0.0, None
    sw = (np.repeat(balanced_weights(y), F) / F)[ok]
    lp = None if prior is None else np.repeat([logit(float(p)) for p in prior], F)[ok]
    return fit_logistic(sp.csr_matrix(oof[ok]), yy[ok], sw, 1.0, lp, cfg.prior_l2, cfg.prior_weight)


def _fit_joint(runs: list[RunRows], y: np.ndarray, prior: np.ndarray | None, cfg: AgentModelConfig) -> Fitted:
    n = len(runs)
    fr = cfg.prefix_fractions
    j_full = int(np.argmax(fr))
    yy = np.repeat(y, len(fr))
    sw = np.repeat(balanced_weights(y), len(fr)) / len(fr)
    l2 = 1.0 / cfg.c
    blocks: list[sp.csr_matrix] = []
    S = shape_row(np.vstack([r.shape for r in runs]))
    mean, scale = np.zeros(S.shape[1]), np.ones(S.shape[1])
    if cfg.shape_weight > 0:
        mean, scale = S.mean(axis=0), S.std(axis=0)
        scale[scale < 1e-9] = 1.0
        blocks.append(sp.csr_matrix((S - mean) / scale * cfg.shape_weight))
    bk = np.zeros(0, np.int64)
    idf = np.zeros(0)
    if cfg.ngram_weight > 0:
        G = sp.vstack([r.grams for r in runs], format="csr")
        full = sp.vstack([r.grams[j_full] for r in runs], format="csr")
        df = np.bincount(full.indices, minlength=cfg.buckets)
        bk = np.flatnonzero(df >= cfg.min_df).astype(np.int64)
        # float32 storage: round now so the fitted model scores exactly as the saved one
        idf = (np.log((1 + n) / (1 + df[bk])) + 1.0).astype("<f4").astype(float)
        blocks.append(_ngram_block(G, bk, idf) * cfg.ngram_weight)
    e_mean, e_scale = None, np.ones(1)
    if cfg.encoder_weight > 0:
        if any(r.emb is None for r in runs):
            raise ValueError("encoder_weight > 0 needs rows with the encoder block (FeatureCache.rows(encoded=True))")
        E = np.vstack([r.emb for r in runs if r.emb is not None])
        # centred, one scale for the block: a row's norm is about one, like the n-gram block's
        e_mean = E.mean(axis=0).astype("<f4").astype(float)
        C = E - e_mean
        if cfg.encoder_scale == "dim":
            sd = C.std(axis=0)
            e_scale = np.where(sd > 1e-9, sd, 1.0) * math.sqrt(C.shape[1])
        else:
            e_scale = np.full(C.shape[1], float(np.mean(np.linalg.norm(C, axis=1))) or 1.0)
        blocks.append(sp.csr_matrix(C / e_scale * cfg.encoder_weight))
    X = sp.hstack(blocks, format="csr")
    lp = None if prior is None else np.repeat([logit(float(p)) for p in prior], len(fr))
    w, b, g = fit_logistic(X, yy, sw, l2, lp, cfg.prior_l2, cfg.prior_weight)
    k = S.shape[1] if cfg.shape_weight > 0 else 0
    w_shape = w[:k] * cfg.shape_weight
    k2 = k + len(bk)
    w_ngram = (w[k:k2] * cfg.ngram_weight).astype("<f4").astype(float)
    w_emb = None if e_mean is None else (w[k2:] * cfg.encoder_weight / e_scale).astype("<f4").astype(float)
    return Fitted(mean=mean, scale=scale, w_shape=w_shape, buckets=bk, idf=idf, w_ngram=w_ngram,
                  w_prior=g, bias=b, e_mean=e_mean, w_emb=w_emb)


def score_rows(f: Fitted, rows: RunRows, prior: float | None) -> np.ndarray:
    """P(failed) of each prefix in ``rows`` (vectorised; the same arithmetic as the prefix state)."""
    z = np.full(rows.shape.shape[0], f.bias)
    if len(f.w_shape):
        z += ((shape_row(rows.shape) - f.mean) / f.scale) @ f.w_shape
    if len(f.buckets):
        X = rows.grams[:, f.buckets] @ sp.diags(f.idf)
        dot = np.asarray(X @ f.w_ngram).ravel()
        sq = np.asarray(X.multiply(X).sum(axis=1)).ravel()
        z += np.where(sq > 0, dot / np.sqrt(np.where(sq > 0, sq, 1.0)), 0.0)
    if f.w_emb is not None and f.e_mean is not None:
        if rows.emb is None:
            raise ValueError("this model reads the encoder block: score rows made with FeatureCache.rows(encoded=True)")
        z += (rows.emb - f.e_mean) @ f.w_emb
    if f.w_prior is not None:
        z += f.w_prior * logit(0.5 if prior is None else prior)
    return np.asarray(1.0 / (1.0 + np.exp(-z)))


__all__ = ["Fitted", "fit_blocks", "score_rows"]
