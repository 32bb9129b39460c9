"""The run scorer: ``failure_probability`` and ``attribution`` from domain-general evidence.

Two small linear models over :mod:`model.scoring.runscore.features`, fitted with scipy and served with
numpy alone (the artefact is one JSON file, ``model/artifacts/runscore.json``):

* **attribution** — a conditional logit over a run's agent messages: ``softmax(X·w)`` is the
  probability that each message is where the run went wrong, *given that it failed*. Trained on
  the failed runs whose set says where (AgentProcessBench, Who&When, τ-bench's derived step).
* **run probability** — the zero-shot recipe (:mod:`model.scoring.runscore.zeroshot`,
  :data:`~model.scoring.runscore.zeroshot.RECIPE`): the prior, the rules' measured confidences and
  a small continuous part from the step classifier's per-kind maxima and the rule signals, every
  weight non-negative. The run features of :mod:`~model.scoring.runscore.features` no longer enter
  it: leave-one-source-out none kept its direction on every set (``reports/real.md``), and a run
  scorer trained on them ranked unseen agents' runs backwards as often as not (issue 31).
* **operating point** — at or above the (1 − ``target_false_alarm``) quantile of each training
  set's successful runs and the highest value the continuous part reaches alone.

Selection, thresholds and the operating point come from real runs only
(``model.training.runscore.evaluate`` reports them leave-one-source-out).

>>> scorer = RunScorer.load()                                   # doctest: +SKIP
>>> scorer.score(trace, rule_confidence=None, evidence={}).failure_probability   # doctest: +SKIP
0.31
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize

from model.core.errors import InputError, NotFittedError
from model.core.paths import ARTIFACTS
from model.core.schema import Trace
from model.scoring.runscore.features import (
    MESSAGE_FEATURES,
    POSITION_FEATURES,
    MessageUnit,
    message_features,
    run_features,
)
from model.scoring.runscore.zeroshot import (
    EVIDENCE_FEATURES,
    RECIPE,
    RUN_EVIDENCE,
    ZeroShotRecipe,
    run_evidence,
)

ARTIFACT = ARTIFACTS / "runscore.json"
FORMAT_VERSION = 2  # 2: the zero-shot recipe replaces the run-level regression (issue 31)

#: The message features the attribution may use (``RunScorer(attribution=…)``). ``"position"``: where
#: the message sits in the run, nothing of its content. Leave-one-source-out, the content cues made
#: "where did it go wrong?" worse on every set (exact τ-airline 0.29 → 0.01, AgentProcessBench
#: 0.76 → 0.21, Who&When 0.05 either way; docs/classifier.md): which message looks wrong is learned
#: per agent, so the shipped attribution is a position model, and content is the retraining's.
ATTRIBUTION_FEATURES: dict[str, tuple[str, ...]] = {
    "position": ("rel_position", "first_agent_message", "last_agent_message", "agent_ordinal_log"),
    "all": MESSAGE_FEATURES[1:],
}


@dataclass
class ScoredRun:
    """What the scorer says of one trace."""

    failure_probability: float | None
    attribution: dict[str, Any] | None
    units: list[MessageUnit] = field(default_factory=list)
    message_probabilities: list[float] = field(default_factory=list)


@dataclass
class Example:
    """One labelled run as the scorer trains on it (features computed once)."""

    source: str
    group: str
    failed: bool
    fail_source_index: int | None
    units: list[MessageUnit]
    X: np.ndarray
    run: np.ndarray
    messages: int
    rules: tuple[str, ...] = ()  # the rule detectors that raised a failure on this run
    #: each of those rules' highest raw confidence among its failures (the prior of its estimate)
    rule_confidences: dict[str, float] = field(default_factory=dict)
    #: the run's evidence features (:func:`model.scoring.runscore.zeroshot.evidence`)
    evidence: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_trace(cls, trace: Trace, source: str, group: str, rules: tuple[str, ...] = (),
                   rule_confidences: dict[str, float] | None = None,
                   evidence: dict[str, float] | None = None) -> Example:
        labels = trace.labels
        if labels is None or labels.failed is None:
            raise InputError(f"trace {trace.id}: no run-level label (labels.failed)", path="labels.failed")
        units, X = message_features(trace)
        fail = labels.failures[0].source_index if labels.failures else None
        msgs = (max(s.source_index for s in trace.steps) + 1) if trace.steps else 0
        return cls(source, group, bool(labels.failed), fail, units, X, run_features(trace, units, X), msgs,
                   tuple(sorted(set(rules))), dict(rule_confidences or {}), dict(evidence or {}))

    @property
    def target(self) -> int | None:
        """The labelled message's row among the units (``None`` when unknown or not an agent's)."""
        if not self.failed or self.fail_source_index is None:
            return None
        for k, u in enumerate(self.units):
            if u.source_index == self.fail_source_index:
                return k
        return None


def fit_message_model(examples: Sequence[Example], l2: float = 1.0,
                      features: Sequence[str] = MESSAGE_FEATURES[1:]) -> np.ndarray:
    """Conditional-logit weights over :data:`MESSAGE_FEATURES` (the bias cancels in the softmax);
    the columns not in ``features`` get weight 0."""
    rows = [(e.X, e.target) for e in examples if e.target is not None and len(e.units) > 1]
    d = len(MESSAGE_FEATURES)
    if not rows:
        return np.zeros(d)
    mask = np.array([name in features for name in MESSAGE_FEATURES], dtype=np.float64)
    X = np.concatenate([x for x, _ in rows]).astype(np.float64) * mask
    sizes = np.array([len(x) for x, _ in rows])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    target_rows = starts + np.array([t for _, t in rows])
    group = np.repeat(np.arange(len(rows)), sizes)
    # each set weighs the same, whatever its number of labelled runs
    src = [e.source for e in examples if e.target is not None and len(e.units) > 1]
    counts = {s: src.count(s) for s in set(src)}
    wrun = np.array([len(src) / (len(counts) * counts[s]) for s in src])

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        z = X @ w
        zmax = np.maximum.reduceat(z, starts)
        e = np.exp(z - zmax[group])
        den = np.add.reduceat(e, starts)
        logp = z[target_rows] - zmax - np.log(den)
        p = e / den[group]
        grad_rows = -X[target_rows] * wrun[:, None]
        grad = grad_rows.sum(0) + ((p * wrun[group])[:, None] * X).sum(0)
        val = -(logp * wrun).sum() + 0.5 * l2 * float(w @ w)
        return float(val), grad + l2 * w

    res = minimize(loss, np.zeros(d), jac=True, method="L-BFGS-B", options={"maxiter": 500})
    w: np.ndarray = res.x * mask
    return w


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max())
    out: np.ndarray = e / e.sum()
    return out


#: A rule that raises a failure on more than this share of any training set's successful runs is a
#: defect (issue "Right on real agent runs"): its findings become signals (``details.demoted``).
MAX_FALSE_ALARM_RATE = 0.10
#: Pseudo-runs of the prior when a rule's confidence is estimated: the rule's own confidence (what
#: it was designed and tested to claim) counts as this many firings, so a rule seen firing twice on
#: real runs moves a little and one seen 100 times is mostly its measurement.
PRIOR_RUNS = 10


def rule_precision(per_set: dict[str, dict[str, int]]) -> tuple[int, float | None]:
    """``(firings, P(run failed | fired))`` from a rule's per-set counts, each training set weighted
    equally (so the biggest set does not decide); ``None`` when it never fired."""
    num = den = 0.0
    fired = 0
    for v in per_set.values():
        n = v["successful"] + v["failed"]
        fired += v["fired_on_successful"] + v["fired_on_failed"]
        w = 1.0 / max(1, n)
        num += w * v["fired_on_failed"]
        den += w * (v["fired_on_successful"] + v["fired_on_failed"])
    return fired, (num / den if den else None)


def rule_stats(examples: Sequence[Example], sets: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per rule, on each training set: how often it raised a failure on successful and on failed
    runs; its measured precision P(run failed | it fired) (sets weighted equally, unsmoothed:
    :func:`rule_precision`) and whether it is demoted (it fired on more than
    :data:`MAX_FALSE_ALARM_RATE` of a set's successful runs)."""
    out: dict[str, dict[str, Any]] = {}
    names = sorted({r for e in examples for r in e.rules})
    for name in names:
        per: dict[str, dict[str, int]] = {}
        for s in sets:
            sub = [e for e in examples if e.source == s]
            ok = [e for e in sub if not e.failed]
            bad = [e for e in sub if e.failed]
            f_ok = sum(name in e.rules for e in ok)
            f_bad = sum(name in e.rules for e in bad)
            per[s] = {"successful": len(ok), "fired_on_successful": f_ok, "failed": len(bad), "fired_on_failed": f_bad}
        fired, precision = rule_precision(per)
        worst = max((v["fired_on_successful"] / v["successful"] for v in per.values() if v["successful"]), default=0.0)
        out[name] = {"sets": per, "fired": fired, "precision": None if precision is None else round(precision, 4),
                     "max_false_alarm_rate": round(worst, 4), "demoted": worst > MAX_FALSE_ALARM_RATE}
    return out


class RunScorer:
    """Fit on labelled real runs; score any trace.

    Parameters
    ----------
    l2_message:
        L2 strength of the attribution model.
    target_false_alarm:
        The operating point: at most this share of each training set's successful runs flagged.
    delta:
        The weight of the zero-shot recipe's continuous part (:mod:`model.scoring.runscore.zeroshot`).
    tolerance:
        An evidence feature is kept only if its AUROC is ≥ 0.5 − this on every training set.
    run_features:
        Offer the old run scorer's features (:data:`~model.scoring.runscore.zeroshot.RUN_EVIDENCE`) to the
        recipe as candidates too (the evaluation's check of whether they help; off in the shipped one).
    attribution:
        The message features the attribution uses: a key of :data:`ATTRIBUTION_FEATURES`.
    """

    def __init__(self, *, l2_message: float = 1.0, target_false_alarm: float = 0.1, delta: float = 0.2,
                 tolerance: float = 0.02, run_features: bool = False, attribution: str = "position") -> None:
        if attribution not in ATTRIBUTION_FEATURES:
            raise InputError(f"attribution {attribution!r}: one of {sorted(ATTRIBUTION_FEATURES)}",
                             path="attribution")
        self.attribution = attribution
        self.l2_message = l2_message
        self.target_false_alarm = target_false_alarm
        self.delta = delta
        self.tolerance = tolerance
        self.run_features = run_features
        self.message_weights_: np.ndarray | None = None
        self.zero_shot_: ZeroShotRecipe | None = None
        self.rule_stats_: dict[str, dict[str, Any]] = {}
        self.meta_: dict[str, Any] = {}

    # ---- fit ------------------------------------------------------------------------------

    def fit(self, examples: Sequence[Example]) -> RunScorer:
        """Fit the attribution, the rules' measured confidences and the zero-shot recipe on
        ``examples`` (real labelled runs)."""
        self.message_weights_ = fit_message_model(examples, self.l2_message, ATTRIBUTION_FEATURES[self.attribution])
        outcomes = {(e.source, e.failed) for e in examples}
        run_sets = sorted({s for s, _ in outcomes if (s, True) in outcomes and (s, False) in outcomes})
        if not run_sets:
            raise InputError("no training set holds both failed and successful runs", path="examples")
        ex = [e for e in examples if e.source in run_sets]
        self.rule_stats_ = rule_stats(ex, run_sets)
        self.zero_shot_ = ZeroShotRecipe.fit(
            run_sets, [e.source for e in ex], [e.failed for e in ex], [self.rule_part(e) for e in ex],
            [self._evidence(e.evidence, e.run) for e in ex], delta=self.delta, tolerance=self.tolerance,
            target_false_alarm=self.target_false_alarm,
            candidates=(*EVIDENCE_FEATURES, *RUN_EVIDENCE) if self.run_features else EVIDENCE_FEATURES)
        self.meta_ = {"trained_on": run_sets, "attribution_trained_on": sorted(
            {e.source for e in examples if e.target is not None}), "runs": len(examples)}
        return self

    def _evidence(self, evidence: dict[str, float], run: np.ndarray) -> dict[str, float]:
        return {**evidence, **run_evidence(run)} if self.run_features else evidence

    def _reads_content(self) -> bool:
        """Whether scoring needs the messages' content features: the run features read them, or the
        attribution weighs one (a position-only attribution weighs each exactly 0, so the content
        columns add exactly 0 to every message's score: left at 0, they are not computed)."""
        w = self.message_weights_
        assert w is not None
        cached = self.__dict__.get("_content_")
        if cached is None or cached[0] is not w:  # worked out again only when the weights are replaced
            cached = self.__dict__["_content_"] = (w, bool(np.any(w[len(POSITION_FEATURES):] != 0)))
        return self.run_features or cached[1]

    def rule_part(self, e: Example) -> float | None:
        """The highest measured confidence among ``e``'s rule failures that still raise (``None``: none)."""
        best: float | None = None
        for rule in e.rules:
            conf = e.rule_confidences.get(rule, 1.0)
            estimate, extra = self.rule_confidence(rule, conf)
            if estimate >= 0.5 and "demoted" not in extra:
                best = estimate if best is None else max(best, estimate)
        return best

    # ---- predict --------------------------------------------------------------------------

    def _check(self) -> None:
        if self.message_weights_ is None or self.zero_shot_ is None:
            raise NotFittedError("this RunScorer is not fitted; call fit() or RunScorer.load()")

    @property
    def features_(self) -> list[str]:
        """The evidence features the zero-shot recipe kept."""
        self._check()
        assert self.zero_shot_ is not None
        return list(self.zero_shot_.features)

    @property
    def recipe(self) -> str:
        """The zero-shot recipe's name (:data:`model.scoring.runscore.zeroshot.RECIPE`)."""
        return RECIPE

    def probability(self, rule_confidence: float | None, evidence: dict[str, float]) -> float:
        """``failure_probability`` from a run's rule part and evidence features (the recipe's)."""
        self._check()
        assert self.zero_shot_ is not None
        return self.zero_shot_.probability(rule_confidence, evidence)

    def score_example(self, e: Example) -> tuple[float, np.ndarray]:
        """(failure probability, message probabilities) of a prepared example."""
        self._check()
        assert self.message_weights_ is not None
        p = self.probability(self.rule_part(e), self._evidence(e.evidence, e.run))
        probs = _softmax(e.X.astype(np.float64) @ self.message_weights_) if len(e.units) else np.zeros(0)
        return p, probs

    def score(self, trace: Trace, *, rule_confidence: float | None = None,
              evidence: dict[str, float] | None = None) -> ScoredRun:
        """``failure_probability`` and ``attribution`` of one trace (no labels needed).

        ``rule_confidence``: the highest (measured) confidence among the run's rule failures, ``None``
        without one; ``evidence``: :func:`model.scoring.runscore.zeroshot.evidence` of its findings.
        :meth:`model.diagnosis.diagnoser.Diagnoser.diagnose` passes both; a feature left out counts
        as the training mean (it neither raises nor lowers the probability).
        """
        self._check()
        assert self.message_weights_ is not None
        units, X = message_features(trace, content=self._reads_content())
        if not units:
            return ScoredRun(None, None)
        ev = dict(evidence or {})
        p = self.probability(rule_confidence, self._evidence(ev, run_features(trace, units, X)) if self.run_features
                             else ev)
        probs = _softmax(X.astype(np.float64) @ self.message_weights_)
        k = int(np.argmax(probs))
        u = units[k]
        attribution = {"step": u.steps[0], "source_index": u.source_index, "speaker": u.speaker,
                       "probability": round(float(probs[k]), 4)}
        return ScoredRun(round(p, 4), attribution, units, [float(x) for x in probs])

    @property
    def threshold(self) -> float:
        self._check()
        assert self.zero_shot_ is not None
        return self.zero_shot_.threshold

    def rule_confidence(self, rule: str, confidence: float) -> tuple[float, dict[str, Any]]:
        """A rule finding's confidence as P(run failed | it fired), estimated on the training sets,
        and what to add to its details.

        The estimate is the mean of a Beta posterior: the finding's own ``confidence`` as the
        prior, worth :data:`PRIOR_RUNS` firings, updated by the rule's firings on the training sets'
        runs (:func:`rule_precision`): ``(n·precision + PRIOR_RUNS·confidence) / (n + PRIOR_RUNS)``.
        Details gain ``p_run_failed`` (the estimate) and ``measured`` (``fired``, ``precision``); a
        demoted rule's also ``demoted``, and :func:`model.diagnosis.diagnoser.fuse` keeps such a finding a
        signal whatever its confidence. A rule never seen on a training set keeps its confidence.
        """
        st = self.rule_stats_.get(rule)
        if st is None:
            return confidence, {}
        fired, precision = rule_precision(st["sets"])
        estimate = confidence if precision is None else (fired * precision + PRIOR_RUNS * confidence) / (
            fired + PRIOR_RUNS)
        estimate = round(float(estimate), 4)
        extra: dict[str, Any] = {"p_run_failed": estimate, "measured": {
            "fired": fired, "precision": None if precision is None else round(precision, 4), "prior": confidence}}
        if st["demoted"]:
            extra["demoted"] = {"max_false_alarm_rate": st["max_false_alarm_rate"]}
        return estimate, extra

    def rule_raises(self, rule: str, confidence: float, threshold: float = 0.5) -> bool:
        """Whether a finding of ``rule`` at ``confidence`` is still a failure after the estimate
        (:meth:`rule_confidence`: at or above ``threshold``, and the rule not demoted)."""
        estimate, extra = self.rule_confidence(rule, confidence)
        return estimate >= threshold and "demoted" not in extra

    # ---- persistence ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        self._check()
        assert self.message_weights_ is not None and self.zero_shot_ is not None
        return {
            "format_version": FORMAT_VERSION,
            "message_features": list(MESSAGE_FEATURES),
            "message_weights": [round(float(x), 6) for x in self.message_weights_],
            "zero_shot": self.zero_shot_.to_dict(),
            "rule_stats": self.rule_stats_,
            "params": {"l2_message": self.l2_message, "target_false_alarm": self.target_false_alarm,
                       "delta": self.delta, "tolerance": self.tolerance, "run_features": self.run_features,
                       "attribution": self.attribution},
            "meta": self.meta_,
        }

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n", encoding="utf-8")

    @property
    def version(self) -> str:
        """``runscore-`` and 8 hex digits of the model's JSON: computed again only when an attribute
        is assigned (fit, load), not at each of a request's reads."""
        key = tuple(id(v) for k, v in vars(self).items() if not k.startswith("_"))  # not the caches
        cached: tuple[tuple[int, ...], str] | None = self.__dict__.get("_version")
        if cached is None or cached[0] != key:
            digest = hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:8]
            cached = (key, f"runscore-{digest}")
            self.__dict__["_version"] = cached
        return cached[1]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunScorer:
        if d.get("format_version") != FORMAT_VERSION:
            raise InputError(f"run scorer format {d.get('format_version')!r}; this code reads {FORMAT_VERSION}",
                             path="format_version")
        if list(d["message_features"]) != list(MESSAGE_FEATURES):
            raise InputError("the run scorer was fitted on other message features; refit it",
                             path="message_features")
        s = cls(**d.get("params", {}))
        s.message_weights_ = np.asarray(d["message_weights"], dtype=np.float64)
        s.zero_shot_ = ZeroShotRecipe.from_dict(d["zero_shot"])
        s.rule_stats_ = dict(d.get("rule_stats", {}))
        s.meta_ = dict(d.get("meta", {}))
        if d.get("head") is not None:  # a tenant head of before agent models (issue 20): not served any more
            raise InputError("this run scorer carries a tenant head (`triage retrain` before agent models); "
                             "tenant heads are no longer served: retrain the agent models", path="head")
        return s

    @classmethod
    def load(cls, path: Path | None = None) -> RunScorer:
        p = Path(path or ARTIFACT)
        try:
            return cls.from_dict(json.loads(p.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError) as exc:
            raise InputError(f"{p}: not a run scorer ({exc})", path=str(p)) from exc


__all__ = ["ARTIFACT", "ATTRIBUTION_FEATURES", "MAX_FALSE_ALARM_RATE", "PRIOR_RUNS", "rule_precision", "rule_stats", "Example", "RunScorer", "ScoredRun", "fit_message_model"]
