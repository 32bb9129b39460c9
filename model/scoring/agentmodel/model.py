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
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from model.core.errors import InputError, NotFittedError
from model.core.metrics import auroc, group_bootstrap_interval, logistic, logit
from model.core.schema import Step, Trace
from model.scoring.agentmodel.features import (
    SHAPE_FEATURES,
    FeatureCache,
    RunCounts,
    RunRows,
    from_state,
    shape_row,
    to_state,
)
from model.scoring.agentmodel.logistic import balanced_weights, fit_logistic, group_folds

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


@dataclass(frozen=True)
class AgentModelConfig:
    """Hyper-parameters of :class:`AgentModel` (validated; ``params.yaml``'s ``learning_curve.model``).

    c: inverse L2 strength (sklearn's ``C``; sample weights average one).
    shape_weight, ngram_weight: scale of each block (0 leaves a block out).
    prior_weight: the prior's coefficient is shrunk towards this (1: trust the zero-shot score).
    prior_l2: strength of that shrinkage (in balanced-weight units: about that many runs).
    prefix_fractions: the prefixes each labelled run is trained on.
    buckets: n-gram hash columns; min_df: runs a bucket must appear in to be learned.
    last_turn: also count the words of the latest assistant message as ``last:`` n-grams (replaced as
        the run goes on), so what the agent said last weighs apart from the same words earlier.
    internal_folds: grouped folds of the model's own CV (threshold, card); 0 skips it.
    target_false_alarm: the share of new successful runs whose score may reach the early-warning point at
        any of the prefixes :data:`WARNING_PREFIXES`, held with :data:`WARNING_CONFIDENCE` (``at_risk`` is
        raised at the first step that reaches it, so the point is set on each run's highest out-of-fold
        prefix score, not on one prefix: :func:`warning_point`).
    combine: ``joint`` (one regression over both blocks) or ``stack`` (a shape model and an n-gram model
        fitted apart, combined by a logistic regression on their out-of-fold logits over ``stack_folds``
        grouped folds of the training runs — nested: the weights never see the runs they are judged on;
        the result collapses into the same linear form, so serving is unchanged).
    """

    c: float = 4.0
    shape_weight: float = 1.0
    ngram_weight: float = 1.0
    prior_weight: float = 1.0
    prior_l2: float = 10.0
    prefix_fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    buckets: int = 1 << 18
    min_df: int = 2
    last_turn: bool = False
    internal_folds: int = 5
    combine: str = "joint"
    stack_folds: int = 3
    target_false_alarm: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        if self.c <= 0:
            raise InputError(f"c must be > 0; got {self.c}", path="c")
        if self.shape_weight < 0 or self.ngram_weight < 0 or (self.shape_weight == 0 and self.ngram_weight == 0):
            raise InputError(f"shape_weight and ngram_weight must be ≥ 0, not both 0; got {self.shape_weight}, "
                             f"{self.ngram_weight}", path="shape_weight")
        if not self.prefix_fractions or any(not 0 < f <= 1 for f in self.prefix_fractions):
            raise InputError(f"prefix_fractions must lie in (0, 1]; got {self.prefix_fractions}",
                             path="prefix_fractions")
        if self.combine not in ("joint", "stack", "mean"):
            raise InputError(f"combine must be 'joint', 'stack' or 'mean'; got {self.combine!r}", path="combine")
        if self.buckets < 16:
            raise InputError(f"buckets must be ≥ 16; got {self.buckets}", path="buckets")
        object.__setattr__(self, "prefix_fractions", tuple(float(f) for f in self.prefix_fractions))

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> AgentModelConfig:
        d = dict(d or {})
        d.pop("warning_fraction", None)  # retired: stored models written before the point read every prefix
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise InputError(f"unknown agent-model option(s) {unknown}; valid: {sorted(names)}", path="config")
        if "prefix_fractions" in d:
            d["prefix_fractions"] = tuple(d["prefix_fractions"])
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON values (what :meth:`from_dict` reads back)."""
        d = asdict(self)
        d["prefix_fractions"] = list(self.prefix_fractions)
        return d


class PrefixState:
    """The running state of one run under one model: ``add(step)`` costs O(words of the step).

    Holds the counts (:class:`~model.scoring.agentmodel.features.RunCounts`) and, for the model's buckets,
    the running dot product with the weights and the running squared norm, so scoring needs no pass
    over the steps seen before.
    """

    def __init__(self, model: AgentModel, counts: RunCounts | None = None) -> None:
        self._model = model
        self.counts = counts or RunCounts.empty()
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

    def add(self, step: Step) -> None:
        """Count one more step of the run."""
        counts = self.counts.counts
        cfg = self._model.config
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
        return {"model": self._model.version, "counts": to_state(self.counts)}


@dataclass
class _Fitted:
    mean: np.ndarray
    scale: np.ndarray
    w_shape: np.ndarray
    buckets: np.ndarray  # learned bucket ids, ascending
    idf: np.ndarray
    w_ngram: np.ndarray
    w_prior: float | None
    bias: float
    meta: dict[str, Any] = field(default_factory=dict)


class AgentModel:
    """One agent's failure model. Build it with :meth:`fit` (a classmethod) or :meth:`load`."""

    def __init__(self, config: AgentModelConfig | None = None) -> None:
        self.config = config or AgentModelConfig()
        self.fitted_: _Fitted | None = None
        self.at_risk_threshold: float | None = None
        self.card_: dict[str, Any] = {}
        self._tab: dict[int, tuple[float, float]] | None = None
        self._version: str | None = None

    # ---- fit ------------------------------------------------------------------------------------

    @classmethod
    def fit(cls, traces: Sequence[Trace], failed: Sequence[bool], groups: Sequence[str], *,
            config: AgentModelConfig | None = None, prior: Sequence[float] | None = None,
            agent: str | None = None, cache: FeatureCache | None = None,
            flagged: Sequence[bool] | None = None) -> AgentModel:
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
        cache = cache if cache is not None else FeatureCache()  # an empty cache is falsy (__len__)
        counts = [cache.rows(t, cfg.buckets, cfg.prefix_fractions, cfg.last_turn) for t in traces]
        m = cls(cfg)
        m.fitted_ = _fit_core(counts, y, list(groups), None if prior is None else np.asarray(prior, float), cfg)
        m.fitted_.meta = {**m.fitted_.meta, "labelled_runs": n, "failed_runs": int(y.sum()), "groups": len(set(groups))}
        m._tab = None
        m.card_ = {"agent": agent, "labelled_runs": n, "failed_runs": int(y.sum()), "groups": len(set(groups)),
                   "cv_auroc": None, "cv_auroc_interval": None, "cheap_learners": None, "learning_curve": []}
        if cfg.internal_folds >= 2 and len(set(groups)) >= cfg.internal_folds:
            efr = WARNING_PREFIXES
            evals = [cache.rows(t, cfg.buckets, efr, cfg.last_turn) for t in traces]
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
            f = _fit_core([counts[i] for i in train], y[train], [groups[i] for i in train],
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

    def _check(self) -> _Fitted:
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
        return PrefixState(self, from_state(d["counts"]))

    def score_state(self, state: PrefixState, *, prior: float | None = None) -> float:
        """P(failed) of the prefix the state has seen (equal to :meth:`score` of that prefix)."""
        f = self._check()
        z = f.bias + self._shape_logit(state.counts.shape)
        if state.sq > 0:
            z += state.dot / math.sqrt(state.sq)
        if f.w_prior is not None:
            z += f.w_prior * logit(0.5 if prior is None else prior)
        return logistic(z)

    def score(self, trace: Trace, *, prior: float | None = None) -> float:
        """P(failed) of a whole run."""
        st = self.start()
        for s in trace.steps:
            st.add(s)
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
            "at_risk_threshold": self.at_risk_threshold, "card": self.card_,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AgentModel:
        if d.get("format") != FORMAT:
            raise InputError(f"not an agent model: format {d.get('format')!r}, expected {FORMAT!r}", path="format")
        if list(d["shape_features"]) != list(SHAPE_FEATURES):
            raise InputError("agent model built with other shape features; refit it", path="shape_features")
        m = cls(AgentModelConfig.from_dict(d["config"]))
        m.fitted_ = _Fitted(
            mean=np.asarray(d["mean"], float), scale=np.asarray(d["scale"], float),
            w_shape=np.asarray(d["w_shape"], float), buckets=_unb64(d["buckets"], "<u4").astype(np.int64),
            idf=_unb64(d["idf"], "<f4").astype(float), w_ngram=_unb64(d["w_ngram"], "<f4").astype(float),
            w_prior=None if d["w_prior"] is None else float(d["w_prior"]), bias=float(d["bias"]),
            meta=dict(d.get("meta") or {}))
        m.at_risk_threshold = d.get("at_risk_threshold")
        m.card_ = dict(d.get("card") or {})
        return m

    def save(self, path: Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), sort_keys=True), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> AgentModel:
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"{path}: cannot read an agent model ({exc})", path=str(path)) from exc
        return cls.from_dict(d)

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


# ---- the fit itself (shared by the model and its own CV) ------------------------------------------


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(a.tobytes()).decode("ascii")


def _unb64(s: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype=dtype).copy()


def _ngram_block(grams: sp.csr_matrix, bk: np.ndarray, idf: np.ndarray) -> sp.csr_matrix:
    """Rows of log1p counts → the model's n-gram block: learned buckets only, × idf, L2-normalised."""
    X = sp.csr_matrix(grams[:, bk] @ sp.diags(idf))
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    return sp.csr_matrix(sp.diags(1.0 / norms) @ X)


def _fit_core(runs: list[RunRows], y: np.ndarray, groups: list[str], prior: np.ndarray | None,
              cfg: AgentModelConfig) -> _Fitted:
    if cfg.combine in ("stack", "mean") and cfg.shape_weight > 0 and cfg.ngram_weight > 0:
        return _fit_stack(runs, y, groups, prior, cfg)
    return _fit_joint(runs, y, prior, cfg)


def _logits(f: _Fitted, runs: Sequence[RunRows]) -> np.ndarray:
    p = np.concatenate([score_rows(f, r, None) for r in runs])
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return np.asarray(np.log(p / (1 - p)))


def _fit_stack(runs: list[RunRows], y: np.ndarray, groups: list[str], prior: np.ndarray | None,
               cfg: AgentModelConfig) -> _Fitted:
    """A shape model and an n-gram model, combined by weights fitted on their out-of-fold logits
    (``stack``) or by the mean of their logits (``mean``)."""
    from dataclasses import replace

    c_shape = replace(cfg, ngram_weight=0.0)
    c_gram = replace(cfg, shape_weight=0.0)
    a, c0, g = (np.array([0.5, 0.5]), 0.0, None) if cfg.combine == "mean" else \
        _stack_weights(runs, y, groups, prior, cfg, c_shape, c_gram)
    if prior is not None and g is None:
        g = cfg.prior_weight
    fs = _fit_joint(runs, y, None, c_shape)
    fg = _fit_joint(runs, y, None, c_gram)
    # z = c0 + a0·(b_s + shape·w_s) + a1·(b_g + grams·w_g) (+ γ·logit prior): one linear model again
    return _Fitted(mean=fs.mean, scale=fs.scale, w_shape=fs.w_shape * a[0], buckets=fg.buckets, idf=fg.idf,
                   w_ngram=(fg.w_ngram * a[1]).astype("<f4").astype(float), w_prior=g,
                   bias=float(c0 + a[0] * fs.bias + a[1] * fg.bias),
                   meta={"stack_weights": [float(a[0]), float(a[1])], "stack_bias": float(c0)})


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


def _fit_joint(runs: list[RunRows], y: np.ndarray, prior: np.ndarray | None, cfg: AgentModelConfig) -> _Fitted:
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
    X = sp.hstack(blocks, format="csr")
    lp = None if prior is None else np.repeat([logit(float(p)) for p in prior], len(fr))
    w, b, g = fit_logistic(X, yy, sw, l2, lp, cfg.prior_l2, cfg.prior_weight)
    k = S.shape[1] if cfg.shape_weight > 0 else 0
    w_shape = w[:k] * cfg.shape_weight
    w_ngram = (w[k:] * cfg.ngram_weight).astype("<f4").astype(float)
    return _Fitted(mean=mean, scale=scale, w_shape=w_shape, buckets=bk, idf=idf, w_ngram=w_ngram,
                   w_prior=g, bias=b)


def score_rows(f: _Fitted, rows: RunRows, prior: float | None) -> np.ndarray:
    """P(failed) of each prefix in ``rows`` (vectorised; the same arithmetic as the prefix state)."""
    z = np.full(rows.shape.shape[0], f.bias)
    if len(f.w_shape):
        z += ((shape_row(rows.shape) - f.mean) / f.scale) @ f.w_shape
    if len(f.buckets):
        X = rows.grams[:, f.buckets] @ sp.diags(f.idf)
        dot = np.asarray(X @ f.w_ngram).ravel()
        sq = np.asarray(X.multiply(X).sum(axis=1)).ravel()
        z += np.where(sq > 0, dot / np.sqrt(np.where(sq > 0, sq, 1.0)), 0.0)
    if f.w_prior is not None:
        z += f.w_prior * logit(0.5 if prior is None else prior)
    return np.asarray(1.0 / (1.0 + np.exp(-z)))


__all__ = ["WARNING_CONFIDENCE", "WARNING_PREFIXES", "AgentModel", "AgentModelConfig", "PrefixState", "score_rows", "warning_point"]
