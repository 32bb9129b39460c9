"""The real-run evaluation that decides: leave-one-source-out, with intervals, beside baselines.

``triage evaluate --real`` (and the DVC stage ``evaluate_real``) runs :func:`evaluate_real` and
writes ``reports/real.json``, ``reports/real.md`` and the figures under ``reports/real-figures/``
(:mod:`model.training.runscore.report`).

For each real set S the run scorer is **fitted without S** (models, feature choice, calibration
and operating point) and scored on S — what a new user's unseen agent gets:

* run level (the sets with both outcomes): AUROC of ``failure_probability`` with a bootstrap 95 %
  interval over S's task groups, beside the run-length baselines (messages, tool calls,
  characters) and the paired-bootstrap interval of the difference to the best of them; at the
  operating point, false alarms on successful runs and recall on failed ones — of the probability
  alone and of the full verdict (``healthy`` false: a rule's failure **or** the probability);
  reliability diagram and ECE;
* localisation (the sets that say where): exact, ±1, ±3 on ``source_index`` beside every fixed
  position (k-th message, k-th agent message, the last agent message), the middle, uniform, and
  the position prior learned on the training folds, with the paired interval of the difference
  to the best of them; for multi-agent logs, the blamed agent;
* rules: per detector, how often it raises a failure on successful vs failed runs of each set,
  and P(run failed | it fired);
* the step classifier, zero-shot (issue 20, item 7): per kind, the runs it fired on (some step at
  ``p ≥`` its threshold) of each set, P(run failed | it fired) over the sets with successful runs
  with its Wilson bound, and the frozen look-alikes it fires on: the evidence
  :func:`model.training.classifier.gate.decide` reads (``classifier_gate`` in the report; the DVC stage
  ``gate`` writes ``gate.json`` from it). In the verdict above, a held-out set's classifier
  failures are those of a gate decided without that set's family.

A source is held out with its family (:func:`model.data.realdata.loso_family`: τ-bench airline and τ²'s
airline scenarios are one): the scorer that judges a set never saw a set of its family.

A second table fits in-domain (folds grouped by task within S) for comparison: what a user gets
once the agent's own labelled history trains the scorer (the retraining issue's path).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from model.core.metrics import auroc, ece, group_bootstrap, percentile_interval, reliability_bins
from model.data.realdata import RUN_LEVEL_SOURCES, SOURCES, RealRun, first_groups, load_all, loso_family
from model.scoring.runscore.model import Example, RunScorer
from model.training.runscore.report import write_reports
from model.training.semantic import wilson

LOCALISATION_SOURCES = ("whowhen", "agentprocessbench", "tau_airline")


@dataclass
class Prepared:
    run: RealRun
    example: Example
    rule_failures: list[tuple[str, str, int | None]]  # (detector, kind, source_index) at ≥ threshold
    rule_signals: list[tuple[str, str]]
    characters: int
    calls: int
    #: each rule's highest raw confidence among its failures (the prior of its estimate)
    rule_confidences: dict[str, float] = field(default_factory=dict)
    #: the step classifier's kinds that fired on some step (``p ≥`` threshold), before any gate
    classifier_kinds: frozenset[str] = frozenset()


def prepare(runs: Sequence[RealRun], progress: Callable[[int, int], None] | None = None, *,
            classifier: bool = False) -> list[Prepared]:
    """Features and the detectors' findings of every run (the slow part, done once).

    ``classifier=True`` runs the shipped classifier beside the rules, as the service does; its
    kinds that fire are kept apart (``classifier_kinds``, ungated): the evaluation gates them.
    """
    from model.core.coverage import assess
    from model.diagnosis.diagnoser import DEFAULT_THRESHOLDS, Diagnoser, zero_shot_inputs

    rules = Diagnoser.with_shipped_models(classifier=classifier, runscore=False)
    out = []
    for n, r in enumerate(runs):
        all_found, maxima = rules.scored_findings(r.trace)
        clf = frozenset(f.kind.value for f in all_found if f.detector == "classifier"
                        and f.details.get("probability", 0.0) >= f.details.get("threshold", 1.0))
        found = [f for f in all_found if f.detector != "classifier"]
        fails = [(f.detector, f.kind.value, f.source_index) for f in found
                 if f.confidence >= DEFAULT_THRESHOLDS[f.kind]]
        conf: dict[str, float] = {}
        for f in found:
            if f.confidence >= DEFAULT_THRESHOLDS[f.kind]:
                conf[f.detector] = max(conf.get(f.detector, 0.0), f.confidence)
        raw_signals = [f for f in found if f.confidence < DEFAULT_THRESHOLDS[f.kind]]
        # the evidence features as the diagnosis reads them (the classifier's left out without content)
        _, ev = zero_shot_inputs(found, [], [], maxima, assess(r.trace)[0])
        ex = Example.from_trace(r.trace, r.source, r.group,
                                tuple(d for d, _, _ in fails if d not in ("classifier", "runscore")), conf, ev)
        sigs = [(f.detector, f.kind.value) for f in raw_signals]
        chars = sum(len(s.content or "") for s in r.trace.steps)
        calls = sum(1 for s in r.trace.steps if s.kind.value == "tool_call")
        out.append(Prepared(r, ex, fails, sigs, chars, calls, conf, clf))
        if progress is not None:
            progress(n + 1, len(runs))
    return out


# ---- statistics ---------------------------------------------------------------------------------


def _ci(values: Sequence[float]) -> list[float]:
    return [round(v, 4) for v in percentile_interval(values)]


def auroc_with_ci(y: np.ndarray, s: np.ndarray, boots: list[np.ndarray]) -> dict[str, Any]:
    return {"auroc": round(auroc(y, s), 4), "ci": _ci([auroc(y[b], s[b]) for b in boots])}


def paired_diff(y: np.ndarray, a: np.ndarray, b: np.ndarray, boots: list[np.ndarray]) -> dict[str, Any]:
    """AUROC(a) − AUROC(b) with its paired bootstrap interval (same resamples for both)."""
    return {"diff": round(auroc(y, a) - auroc(y, b), 4),
            "ci": _ci([auroc(y[i], a[i]) - auroc(y[i], b[i]) for i in boots])}


def rate_ci(hits: int, n: int) -> dict[str, Any]:
    """A rate with its Wilson 95 % interval (:func:`model.training.semantic.wilson`)."""
    if n == 0:
        return {"rate": None, "n": 0, "ci": [None, None]}
    lo, hi = wilson(hits, n, z=1.96)
    return {"rate": round(hits / n, 4), "n": n, "hits": hits, "ci": [round(lo, 4), round(hi, 4)]}


def relative_thresholds(probs: np.ndarray, groups: Sequence[str], false_alarm: float) -> np.ndarray:
    """Per run, the (1 − ``false_alarm``) quantile of the probabilities of runs of other groups."""
    g = np.asarray(groups)
    out = np.empty(len(probs))
    for key in set(groups):
        m = g == key
        out[m] = float(np.nextafter(np.quantile(probs[~m], 1 - false_alarm), 2.0)) if (~m).any() else 1.0
    return out


# ---- localisation baselines -----------------------------------------------------------------


def _positions(e: Example) -> list[int]:
    return [u.source_index for u in e.units]


def localisation_baselines(test: Sequence[Example], train: Sequence[Example]) -> dict[str, list[int]]:
    """Predicted ``source_index`` per test run for every baseline."""
    preds: dict[str, list[int]] = {}
    for k in range(10):
        preds[f"message {k}"] = [min(k, e.messages - 1) for e in test]
        preds[f"agent message {k}"] = [_positions(e)[min(k, len(e.units) - 1)] for e in test]
    preds["last agent message"] = [_positions(e)[-1] for e in test]
    preds["middle agent message"] = [_positions(e)[len(e.units) // 2] for e in test]
    # the position prior learned on the training folds: the most likely relative position
    rel = [e.target / max(1, len(e.units) - 1) for e in train if e.target is not None]
    hist = np.histogram(rel, bins=10, range=(0, 1))[0] if rel else np.ones(10)
    centre = (int(np.argmax(hist)) + 0.5) / 10
    preds["position prior (training folds)"] = [
        _positions(e)[int(round(centre * (len(e.units) - 1)))] for e in test]
    return preds


def _loc_rates(pred: Sequence[int], truth: Sequence[int]) -> dict[str, float]:
    p, t = np.asarray(pred), np.asarray(truth)
    return {"exact": float(np.mean(p == t)), "within_1": float(np.mean(np.abs(p - t) <= 1)),
            "within_3": float(np.mean(np.abs(p - t) <= 3))}


def _uniform(test: Sequence[Example], truth: Sequence[int]) -> dict[str, float]:
    """Expected rates of a uniform pick among the agent messages (exact, not sampled)."""
    ex, w1, w3 = [], [], []
    for e, t in zip(test, truth, strict=True):
        pos = np.asarray(_positions(e))
        ex.append(np.mean(pos == t))
        w1.append(np.mean(np.abs(pos - t) <= 1))
        w3.append(np.mean(np.abs(pos - t) <= 3))
    return {"exact": float(np.mean(ex)), "within_1": float(np.mean(w1)), "within_3": float(np.mean(w3))}


# ---- the evaluation ---------------------------------------------------------------------------


def _fit(train: Sequence[Example], params: dict[str, Any]) -> RunScorer:
    return RunScorer(**params).fit(train)


@dataclass
class LosoFit:
    """The scorer fitted without one set, and what it says of that set's runs."""

    source: str
    scorer: RunScorer
    test_idx: list[int]                         # into ``prepared``
    scored: list[tuple[float, np.ndarray]]      # (failure probability, message probabilities) per test run


def loso_fits(prepared: Sequence[Prepared], params: dict[str, Any] | None = None) -> Iterator[LosoFit]:
    """For each set present (in :data:`SOURCES` order): fit without its family, score it."""
    for S in [s for s in SOURCES if any(p.run.source == s for p in prepared)]:
        test_idx = [i for i, p in enumerate(prepared) if p.run.source == S]
        fam = loso_family(S)
        scorer = _fit([p.example for p in prepared if loso_family(p.run.source) != fam], dict(params or {}))
        yield LosoFit(S, scorer, test_idx, [scorer.score_example(prepared[i].example) for i in test_idx])


def classifier_evidence(prepared: Sequence[Prepared]) -> dict[str, dict[str, int]]:
    """Per step-classifier kind: the runs it fired on and, of those, the failed ones, over the
    prepared runs of the sets with successful runs (:data:`RUN_LEVEL_SOURCES`)."""
    out: dict[str, dict[str, int]] = {}
    for p in prepared:
        if p.run.source not in RUN_LEVEL_SOURCES:
            continue
        for k in p.classifier_kinds:
            row = out.setdefault(k, {"fired": 0, "failed": 0})
            row["fired"] += 1
            row["failed"] += int(p.run.failed)
    return dict(sorted(out.items()))


def lookalike_fires(path: Path, classifier_path: Path | None = None) -> dict[str, Any]:
    """The frozen healthy look-alikes (``lookalike_of`` set) on which each step-classifier kind
    fires (some step at ``p ≥`` its threshold, before any gate): ``{"n", "fired": kind → cases}``."""
    from model.detectors.classifier import ClassifierDetector
    from model.importers import load_trace
    from model.training.semantic import load_cases

    det = ClassifierDetector(path=classifier_path, signal_ratio=1.0)
    if not det.available():
        return {"n": 0, "fired": {}}
    alikes = [c for c in load_cases(path) if c.lookalike_of is not None]
    fired: Counter[str] = Counter()
    for c in alikes:
        found = det.inspect(load_trace(c.trace))
        fired.update({f.kind.value for f in found if f.details["probability"] >= f.details["threshold"]})
    return {"n": len(alikes), "fired": dict(sorted(fired.items()))}


def evaluate_real(
    prepared: Sequence[Prepared], params: dict[str, Any] | None = None, *, seed: int = 0,
    in_domain_folds: int = 5, generated_per_kind: dict[str, dict[str, dict[str, float]]] | None = None,
    lookalikes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Leave-one-source-out (and in-domain) figures for ``prepared`` runs; see the module doc.

    ``generated_per_kind`` (the classifier's per-kind figures on generated traces,
    :func:`model.training.classifier.gate.per_kind_from_metrics`) and ``lookalikes`` (:func:`lookalike_fires`)
    feed the step classifier's zero-shot gate; without them no classifier kind raises a failure.
    """
    from model.training.classifier.gate import decide

    params = dict(params or {})
    rng = np.random.default_rng(seed)
    examples = [p.example for p in prepared]
    report: dict[str, Any] = {"params": params, "sets": {}, "rules": {}, "in_domain": {}, "classifier": {},
                              "generated": time.strftime("%Y-%m-%d")}
    gen = generated_per_kind or {}
    evidence = classifier_evidence(prepared)
    report["classifier_gate"] = {"real": evidence, "lookalikes": lookalikes,
                                 "sets": [s for s in RUN_LEVEL_SOURCES if any(p.run.source == s for p in prepared)],
                                 "decision": decide(gen, real=evidence, lookalikes=lookalikes)}
    for fit in loso_fits(prepared, params):
        S, scorer, test_idx, scored = fit.source, fit.scorer, fit.test_idx, fit.scored
        fam = loso_family(S)
        train = [examples[i] for i, p in enumerate(prepared) if loso_family(p.run.source) != fam]
        # the classifier's gate as it would be decided without this set's family
        clf_gate = decide(gen, real=classifier_evidence([p for p in prepared if loso_family(p.run.source) != fam]),
                          lookalikes=lookalikes)
        trusted = set(clf_gate["failure_kinds"])
        clf_fail = np.array([bool(prepared[i].classifier_kinds & trusted) for i in test_idx])
        test = [examples[i] for i in test_idx]
        probs = np.array([s[0] for s in scored])
        y = np.array([int(e.failed) for e in test])
        groups = [e.group for e in test]
        boots = group_bootstrap(groups, rng).resamples(groups)
        served = np.round(probs, 4)  # as the service answers it
        entry: dict[str, Any] = {"runs": len(test), "failed": int(y.sum()), "groups": len(set(groups)),
                                 "ties": round(float(np.unique(served, return_counts=True)[1].max() / len(served)), 4),
                                 "model": {"recipe": scorer.recipe, "features": scorer.features_,
                                           "zero_shot": scorer.zero_shot_.to_dict() if scorer.zero_shot_ else None,
                                           "threshold": round(scorer.threshold, 4),
                                           "trained_on": scorer.meta_.get("trained_on"),
                                           "demoted_rules": sorted(r for r, v in scorer.rule_stats_.items()
                                                                   if v["demoted"]),
                                           "classifier_failure_kinds": sorted(trusted)}}
        # the verdict's rule part as the service gives it: each rule's confidence estimated on the
        # training sets (RunScorer.rule_confidence), a demoted rule only signalling
        rule_fail = np.array([any(scorer.rule_raises(d, prepared[i].rule_confidences.get(d, 1.0))
                                  for d, _, _ in prepared[i].rule_failures) for i in test_idx])
        rule_fail = rule_fail | clf_fail  # the verdict's finding part: rules and trusted classifier kinds
        if 0 < y.sum() < len(y):
            base = {
                "messages": np.array([e.messages for e in test], dtype=float),
                "tool calls": np.array([prepared[i].calls for i in test_idx], dtype=float),
                "characters": np.array([prepared[i].characters for i in test_idx], dtype=float),
            }
            entry["auroc"] = auroc_with_ci(y, probs, boots)
            # the old run scorer's features enter only if they help on every source (issue 31): the same
            # recipe with them among its candidates, fitted on the same training sets
            variant = _fit(train, {**params, "run_features": True})
            vprobs = np.array([variant.score_example(e)[0] for e in test])
            entry["run_features_check"] = {"auroc": round(auroc(y, vprobs), 4), "kept": variant.features_,
                                           "vs_recipe": paired_diff(y, vprobs, probs, boots)}
            entry["baselines"] = {k: auroc_with_ci(y, v, boots) for k, v in base.items()}
            best = max(base, key=lambda k: auroc(y, base[k]))
            entry["vs_best_baseline"] = {"baseline": best, **paired_diff(y, probs, base[best], boots)}
            flag_p = probs >= scorer.threshold
            flag = flag_p | rule_fail
            # relative to the agent's own runs: flagged when above the (1 − q) quantile of the
            # failure probabilities of the agent's *other* tasks (unlabelled), as the service does
            # once it has seen RELATIVE_MIN_RUNS runs of a task type
            # zero-shot it may only raise the fixed point (model.diagnosis.diagnoser.Diagnoser.diagnose)
            rel_thr = np.maximum(relative_thresholds(probs, groups, scorer.target_false_alarm), scorer.threshold)
            flag_r = (probs >= rel_thr) | rule_fail
            entry["operating_point_relative"] = {
                "quantile": round(1 - scorer.target_false_alarm, 4),
                "false_alarms": rate_ci(int(flag_r[y == 0].sum()), int((y == 0).sum())),
                "recall": rate_ci(int(flag_r[y == 1].sum()), int((y == 1).sum())),
            }
            entry["operating_point"] = {
                "threshold": round(scorer.threshold, 4),
                "false_alarms": rate_ci(int(flag[y == 0].sum()), int((y == 0).sum())),
                "recall": rate_ci(int(flag[y == 1].sum()), int((y == 1).sum())),
                "probability_only": {"false_alarms": rate_ci(int(flag_p[y == 0].sum()), int((y == 0).sum())),
                                     "recall": rate_ci(int(flag_p[y == 1].sum()), int((y == 1).sum()))},
                # what the probability adds to the findings' verdict (the diagnosis reads it only without a failure)
                "probability_beyond_findings": {
                    "false_alarms": rate_ci(int((flag_p & ~rule_fail)[y == 0].sum()), int((y == 0).sum())),
                    "recall": rate_ci(int((flag_p & ~rule_fail)[y == 1].sum()), int((y == 1).sum()))},
                "rules_only": {"false_alarms": rate_ci(int(rule_fail[y == 0].sum()), int((y == 0).sum())),
                               "recall": rate_ci(int(rule_fail[y == 1].sum()), int((y == 1).sum()))},
            }
            prior = scorer.zero_shot_.prior if scorer.zero_shot_ is not None else float(y.mean())
            flat = np.full(len(y), prior)
            entry["calibration"] = {"ece": round(ece(y, probs), 4), "bins": reliability_bins(y, probs),
                                    "base_rate": round(prior, 4), "ece_base_rate": round(ece(y, flat), 4),
                                    "ece_vs_base_rate": {"diff": round(ece(y, probs) - ece(y, flat), 4),
                                                         "ci": _ci([ece(y[b], probs[b]) - ece(y[b], flat[b])
                                                                    for b in boots])}}
        else:
            entry["flagged"] = rate_ci(int((rule_fail | (probs >= scorer.threshold)).sum()), len(y))
        # localisation
        # every failed run the set labels, the label's message an agent's or not (then nobody picking
        # among agent messages can be exactly right: counted as a miss, not left out)
        loc = [(k, e) for k, e in enumerate(test) if e.failed and e.fail_source_index is not None and e.units]
        if S in LOCALISATION_SOURCES and loc:
            truth = [e.fail_source_index for _, e in loc]
            assert all(t is not None for t in truth)
            tr = [int(t) for t in truth if t is not None]
            ours = [e.units[int(np.argmax(scored[k][1]))].source_index for k, e in loc]
            base_preds = localisation_baselines([e for _, e in loc], train)
            rates = {name: _loc_rates(p, tr) for name, p in base_preds.items()}
            best = max(rates, key=lambda n: (rates[n]["exact"], rates[n]["within_3"]))
            lgroups = [e.group for _, e in loc]
            lboots = group_bootstrap(lgroups, rng).resamples(lgroups)
            t_arr, o_arr, b_arr = np.asarray(tr), np.asarray(ours), np.asarray(base_preds[best])
            diffs = [float(np.mean(o_arr[b] == t_arr[b]) - np.mean(b_arr[b] == t_arr[b])) for b in lboots]
            ours_rates = _loc_rates(ours, tr)
            entry["localisation"] = {
                "runs": len(loc), "ours": {k: round(v, 4) for k, v in ours_rates.items()},
                "ours_exact_ci": _ci([float(np.mean(o_arr[b] == t_arr[b])) for b in lboots]),
                "baselines": {n: {k: round(v, 4) for k, v in r.items()} for n, r in rates.items()},
                "uniform": {k: round(v, 4) for k, v in _uniform([e for _, e in loc], tr).items()},
                "best_baseline": best,
                "exact_vs_best": {"diff": round(ours_rates["exact"] - rates[best]["exact"], 4), "ci": _ci(diffs)},
            }
            speakers = [prepared[test_idx[k]].run.fail_speaker for k, _ in loc]
            if any(speakers):
                ours_sp = [e.units[int(np.argmax(scored[k][1]))].speaker for k, e in loc]
                best_sp = [next((u.speaker for u in e.units if u.source_index == p), None)
                           for (_, e), p in zip(loc, base_preds[best], strict=True)]
                common = Counter(s for s in speakers if s).most_common(1)[0][0]
                entry["localisation"]["agent"] = {
                    "ours": round(float(np.mean([a == b for a, b in zip(ours_sp, speakers, strict=True)])), 4),
                    f"speaker at {best}": round(float(np.mean([a == b for a, b in zip(best_sp, speakers,
                                                                                     strict=True)])), 4),
                    "most common mistake agent": round(float(np.mean([s == common for s in speakers])), 4),
                }
        report["sets"][S] = entry
        # rules on this set
        rules: dict[str, Any] = {}
        names = sorted({d for i in test_idx for d, _, _ in prepared[i].rule_failures})
        for name in names:
            fired = np.array([any(d == name for d, _, _ in prepared[i].rule_failures) for i in test_idx])
            row: dict[str, Any] = {"fires_on_successful": rate_ci(int(fired[y == 0].sum()), int((y == 0).sum())),
                   "fires_on_failed": rate_ci(int(fired[y == 1].sum()), int((y == 1).sum()))}
            row["p_failed_given_fired"] = round(float(y[fired].mean()), 4) if fired.any() else None
            rules[name] = row
        report["rules"][S] = rules
        kinds = sorted({k for i in test_idx for k in prepared[i].classifier_kinds})
        report["classifier"][S] = {k: {
            "fires_on_successful": rate_ci(sum(k in prepared[i].classifier_kinds for i, f in zip(test_idx, y, strict=True)
                                               if not f), int((y == 0).sum())),
            "fires_on_failed": rate_ci(sum(k in prepared[i].classifier_kinds for i, f in zip(test_idx, y, strict=True)
                                           if f), int((y == 1).sum()))} for k in kinds}
        # in domain: folds grouped by task within S
        if in_domain_folds > 1:
            report["in_domain"][S] = _in_domain(test, params, in_domain_folds, rng, train)
    return report


def _in_domain(test: Sequence[Example], params: dict[str, Any], folds: int, rng: np.random.Generator,
               others: Sequence[Example]) -> dict[str, Any]:
    groups = sorted({e.group for e in test})
    order = rng.permutation(len(groups))
    fold_of = {groups[j]: k % folds for k, j in enumerate(order)}
    probs = np.zeros(len(test))
    picks: dict[int, int] = {}
    for k in range(folds):
        tr = [e for e in test if fold_of[e.group] != k]
        scorer = _fit([*tr, *others], params)  # the other sets still train the run model of an all-failed set
        for i, e in enumerate(test):
            if fold_of[e.group] == k:
                p, m = scorer.score_example(e)
                probs[i] = p
                if e.failed and e.fail_source_index is not None and e.units:
                    picks[i] = e.units[int(np.argmax(m))].source_index
    y = np.array([int(e.failed) for e in test])
    out: dict[str, Any] = {"folds": folds}
    if 0 < y.sum() < len(y):
        tgroups = [e.group for e in test]
        boots = group_bootstrap(tgroups, rng, 500).resamples(tgroups)
        L = np.array([e.messages for e in test], dtype=float)
        out.update({"auroc": auroc_with_ci(y, probs, boots), "messages_baseline": auroc_with_ci(y, L, boots),
                    "vs_messages": paired_diff(y, probs, L, boots)})
    if picks:
        idx = sorted(picks)
        truth = [int(test[i].fail_source_index or 0) for i in idx]
        out["localisation"] = {k: round(v, 4) for k, v in _loc_rates([picks[i] for i in idx], truth).items()}
    return out


def run(root: Path | None = None, reports: Path = Path("reports"), params: dict[str, Any] | None = None,
        sources: tuple[str, ...] | None = None, limit: int | None = None,
        progress: Callable[[int, int], None] | None = None, semantic: Path | None = None, seed: int = 0,
        in_domain_folds: int = 5, classifier: bool = True, card: Path | None = None) -> dict[str, Any]:
    """Load the vendored sets, prepare, evaluate, write the reports; returns the report."""
    runs = load_all(root, sources)
    if limit is not None:  # a small sample per set (tests, the notebook): the first groups of each
        runs = first_groups(runs, limit)
    prepared = prepare(runs, progress, classifier=classifier)
    from model.training.classifier.gate import per_kind_from_metrics

    metrics_file = reports / "metrics.json"  # the classifier's figures on generated traces (its train stage)
    metrics = json.loads(metrics_file.read_text(encoding="utf-8")) if metrics_file.is_file() else {}
    lookalikes = lookalike_fires(semantic) if classifier and semantic is not None and semantic.is_file() else None
    report = evaluate_real(prepared, params, seed=seed, in_domain_folds=in_domain_folds,
                           generated_per_kind=per_kind_from_metrics(metrics), lookalikes=lookalikes)
    if semantic is not None and semantic.is_file():
        report["semantic"] = semantic_table(semantic, prepared, params)
    write_reports(report, reports, card)
    return report


def semantic_table(path: Path, prepared: Sequence[Prepared], params: dict[str, Any] | None) -> str:
    """The frozen semantic cases diagnosed by the full service path (rules, classifier, run scorer
    fitted on every real set), as a markdown table (``model.training.semantic``)."""
    import importlib

    from model.diagnosis.diagnoser import Diagnoser
    from model.importers import load_trace

    sem = importlib.import_module("model.training.semantic")
    scorer = RunScorer(**(params or {})).fit([p.example for p in prepared])
    diagnoser = Diagnoser.with_shipped_models(runscorer=scorer)
    cases = sem.load_cases(path)
    result = sem.evaluate_cases(cases, lambda t: diagnoser.diagnose(load_trace(t)))
    return str(sem.render_markdown(result))


__all__ = ["LosoFit", "Prepared", "classifier_evidence", "evaluate_real", "lookalike_fires", "loso_fits", "prepare",
           "run"]
