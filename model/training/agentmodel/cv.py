"""Grouped cross-validation of the agent model beside the two cheap learners: one estimate for the
gate and the learning curve.

Protocol (``../shared/MEASUREMENTS.md``, "In domain"): folds grouped by task (``folds`` folds,
``draws`` shufflings of the groups); in each fold, ``K`` labelled runs drawn from the training folds
(all of them for ``K=None``; a ``K`` larger than the training folds is skipped); AUROC on the runs of
the held-out tasks, averaged over folds × draws. The agent model and both cheap learners are fitted
on the *same* K runs, so their differences are paired; intervals come from a bootstrap over task
groups (each replicate reweights the held-out runs of every fold by how often their group was drawn).

The cheap learners, exactly as MEASUREMENTS specifies (scikit-learn, imported only here, at
evaluation time — the serving install has no scikit-learn and needs none):

* **length fit** — logistic regression on ``log1p(messages)``, ``log1p(characters)``;
* **TF-IDF** — word 1–2-grams over role-prefixed words (``user_refund``, ``assistant_sorry``; system
  messages skipped; 2,000 characters and 300 words a message) plus ``CALL_<tool>`` tokens, min_df 2,
  sublinear tf, 50,000 features, logistic regression C = 4, class-balanced.

Prefixes: at each fraction the model scores the held-out runs' prefixes; the cheap learners are fitted
on the training runs' prefixes of the same fraction and score the same held-out prefixes.

:func:`group_runs` makes the groups when runs carry no task id: near-duplicate clustering of the
opening user request (word-shingle Jaccard), so trials of one task are never split.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from model.core.errors import InputError
from model.core.metrics import N_BOOT, AurocUnit, auprc, group_bootstrap_weights, percentile_interval
from model.core.schema import Trace
from model.scoring.agentmodel.cheap import cheap_view
from model.scoring.agentmodel.features import FeatureCache, prefix_lengths
from model.scoring.agentmodel.model import AgentModel, AgentModelConfig
from model.training.agentmodel.groups import group_runs

METHODS = ("agent", "tfidf", "length")


def summarise(units: Sequence[AurocUnit], *, seed: int = 0, n_boot: int = N_BOOT,
              methods: Sequence[str] = METHODS) -> dict[str, Any]:
    """Mean AUROC over folds × draws per method, its bootstrap interval, and the paired differences
    of the agent model from each cheap learner (``replicates_*`` kept for pooling across sets)."""
    if not units:
        return {"folds": 0}
    pts = {m: float(np.mean([u.point()[m] for u in units])) for m in methods}
    reps = [u.replicates(w) for u, w in zip(units, group_bootstrap_weights(units, seed, n_boot), strict=True)]
    with warnings.catch_warnings():  # a replicate that drew no failed (or no successful) run: nan
        warnings.simplefilter("ignore", RuntimeWarning)
        rep = {m: np.nanmean(np.array([r[m] for r in reps]), axis=0) for m in methods}
    out: dict[str, Any] = {"folds": len(units)}
    for m in methods:
        out[m] = {"auroc": pts[m], "interval": list(percentile_interval(rep[m]))}
    for m in methods[1:]:
        d = rep[methods[0]] - rep[m]
        out[f"{methods[0]}_minus_{m}"] = {"diff": pts[methods[0]] - pts[m], "interval": list(percentile_interval(d)),
                                          "replicates": d.tolist()}
    return out


# ---- cheap learners (scikit-learn: evaluation time only) ------------------------------------------------

class CheapLearners:
    """Both cheap learners fitted on the same runs; ``score`` returns ``{"tfidf": …, "length": …}``."""

    def __init__(self, texts: Sequence[str], lengths: np.ndarray, y: np.ndarray) -> None:
        try:
            from sklearn.feature_extraction.text import TfidfVectorizer
            from sklearn.linear_model import LogisticRegression
        except ImportError as exc:  # pragma: no cover - the train extra holds it
            raise InputError("the cheap learners need scikit-learn (pip install -e '.[train]')",
                             path="scikit-learn") from exc
        self.vec: Any = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True, max_features=50000)
        self.tfidf: Any = None
        try:
            Xt = self.vec.fit_transform(texts)
        except ValueError:  # no term in two runs (empty traces, say): the TF-IDF learner knows nothing
            self.vec = None
        else:
            self.tfidf = LogisticRegression(C=4.0, max_iter=2000, class_weight="balanced").fit(Xt, y)
        self.length = LogisticRegression().fit(lengths, y)

    def score(self, texts: Sequence[str], lengths: np.ndarray) -> dict[str, np.ndarray]:
        tfidf = np.full(len(texts), 0.5) if self.vec is None else self.tfidf.predict_proba(self.vec.transform(texts))[:, 1]
        return {"tfidf": tfidf, "length": self.length.predict_proba(lengths)[:, 1]}


# ---- the cross-validation ------------------------------------------------------------------------------


@dataclass
class CVData:
    """A set prepared once: labels, groups, cached features and cheap views at each prefix fraction."""

    traces: list[Trace]
    y: np.ndarray
    groups: list[str]
    fractions: tuple[float, ...]
    prior: np.ndarray | None = None
    cache: FeatureCache = field(default_factory=FeatureCache)
    views: dict[float, list[tuple[str, int, int]]] = field(default_factory=dict)

    @classmethod
    def make(cls, traces: Sequence[Trace], failed: Sequence[bool] | np.ndarray, groups: Sequence[str],
             fractions: Sequence[float] = (1.0,), prior: Sequence[float] | np.ndarray | None = None,
             cache: FeatureCache | None = None) -> CVData:
        fr = tuple(sorted({float(f) for f in fractions}))
        d = cls(list(traces), np.array([bool(f) for f in failed], float), [str(g) for g in groups], fr,
                None if prior is None else np.asarray(prior, float), cache if cache is not None else FeatureCache())
        for f in fr:
            d.views[f] = [cheap_view(t, prefix_lengths(len(t.steps), [f])[0]) for t in d.traces]
        return d

    def lengths(self, f: float, idx: np.ndarray) -> np.ndarray:
        v = self.views[f]
        return np.array([[np.log1p(v[i][1]), np.log1p(v[i][2])] for i in idx])

    def texts(self, f: float, idx: np.ndarray) -> list[str]:
        return [self.views[f][i][0] for i in idx]


def draws_folds(groups: Sequence[str], folds: int, draws: int, seed: int) -> list[list[np.ndarray]]:
    """``draws`` shufflings of the groups into ``folds`` grouped folds (sklearn's GroupKFold on
    randomly renumbered groups, as MEASUREMENTS measured)."""
    from sklearn.model_selection import GroupKFold

    rng = random.Random(seed)
    uniq = sorted(set(groups))
    k = min(folds, len(uniq))
    out = []
    for _ in range(draws):
        perm = {g: rng.random() for g in uniq}
        gk = np.array([int(perm[g] * 1e6) for g in groups])
        out.append([te for _, te in GroupKFold(n_splits=k).split(np.zeros(len(groups)), groups=gk)])
    return out


def cross_validate(traces: Sequence[Trace], failed: Sequence[bool] | np.ndarray, groups: Sequence[str], *,
                   ks: Sequence[int | None] = (None,), fractions: Sequence[float] = (1.0,),
                   config: AgentModelConfig | None = None, prior: Sequence[float] | None = None,
                   folds: int = 5, draws: int = 5, seed: int = 0, n_boot: int = N_BOOT,
                   data: CVData | None = None, methods: Sequence[str] = METHODS,
                   prefix_ks: Sequence[int | None] | None = None,
                   progress: Callable[[str], None] | None = None,
                   reference: AgentModelConfig | None = None) -> dict[str, Any]:
    """The agent model and both cheap learners on the same folds and the same K runs.

    Returns ``{"runs", "failed", "groups", "results": {"K=…|f=…": summary}}`` where each summary
    (:func:`summarise`) holds every method's mean AUROC over folds × draws with its interval, the mean
    AUPRC, and the paired differences ``agent_minus_tfidf`` / ``agent_minus_length`` with intervals;
    ``oof`` holds, for ``K=None`` and each draw, the out-of-fold scores of every method.
    ``prefix_ks``: the K at which prefixes other than the largest fraction are scored (default all).
    ``reference``: another agent-model configuration (e.g. the one served before a change), fitted on
    the same K runs of every fold and scored as method ``reference``: ``agent_minus_reference`` is then
    the paired difference of the change.
    """
    rcfg = None if reference is None else replace(reference, internal_folds=0)
    if rcfg is not None and "reference" not in methods:
        methods = (*methods, "reference")
    cfg = config or AgentModelConfig(internal_folds=0)
    if cfg.internal_folds:
        cfg = AgentModelConfig.from_dict({**cfg.to_dict(), "internal_folds": 0})
    d = data or CVData.make(traces, failed, groups, fractions, prior)
    fr = tuple(sorted({float(f) for f in fractions}))
    missing = [f for f in fr if f not in d.views]
    if missing:
        raise InputError(f"data prepared without fractions {missing}", path="fractions")
    y = d.y
    n = len(y)
    splits = draws_folds(d.groups, folds, draws, seed)
    rng = random.Random(seed + 1)
    units: dict[tuple[int | None, float], list[AurocUnit]] = {}
    prc: dict[tuple[int | None, float], dict[str, list[float]]] = {}
    oof: dict[str, list[list[float]]] = {m: [] for m in methods}
    j_of = {f: i for i, f in enumerate(cfg.prefix_fractions)}
    j_ref = {} if rcfg is None else {f: i for i, f in enumerate(rcfg.prefix_fractions)}
    for di, draw in enumerate(splits):
        full = {m: np.full(n, np.nan) for m in methods}
        for te in draw:
            if y[te].min() == y[te].max():
                continue
            tr = np.setdiff1d(np.arange(n), te)
            base = list(tr)
            rng.shuffle(base)
            for K in ks:
                if K is not None and len(tr) < K:
                    continue
                idx = np.array(sorted(base if K is None else base[:K]))
                if y[idx].min() == y[idx].max():
                    continue
                model = ref = None
                if "agent" in methods:
                    model = AgentModel.fit([d.traces[i] for i in idx], y[idx] > 0.5, [d.groups[i] for i in idx],
                                           config=cfg, prior=None if d.prior is None else d.prior[idx],
                                           cache=d.cache)
                if rcfg is not None:
                    ref = AgentModel.fit([d.traces[i] for i in idx], y[idx] > 0.5, [d.groups[i] for i in idx],
                                         config=rcfg, prior=None if d.prior is None else d.prior[idx], cache=d.cache)
                for f in fr:
                    if f != max(fr) and prefix_ks is not None and K not in prefix_ks:
                        continue
                    sc: dict[str, np.ndarray] = {}
                    if model is not None:
                        sc["agent"] = np.array([_score_at(model, d, i, f, j_of) for i in te])
                    if ref is not None:
                        sc["reference"] = np.array([_score_at(ref, d, i, f, j_ref) for i in te])
                    if "tfidf" in methods or "length" in methods:
                        cl = CheapLearners(d.texts(f, idx), d.lengths(f, idx), y[idx])
                        sc.update(cl.score(d.texts(f, te), d.lengths(f, te)))
                    sc = {m: sc[m] for m in methods}
                    units.setdefault((K, f), []).append(AurocUnit.make(y[te], sc, [d.groups[i] for i in te]))
                    pr = prc.setdefault((K, f), {m: [] for m in methods})
                    for m in methods:
                        pr[m].append(auprc(y[te], sc[m]))
                    if K is None and f == max(fr):
                        for m in methods:
                            full[m][te] = sc[m]
        for m in methods:
            oof[m].append(full[m].tolist())
        if progress:
            progress(f"draw {di + 1}/{len(splits)}")
    results: dict[str, Any] = {}
    for (K, f), us in units.items():
        s = summarise(us, seed=seed, n_boot=n_boot, methods=methods)
        for m in methods:
            s[m]["auprc"] = float(np.nanmean(prc[(K, f)][m]))
        results[key(K, f)] = s
    return {"runs": n, "failed": int(y.sum()), "groups": len(set(d.groups)), "folds": folds, "draws": draws,
            "results": results, "oof": oof}


def key(K: int | None, f: float) -> str:
    return f"K={'all' if K is None else K}|f={f:g}"


def _score_at(model: AgentModel, d: CVData, i: int, f: float, j_of: dict[float, int]) -> float:
    """The model's score of run ``i``'s prefix at ``f`` from the cache (a fraction the model was not
    trained on gets its own cached rows: the steps are counted, and encoded, once a run)."""
    p = None if d.prior is None else float(d.prior[i])
    c = model.config
    enc = c.encoder_weight > 0
    if f in j_of:
        rows = d.cache.rows(d.traces[i], c.buckets, c.prefix_fractions, c.last_turn, enc)
        return float(model.score_rows(rows, prior=p)[j_of[f]])
    return float(model.score_rows(d.cache.rows(d.traces[i], c.buckets, (f,), c.last_turn, enc), prior=p)[0])


def attach(model: AgentModel, report: dict[str, Any]) -> AgentModel:
    """Put the cheap learners' cross-validated AUROC (a :func:`cross_validate` report) on the card."""
    res = report["results"].get(key(None, 1.0))
    if res:
        model.card_["cheap_learners"] = {m: res[m] for m in ("tfidf", "length") if m in res}
        model.card_["cv_protocol"] = {"folds": report["folds"], "draws": report["draws"]}
    return model


__all__ = ["CVData", "CheapLearners", "attach", "cheap_view", "cross_validate", "draws_folds", "group_runs", "key",
           "summarise"]
