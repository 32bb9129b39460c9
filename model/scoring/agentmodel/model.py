"""The agent model: P(run failed) for one agent, learned from that agent's own labelled runs.

An L2 logistic regression (L-BFGS in numpy; numpy / scipy only, at fit and at serve time) over two
blocks of :mod:`model.scoring.agentmodel.features` — the run's shape (standardised ``log1p`` counts, sign and
scale learned) and hashed role-prefixed n-grams (TF-IDF-like, L2-normalised) — plus, where given, the
logit of the zero-shot run-scorer probability as a prior whose coefficient is shrunk towards
``prior_weight`` (at small K the model stays near the prior). Trained on prefixes of each labelled run
(25 / 50 / 75 / 100 % of its steps by default, labelled with the run's outcome, each run weighing one
in all), so one model scores a run at any point of its life. Classes are balanced.

Interface (what the service and the gate build on)::

    AgentModel.fit(traces, failed, groups, *, config=None, prior=None) -> AgentModel   # classmethod
    model.score(trace, *, prior=None) -> float                 # P(failed) of the whole trace
    state = model.start(); state.add(step)                     # O(1) per step in the run's length
    model.score_state(state, *, prior=None) -> float           # == model.score(prefix so far)
    model.at_risk_threshold -> float | None                    # ≤ 5 % of successful runs reach it
    model.card -> dict                                         # agent, labelled_runs, cv_auroc + interval, …
    model.to_dict() / AgentModel.from_dict(d) / model.save(path) / AgentModel.load(path)
    model.version -> str                                       # content hash of the artefact
    model.state_from_dict(state.to_dict()) -> PrefixState      # a session's state, continued by any worker
    model.score_rows(FeatureCache().rows(trace, …)) -> array   # cached prefixes (learning curve, queue)

``fit`` also takes ``agent=`` (the card's name) and ``cache=`` (a :class:`FeatureCache` shared by
refits). ``config.combine="stack"`` fits the shape and n-gram blocks apart and combines them by
weights fitted on out-of-fold logits (nested in the training runs).

``groups`` keeps the runs of one task together in the model's own cross-validation (which sets the
early-warning threshold and the card's ``cv_auroc``); :func:`model.training.agentmodel.cv.group_runs` makes
them when runs carry no task id. ``prior`` is the zero-shot probability of each run (the run
scorer's); a model fitted with a prior wants one at scoring (``None`` reads as 0.5, no evidence).

>>> from model.scoring.agentmodel.model import AgentModel, AgentModelConfig   # doctest: +SKIP
>>> m = AgentModel.fit(traces, failed, groups)                        # doctest: +SKIP
>>> st = m.start()                                                    # doctest: +SKIP
>>> for step in trace.steps: st.add(step)                             # doctest: +SKIP
>>> abs(m.score_state(st) - m.score(trace)) < 1e-9                    # doctest: +SKIP
True
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from model.core.errors import InputError, NotFittedError
from model.core.metrics import auroc, group_bootstrap_interval, logistic, logit
from model.core.schema import Step, Trace
from model.scoring.agentmodel.config import AgentModelConfig
from model.scoring.agentmodel.encoded import Pool, encode_steps
from model.scoring.agentmodel.features import (
    SHAPE_FEATURES,
    FeatureCache,
    RunCounts,
    RunRows,
    from_state,
    shape_row,
    to_state,
)
from model.scoring.agentmodel.fitting import Fitted, fit_blocks, score_rows
from model.scoring.agentmodel.logistic import group_folds
from model.scoring.encoder import StaticEncoder, shared_encoder

FORMAT = "agentmodel/1"

#: The prefixes (shares of a run's steps) whose out-of-fold scores set the early-warning point: a tenth
#: apart, because ``at_risk`` is raised at any step (with four, 6.6-7.9 % of new successful runs reached
#: a point set for 5 % on AgentProcessBench and WebShop after the first week's retrain).
WARNING_PREFIXES: tuple[float, ...] = tuple(k / 10 for k in range(1, 11))


#: The early-warning point holds its false-alarm target with this confidence: the share of new successful
#: runs that reach it is above ``target_false_alarm`` with probability at most ``1 - WARNING_CONFIDENCE``
#: (a one-sided binomial tolerance bound on the out-of-fold runs; a point placed at the target's quantile
#: itself gave 4.0-6.2 % on the first-week bench's SWE held-out halves, over two runs of one history).
WARNING_CONFIDENCE = 0.9


def warning_point(highest: np.ndarray | Sequence[float], target: float,
                  flagged: np.ndarray | Sequence[bool] | None = None,
                  confidence: float = WARNING_CONFIDENCE) -> float | None:
    """The early-warning point from successful runs' highest prefix scores (``at_risk`` fires at ≥).

    A point with ``m`` of the ``n`` runs above it lets a new successful run reach it with a probability
    ``p`` such that ``P(p > target) = P(Binomial(n, target) ≤ m)`` (order statistics of exchangeable
    runs): the point is just above the ``m + 1``-th highest run, ``m`` the largest with that probability
    at most ``1 - confidence``. ``flagged``: the successful runs the service already answered unhealthy
    for another cause (a rule, a stream): they spend the same budget, so they count as reaching it.
    ``None`` (no early warning) when no ``m`` qualifies — too few runs (45 at a 5 % target) — or the
    other causes spend it all.

    >>> warning_point([0.1, 0.2, 0.3, 0.9] * 8, 0.25) > 0.3
    True
    >>> warning_point([0.1, 0.2, 0.3, 0.9] * 2, 0.25) is None
    True
    >>> hundred = [k / 100 for k in range(100)]
    >>> round(warning_point(hundred, 0.1), 6), round(warning_point(hundred, 0.1, [True] * 2 + [False] * 98), 6)
    (0.94, 0.96)
    """
    from scipy.stats import binom

    values = np.asarray(highest, float)
    n = len(values)
    if flagged is not None:
        values = np.where(np.asarray(flagged, bool), np.inf, values)
    allowed = np.flatnonzero(binom.cdf(np.arange(n), n, target) <= 1 - confidence)
    if n == 0 or not len(allowed):
        return None
    m = int(allowed[-1])
    point = float(np.sort(values)[::-1][m])
    return float(np.nextafter(point, 2.0)) if math.isfinite(point) else None


class PrefixState:
    """The running state of one run under one model: ``add(step)`` costs O(words of the step).

    Holds the counts (:class:`~model.scoring.agentmodel.features.RunCounts`) and, for the model's buckets,
    the running dot product with the weights and the running squared norm, so scoring needs no pass
    over the steps seen before.
    """

    def __init__(self, model: AgentModel, counts: RunCounts | None = None, pool: Pool | None = None) -> None:
        self._model = model
        self.counts = counts or RunCounts.empty()
        enc = model.encoder_
        self.pool = pool if pool is not None else (Pool.empty(enc.dim) if enc is not None else None)
        self.dot = 0.0
        self.sq = 0.0
        if counts is not None:
            tab = model._table()
            for b, c in counts.counts.items():
                t = tab.get(b)
                if t is not None:
                    v = t[0] * math.log1p(c)
                    self.dot += t[1] * v
                    self.sq += v * v

    def add(self, step: Step, vector: np.ndarray | None = None) -> None:
        """Count one more step of the run and, when the model reads the encoder block, pool its vector:
        ``vector`` when given (:func:`~model.scoring.agentmodel.encoded.encode_steps`' row of the step,
        encoded once elsewhere: a batch, or a stored run), else the step encoded now."""
        counts = self.counts.counts
        cfg = self._model.config
        if self.pool is not None and self._model.encoder_ is not None:
            vec = vector if vector is not None else encode_steps(self._model.encoder_, [step])[0]
            if not np.isnan(vec[0]):
                self.pool.add(vec, step.kind)
        seen = self.counts.add(step, cfg.buckets, cfg.last_turn)
        if not seen:
            return
        tab = self._model._table()
        for b, k in seen.items():
            t = tab.get(b)
            if t is None or k == 0:
                continue
            c1 = counts.get(b, 0)
            v0, v1 = t[0] * math.log1p(c1 - k), t[0] * math.log1p(c1)
            self.dot += t[1] * (v1 - v0)
            self.sq += v1 * v1 - v0 * v0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able; :meth:`AgentModel.state_from_dict` continues it (any worker, same model)."""
        d = {"model": self._model.version, "counts": to_state(self.counts)}
        if self.pool is not None:
            d["pool"] = self.pool.to_dict()
        return d


class AgentModel:
    """One agent's failure model. Build it with :meth:`fit` (a classmethod) or :meth:`load`."""

    def __init__(self, config: AgentModelConfig | None = None) -> None:
        self.config = config or AgentModelConfig()
        self.fitted_: Fitted | None = None
        self.encoder_: StaticEncoder | None = None  # set when the model reads the encoder block
        self.at_risk_threshold: float | None = None
        self.card_: dict[str, Any] = {}
        self._tab: dict[int, tuple[float, float]] | None = None
        self._version: str | None = None

    # ---- fit ------------------------------------------------------------------------------------

    @classmethod
    def fit(cls, traces: Sequence[Trace], failed: Sequence[bool], groups: Sequence[str], *,
            config: AgentModelConfig | None = None, prior: Sequence[float] | None = None,
            agent: str | None = None, cache: FeatureCache | None = None,
            flagged: Sequence[bool] | None = None, encoder: StaticEncoder | None = None) -> AgentModel:
        """Fit on labelled runs of one agent.

        Parameters
        ----------
        traces, failed, groups:
            The runs, whether each failed, and the group (task) each belongs to.
        config:
            Hyper-parameters (:class:`AgentModelConfig`).
        prior:
            The zero-shot probability of each run; the model then carries a prior coefficient.
        agent:
            The agent's name, for the card.
        cache:
            A :class:`FeatureCache` shared across fits (the learning curve, retrain).
        flagged:
            Per run, whether the service answered it unhealthy for a cause other than the early
            warning: such successful runs spend the early warning's false-alarm budget
            (:func:`warning_point`).
        encoder:
            The static encoder of the encoder block (``config.encoder_weight > 0``): the cache's, else
            this one, else the shipped one.

        Raises
        ------
        InputError
            Lengths differ, or the runs are not both failed and successful.
        """
        cfg = config or AgentModelConfig()
        n = len(traces)
        if len(failed) != n or len(groups) != n or (prior is not None and len(prior) != n) or (
                flagged is not None and len(flagged) != n):
            raise InputError(f"traces, failed, groups (and prior) must have one entry a run; got {n}, "
                             f"{len(failed)}, {len(groups)}" + ("" if prior is None else f", {len(prior)}"),
                             path="failed")
        y = np.array([bool(f) for f in failed], dtype=float)
        if y.min(initial=1.0) == y.max(initial=0.0):
            raise InputError(f"need failed and successful runs; got {int(y.sum())} failed of {n}", path="failed")
        cache = cache if cache is not None else FeatureCache(encoder)  # an empty cache is falsy (__len__)
        enc = cfg.encoder_weight > 0
        if enc and cache.encoder is None:
            cache.encoder = encoder or shared_encoder()
        counts = [cache.rows(t, cfg.buckets, cfg.prefix_fractions, cfg.last_turn, enc) for t in traces]
        m = cls(cfg)
        m.encoder_ = cache.encoder if enc else None
        m.fitted_ = fit_blocks(counts, y, list(groups), None if prior is None else np.asarray(prior, float), cfg)
        m.fitted_.meta = {**m.fitted_.meta, "labelled_runs": n, "failed_runs": int(y.sum()), "groups": len(set(groups))}
        m._tab = None
        m.card_ = {"agent": agent, "labelled_runs": n, "failed_runs": int(y.sum()), "groups": len(set(groups)),
                   "cv_auroc": None, "cv_auroc_interval": None, "cheap_learners": None, "learning_curve": []}
        if cfg.internal_folds >= 2 and len(set(groups)) >= cfg.internal_folds:
            efr = WARNING_PREFIXES
            evals = [cache.rows(t, cfg.buckets, efr, cfg.last_turn, enc) for t in traces]
            m._own_cv(counts, evals, efr, y, list(groups), None if prior is None else np.asarray(prior, float),
                      None if flagged is None else np.asarray(flagged, bool))
        return m

    def _own_cv(self, counts: list[RunRows], evals: list[RunRows], fr: tuple[float, ...], y: np.ndarray,
                groups: list[str], prior: np.ndarray | None, flagged: np.ndarray | None = None) -> None:
        """Grouped CV on the training runs: out-of-fold scores of each run at the prefixes ``fr``
        (``evals``) give the card's AUROC and the early-warning threshold (``flagged``: see :meth:`fit`)."""
        cfg = self.config
        folds = group_folds(groups, cfg.internal_folds, seed=cfg.seed)
        j_full = int(np.argmin([abs(f - 1.0) for f in fr]))
        oof = np.full((len(y), len(fr)), np.nan)
        for test in folds:
            train = np.setdiff1d(np.arange(len(y)), test)
            if y[train].min() == y[train].max():
                continue
            f = fit_blocks([counts[i] for i in train], y[train], [groups[i] for i in train],
                          None if prior is None else prior[train], cfg)
            for i in test:
                oof[i] = score_rows(f, evals[i], None if prior is None else float(prior[i]))
        ok = ~np.isnan(oof[:, j_full])
        if ok.sum() < 4 or y[ok].min() == y[ok].max():
            return
        a = auroc(y[ok], oof[ok, j_full])
        lo, hi = group_bootstrap_interval(y[ok], oof[ok, j_full], [groups[i] for i in np.flatnonzero(ok)],
                                          seed=cfg.seed)
        succ = ok & (y < 0.5)
        highest = np.nanmax(oof[succ], axis=1)
        if len(highest):
            # new successful runs reach it at any prefix at most target_false_alarm of the time (90 % sure),
            # those already answered unhealthy for another cause counted as reaching it
            self.at_risk_threshold = warning_point(highest, cfg.target_false_alarm,
                                                   None if flagged is None else flagged[succ])
        self.card_.update({"cv_auroc": a, "cv_auroc_interval": [lo, hi], "cv_folds": len(folds),
                           "prefix_cv_auroc": {str(fr[j]): auroc(y[ok], oof[ok, j]) for j in range(len(fr))}})

    # ---- score ----------------------------------------------------------------------------------

    def _check(self) -> Fitted:
        if self.fitted_ is None:
            raise NotFittedError("this AgentModel is not fitted: call AgentModel.fit(...) or AgentModel.load(path)")
        return self.fitted_

    def _table(self) -> dict[int, tuple[float, float]]:
        if self._tab is None:
            f = self._check()
            self._tab = {int(b): (float(i), float(w)) for b, i, w in zip(f.buckets, f.idf, f.w_ngram, strict=True)}
        return self._tab

    def start(self) -> PrefixState:
        """An empty prefix state for a run that is starting."""
        self._check()
        return PrefixState(self)

    def state_from_dict(self, d: dict[str, Any]) -> PrefixState:
        """Continue a state saved with :meth:`PrefixState.to_dict` (same model version)."""
        if d.get("model") != self.version:
            raise InputError(f"state was built by model {d.get('model')!r}, not {self.version!r}", path="model")
        return PrefixState(self, from_state(d["counts"]), Pool.from_dict(d["pool"]) if "pool" in d else None)

    def score_state(self, state: PrefixState, *, prior: float | None = None) -> float:
        """P(failed) of the prefix the state has seen (equal to :meth:`score` of that prefix)."""
        f = self._check()
        z = f.bias + self._shape_logit(state.counts.shape)
        if state.sq > 0:
            z += state.dot / math.sqrt(state.sq)
        if f.w_emb is not None and f.e_mean is not None and state.pool is not None:
            z += float((state.pool.row() - f.e_mean) @ f.w_emb)
        if f.w_prior is not None:
            z += f.w_prior * logit(0.5 if prior is None else prior)
        return logistic(z)

    def score(self, trace: Trace, *, prior: float | None = None) -> float:
        """P(failed) of a whole run (its steps encoded in one batch when the model reads the encoder block)."""
        st = self.start()
        vectors = encode_steps(self.encoder_, trace.steps) if st.pool is not None and self.encoder_ is not None else None
        for i, s in enumerate(trace.steps):
            st.add(s, None if vectors is None else vectors[i])
        return self.score_state(st, prior=prior)

    def score_rows(self, rows: RunRows, *, prior: float | None = None) -> np.ndarray:
        """P(failed) of each cached prefix of a run (:meth:`FeatureCache.rows`, this model's buckets
        and fractions): the learning curve's fast path, equal to :meth:`score` of each prefix."""
        return score_rows(self._check(), rows, prior)

    def _shape_logit(self, shape: np.ndarray) -> float:
        f = self._check()
        if not len(f.w_shape):
            return 0.0
        return float(((shape_row(shape) - f.mean) / f.scale) @ f.w_shape)

    # ---- card, persistence ------------------------------------------------------------------------

    @property
    def card(self) -> dict[str, Any]:
        """The model card: agent, labelled runs, its own grouped-CV AUROC and interval, the cheap
        learners' (when :func:`model.training.agentmodel.cv.cross_validate` attached them), the curve so far."""
        self._check()
        return {**self.card_, "at_risk_threshold": self.at_risk_threshold, "version": self.version,
                "config": self.config.to_dict()}

    def to_dict(self) -> dict[str, Any]:
        f = self._check()
        return {
            "format": FORMAT,
            "config": self.config.to_dict(),
            "shape_features": list(SHAPE_FEATURES),
            "tokens": "features.step_tokens: role-prefixed [a-z_]{2,} words of content[:2000] (300 words) + "
                      "within-step bigrams + CALL:/ERR:<tool>; CRC-32 mod buckets",
            "mean": f.mean.tolist(), "scale": f.scale.tolist(), "w_shape": f.w_shape.tolist(),
            "buckets": _b64(f.buckets.astype("<u4")), "idf": _b64(f.idf.astype("<f4")),
            "w_ngram": _b64(f.w_ngram.astype("<f4")),
            "w_prior": f.w_prior, "bias": f.bias, "meta": f.meta,
            **({} if f.w_emb is None or f.e_mean is None or self.encoder_ is None else {
                "encoder": self.encoder_.version, "e_mean": _b64(f.e_mean.astype("<f4")),
                "w_emb": _b64(f.w_emb.astype("<f4"))}),
            "at_risk_threshold": self.at_risk_threshold, "card": self.card_,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], encoder: StaticEncoder | None = None) -> AgentModel:
        """The model :meth:`to_dict` wrote; one that reads the encoder block gets ``encoder`` (default:
        the shipped one), which must be the encoder it was fitted with."""
        if d.get("format") != FORMAT:
            raise InputError(f"not an agent model: format {d.get('format')!r}, expected {FORMAT!r}", path="format")
        if list(d["shape_features"]) != list(SHAPE_FEATURES):
            raise InputError("agent model built with other shape features; refit it", path="shape_features")
        m = cls(AgentModelConfig.from_dict(d["config"]))
        m.fitted_ = Fitted(
            mean=np.asarray(d["mean"], float), scale=np.asarray(d["scale"], float),
            w_shape=np.asarray(d["w_shape"], float), buckets=_unb64(d["buckets"], "<u4").astype(np.int64),
            idf=_unb64(d["idf"], "<f4").astype(float), w_ngram=_unb64(d["w_ngram"], "<f4").astype(float),
            w_prior=None if d["w_prior"] is None else float(d["w_prior"]), bias=float(d["bias"]),
            meta=dict(d.get("meta") or {}),
            e_mean=_unb64(d["e_mean"], "<f4").astype(float) if "e_mean" in d else None,
            w_emb=_unb64(d["w_emb"], "<f4").astype(float) if "w_emb" in d else None)
        if "encoder" in d:
            m.encoder_ = encoder or shared_encoder()
            if m.encoder_.version != d["encoder"]:
                raise InputError(f"agent model fitted with encoder {d['encoder']}, not the one given "
                                 f"({m.encoder_.version}): refit it", path="encoder")
        m.at_risk_threshold = d.get("at_risk_threshold")
        m.card_ = dict(d.get("card") or {})
        return m

    def save(self, path: Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), sort_keys=True), encoding="utf-8")

    @classmethod
    def load(cls, path: Path, encoder: StaticEncoder | None = None) -> AgentModel:
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"{path}: cannot read an agent model ({exc})", path=str(path)) from exc
        return cls.from_dict(d, encoder)

    @property
    def version(self) -> str:
        """Content hash of the learned parameters and config (not of the card)."""
        if self._version is None:
            d = self.to_dict()
            d.pop("card", None)
            self._version = "am-" + hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]
        return self._version

    def __getstate__(self) -> dict[str, Any]:
        return {"d": self.to_dict()}

    def __setstate__(self, s: dict[str, Any]) -> None:
        self.__dict__.update(AgentModel.from_dict(s["d"]).__dict__)


# ---- persistence helpers ------------------------------------------------------------------------


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(a.tobytes()).decode("ascii")


def _unb64(s: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype=dtype).copy()


__all__ = ["WARNING_CONFIDENCE", "WARNING_PREFIXES", "AgentModel", "AgentModelConfig", "PrefixState", "score_rows", "warning_point"]
