"""The label model: LF votes → weak labels with a confidence.

Per failure kind, each candidate is a ``(trace, source_index)`` some LF voted for; every LF that
*covers* the kind votes on it (yes when it fired there, no when it did not). Two methods:

* ``majority``: the share of covering LFs that said yes;
* ``dawid_skene`` (default): a binary Dawid–Skene model per kind — each LF has a true-positive rate
  ``tpr`` and a true-negative rate ``tnr``; EM alternates between the posterior of each candidate
  and the LFs' rates (Beta(2, 1)-style smoothing keeps them away from 0 and 1). With fewer than
  ``min_candidates`` candidates for a kind, the starting rates are kept (no fit). This is what
  snorkel's LabelModel does for conditionally independent LFs, without the dependency.

A candidate whose posterior is at least ``threshold`` becomes a weak label with that confidence;
``review_band`` marks the ones worth a human look.

>>> lm = LabelModel(method="majority")
>>> from model.data.labelling.functions import Vote, lf_names
>>> from model.core.kinds import FailureKind
>>> lm.fit([[Vote("tool_error", FailureKind.TOOL_ERROR, 3, 3, 0.9)]])
LabelModel(method='majority')
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from model.core.errors import NotFittedError
from model.core.kinds import FailureKind
from model.data.labelling.functions import Vote, lf_names

#: Which kinds each LF can vote on (so that its silence counts as a "no" there).
COVERAGE: dict[str, tuple[FailureKind, ...]] = {
    "status_fields": (FailureKind.TIMEOUT, FailureKind.TOOL_ERROR, FailureKind.RATE_LIMITED),
    "text_patterns": (FailureKind.RATE_LIMITED, FailureKind.TIMEOUT, FailureKind.TOOL_ERROR, FailureKind.REFUSAL,
                      FailureKind.EMPTY_RESPONSE),
}


def coverage(lf: str) -> tuple[FailureKind, ...]:
    if lf in COVERAGE:
        return COVERAGE[lf]
    try:
        return (FailureKind(lf),)  # a rule LF is named after its kind
    except ValueError:
        return ()


@dataclass(frozen=True)
class WeakLabel:
    kind: FailureKind
    step: int
    source_index: int
    confidence: float
    votes: tuple[str, ...]


class LabelModel:
    """Combine LF votes per kind; see the module docstring.

    Parameters
    ----------
    method:
        ``"dawid_skene"`` or ``"majority"``.
    threshold:
        Posterior at or above which a candidate becomes a weak label.
    prior_tpr, prior_tnr:
        Starting rates of every LF (and the rates used when a kind has too few candidates).
    n_iter, min_candidates:
        EM iterations; the fewest candidates of a kind for which rates are fitted.
    """

    def __init__(self, *, method: str = "dawid_skene", threshold: float = 0.5, prior_tpr: float = 0.8,
                 prior_tnr: float = 0.7, n_iter: int = 20, min_candidates: int = 20) -> None:
        if method not in ("dawid_skene", "majority"):
            raise ValueError(f"method must be 'dawid_skene' or 'majority', got {method!r}")
        self.method = method
        self.threshold = threshold
        self.prior_tpr = prior_tpr
        self.prior_tnr = prior_tnr
        self.n_iter = n_iter
        self.min_candidates = min_candidates

    def __repr__(self) -> str:
        return f"LabelModel(method={self.method!r})"

    # candidates: per kind, a list of (trace no, source_index) -> {lf: yes?}
    @staticmethod
    def _candidates(
        votes_per_trace: list[list[Vote]],
    ) -> dict[FailureKind, dict[tuple[int, int], dict[str, bool]]]:
        # every LF that ran counts, also where it stayed silent
        lfs = sorted({v.lf for vs in votes_per_trace for v in vs} | set(lf_names()))
        out: dict[FailureKind, dict[tuple[int, int], dict[str, bool]]] = defaultdict(dict)
        for ti, vs in enumerate(votes_per_trace):
            yes = {(v.kind, v.source_index, v.lf) for v in vs}
            for v in vs:
                key = (ti, v.source_index)
                if key in out[v.kind]:
                    continue
                out[v.kind][key] = {lf: (v.kind, v.source_index, lf) in yes for lf in lfs if v.kind in coverage(lf)}
        return out

    def fit(self, votes_per_trace: list[list[Vote]]) -> LabelModel:
        """Fit each LF's rates per kind on the votes of many traces."""
        self.rates_: dict[str, dict[str, tuple[float, float]]] = {}
        self.prior_: dict[str, float] = {}
        if self.method == "majority":
            return self
        for kind, cands in self._candidates(votes_per_trace).items():
            lfs = sorted({lf for c in cands.values() for lf in c})
            rates = {lf: (self.prior_tpr, self.prior_tnr) for lf in lfs}
            prior = 0.5
            if len(cands) >= self.min_candidates:
                for _ in range(self.n_iter):
                    post = {k: self._posterior(c, rates, prior) for k, c in cands.items()}
                    prior = min(0.95, max(0.05, sum(post.values()) / len(post)))
                    for lf in lfs:
                        tp = sum(p for k, p in post.items() if cands[k].get(lf) is True)
                        pos = sum(p for k, p in post.items() if lf in cands[k])
                        tn = sum(1 - p for k, p in post.items() if cands[k].get(lf) is False)
                        neg = sum(1 - p for k, p in post.items() if lf in cands[k])
                        rates[lf] = ((tp + 2) / (pos + 3), (tn + 2) / (neg + 3))
            self.rates_[kind.value] = rates
            self.prior_[kind.value] = prior
        return self

    @staticmethod
    def _posterior(c: dict[str, bool], rates: dict[str, tuple[float, float]], prior: float) -> float:
        logit = math.log(prior / (1 - prior))
        for lf, said in c.items():
            tpr, tnr = rates[lf]
            logit += math.log(tpr / (1 - tnr)) if said else math.log((1 - tpr) / tnr)
        return 1 / (1 + math.exp(-max(-30.0, min(30.0, logit))))

    def predict(self, votes: list[Vote]) -> list[WeakLabel]:
        """Weak labels for one trace's votes (at the earliest step of each voted source_index)."""
        if not hasattr(self, "rates_"):
            raise NotFittedError("LabelModel is not fitted; call fit(votes_per_trace) first")
        out: list[WeakLabel] = []
        for kind, cands in self._candidates([votes]).items():
            for (_, src), c in cands.items():
                if self.method == "majority" or kind.value not in self.rates_:
                    p = sum(c.values()) / len(c) if c else 0.0
                    if self.method != "majority":
                        p = self._posterior(c, {lf: (self.prior_tpr, self.prior_tnr) for lf in c}, 0.5)
                else:
                    rates = self.rates_[kind.value]
                    p = self._posterior(c, {lf: rates.get(lf, (self.prior_tpr, self.prior_tnr)) for lf in c},
                                        self.prior_[kind.value])
                if p < self.threshold:
                    continue
                voters = tuple(sorted(lf for lf, said in c.items() if said))
                step = min(v.step for v in votes if v.kind is kind and v.source_index == src)
                out.append(WeakLabel(kind, step, src, round(p, 4), voters))
        return sorted(out, key=lambda w: (w.step, w.kind.value))

    def describe(self) -> dict[str, Any]:
        return {"method": self.method, "threshold": self.threshold,
                "rates": {k: {lf: [round(a, 3), round(b, 3)] for lf, (a, b) in v.items()}
                          for k, v in getattr(self, "rates_", {}).items()},
                "prior": {k: round(v, 3) for k, v in getattr(self, "prior_", {}).items()}}


__all__ = ["COVERAGE", "LabelModel", "WeakLabel", "coverage"]
