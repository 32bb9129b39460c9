"""Retraining from a tenant's labelled history: the challenger and the gate (``triage retrain``).

**What is trained.** The base data is every vendored real set's training part
(:func:`model.runscore.train.fixed_test` holds back the fixed test splits); the tenant's labelled
runs join it as one more set, ``tenant``. The challenger is a :class:`RunScorer` fitted on both (the
run model, its feature choice, the attribution's message model) plus a **tenant head**
(:mod:`model.runscore.head`): logistic regression over the run model's logit and the hashed text of
the run, the tenant's runs weighing ``tenant_weight`` times a base run (classes balanced per set).
Nothing heavy is trained: features are cached by content hash (:class:`FeatureCache`), the fits are
scipy L-BFGS on a few thousand rows.

**The gate** (:func:`gate`). The champion (the tenant's active model, or the shipped one) and the
challenger are scored on

* the **tenant slice**: whole tasks of the tenant's history held back from training (at least
  :data:`MIN_SLICE` failed and :data:`MIN_SLICE` successful runs, else the gate refuses), and
* the **fixed test splits** of each real set (never trained on by a shipped model),

AUROC with paired bootstrap intervals over tasks. It promotes only when the challenger's AUROC on
the tenant slice is higher **and** on no fixed split it is worse beyond the interval (the upper
end of the paired difference's 95 % interval below 0); otherwise it names the comparison that failed.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from model.errors import InputError
from model.realdata import RUN_LEVEL_SOURCES, RealRun
from model.schema import Trace

from .evaluate import _ci, _group_boot, prepare
from .head import TOKENS_VERSION, TenantHead, text_vector
from .model import FORMAT_VERSION, Example, RunScorer, auroc
from .train import fixed_test

#: The tenant slice must hold at least this many failed and this many successful runs.
MIN_SLICE = 10
#: The set name the tenant's runs train under.
TENANT_SOURCE = "tenant"
def _code_version() -> str:
    """A digest of the code an Example's content comes from (features, head tokens, rule detectors):
    the cache never serves features computed by other code."""
    here = Path(__file__).resolve().parent
    files = [here / "features.py", here / "head.py", here / "model.py",
             *sorted((here.parent / "detectors").glob("*.py"))]
    h = hashlib.sha256(f"f{FORMAT_VERSION}-t{TOKENS_VERSION}".encode())
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


#: Cache key version (see :func:`_code_version`).
CACHE_VERSION = _code_version()

Progress = Callable[[str, int, int], None]


def _noop(stage: str, done: int, total: int) -> None:
    return None


def trace_hash(trace: Trace) -> str:
    """sha256 of the trace's content (labels excluded: a relabelled run reuses its features)."""
    d = trace.model_dump(mode="json", exclude={"labels"}, exclude_none=True)
    return hashlib.sha256(json.dumps(d, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class FeatureCache:
    """Examples (features, rule findings, text vector) by content hash under ``folder``."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.hits = self.misses = 0

    def _path(self, key: str) -> Path | None:
        return None if self.folder is None else self.folder / key[:2] / f"{key}.pkl"

    def examples(self, runs: Sequence[RealRun], progress: Progress = _noop, stage: str = "features") -> list[Example]:
        """One :class:`Example` per run (``text`` set), computed once per content."""
        keys = [hashlib.sha256(f"{CACHE_VERSION}\x00{trace_hash(r.trace)}".encode()).hexdigest() for r in runs]
        out: list[Example | None] = [None] * len(runs)
        todo: list[int] = []
        for i, k in enumerate(keys):
            p = self._path(k)
            if p is not None and p.is_file():
                try:
                    with p.open("rb") as fh:  # our own cache, written below
                        out[i] = pickle.load(fh)  # noqa: S301
                    self.hits += 1
                    continue
                except (OSError, pickle.UnpicklingError, EOFError, AttributeError):
                    pass
            todo.append(i)
        self.misses += len(todo)
        progress(stage, len(runs) - len(todo), len(runs))
        if todo:
            base = len(runs) - len(todo)
            prepared = prepare([runs[i] for i in todo], lambda d, t: progress(stage, base + d, len(runs)))
            for i, pr in zip(todo, prepared, strict=True):
                ex = pr.example
                ex.text = text_vector(runs[i].trace)
                out[i] = ex
                p = self._path(keys[i])
                if p is not None:
                    p.parent.mkdir(parents=True, exist_ok=True)
                    tmp = p.with_suffix(".tmp")
                    with tmp.open("wb") as fh:
                        pickle.dump(ex, fh, protocol=pickle.HIGHEST_PROTOCOL)
                    tmp.replace(p)
        result = []
        for i, e in enumerate(out):
            assert e is not None
            # the label is the run's, not the cached content's
            labels = runs[i].trace.labels
            assert labels is not None and labels.failed is not None
            fail = labels.failures[0].source_index if labels.failures else None
            e.source, e.group, e.failed, e.fail_source_index = runs[i].source, runs[i].group, bool(labels.failed), fail
            result.append(e)
        return result


def split_slice(tenant: Sequence[Example], *, share: float, seed: int = 0,
                minimum: int = MIN_SLICE) -> tuple[list[int], list[int]]:
    """(training rows, slice rows) of the tenant's runs: whole tasks, chosen in a seeded order to hold
    ``minimum`` of each outcome, then up to ``share`` of the runs, never more than half the runs.
    When half the runs cannot hold ``minimum`` of each, nothing is held back: the gate will refuse
    (it cannot decide), and every run trains the challenger, which is registered, not promoted."""
    groups: dict[str, list[int]] = {}
    for i, e in enumerate(tenant):
        groups.setdefault(e.group, []).append(i)
    order = sorted(groups, key=lambda g: hashlib.sha256(f"{seed}\x00{g}".encode()).hexdigest())

    def draw(need: int) -> list[int]:
        # whole tasks, each time the one (in the seeded order on ties) that covers most of what the
        # slice still lacks of either outcome, within half the runs; then more in order up to ``share``.
        # The choice reads the labels only, never a model's scores, so it favours neither model.
        held: list[int] = []
        left = list(order)
        while left:
            n_fail = sum(tenant[i].failed for i in held)
            n_ok = len(held) - n_fail
            fits = [g for g in left if len(held) + len(groups[g]) <= len(tenant) / 2]
            if not fits or (n_fail >= need and n_ok >= need and len(held) >= share * len(tenant)):
                break

            def covers(g: str, n_fail: int = n_fail, n_ok: int = n_ok) -> int:
                f = sum(tenant[i].failed for i in groups[g])
                return min(f, max(0, need - n_fail)) + min(len(groups[g]) - f, max(0, need - n_ok))

            best = max(fits, key=lambda g: (covers(g), -left.index(g)))
            if covers(best) == 0 and (n_fail < need or n_ok < need):
                break  # what is left cannot help
            if covers(best) == 0:
                best = fits[0]
            held += groups[best]
            left.remove(best)
        return held

    held = draw(minimum)
    n_fail = sum(tenant[i].failed for i in held)
    if n_fail < minimum or len(held) - n_fail < minimum:
        held = []
    held_set = set(held)
    return [i for i in range(len(tenant)) if i not in held_set], sorted(held)


def _weights(ex: Sequence[Example], tenant_weight: float) -> np.ndarray:
    """Each set weighs the same (the tenant's ``tenant_weight`` times more); classes balanced within."""
    src = np.array([e.source for e in ex])
    y = np.array([e.failed for e in ex])
    w = np.zeros(len(ex))
    for s in set(src.tolist()):
        for c in (False, True):
            m = (src == s) & (y == c)
            if m.any():
                w[m] = (tenant_weight if s == TENANT_SOURCE else 1.0) / m.sum()
    return w


def fit_challenger(base: Sequence[Example], tenant: Sequence[Example], params: dict[str, Any], *,
                   tenant_weight: float = 5.0, l2_head: float = 1.0) -> RunScorer:
    """The run scorer refitted on ``base`` + ``tenant`` runs, with a tenant head (see the module doc)."""
    if not tenant:
        raise InputError("no labelled runs of the tenant to train on", path="tenant")
    for e in tenant:
        e.source = TENANT_SOURCE
    ex = list(base) + list(tenant)
    if any(e.text is None for e in ex):
        raise InputError("every example needs its text vector (FeatureCache.examples sets it)", path="examples")
    # in domain the attribution's content cues help (τ-airline, 100 tenant runs: exact 0.25 with the
    # positions only, 0.39 with every message feature); across agents they do not (model.py)
    scorer = RunScorer(**{**params, "attribution": "all"}).fit(ex)
    L = np.array([scorer.base_logit(e) for e in ex])
    H = np.stack([e.text for e in ex if e.text is not None])
    y = np.array([float(e.failed) for e in ex])
    mask = np.array([e.source == TENANT_SOURCE for e in ex])
    head = TenantHead.fit(H, L, y, _weights(ex, tenant_weight), l2=l2_head,
                          target_false_alarm=scorer.target_false_alarm, tenant_mask=mask,
                          meta={"tenant_runs": len(tenant), "tenant_failed": int(sum(e.failed for e in tenant)),
                                "base_runs": len(base), "tenant_weight": tenant_weight, "l2": l2_head})
    head.threshold, how = _oof_threshold(H, L, y, _weights(ex, tenant_weight), mask, [e.group for e in ex],
                                         l2_head, scorer.target_false_alarm, head.threshold)
    head.meta["threshold_from"] = how
    scorer.set_head(head)
    return scorer


def _oof_threshold(H: np.ndarray, L: np.ndarray, y: np.ndarray, w: np.ndarray, tenant: np.ndarray,
                   groups: Sequence[str], l2: float, target: float, fallback: float,
                   folds: int = 3) -> tuple[float, str]:
    """The operating point from out-of-fold probabilities of the tenant's successful runs.

    The head fits its own training runs too well: a threshold on their in-sample probabilities gave
    62-82 % false alarms on unseen runs of the agent (bench/retrain.py, K = 25-50). Here the tenant's
    tasks are split into ``folds``; each fold's runs are scored by a head fitted without them (the
    base runs stay in every fit), and the threshold is the (1 − target) quantile of the successful
    runs' out-of-fold probabilities. Fewer than 5 successful tenant runs: ``fallback``.
    """
    idx = np.flatnonzero(tenant)
    if int((y[idx] == 0).sum()) < 5:
        return fallback, "training runs (too few successful tenant runs for out-of-fold)"
    keys = sorted({groups[int(i)] for i in idx}, key=lambda g: hashlib.sha256(g.encode()).hexdigest())
    fold_of = {g: k % folds for k, g in enumerate(keys)}
    oof = np.full(len(y), np.nan)
    for f in range(folds):
        out = np.array([tenant[i] and fold_of[groups[i]] == f for i in range(len(y))])
        if not out.any() or not (tenant & ~out).any():
            continue
        h = TenantHead.fit(H[~out], L[~out], y[~out], w[~out], l2=l2)
        oof[out] = h.probability(H[out], L[out])
    ok = idx[(y[idx] == 0) & ~np.isnan(oof[idx])]
    if len(ok) < 5:
        return fallback, "training runs (out-of-fold left too few)"
    thr = float(min(1.0, np.quantile(oof[ok], 1 - target, method="higher") + 1e-6))
    return thr, f"out-of-fold ({folds} folds by task, {len(ok)} successful tenant runs)"


# ---- the gate ---------------------------------------------------------------------------------


@dataclass
class Comparison:
    """Champion vs challenger on one set of runs."""

    name: str
    runs: int
    failed: int
    champion: float
    challenger: float
    diff: float
    ci: list[float]
    passed: bool
    rule: str

    def line(self) -> str:
        mark = "ok  " if self.passed else "FAIL"
        return (f"{mark} {self.name:<24} {self.runs:>4} runs ({self.failed} failed): AUROC champion "
                f"{self.champion:.3f}, challenger {self.challenger:.3f}, diff {self.diff:+.3f} "
                f"[{self.ci[0]:+.3f}, {self.ci[1]:+.3f}]  ({self.rule})")


@dataclass
class GateResult:
    promote: bool
    comparisons: list[Comparison] = field(default_factory=list)
    refused: str | None = None      # why the gate could not decide (too small a slice)

    @property
    def failed(self) -> list[Comparison]:
        return [c for c in self.comparisons if not c.passed]

    def reason(self) -> str:
        if self.refused:
            return self.refused
        if self.promote:
            return "the challenger is better on the tenant slice and not worse on any fixed split"
        return "; ".join(f"{c.name}: {c.rule} failed (diff {c.diff:+.3f} [{c.ci[0]:+.3f}, {c.ci[1]:+.3f}])"
                         for c in self.failed)

    def to_dict(self) -> dict[str, Any]:
        return {"promote": self.promote, "refused": self.refused, "reason": self.reason(),
                "comparisons": [vars(c) for c in self.comparisons]}


def probabilities(scorer: RunScorer, ex: Sequence[Example]) -> np.ndarray:
    return np.array([scorer.score_example(e)[0] for e in ex])


def compare(name: str, champion: RunScorer, challenger: RunScorer, ex: Sequence[Example], *, tenant: bool,
            seed: int = 0, n_boot: int = 1000) -> Comparison:
    """AUROCs and the paired bootstrap interval (over tasks) of challenger − champion on ``ex``."""
    y = np.array([int(e.failed) for e in ex])
    a, b = probabilities(challenger, ex), probabilities(champion, ex)
    boots = _group_boot([e.group for e in ex], np.random.default_rng(seed), n_boot)
    diff = auroc(y, a) - auroc(y, b)
    ci = _ci([auroc(y[i], a[i]) - auroc(y[i], b[i]) for i in boots])
    if tenant:
        passed, rule = diff > 0, "better on the tenant slice"
    else:
        passed, rule = not (ci[1] < 0), "not worse beyond the interval"
    return Comparison(name, len(ex), int(y.sum()), round(auroc(y, b), 4), round(auroc(y, a), 4), round(diff, 4),
                      [float(x) for x in ci], bool(passed), rule)


def gate(champion: RunScorer, challenger: RunScorer, tenant_slice: Sequence[Example],
         fixed: Mapping[str, Sequence[Example]], *, seed: int = 0, minimum: int = MIN_SLICE) -> GateResult:
    """Promote or keep the champion (see the module docstring)."""
    n_fail = sum(e.failed for e in tenant_slice)
    n_ok = len(tenant_slice) - n_fail
    if n_fail < minimum or n_ok < minimum:
        return GateResult(False, refused=(
            f"the gate needs a slice of at least {minimum} failed and {minimum} successful runs held back, in at "
            f"most half of the tenant's labelled runs; it has {n_fail} failed and {n_ok} successful held back. "
            "The challenger trained on every labelled run and is registered, not promoted: label more runs "
            "(POST /v1/traces/{id}/labels) and retrain, or promote it yourself (triage model promote V)"))
    comps = [compare("tenant slice", champion, challenger, tenant_slice, tenant=True, seed=seed)]
    for name, ex in fixed.items():
        if 0 < sum(e.failed for e in ex) < len(ex):
            comps.append(compare(f"fixed split {name}", champion, challenger, ex, tenant=False, seed=seed))
    return GateResult(all(c.passed for c in comps), comps)


def fixed_splits(base_all: Sequence[Example], exclude: Sequence[str] = ()) -> dict[str, list[Example]]:
    """The fixed test split of every run-level real set (not in ``exclude``)."""
    return {s: [e for e in base_all if e.source == s and fixed_test(e.source, e.group)]
            for s in RUN_LEVEL_SOURCES if s not in exclude}


def base_training(base_all: Sequence[Example], exclude: Sequence[str] = ()) -> list[Example]:
    """The training part of every real set (not in ``exclude``)."""
    return [e for e in base_all if e.source not in exclude and not fixed_test(e.source, e.group)]


__all__ = ["MIN_SLICE", "TENANT_SOURCE", "Comparison", "FeatureCache", "GateResult", "base_training", "compare",
           "fit_challenger", "fixed_splits", "gate", "probabilities", "split_slice", "trace_hash"]
