"""Which runs to label next: the review queue's order, and whether it beats random order.

**The order** (:func:`order_queue`). A run's value is its *uncertainty* under the current model,
``u = 1 − |2p − 1|`` (1 at p = 0.5, 0 at a sure verdict; 1 for every run before a model exists),
divided by ``1 + n`` where ``n`` counts the runs of its near-duplicate cluster (its task, or the
runs whose opening requests are near-duplicates) already labelled or placed earlier in the queue:
near-duplicate runs of one task count once, and the queue spreads over tasks (diversity) before it
comes back to a task. Greedy, with a heap: ``O(n log n)``.

**The labels** come from three authors, each with its weight in training
(:data:`LABEL_WEIGHTS`): a reviewer (``author_type`` ``human``), a task checker (``checker``: an
automatic verdict on the task, e.g. a test suite or a reward), and an outcome the agent reported
(``author`` ``outcome``: whether the repair worked, a weaker word on whether the run failed).

**The experiment** (:func:`queue_vs_random`): every order the review offers
(``serve.services.label_queue.ORDERS``) against random order. Folds grouped by task; within each
draw and fold the same ``seed_labels`` random runs of the training folds start every arm; ``margin``
then picks the ``batch`` runs of largest uncertainty (smallest ``|p − 0.5|``) under the learner
refitted on its labels so far, ``queue`` picks ``batch`` runs by :func:`order_queue` under its own
refitted learner, the random arm takes the next runs of one random permutation; at each K every arm's
learner is fitted on its K runs and judged by AUROC on the held-out fold's runs. Each paired
difference (order − random) gets a bootstrap interval over the draw × fold units; :func:`pooled`
averages a difference over sets, :func:`measured_best` names the default (random order unless an
order's pooled interval at K = 50 is above 0). The queue's clusters are the tasks recovered from the
runs (:func:`model.training.agentmodel.cv.group_runs` with no task ids), as a tenant's store would
give them; the folds use the sets' true tasks. The service ranks by the *stored* diagnosis's margin
(the model that answered when the run was diagnosed, against its operating point); the experiment
re-scores every candidate with the learner refitted after each batch — the best case for both
uncertainty orders.

>>> order_queue([0.5, 0.9, 0.45, 0.5], ["a", "a", "b", "c"], labelled={"c": 1})
[0, 2, 3, 1]

Run ``python -m model.training.agentmodel.queue`` for the table on the run-level sets (the learning
curve's ``--sections-only`` writes it into ``reports/learning.md``). The queue that serves these
orders (``triage label review --from-store --order random|margin|queue``, the console's Label queue) is
``serve/services/label_queue.py``.
"""

from __future__ import annotations

import argparse
import heapq
import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from model.core.errors import InputError
from model.core.metrics import fold_by_group
from model.core.schema import Trace

if TYPE_CHECKING:
    from model.scoring.agentmodel.model import AgentModelConfig

#: Weight of a label in training, by who gave it. A reviewer's verdict and a task checker's are the
#: truth of the run as far as we know it; an outcome says whether a *repair* worked, which is
#: weaker evidence on whether the run failed. (Set, not measured: no labelled set here has labels of
#: more than one author per run.)
LABEL_WEIGHTS: dict[str, float] = {"human": 1.0, "checker": 1.0, "outcome": 0.5}


def label_weight(author: str | None, author_type: str | None) -> float:
    """The training weight of a stored label (:data:`LABEL_WEIGHTS`; author ``outcome`` is an outcome)."""
    if author == "outcome":
        return LABEL_WEIGHTS["outcome"]
    if author_type not in LABEL_WEIGHTS:
        raise InputError(f"author_type must be one of human, checker; got {author_type!r}", path="author_type")
    return LABEL_WEIGHTS[author_type]


def uncertainty(p: Sequence[float] | np.ndarray) -> np.ndarray:
    """``1 − |2p − 1|``: 1 at p = 0.5, 0 at 0 or 1."""
    a = np.asarray(p, dtype=np.float64)
    out: np.ndarray = 1.0 - np.abs(2.0 * a - 1.0)
    return out


def order_queue(probs: Sequence[float] | np.ndarray | None, clusters: Sequence[str], *,
                labelled: Mapping[str, int] | None = None, value: Sequence[float] | None = None) -> list[int]:
    """Indices of the candidates, the most useful label first (module docstring).

    Parameters
    ----------
    probs:
        The current model's failure probability of each candidate (``None``: no model yet).
    clusters:
        Each candidate's near-duplicate cluster.
    labelled:
        Runs already labelled, per cluster.
    value:
        The uncertainty of each candidate, when it is measured otherwise than from ``probs``.
    """
    n = len(clusters)
    if value is not None:
        u = np.asarray(value, dtype=np.float64)
    elif probs is not None:
        u = uncertainty(probs)
    else:
        u = np.ones(n)
    if len(u) != n:
        raise InputError(f"one probability (or value) per candidate; got {len(u)} for {n}", path="probs")
    by: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(clusters):
        by[c].append(i)
    for c in by:
        by[c].sort(key=lambda i: (-u[i], i))
    seen = dict(labelled or {})
    heap = [(-u[ix[0]] / (1 + seen.get(c, 0)), ix[0], c, 0) for c, ix in by.items()]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        _, i, c, j = heapq.heappop(heap)
        out.append(i)
        seen[c] = seen.get(c, 0) + 1
        if j + 1 < len(by[c]):
            nxt = by[c][j + 1]
            heapq.heappush(heap, (-u[nxt] / (1 + seen[c]), nxt, c, j + 1))
    return out


# ---- the experiment -----------------------------------------------------------------------------

Scorer = Callable[[Sequence[int]], np.ndarray]


class Learner(Protocol):
    """Fits on runs given by index (with their labels and groups), returns a scorer of runs by index."""

    def __call__(self, idx: Sequence[int], failed: np.ndarray, groups: Sequence[str]) -> Scorer: ...


def _opening_clusters(traces: Sequence[Trace]) -> list[str]:
    from model.training.agentmodel.cv import group_runs

    return group_runs(traces, [None] * len(traces))


#: The orders the review offers (``serve.services.label_queue.ORDERS``) that the experiment measures against
#: random order (the reference): ``margin`` (the most uncertain first) and ``queue`` (:func:`order_queue`).
STUDIED = ("margin", "queue")


def _run_arms(pool: np.ndarray, y: np.ndarray, clusters: Sequence[str], groups: Sequence[str], ks: Sequence[int],
              seed_labels: int, batch: int, learner: Learner, rng: np.random.Generator) -> dict[str, list[int]]:
    """Each order's labelled runs (indices into the set), in the order they were labelled: the orders of
    :data:`STUDIED` and ``random`` (the next runs of one permutation). Every arm starts from the same
    ``seed_labels`` runs; ``margin`` breaks ties (every run, before a model exists) by the permutation, as
    the service breaks them by arrival."""
    perm = pool[rng.permutation(len(pool))]
    rank = {int(i): j for j, i in enumerate(perm)}
    arms: dict[str, list[int]] = {}
    for arm in STUDIED:
        chosen = [int(i) for i in perm[:seed_labels]]
        rest = set(int(i) for i in pool) - set(chosen)
        for k in sorted(ks):
            while len(chosen) < k:
                cand = sorted(rest)
                probs = None
                if len(set(y[chosen].tolist())) == 2:
                    probs = learner(chosen, y[chosen], [groups[i] for i in chosen])(cand)
                if arm == "margin":
                    u = uncertainty(probs) if probs is not None else np.ones(len(cand))
                    order = sorted(range(len(cand)), key=lambda j: (-u[j], rank[cand[j]]))
                else:
                    counts: dict[str, int] = defaultdict(int)
                    for i in chosen:
                        counts[clusters[i]] += 1
                    order = order_queue(probs, [clusters[i] for i in cand], labelled=counts)
                take = [cand[j] for j in order[: min(batch, k - len(chosen))]]
                chosen.extend(take)
                rest -= set(take)
        arms[arm] = chosen
    arms["random"] = [int(i) for i in perm[: max(ks)]]
    return arms


def queue_vs_random(runs: Sequence[Any], ks: Sequence[int] = (25, 50), draws: int = 5, seed: int = 0, *,
                    folds: int = 3, seed_labels: int = 10, batch: int = 5, learner: Learner | None = None,
                    learner_factory: Callable[[Sequence[Trace]], Learner] | None = None,
                    clusters: Sequence[str] | None = None) -> dict[str, Any]:
    """AUROC on held-out tasks of the learner fitted on the K runs each order of :data:`STUDIED` picked
    vs K random runs.

    ``runs``: one set's runs, objects with ``trace``, ``group`` (the task) and ``failed``
    (:class:`model.data.realdata.RealRun`). ``learner_factory(traces)`` builds the learner over the set
    (features computed once); default: :func:`agent_model_learner`. ``clusters``: the queue's
    near-duplicate cluster of each run (default: its opening request's, module docstring).

    Returns per K: ``random`` (its mean AUROC) and, per order, its mean AUROC, the paired difference
    ``diff`` with its bootstrap interval ``ci`` over the draw × fold units, ``wins``, ``units``,
    ``diffs`` (one per unit), ``tasks`` (tasks among its K runs) and ``failed_share`` (of its K runs).
    """
    from model.core.metrics import auroc, group_bootstrap

    if draws < 1 or folds < 2 or seed_labels < 2 or batch < 1:
        raise InputError(f"draws ≥ 1, folds ≥ 2, seed_labels ≥ 2, batch ≥ 1; got {draws}, {folds}, "
                         f"{seed_labels}, {batch}", path="draws")
    traces = [r.trace for r in runs]
    y = np.array([int(r.failed) for r in runs])
    groups = [str(r.group) for r in runs]
    if learner is None:
        learner = (learner_factory or agent_model_learner)(traces)
    clusters = list(clusters) if clusters is not None else _opening_clusters(traces)
    if len(clusters) != len(runs):
        raise InputError(f"one cluster per run; got {len(clusters)} for {len(runs)}", path="clusters")
    ks = sorted(int(k) for k in ks)
    units: list[dict[str, Any]] = []
    rng = np.random.default_rng(seed)
    for d in range(draws):
        for f, test in enumerate(fold_by_group(groups, folds, seed * 1000 + d)):
            pool = np.setdiff1d(np.arange(len(runs)), test)
            if len(set(y[test].tolist())) < 2 or len(pool) < max(ks):
                continue
            arms = _run_arms(pool, y, clusters, groups, ks, seed_labels, batch, learner, rng)
            unit: dict[str, Any] = {"draw": d, "fold": f, "test_runs": len(test)}
            for k in ks:
                for arm, picked in arms.items():
                    idx = picked[:k]
                    unit[f"failed_share:{arm}@{k}"] = float(y[idx].mean())
                    unit[f"tasks:{arm}@{k}"] = len({groups[i] for i in idx})
                    if len(set(y[idx].tolist())) < 2:
                        unit[f"{arm}@{k}"] = 0.5  # one class only: no model, no ranking
                        continue
                    s = learner(idx, y[idx], [groups[i] for i in idx])([int(i) for i in test])
                    unit[f"{arm}@{k}"] = auroc(y[test], s)
            units.append(unit)
    if not units:
        raise InputError(f"no fold had both classes and a pool of {max(ks)} runs; got {len(runs)} runs",
                         path="runs")
    brng = np.random.default_rng(seed + 11)
    per_k: dict[str, Any] = {}
    for k in ks:
        r = np.array([u[f"random@{k}"] for u in units])
        row: dict[str, Any] = {"random": round(float(r.mean()), 4), "units": len(units),
                               "random_tasks": round(float(np.mean([u[f"tasks:random@{k}"] for u in units])), 1),
                               "orders": {}}
        for arm in STUDIED:
            a = np.array([u[f"{arm}@{k}"] for u in units])
            diff = a - r
            boot = group_bootstrap(range(len(diff)), brng, 2000).means(diff, range(len(diff)))  # a unit: its own group
            row["orders"][arm] = {
                "auroc": round(float(a.mean()), 4), "diff": round(float(diff.mean()), 4),
                "ci": [round(float(np.quantile(boot, 0.025)), 4), round(float(np.quantile(boot, 0.975)), 4)],
                "wins": int((diff > 0).sum()), "units": len(diff),
                "failed_share": round(float(np.mean([u[f"failed_share:{arm}@{k}"] for u in units])), 3),
                "tasks": round(float(np.mean([u[f"tasks:{arm}@{k}"] for u in units])), 1),
                "diffs": [round(float(x), 4) for x in diff],
            }
        per_k[str(k)] = row
    return {"runs": len(runs), "tasks": len(set(groups)), "failed_share": round(float(y.mean()), 3),
            "clusters": len(set(clusters)), "draws": draws, "folds": folds, "seed": seed,
            "seed_labels": seed_labels, "batch": batch, "orders": list(STUDIED), "k": per_k}


def pooled(results: Mapping[str, Mapping[str, Any]], k: int, order: str = "queue", seed: int = 0) -> dict[str, Any]:
    """The mean over sets of the ``order`` − random difference at ``k``, with a bootstrap interval
    (each set's units resampled within the set)."""
    from model.core.metrics import group_bootstrap

    rng = np.random.default_rng(seed + 13)
    diffs = [np.asarray(r["k"][str(k)]["orders"][order]["diffs"]) for r in results.values()
             if str(k) in r["k"] and order in r["k"][str(k)]["orders"]]
    if not diffs:
        raise InputError(f"no set was measured at K = {k} with order {order!r}", path="k")
    boot = np.mean([group_bootstrap(range(len(d)), rng, 2000).means(d, range(len(d))) for d in diffs], axis=0)
    return {"k": k, "order": order, "sets": len(diffs), "diff": round(float(np.mean([d.mean() for d in diffs])), 4),
            "ci": [round(float(np.quantile(boot, 0.025)), 4), round(float(np.quantile(boot, 0.975)), 4)]}


def beats_random(results: Mapping[str, Mapping[str, Any]], order: str, k: int = 50) -> bool:
    """Whether ``order``'s pooled difference from random at ``k`` is above 0 with its whole interval."""
    return bool(pooled(results, k, order)["ci"][0] > 0)


def measured_best(results: Mapping[str, Mapping[str, Any]], k: int = 50) -> str:
    """The order the review should default to: of the orders whose pooled interval at ``k`` is above
    random's, the one with the largest mean difference; ``"random"`` when none is.

    >>> measured_best({"a": {"k": {"50": {"orders": {"margin": {"diffs": [0.02, 0.03, 0.04]},
    ...                                              "queue": {"diffs": [-0.01, 0.02, -0.03]}}}}}})
    'margin'
    """
    orders = sorted({o for r in results.values() for o in r["k"].get(str(k), {}).get("orders", {})})
    above = [(pooled(results, k, o)["diff"], o) for o in orders if beats_random(results, o, k)]
    return max(above)[1] if above else "random"


def queue_markdown(results: Mapping[str, Mapping[str, Any]]) -> str:
    """One row per set, K and order, then each order's mean difference over sets per K and the default
    it implies at K = 50 (:func:`measured_best`)."""
    lines = ["| set | runs (tasks, recovered task groups) | K | order | its AUROC | random AUROC "
             "| order − random [95 %] | order wins | tasks among the K (order / random) | failed share picked |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    ks: set[int] = set()
    orders: list[str] = []
    for name, d in results.items():
        for k, row in d["k"].items():
            ks.add(int(k))
            for o, r in row["orders"].items():
                if o not in orders:
                    orders.append(o)
                lines.append(f"| {name} | {d['runs']} ({d['tasks']}, {d['clusters']}) | {k} | {o} | {r['auroc']:.3f} | "
                             f"{row['random']:.3f} | {r['diff']:+.3f} [{r['ci'][0]:+.3f}, {r['ci'][1]:+.3f}] | "
                             f"{r['wins']}/{r['units']} | {r['tasks']} / {row['random_tasks']} | "
                             f"{r['failed_share']:.2f} (set {d['failed_share']:.2f}) |")
    lines += ["", "| order | " + " | ".join(f"mean over sets, K = {k}: order − random [95 %]" for k in sorted(ks)) + " |",
              "| --- | " + " | ".join("---" for _ in ks) + " |"]
    for o in orders:
        cells = []
        for k in sorted(ks):
            p = pooled(results, k, o)
            cells.append(f"{p['diff']:+.3f} [{p['ci'][0]:+.3f}, {p['ci'][1]:+.3f}] ({p['sets']} sets)")
        lines.append(f"| {o} | " + " | ".join(cells) + " |")
    if 50 in ks:
        best = measured_best(results, 50)
        lines.append("\nAt K = 50 " + (f"`{best}` beats random order (interval above 0) and is the best that does: "
                                       f"the review's default is `{best}`." if best != "random" else
                                       "no order's interval is above random order's: the review's default is "
                                       "`random`.") +
                     " (`serve.services.label_queue.DEFAULT_ORDER`, checked against this section by "
                     "tests/test_queue.py.)")
    return "\n".join(lines)


# ---- the learner ----------------------------------------------------------------------------------


def agent_model_learner(traces: Sequence[Trace], config: AgentModelConfig | None = None) -> Learner:
    """:class:`model.scoring.agentmodel.model.AgentModel` as the experiment's learner: its defaults, with
    its own internal CV off (the experiment needs its scores only); each run's features computed
    once (:class:`~model.scoring.agentmodel.features.FeatureCache`), runs scored whole by the cached fast path."""
    from model.scoring.agentmodel.features import FeatureCache
    from model.scoring.agentmodel.model import AgentModel, AgentModelConfig

    cfg = config or AgentModelConfig(internal_folds=0)
    if 1.0 not in cfg.prefix_fractions:
        raise InputError(f"the learner scores whole runs: prefix_fractions must hold 1.0; got "
                         f"{cfg.prefix_fractions}", path="prefix_fractions")
    whole = cfg.prefix_fractions.index(1.0)
    cache = FeatureCache()
    rows: dict[int, Any] = {}

    def rows_of(i: int) -> Any:
        if i not in rows:
            rows[i] = cache.rows(traces[i], cfg.buckets, cfg.prefix_fractions, cfg.last_turn, cfg.encoder_weight > 0)
        return rows[i]

    def fit(idx: Sequence[int], failed: np.ndarray, groups: Sequence[str]) -> Scorer:
        for i in idx:
            rows_of(i)
        model = AgentModel.fit([traces[i] for i in idx], [bool(v) for v in failed], list(groups), config=cfg,
                               cache=cache)

        def score(test: Sequence[int]) -> np.ndarray:
            return np.array([float(model.score_rows(rows_of(i))[whole]) for i in test])

        return score

    return fit


def main(argv: Sequence[str] | None = None) -> None:
    from model.data.realdata import RUN_LEVEL_SOURCES, load_source

    ap = argparse.ArgumentParser(prog="python -m model.training.agentmodel.queue", description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=list(RUN_LEVEL_SOURCES))
    ap.add_argument("--ks", nargs="+", type=int, default=[25, 50])
    ap.add_argument("--draws", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    a = ap.parse_args(argv)
    results = {}
    for s in a.sets:
        results[s] = queue_vs_random(load_source(s), ks=a.ks, draws=a.draws, seed=a.seed)
        print(f"{s}: done", flush=True)
    if a.json is not None:
        a.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(queue_markdown(results))


if __name__ == "__main__":
    main()

__all__ = ["LABEL_WEIGHTS", "STUDIED", "Learner", "agent_model_learner", "beats_random", "label_weight",
           "measured_best", "order_queue", "pooled", "queue_markdown", "queue_vs_random", "uncertainty"]

