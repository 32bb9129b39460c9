"""The zero-shot ``failure_probability``: evidence that transfers across agents, never pointing backwards.

A run scorer trained on other agents takes a coin-toss direction on a new one (issue 31: AUROC
0.31–0.60 on six unseen agents). This recipe uses only what reads the same on any agent, and
lets each piece only *raise* the probability:

* **the prior** ``prior_``: the training sets' failure rate (each set weighted equally);
* **rule failures** (and trusted step-classifier kinds): a run whose detectors raise a failure
  gets the highest such failure's *measured* confidence, P(run failed | the rule fired) on the
  training sets (:meth:`model.scoring.runscore.model.RunScorer.rule_confidence`; a demoted rule
  only signals). A run without one starts from ``base_``, the training sets' failure rate among
  the runs no rule flagged;
* **a continuous, direction-safe component**: the mean of the evidence features
  (:data:`EVIDENCE_FEATURES`: the step classifier's highest probability of each kind over the
  agent's steps, the strongest rule signal) that kept their direction (AUROC ≥ 0.5 − ``tolerance``,
  above 0.5 on average) on **every** training set, centred on its training mean and added to the
  logit with the small weight ``delta``: a tie-breaker among the runs the rules leave equal, too
  small to move a run across the operating point by itself. When no classifier kind passes, the
  one whose worst training set is best (maximin) is kept if it is above 0.5 on average: without a
  continuous part the rules alone tie most runs at one score.

``p = σ(logit(q) + delta · (C − c̄))`` with ``q`` the rule part. A feature the run lacks (no
classifier ran, or coverage says the agent's text was not recorded: the classifier read placeholders,
:func:`model.diagnosis.diagnoser.zero_shot_inputs`) counts as its training mean. Every weight is non-negative: a
feature can only raise the probability. The operating point ``threshold_`` is at or above both
the training sets' (1 − target) quantile of successful runs and the highest value the continuous
part alone can reach, so the probability raises a failure only with a rule's evidence behind it.

>>> r = ZeroShotRecipe(features=["clf:hallucination"], prior=0.4, base=0.35, centre=0.2, delta=0.2,
...                    threshold=0.9)
>>> round(r.probability(None, {"clf:hallucination": 0.2}), 4), r.probability(0.9, {}) > 0.85
(0.35, True)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from model.core.findings import Finding
from model.core.metrics import auroc
from model.core.schema import StepKind, Trace
from model.scoring.classifier.gate import REPORTED_KINDS
from model.scoring.runscore.features import RUN_FEATURES

#: The recipe's name: in the artefact, the ``failure_probability`` basis and the retrain's cache key.
RECIPE = "zero-shot-evidence-1"

#: The step kinds whose classifier scores count (the agent's own steps).
AGENT_STEP_KINDS = frozenset({StepKind.LLM_OUTPUT, StepKind.FINAL_OUTPUT, StepKind.TOOL_CALL, StepKind.LLM_REASONING})

_REPORTED = frozenset(k.value for k in REPORTED_KINDS)

#: Candidate evidence features, each in [0, 1] and "higher = more failure evidence".
EVIDENCE_FEATURES: tuple[str, ...] = (*(f"clf:{k.value}" for k in REPORTED_KINDS), "signal")

#: The old run scorer's features (:data:`model.scoring.runscore.features.RUN_FEATURES`, run length left
#: out), as candidates only when ``RunScorer(run_features=True)``: leave-one-source-out decides
#: whether they enter (``reports/real.md``). Counts are squashed to [0, 1] as ``x / (1 + x)``.
RUN_EVIDENCE: tuple[str, ...] = tuple(f"run:{n}" for n in RUN_FEATURES[1:]
                                      if n not in ("messages_log", "calls_log", "user_turns_log"))

_RUN_COUNTS = frozenset({"run:final_novel_numbers", "run:errors_passed_over"})  # log1p counts; the rest are shares

#: Detectors whose findings are not a trace's own evidence (streams, the run scorer itself).
NOT_EVIDENCE = frozenset({"runscore", "cusum", "stream", "degradation"})
_NOT_SIGNALS = NOT_EVIDENCE | {"classifier"}  # the classifier's part is its maxima, not its signals


def classifier_maxima(trace: Trace, probs: np.ndarray, labels: Sequence[str], start: int = 0) -> dict[str, float]:
    """Per reported kind, the classifier's highest probability over the agent's steps (0 without one).

    ``probs`` holds the rows of steps ``start, start + 1, …`` (the classifier's ``score_trace``)."""
    steps = trace.steps
    rows = [r for r in range(probs.shape[0]) if steps[start + r].kind in AGENT_STEP_KINDS]
    cols = [j for j, label in enumerate(labels) if label in _REPORTED]
    if not rows:
        return {labels[j]: 0.0 for j in cols}
    top = probs[rows][:, cols].max(axis=0).tolist()
    return {labels[j]: round(v, 4) for j, v in zip(cols, top, strict=True)}


def evidence(signals: Iterable[Finding | tuple[str, float]], maxima: Mapping[str, float] | None,
             threshold: float = 0.5) -> dict[str, float]:
    """The evidence features of one run: ``clf:<kind>`` from ``maxima`` (absent when the classifier
    did not run) and ``signal`` (the strongest rule signal's confidence over ``threshold``, at most 1)."""
    out = {f"clf:{k}": float(v) for k, v in (maxima or {}).items()}
    confs = [s.confidence if isinstance(s, Finding) else float(s[1]) for s in signals
             if (s.detector if isinstance(s, Finding) else s[0]) not in _NOT_SIGNALS]
    out["signal"] = min(1.0, max(confs, default=0.0) / threshold)
    return out


def run_evidence(run: np.ndarray) -> dict[str, float]:
    """:data:`RUN_EVIDENCE` of a run's feature vector (:func:`model.scoring.runscore.features.run_features`)."""
    out = {}
    for name in RUN_EVIDENCE:
        x = max(0.0, float(run[RUN_FEATURES.index(name[4:])]))
        out[name] = round(x / (1.0 + x) if name in _RUN_COUNTS else min(1.0, x), 6)
    return out


def _logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


@dataclass
class ZeroShotRecipe:
    """The fitted recipe (see the module docstring); :meth:`fit` builds one from labelled runs."""

    features: list[str] = field(default_factory=list)
    prior: float = 0.5
    base: float = 0.5
    centre: float = 0.0
    delta: float = 0.2
    threshold: float = 1.0
    directions: dict[str, list[float]] = field(default_factory=dict)
    recipe: str = RECIPE

    def continuous(self, ev: Mapping[str, float]) -> float:
        """The continuous part ``C``: the mean of the kept features (a missing one counts as its centre)."""
        if not self.features:
            return self.centre
        # np.mean's own arithmetic (its float64 sum, then ÷ n) without its wrapper's cost
        values = np.asarray([ev.get(f, self.centre) for f in self.features], dtype=np.float64)
        return float(np.add.reduce(values)) / len(values)

    def probability(self, rule_confidence: float | None, ev: Mapping[str, float]) -> float:
        """``failure_probability`` from the rule part (the highest measured failure confidence, ``None``
        without a failure) and the run's evidence features."""
        q = self.base if rule_confidence is None else max(self.base, rule_confidence)
        z = _logit(q) + self.delta * (self.continuous(ev) - self.centre)
        return 1.0 / (1.0 + math.exp(-z))

    @classmethod
    def fit(cls, sets: Sequence[str], source: Sequence[str], failed: Sequence[bool],
            rule_part: Sequence[float | None], evs: Sequence[Mapping[str, float]], *, delta: float,
            tolerance: float, target_false_alarm: float,
            candidates: Sequence[str] = EVIDENCE_FEATURES) -> ZeroShotRecipe:
        """Fit on labelled runs of ``sets`` (each with both outcomes): ``rule_part`` per run as
        :meth:`probability` takes it, ``evs`` its evidence features."""
        src = np.asarray(source)
        y = np.asarray(failed, dtype=float)
        fired = np.array([q is not None for q in rule_part])
        prior = float(np.mean([y[src == s].mean() for s in sets]))
        quiet = [y[(src == s) & ~fired].mean() for s in sets if ((src == s) & ~fired).any()]
        base = float(np.mean(quiet)) if quiet else prior
        keep, directions = [], {}
        for name in candidates:
            col = np.array([e.get(name, np.nan) for e in evs], dtype=float)
            aucs = [auroc(y[m], col[m]) for s in sets if (m := (src == s) & ~np.isnan(col)).any()
                    and 0 < y[m].sum() < m.sum()]
            if len(aucs) < len(sets):
                continue  # not measured on every training set
            directions[name] = [round(a, 4) for a in aucs]
            if min(aucs) >= 0.5 - tolerance and float(np.mean(aucs)) > 0.5:
                keep.append(name)
        continuous = [n for n in directions if n.startswith("clf:")]
        if continuous and not any(n.startswith("clf:") for n in keep):
            # no classifier kind kept its direction within the tolerance: the one whose worst set is
            # best (maximin) still breaks the rules' ties, if it helps on average
            best = max(continuous, key=lambda n: (min(directions[n]), float(np.mean(directions[n]))))
            if float(np.mean(directions[best])) > 0.5:
                keep.append(best)
        r = cls(features=keep, prior=round(prior, 6), base=round(base, 6), delta=delta, directions=directions)
        if keep:
            c = np.array([r.continuous(e) for e in evs])
            r.centre = round(float(np.mean([c[src == s].mean() for s in sets])), 6)
        p = np.array([r.probability(q, e) for q, e in zip(rule_part, evs, strict=True)])
        quant = max(float(np.quantile(p[(src == s) & (y == 0)], 1 - target_false_alarm, method="higher"))
                    for s in sets)
        ceiling = r.probability(None, dict.fromkeys(keep, 1.0))  # the continuous part alone, at its highest
        r.threshold = round(min(1.0, max(quant, ceiling) + 1e-6), 6)
        return r

    def to_dict(self) -> dict[str, Any]:
        return {"recipe": self.recipe, "features": list(self.features), "prior": self.prior, "base": self.base,
                "centre": self.centre, "delta": self.delta, "threshold": self.threshold,
                "directions": self.directions}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ZeroShotRecipe:
        unknown = [f for f in d.get("features", []) if f not in (*EVIDENCE_FEATURES, *RUN_EVIDENCE)]
        if unknown or d.get("recipe") != RECIPE:
            from model.core.errors import InputError

            raise InputError(f"zero-shot recipe {d.get('recipe')!r} with features {unknown}; this code reads "
                             f"{RECIPE}: refit the run scorer", path="zero_shot")
        return cls(features=list(d["features"]), prior=float(d["prior"]), base=float(d["base"]),
                   centre=float(d["centre"]), delta=float(d["delta"]), threshold=float(d["threshold"]),
                   directions=dict(d.get("directions", {})))


__all__ = ["AGENT_STEP_KINDS", "EVIDENCE_FEATURES", "RECIPE", "RUN_EVIDENCE", "ZeroShotRecipe", "classifier_maxima",
           "evidence", "run_evidence"]
