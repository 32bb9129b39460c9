"""``triage retrain``'s gate: grouped cross-validation of the agent model beside both cheap learners,
the learner to serve (the best measured), and its comparisons with the champion.

See :mod:`serve.services.retrain` (step 4) for the protocol.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from model.core.errors import RetrainRefused
from model.core.schema import Trace
from model.scoring.agent_registry import ModelVersion
from serve.services.retrain_plan import TOO_FEW_TASK_GROUPS, too_few_groups

#: A registered champion is compared paired on the runs labelled since it was trained when there
#: are at least this many of them (with both classes); else against its recorded estimate.
MIN_UNSEEN = 10
N_BOOT = 1000
#: The AUROC a challenger must beat to be served at all.
CHANCE = 0.5


def trace_hash(trace: Trace) -> str:
    """sha256 of the trace's content (labels excluded)."""
    d = trace.model_dump(mode="json", exclude={"labels"}, exclude_none=True)
    return hashlib.sha256(json.dumps(d, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


@dataclass
class Comparison:
    """The challenger against one other scorer of the same runs."""

    name: str
    challenger: float
    other: float
    interval: tuple[float, float] | None  # 95 % paired interval of challenger − other; None: unpaired
    runs: int
    note: str = ""
    strict: bool = True  # passed: above the other (strict), or not below it (the served learner's rivals)

    @property
    def diff(self) -> float:
        return self.challenger - self.other

    @property
    def passed(self) -> bool:
        return bool(self.challenger > self.other) if self.strict else bool(self.challenger >= self.other)

    def line(self) -> str:
        ci = "unpaired" if self.interval is None else f"[{self.interval[0]:+.3f}, {self.interval[1]:+.3f}]"
        note = f" ({self.note})" if self.note else ""
        return (f"vs {self.name}: AUROC {self.challenger:.3f} vs {self.other:.3f}, diff {self.diff:+.3f} {ci} "
                f"on {self.runs} runs{note}: {'passed' if self.passed else 'failed'}")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "challenger": self.challenger, "other": self.other, "diff": self.diff,
                "interval": None if self.interval is None else list(self.interval), "runs": self.runs,
                "paired": self.interval is not None, "passed": self.passed, "note": self.note}


@dataclass
class Gate:
    comparisons: list[Comparison] = field(default_factory=list)
    estimate: dict[str, Any] = field(default_factory=dict)
    #: the served learner's out-of-fold scores, draws × runs (NaN: not held out); not stored
    oof: Any = field(default=None, repr=False, compare=False)

    @property
    def promote(self) -> bool:
        return bool(self.comparisons) and all(c.passed for c in self.comparisons)

    def reason(self) -> str:
        failed = [c.name for c in self.comparisons if not c.passed]
        if not self.comparisons:
            return "nothing to compare"
        if failed:
            return f"not above {', '.join(failed)}"
        return "above " + ", ".join(c.name for c in self.comparisons)

    def to_dict(self) -> dict[str, Any]:
        return {"promote": self.promote, "reason": self.reason(), "comparisons": [c.to_dict() for c in self.comparisons],
                "estimate": self.estimate}


LEARNER_NAMES = {"agent": "agent model", "tfidf": "TF-IDF + logistic regression", "length": "length fit"}


def served_learner(aurocs: dict[str, float]) -> str:
    """The learner a retrain serves: the agent model when its grouped-CV AUROC is above both cheap
    learners', else the better cheap learner (TF-IDF on a tie)."""
    cheap = max(("tfidf", "length"), key=lambda m: (aurocs[m], m == "tfidf"))
    return "agent" if aurocs["agent"] > aurocs[cheap] else cheap


def gate(traces: Sequence[Trace], failed: Sequence[bool], groups: Sequence[str], prior: Sequence[float] | None,
         zero_shot: Sequence[float], config: Any, *, folds: int, draws: int, seed: int,
         champion: Any | None = None, champion_record: ModelVersion | None = None,
         seen: set[str] | None = None, cache: Any | None = None) -> Gate:
    """The grouped cross-validated estimate and the comparisons (see the module docstring): the learner
    to serve (:func:`served_learner`) against the champion, and beside the two other learners.
    ``folds`` is cut to the number of task groups. ``cache``: a
    :class:`~model.scoring.agentmodel.features.FeatureCache` the final fit shares (each run counted once).

    Raises :class:`~model.core.errors.RetrainRefused` (``too_few_task_groups``) when the runs form fewer
    than two task groups, or no grouped fold holds out runs of both classes while training on both."""
    from model.core.metrics import AurocUnit, auroc, group_bootstrap_interval
    from model.training.agentmodel.cv import CVData, cross_validate, draws_folds, summarise

    few = too_few_groups("", groups)
    if few is not None:
        raise RetrainRefused(few.code, few.message, path="groups")
    folds = min(folds, len(set(groups)))
    data = CVData.make(traces, failed, groups, (1.0,), prior, cache)
    report = cross_validate(traces, failed, groups, ks=(None,), fractions=(1.0,), config=config, prior=prior,
                            folds=folds, draws=draws, seed=seed, n_boot=N_BOOT, data=data)
    y = np.array([bool(f) for f in failed], float)
    zs = np.asarray(zero_shot, float)
    units = []
    learners = ("agent", "tfidf", "length")
    oof = {m: np.asarray(report["oof"][m], float) for m in learners}
    for di, draw in enumerate(draws_folds(groups, folds, draws, seed)):
        for te in draw:
            sc = {m: oof[m][di][te] for m in learners}
            if y[te].min() == y[te].max() or any(np.isnan(v).any() for v in sc.values()):
                continue
            units.append(AurocUnit.make(y[te], {**sc, "zero-shot": zs[te]}, [groups[i] for i in te]))
    if not units:
        raise RetrainRefused(TOO_FEW_TASK_GROUPS, f"no grouped fold of the {len(set(groups))} task groups holds out "
                             "failed and successful runs while training on both: label runs of more tasks",
                             path="groups")
    first = summarise(units, seed=seed, n_boot=N_BOOT, methods=("agent", "tfidf", "length"))
    served = served_learner({m: first[m]["auroc"] for m in learners})
    methods = (served, "zero-shot", *[m for m in learners if m != served])
    s = summarise(units, seed=seed, n_boot=N_BOOT, methods=methods)
    n = len(traces)
    est: dict[str, Any] = {m: {"auroc": s[m]["auroc"], "interval": s[m]["interval"]} for m in methods}
    est.update(folds=s["folds"], draws=draws, runs=n, failed=int(y.sum()), groups=len(set(groups)), served=served,
               cv_folds=folds)

    def paired(m: str, name: str, strict: bool = True) -> Comparison:
        d = s[f"{served}_minus_{m}"]
        return Comparison(name, s[served]["auroc"], s[m]["auroc"], (d["interval"][0], d["interval"][1]), n,
                          strict=strict)

    # a score that ranks this agent's runs backwards (or no better than a coin) is never served, whatever
    # the champion: a zero-shot score that points the wrong way on the agent is beaten by one that is
    # merely less wrong (seen on τ² telecom: 2 task groups, 0.370 against zero-shot's 0.176)
    comps = [Comparison("chance", s[served]["auroc"], CHANCE, None, n, "a score at or below it ranks runs no "
                        "better than a coin or backwards")]
    if champion is None:
        comps.append(paired("zero-shot", "champion (zero-shot)"))
    else:
        name = f"champion ({champion_record.version if champion_record else 'agent model'})"
        hashes = [trace_hash(t) for t in traces]
        unseen = np.array([h not in (seen or set()) for h in hashes])
        challenger_oof = oof[served][0]
        ok = unseen & ~np.isnan(challenger_oof)
        if ok.sum() >= MIN_UNSEEN and 0 < y[ok].sum() < ok.sum():
            idx = [int(i) for i in np.flatnonzero(ok)]
            theirs = np.array([champion.score(traces[i], prior=None if prior is None else prior[i]) for i in idx])
            mine = challenger_oof[idx]
            g = [groups[i] for i in idx]
            comps.append(Comparison(name, auroc(y[idx], mine), auroc(y[idx], theirs),
                                    group_bootstrap_interval(y[idx], mine, g, seed=seed, n_boot=N_BOOT,
                                                             baseline=theirs), int(ok.sum()),
                                    "the runs labelled since it was trained"))
        else:
            est_then = ((champion_record.summary.get("gate") or {}).get("estimate") or {}) if champion_record else {}
            recorded = est_then.get(str(est_then.get("served", "agent"))) or {}
            other = recorded.get("auroc")
            comps.append(Comparison(name, s[served]["auroc"], float(other) if other is not None else float("nan"),
                                    None, n, f"its recorded cross-validated AUROC; {int(ok.sum())} runs labelled "
                                    f"since it was trained (a paired comparison needs {MIN_UNSEEN})"))
    for m in learners:
        if m != served:  # the served learner is the best of the three by construction: shown, not a hurdle
            comps.append(paired(m, LEARNER_NAMES[m], strict=False))
    out = Gate(comps, est)
    out.oof = oof[served]
    return out


__all__ = ["LEARNER_NAMES", "MIN_UNSEEN", "N_BOOT", "Comparison", "Gate", "gate", "served_learner", "trace_hash"]
